/* The spin-wait budget (actor/spin.h) on its own: a spin lasts at least
 * its budget and not much more, whatever a pause instruction costs on this
 * CPU; once spent it stays spent and stops pausing; and gpa_await with a
 * timeout shorter than its spin budget returns ETIMEDOUT near that timeout. */
#include <stdint.h>
#include <time.h>

#include "actor/spin.h"
#include "util/testutil.h"

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static gpa_status slow(const gpa_op_exec *x) {
  (void)x;
  struct timespec ts = {0, 100000000};
  nanosleep(&ts, NULL);
  return GPA_OK;
}

static void budget(int64_t ns) {
  int64_t t0 = now_ns();
  gpa__spin s = gpa__spin_begin(ns);
  uint64_t pauses = 0;
  while (gpa__spin_on(&s)) pauses++;
  int64_t took = now_ns() - t0;
  CHECK(took >= ns);
  /* generous: a preempted spinner overshoots by a time slice or more */
  CHECK(took < ns + 50000000);
  CHECK(pauses > 0);
  for (int i = 0; i < 100; i++) CHECK(!gpa__spin_on(&s));
  /* spent: later calls return at once */
  int64_t t1 = now_ns();
  for (int i = 0; i < 1000000; i++) CHECK(!gpa__spin_on(&s));
  CHECK(now_ns() - t1 < 100000000);
}

int main(void) {
  budget(0);
  budget(20000);
  budget(GPA__SPIN_AWAIT_NS);
  budget(2000000);

  /* gpa_await on an op that runs 100 ms: a 5 us timeout bounds the spin */
  gpa_actor *a = tu_actor(NULL);
  gpa_op_desc d = {.name = "test_slow", .host = slow};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  gpa_handle *h = NULL;
  CHECK_OK(gpa_submit(gpa_actor_default_queue(a), &(gpa_op_call){"test_slow", NULL, 0, NULL, 0, NULL, 0}, &h));
  int64_t t0 = now_ns();
  CHECK_ST(gpa_await(h, 5000), GPA_ETIMEDOUT);
  CHECK(now_ns() - t0 < 50000000);
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  gpa_actor_destroy(a);
  printf("spin: ok\n");
  return 0;
}
