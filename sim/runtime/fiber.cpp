/* gpa-sim fibers: context creation and switching with sanitizer hooks. */
#include "fiber.h"
#include <stdint.h>
#include <string.h>
#include <pthread.h>

#if defined(__SANITIZE_ADDRESS__)
#define GPA_SIM_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPA_SIM_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define GPA_SIM_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPA_SIM_FIBER_TSAN 1
#endif
#endif

#ifdef GPA_SIM_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef GPA_SIM_FIBER_TSAN
extern "C" {
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
}
#endif

#ifndef GPA_SIM_USE_UCONTEXT
extern "C" void gpa_sim__ctx_swap(void **save_sp, void *load_sp);
extern "C" void gpa_sim__ctx_boot(void);
#endif

#ifdef GPA_SIM_USE_UCONTEXT
static void gpa_sim_uc_boot(unsigned hi, unsigned lo) {
  gpa_sim_ctx *c = (gpa_sim_ctx *)(((uintptr_t)hi << 32) | lo);
  c->entry(c->arg);
}
#endif

void gpa_sim__ctx_make(gpa_sim_ctx *c, void *stack_lo, size_t size, void (*entry)(void *), void *arg) {
  c->stack_lo = stack_lo;
  c->stack_size = size;
  c->asan_fake = nullptr;
#ifdef GPA_SIM_FIBER_TSAN
  if (!c->tsan_fiber) c->tsan_fiber = __tsan_create_fiber(0);
#endif
#ifdef GPA_SIM_USE_UCONTEXT
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack_lo;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  /* makecontext passes ints: the context pointer travels as two halves */
  c->entry = entry;
  c->arg = arg;
  uintptr_t p = (uintptr_t)c;
  makecontext(&c->uc, (void (*)(void))gpa_sim_uc_boot, 2, (unsigned)(p >> 32), (unsigned)p);
#else
  /* Frame popped by gpa_sim__ctx_swap: r15 r14 r13 r12 rbx rbp, then the
   * return address. After `ret`, rsp = sp + 56 must be 16-byte aligned so
   * that the `call` in gpa_sim__ctx_boot gives the entry a standard frame. */
  uintptr_t top = ((uintptr_t)stack_lo + size) & ~(uintptr_t)15;
  void **sp = (void **)(top - 16 - 56);
  sp[0] = nullptr;                    /* r15 */
  sp[1] = nullptr;                    /* r14 */
  sp[2] = arg;                        /* r13: entry argument */
  sp[3] = (void *)entry;              /* r12: entry */
  sp[4] = nullptr;                    /* rbx */
  sp[5] = nullptr;                    /* rbp */
  sp[6] = (void *)&gpa_sim__ctx_boot; /* return address */
  c->sp = (void *)sp;
#endif
}

void gpa_sim__ctx_thread(gpa_sim_ctx *c) {
  memset(c, 0, sizeof *c);
#ifdef GPA_SIM_FIBER_ASAN
  /* ASan must know the OS thread's stack when fibers switch back to it */
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &c->stack_lo, &c->stack_size);
    pthread_attr_destroy(&attr);
  }
#endif
#ifdef GPA_SIM_FIBER_TSAN
  c->tsan_fiber = __tsan_get_current_fiber();
#endif
}

void gpa_sim__ctx_started(gpa_sim_ctx *self) {
  (void)self;
#ifdef GPA_SIM_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

void gpa_sim__ctx_switch(gpa_sim_ctx *from, gpa_sim_ctx *to, bool from_exits) {
#ifdef GPA_SIM_FIBER_ASAN
  /* An OS thread's own stack has stack_lo == NULL; ASan learns its bounds
   * from the finish call below the first time we come back to it. */
  __sanitizer_start_switch_fiber(from_exits ? nullptr : &from->asan_fake, to->stack_lo, to->stack_size);
#else
  (void)from_exits;
#endif
#ifdef GPA_SIM_FIBER_TSAN
  __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
#ifdef GPA_SIM_USE_UCONTEXT
  swapcontext(&from->uc, &to->uc);
#else
  gpa_sim__ctx_swap(&from->sp, to->sp);
#endif
#ifdef GPA_SIM_FIBER_ASAN
  const void *lo = nullptr;
  size_t sz = 0;
  __sanitizer_finish_switch_fiber(from->asan_fake, &lo, &sz);
  (void)lo;
  (void)sz;
#endif
}

void gpa_sim__ctx_destroy(gpa_sim_ctx *c) {
#ifdef GPA_SIM_FIBER_TSAN
  if (c->tsan_fiber && c->stack_lo) __tsan_destroy_fiber(c->tsan_fiber);
#endif
  c->tsan_fiber = nullptr;
}
