/* gpa-sim fibers: one per emulated CUDA thread, switched cooperatively on the
 * OS worker that runs the block. x86-64 uses the hand-written switch in
 * fiber_x86_64.S; other targets (or -DGPA_SIM_UCONTEXT) use ucontext.
 * Sanitizers: ASan is told about every stack change
 * (__sanitizer_start/finish_switch_fiber) and TSan gets one fiber object per
 * context (__tsan_create_fiber/__tsan_switch_to_fiber), so both follow the
 * emulated threads instead of reporting garbage. */
#ifndef GPA_SIM_FIBER_H
#define GPA_SIM_FIBER_H
#include <stddef.h>
#if !defined(__x86_64__) || defined(GPA_SIM_UCONTEXT)
#define GPA_SIM_USE_UCONTEXT 1
#include <ucontext.h>
#endif

struct gpa_sim_ctx {
  void *sp;              /* saved stack pointer (fast switch) */
#ifdef GPA_SIM_USE_UCONTEXT
  ucontext_t uc;
  void (*entry)(void *);
  void *arg;
#endif
  void *stack_lo;        /* lowest usable address; NULL for an OS thread's own stack */
  size_t stack_size;
  void *asan_fake;       /* ASan fake-stack handle while switched out */
  void *tsan_fiber;      /* TSan fiber object */
};

/* Prepares `c` to run entry(arg) on [stack_lo, stack_lo+size) at its first switch. */
void gpa_sim__ctx_make(gpa_sim_ctx *c, void *stack_lo, size_t size, void (*entry)(void *), void *arg);
/* The calling OS thread's own context (the scheduler side of every switch). */
void gpa_sim__ctx_thread(gpa_sim_ctx *c);
/* Switches from `from` (the running context) to `to`. `from_exits`: the
 * running fiber never resumes (lets ASan drop its fake stack). */
void gpa_sim__ctx_switch(gpa_sim_ctx *from, gpa_sim_ctx *to, bool from_exits);
/* First statement of every fiber entry function. */
void gpa_sim__ctx_started(gpa_sim_ctx *self);
void gpa_sim__ctx_destroy(gpa_sim_ctx *c);
#endif
