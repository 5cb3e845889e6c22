/* Spin-wait hint. Every waiter in the library spins briefly before it
 * sleeps: waking a thread that sleeps on another core costs ~25 us here. */
#ifndef GPA_ACTOR_SPIN_H
#define GPA_ACTOR_SPIN_H

static inline void gpa__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
