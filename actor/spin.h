/* Spin-waits. Every waiter in the library spins briefly before it sleeps:
 * waking a thread that sleeps on another core costs ~25-90 us on the
 * project's VM. Spin budgets are in time, not in iterations: one pause
 * instruction lasts ~27 ns on that VM's Zen 3 cores, ~40 ns on Intel cores
 * since Skylake and a few ns on older ones, so a count of pauses was a
 * different wait on every CPU (the counts of 2000 and 4000 they replace
 * were 53 and 107 us there). Header-only: the bench/ab tools compile
 * kernels/host/pool.c on its own. */
#ifndef GPA_ACTOR_SPIN_H
#define GPA_ACTOR_SPIN_H
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static inline void gpa__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* The budgets: how long each kind of waiter spins before it sleeps. */
#define GPA__SPIN_AWAIT_NS 100000 /* gpa_await, gpa_outfeed_pop */
#define GPA__SPIN_IDLE_NS 50000   /* an idle actor or pool worker, before it sleeps */
#define GPA__SPIN_JOIN_NS 100000  /* a pool loop's caller, before it sleeps until late workers end */

typedef struct gpa__spin {
  int64_t end; /* CLOCK_MONOTONIC ns */
  uint32_t n;
  bool spent;
} gpa__spin;

static inline int64_t gpa__spin_clock(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t); /* vDSO: ~20 ns, once every 16 pauses */
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline gpa__spin gpa__spin_begin(int64_t budget_ns) {
  return (gpa__spin){gpa__spin_clock() + budget_ns, 0, false};
}

/* One pause and true; false (and no pause) from the call that finds the
 * budget spent on. */
static inline bool gpa__spin_on(gpa__spin *s) {
  if (s->spent) return false;
  gpa__cpu_relax();
  if ((++s->n & 15) != 0 || gpa__spin_clock() < s->end) return true;
  s->spent = true;
  return false;
}

#endif
