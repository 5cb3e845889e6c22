/* gpa_await spins briefly before it sleeps, but a thread whose recent
 * waits outlasted the spin stops spinning (actor/handle.c): awaiting ops
 * of 3 ms twenty times costs this thread well under twenty spins of CPU
 * time (each would take 100 us and twenty yields), so it leaves the cores
 * to the ops. Then short ops awaited in a row still complete (the spin
 * comes back as the average falls). On every device the suite runs: the op
 * is a host op (on cuda and sim it runs on the host fallback). The CPU
 * bound is not checked in sanitizer builds. */
#include <time.h>

#include "util/testutil.h"

/* Sanitizers make the futex path cost several times its CPU time; the bound
 * holds for the build users run. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static gpa_status slow(const gpa_op_exec *x) {
  (void)x;
  struct timespec ts = {0, 3000000};
  nanosleep(&ts, NULL);
  return GPA_OK;
}

static gpa_status quick(const gpa_op_exec *x) {
  (void)x;
  return GPA_OK;
}

static int64_t thread_cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void await_op(gpa_queue *q, const char *name) {
  gpa_op_call c = {name, NULL, 0, NULL, 0, NULL, 0};
  gpa_handle *h;
  CHECK_OK(gpa_submit(q, &c, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_op_desc s = {.name = "test_slow", .host = slow}, k = {.name = "test_quick", .host = quick};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &s));
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &k));
  await_op(q, "test_slow"); /* the first wait may spin: this thread has no history yet */
  int64_t cpu = thread_cpu_ns();
  for (int i = 0; i < 20; i++) await_op(q, "test_slow");
  cpu = thread_cpu_ns() - cpu;
  printf("20 awaits of 3 ms ops: %.0f us of this thread's CPU time\n", (double)cpu / 1e3);
  /* twenty spins alone would be 2000 us; the futex waits take a few us each */
  CHECK(SANITIZED || cpu < 1000000);
  for (int i = 0; i < 200; i++) await_op(q, "test_quick");
  gpa_actor_destroy(a);
  return 0;
}
