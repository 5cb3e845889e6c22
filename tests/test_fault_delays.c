/* Slow streams and late host functions on the simulated device: no hang,
 * right results, awaits that time out and then succeed, and a shutdown that
 * drains delayed work; a counting profiler checks that every message
 * finishes exactly once.
 *   - every stream operation 0.5 s slow and host functions another 0.5 s
 *     late: await(5 ms) is GPA_ETIMEDOUT within bounds, the handle is still
 *     pending, a later await succeeds no earlier than the device finished
 *     (the kernel and its end event: 1 s), the data is right. The stream
 *     delay is what makes "no earlier" hold: the actor completes work it
 *     sees done while it spins (its event poll) without the host function,
 *     so a host function delay alone held the handle back only when the
 *     actor went to sleep first (a TSan run on a loaded machine once did
 *     not: done after 24 ms);
 *   - every stream operation delayed 5 ms, two queues each running a chain
 *     of ops with readbacks and batch syncs: results right, device time
 *     reported at least the delay;
 *   - shutdown while delayed work is in flight on both queues: every handle
 *     completes GPA_OK before gpa_actor_shutdown returns. */
#include <stdatomic.h>
#include <time.h>

#include "test_cuda_util.h"

static _Atomic uint64_t finished;
static void on_op(const gpa_prof_op *op, void *ud) {
  (void)op;
  (void)ud;
  atomic_fetch_add(&finished, 1);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static gpa_status axpy_add(gpa_queue *q, const gpa_tensor *a, const gpa_tensor *b, const gpa_tensor *y,
                           gpa_handle **h) {
  gpa_tensor in[2] = {*a, *b};
  gpa_op_call c = {"add", in, 2, y, 1, NULL, 0};
  return gpa_submit(q, &c, h);
}

static uint64_t submitted;

static void late_host_functions(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 64), y = tu_f32(a, 64);
  CHECK_OK(tu_fill(q, &x, 1.25, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  submitted++;
  /* long: a loaded machine oversleeps a 5 ms wait (235 ms seen) */
  sim->fault_stream_delay(NULL, 500000);
  sim->fault_host_fn_delay(500000);
  gpa_handle *h;
  CHECK_OK(axpy_add(q, &x, &x, &y, &h));
  submitted++;
  int64_t t0 = now_ns();
  CHECK_ST(gpa_await(h, 5000000), GPA_ETIMEDOUT);
  int64_t waited = now_ns() - t0;
  CHECK(waited >= 5000000 && waited < 1000000000); /* bounded, before the completion */
  CHECK_OK(gpa_await(h, 10 * 1000000000ll));
  int64_t total = now_ns() - t0;
  gpa_handle_release(h);
  sim->fault_stream_delay(NULL, 0);
  sim->fault_host_fn_delay(0);
  float out[64];
  tu_get(q, &y, out, 64);
  submitted++;
  for (int i = 0; i < 64; i++) CHECK(out[i] == 2.5f);
  printf("ok: device 1 s late: await(5 ms) timed out after %.1f ms, done after %.1f ms, result right\n",
         waited / 1e6, total / 1e6);
  CHECK(total >= 950000000);
}

enum { QN = 2, STEPS = 8, LEN = 256 };

static void slow_streams(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q[QN];
  gpa_tensor x[QN], y[QN];
  for (int k = 0; k < QN; k++) {
    CHECK_OK(gpa_queue_create(a, k ? "slow1" : "slow0", &q[k]));
    x[k] = tu_f32(a, LEN);
    y[k] = tu_f32(a, LEN);
  }
  const unsigned delay_us = 5000;
  sim->fault_stream_delay(NULL, delay_us);
  gpa_handle *h[QN][STEPS + 2];
  for (int k = 0; k < QN; k++) {
    CHECK_OK(gpa_batch_begin(q[k], "slow"));
    CHECK_OK(tu_fill(q[k], &x[k], 1.0 + k, &h[k][0]));
    CHECK_OK(tu_fill(q[k], &y[k], 0.0, &h[k][1]));
    for (int s = 0; s < STEPS; s++) CHECK_OK(axpy_add(q[k], &y[k], &x[k], &y[k], &h[k][s + 2])); /* y += x */
    submitted += STEPS + 2;
  }
  /* A short await on the last op of queue 0: it cannot be done yet. */
  CHECK_ST(gpa_await(h[0][STEPS + 1], 1000000), GPA_ETIMEDOUT);
  for (int k = 0; k < QN; k++) {
    gpa_batch_stats st = {.size = sizeof st};
    CHECK_OK(gpa_sync_batch(q[k], &st));
    CHECK(st.ops == STEPS + 2 && st.errors == 0);
    CHECK(st.device_ns >= (int64_t)(STEPS + 2) * delay_us * 1000 / 2);
    for (int s = 0; s < STEPS + 2; s++) {
      CHECK_OK(gpa_await(h[k][s], 0)); /* synced: all done */
      gpa_handle_release(h[k][s]);
    }
    float out[LEN];
    tu_get(q[k], &y[k], out, LEN);
    submitted++;
    for (int i = 0; i < LEN; i++) CHECK(out[i] == (float)(STEPS * (1 + k)));
  }
  sim->fault_stream_delay(NULL, 0);
  for (int k = 0; k < QN; k++) CHECK_OK(gpa_queue_destroy(q[k]));
  printf("ok: slow streams (%u us per operation), %d queues x %d ops: results right\n", delay_us, QN, STEPS + 2);
}

static void shutdown_in_flight(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q[QN];
  gpa_tensor x[QN];
  gpa_handle *h[QN][STEPS + 1];
  for (int k = 0; k < QN; k++) {
    CHECK_OK(gpa_queue_create(a, k ? "late1" : "late0", &q[k]));
    x[k] = tu_f32(a, LEN);
  }
  sim->fault_stream_delay(NULL, 1000);
  sim->fault_host_fn_delay(3000);
  for (int k = 0; k < QN; k++) {
    CHECK_OK(tu_fill(q[k], &x[k], 0.5, &h[k][0]));
    for (int s = 0; s < STEPS; s++) CHECK_OK(axpy_add(q[k], &x[k], &x[k], &x[k], &h[k][s + 1]));
    submitted += STEPS + 1;
  }
  int64_t t0 = now_ns();
  CHECK_OK(gpa_actor_shutdown(a)); /* drains: every handle completes first */
  int64_t took = now_ns() - t0;
  for (int k = 0; k < QN; k++)
    for (int s = 0; s <= STEPS; s++) {
      CHECK_OK(gpa_await(h[k][s], 0));
      gpa_handle_release(h[k][s]);
    }
  sim->fault_clear();
  printf("ok: shutdown with %d delayed ops in flight drained them in %.1f ms\n", QN * (STEPS + 1), took / 1e6);
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  tcu_sim sim = tcu_sim_api(a);
  gpa_profiler prof = {.size = sizeof prof, .on_op = on_op};
  CHECK_OK(gpa_actor_add_profiler(a, &prof));
  late_host_functions(a, &sim);
  slow_streams(a, &sim);
  shutdown_in_flight(a, &sim);
  printf("ok: %llu messages, %llu finished (each exactly once)\n", (unsigned long long)submitted,
         (unsigned long long)atomic_load(&finished));
  CHECK(atomic_load(&finished) == submitted);
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
