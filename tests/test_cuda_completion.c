/* CUDA backend: completions are batched. A host function blocks its stream
 * until the CPU has run it, so one per op left a GPU idle between kernels
 * (measured on an H100: 36 us a message, 4 us batched). The actor enqueues one
 * per stream after each pass of its loop. Here the actor is held inside an
 * op while 48 fills queue up behind it; once released it runs them in one
 * pass, so their completions take a handful of host functions, not 48. Every
 * op still completes, in order: the last fill's value is what a readback
 * sees. On sim only (the simulator counts cuLaunchHostFunc calls).
 *
 * Then round trips: ops awaited one at a time complete on the actor while it
 * spins (it queries the group's end event: no host function, no driver
 * thread), so fewer host functions than ops; with GPA_CUDA_NO_POLL=1 (the
 * cuda_completion_no_poll ctest) exactly one each. */
#include <stdlib.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "test_cuda_util.h"

enum { FILLS = 48, N = 64, ROUNDS = 200 };

static atomic_int held, release_hold;

/* Runs on the actor thread: no device work, no data touched. */
static gpa_status hold(const gpa_op_exec *x) {
  (void)x;
  atomic_store(&held, 1);
  for (int i = 0; i < 5000 && !atomic_load(&release_hold); i++) usleep(1000);
  return GPA_OK;
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  tcu_sim sim = tcu_sim_api(a); /* exit 77 on a real GPU */
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &(gpa_op_desc){.name = "hold", .host = hold, .cuda = hold}));
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor t = tu_f32(a, N);
  CHECK_OK(tu_fill(q, &t, -1, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));

  gpa_handle *h;
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "hold"}, &h));
  while (!atomic_load(&held)) usleep(100);
  size_t before = sim.host_fns();
  for (int i = 0; i < FILLS; i++) CHECK_OK(tu_fill(q, &t, i, NULL));
  atomic_store(&release_hold, 1);
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  CHECK_OK(gpa_sync_batch(q, NULL));
  size_t fns = sim.host_fns() - before;

  float v[N];
  tu_get(q, &t, v, N);
  for (int i = 0; i < N; i++) CHECK(v[i] == FILLS - 1);
  printf("completion: %d fills queued behind a held op completed through %zu host functions\n", FILLS, fns);
  CHECK(fns <= 8);

  const char *np = getenv("GPA_CUDA_NO_POLL");
  const int no_poll = np && !strcmp(np, "1");
  before = sim.host_fns();
  for (int i = 0; i < ROUNDS; i++) {
    CHECK_OK(tu_fill(q, &t, 1000 + i, &h));
    CHECK_OK(gpa_await(h, -1));
    gpa_handle_release(h);
  }
  fns = sim.host_fns() - before;
  tu_get(q, &t, v, N);
  for (int i = 0; i < N; i++) CHECK(v[i] == 1000 + ROUNDS - 1);
  printf("completion: %d awaited ops completed through %zu host functions (%s)\n", ROUNDS, fns,
         no_poll ? "GPA_CUDA_NO_POLL=1" : "polling");
  if (no_poll) CHECK(fns == ROUNDS);
  else CHECK(fns < ROUNDS);
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
