/* CUDA backend on the simulated device: out-of-memory handling, a refused
 * launch, and completion without busy polling.
 *   - a failed device allocation evicts the unused cached buffers and
 *     retries once (the acquire succeeds, one eviction counted);
 *   - an allocation that fails again gives GPA_ENOMEM and the actor lives;
 *   - an op whose scratch allocation fails evicts the unused cached buffers
 *     and retries once; out of memory for good, it gets GPA_ENOMEM, and the
 *     next op runs once memory is back; the same for a stream's split-sum
 *     counters, and a refused launch of the kernel that counts on them
 *     leaves them usable;
 *   - a failed pinned staging allocation gives the cached blocks back and
 *     retries once;
 *   - a launch the driver refuses fails that op with GPA_EDEVICE and the
 *     driver's message; later ops run;
 *   - while a slow stream (the sim's stream delay) holds an op, the actor
 *     thread and the awaiting thread use almost no CPU. */
#include <pthread.h>
#include <time.h>

#include "actor/internal.h"
#include "test_cuda_util.h"

static int64_t ns_of(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void stats(gpa_actor *a, gpa_actor_stats *s) {
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  CHECK_OK(gpa_actor_stats_get(a, s));
}

static gpa_status add(gpa_queue *q, const gpa_tensor *a, const gpa_tensor *b, const gpa_tensor *y, gpa_handle **h) {
  gpa_tensor in[2] = {*a, *b};
  gpa_op_call c = {"add", in, 2, y, 1, NULL, 0};
  return gpa_submit(q, &c, h);
}

static void oom(gpa_actor *a, tcu_sim *sim) {
  gpa_actor_stats s0, s1;
  gpa_buffer_id b1, b2, big;
  CHECK_OK(gpa_buffer_acquire(a, NULL, 4 << 20, &b1));
  CHECK_OK(gpa_buffer_release(a, b1));
  stats(a, &s0);
  CHECK(s0.bytes_cached >= (4u << 20));
  sim->fault_alloc(1); /* the next device allocation fails */
  CHECK_OK(gpa_buffer_acquire(a, NULL, 8 << 20, &b2));
  stats(a, &s1);
  CHECK(s1.evictions == s0.evictions + 1);
  CHECK(s1.bytes_cached == 0);
  CHECK_OK(gpa_buffer_release(a, b2));
  /* Larger than the device: fails twice, ENOMEM, and the actor lives on. */
  CHECK_ST(gpa_buffer_acquire(a, NULL, 100ull << 30, &big), GPA_ENOMEM);
  CHECK_MSG("out of device memory");
  printf("ok: eviction + retry once, then ENOMEM (%s)\n", gpa_last_error_message());
}

/* layernorm_bwd on a fresh stream (no scratch yet), which needs scratch. */
static gpa_status lnb(gpa_actor *a, gpa_tensor *t, gpa_handle **h) {
  gpa_queue *q;
  CHECK_OK(gpa_queue_create(a, "fresh", &q)); /* its scratch is allocated by the op */
  gpa_op_call c = {"layernorm_bwd", t, 5, t + 5, 3, NULL, 0};
  gpa_status st = gpa_submit(q, &c, h);
  if (st == GPA_OK) st = gpa_await(*h, -1);
  CHECK_OK(gpa_queue_destroy(q)); /* frees the scratch */
  return st;
}

static void scratch_oom(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *dq = gpa_actor_default_queue(a);
  /* 64 rows: dgamma/dbeta split over two chunks of rows, whose partials
   * take scratch and whose last block a counter (kernels/cuda/split_sum.h) */
  enum { N = 64, D = 64 };
  gpa_tensor t[8];
  int64_t nd[2] = {N, D};
  for (int i = 0; i < 8; i++) {
    int vec = i == 2 || i == 6 || i == 7, row = i == 3 || i == 4;
    t[i] = tu_f32(a, vec ? D : row ? N : N * D);
    if (!vec && !row) {
      t[i].rank = 2;
      t[i].shape[0] = nd[0];
      t[i].shape[1] = nd[1];
    }
    CHECK_OK(tu_fill(dq, &t[i], i == 4 ? 1.0 : 0.5, NULL));
  }
  /* layernorm_bwd: x, dy, gamma, mean, rstd -> dx, dgamma, dbeta */
  CHECK_OK(gpa_sync_batch(dq, NULL));
  gpa_handle *h;
  /* One failure with a cached buffer to give back: evicted, retried, done. */
  gpa_buffer_id spare;
  CHECK_OK(gpa_buffer_acquire(a, NULL, 1 << 20, &spare));
  CHECK_OK(gpa_buffer_release(a, spare));
  gpa_actor_stats s0, s1;
  stats(a, &s0);
  CHECK(s0.bytes_cached >= (1u << 20));
  sim->fault_alloc(1);
  CHECK_OK(lnb(a, t, &h));
  gpa_handle_release(h);
  stats(a, &s1);
  CHECK(s1.evictions > s0.evictions && s1.bytes_cached == 0);
  printf("ok: op scratch out of memory: %llu cached buffer(s) evicted, retried once, op done\n",
         (unsigned long long)(s1.evictions - s0.evictions));
  /* Out of memory for good: the retry fails too, GPA_ENOMEM, actor lives. */
  sim->fault_oom(1);
  CHECK_ST(lnb(a, t, &h), GPA_ENOMEM);
  CHECK(strstr(gpa_handle_error_message(h), "CUDA_ERROR_OUT_OF_MEMORY") && strstr(gpa_handle_error_message(h), "scratch"));
  printf("ok: op scratch out of memory after the retry: %s\n", gpa_handle_error_message(h));
  gpa_handle_release(h);
  sim->fault_oom(0);
  CHECK_OK(lnb(a, t, &h));
  gpa_handle_release(h);
  /* the fresh stream's second allocation is its split-sum counters */
  sim->fault_oom(2);
  CHECK_ST(lnb(a, t, &h), GPA_ENOMEM);
  CHECK(strstr(gpa_handle_error_message(h), "split-sum counters"));
  printf("ok: split-sum counters out of memory: %s\n", gpa_handle_error_message(h));
  gpa_handle_release(h);
  sim->fault_oom(0);
  /* launch 2 (dx is 1) is the split sums': refused before it counted, so
   * the stream's next one finds its counter zero and adds every chunk */
  float dg[D];
  for (int i = 0; i < D; i++) dg[i] = 1.0f;
  tu_put(dq, &t[6], dg, D);
  gpa_queue *q;
  CHECK_OK(gpa_queue_create(a, "refused", &q));
  gpa_op_call c = {"layernorm_bwd", t, 5, t + 5, 3, NULL, 0};
  sim->fault_launch(2);
  CHECK_ST(tcu_run(q, &c, &h), GPA_EDEVICE);
  CHECK(strstr(gpa_handle_error_message(h), "gpa_ln_bwd_split_f32"));
  gpa_handle_release(h);
  gpa_sync_batch(q, NULL);
  CHECK_OK(tcu_run(q, &c, &h));
  gpa_handle_release(h);
  CHECK_OK(gpa_queue_destroy(q));
  tu_get(dq, &t[6], dg, D);
  for (int i = 0; i < D; i++) CHECK(dg[i] == 0.0f); /* x constant per row: xhat = 0 */
  float dbeta[D];
  tu_get(dq, &t[7], dbeta, D);
  for (int i = 0; i < D; i++) CHECK(dbeta[i] == 0.5f * N); /* dy = 0.5: every chunk added */
  printf("ok: a refused split-sum launch, then the same op on its stream: every chunk added\n");
}

static void staging_oom(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q = gpa_actor_default_queue(a);
  enum { N = 1 << 18 }; /* 1 MiB: more than any staging block cached so far */
  float *v = malloc(N * sizeof *v), *w = malloc(N * sizeof *w);
  for (int i = 0; i < N; i++) v[i] = (float)i;
  gpa_tensor t = tu_f32(a, N), small = tu_f32(a, 16);
  tu_put(q, &small, v, 16); /* leaves a small cached block */
  sim->fault_alloc(1);
  tu_put(q, &t, v, N);
  tu_get(q, &t, w, N);
  CHECK(!memcmp(v, w, N * sizeof *v));
  free(v);
  free(w);
  printf("ok: pinned staging out of memory: cached blocks freed, retried once\n");
}

/* After a refused operation: the next add y = x + x runs, and y holds want. */
static void add_runs(gpa_queue *q, const gpa_tensor *x, const gpa_tensor *y, float want) {
  gpa_handle *h;
  CHECK_OK(add(q, x, x, y, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  float out[100];
  tu_get(q, y, out, 100);
  for (int i = 0; i < 100; i++) CHECK(out[i] == want);
}

static void launch_refused(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 100), y = tu_f32(a, 100);
  CHECK_OK(tu_fill(q, &x, 1.5, NULL));
  sim->fault_launch(1);
  gpa_handle *h;
  CHECK_OK(add(q, &x, &x, &y, &h));
  CHECK_ST(gpa_await(h, -1), GPA_EDEVICE);
  CHECK(strstr(gpa_handle_error_message(h), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"));
  printf("ok: refused launch: %s\n", gpa_handle_error_message(h));
  gpa_handle_release(h);
  add_runs(q, &x, &y, 3.0f);
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_EDEVICE); /* the batch saw the refused launch */
}

/* The host function that completes a group cannot be enqueued: the group's
 * messages fail with the driver's error, each once; later ones succeed. A
 * readback in the failed group must not leave its handle pending. The
 * stream is slowed (200 ms an operation) so that the work is still running
 * when the actor stops spinning: it would otherwise complete it by polling,
 * with no host function to refuse. 200, not 20: a loaded CI machine once
 * kept an actor off the CPU for ~20 ms mid-spin (fault_delays, TSan). */
static void host_fn_refused(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 100), y = tu_f32(a, 100);
  CHECK_OK(tu_fill(q, &x, 2.0, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  sim->fault_host_fn(1);
  sim->fault_stream_delay(NULL, 200000);
  gpa_handle *h;
  CHECK_OK(add(q, &x, &x, &y, &h));
  gpa_status st = gpa_await(h, -1);
  sim->fault_stream_delay(NULL, 0);
  CHECK(st != GPA_OK && st != GPA_ETIMEDOUT);
  CHECK(strstr(gpa_handle_error_message(h), "cuLaunchHostFunc"));
  printf("ok: refused host function: %s: %s\n", gpa_strerror(st), gpa_handle_error_message(h));
  gpa_handle_release(h);
  CHECK(gpa_sync_batch(q, NULL) != GPA_OK); /* the batch saw it */
  add_runs(q, &x, &y, 4.0f);
  CHECK_OK(gpa_sync_batch(q, NULL));
  /* a readback alone in the refused group */
  sim->fault_host_fn(1);
  sim->fault_stream_delay(NULL, 200000);
  CHECK_OK(gpa_readback(q, &y, &h));
  CHECK(gpa_await(h, -1) == st && strstr(gpa_handle_error_message(h), "cuLaunchHostFunc"));
  sim->fault_stream_delay(NULL, 0);
  gpa_handle_release(h);
  CHECK(gpa_sync_batch(q, NULL) != GPA_OK);
  add_runs(q, &x, &y, 4.0f);
}

static void no_busy_wait(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor t = tu_f32(a, 1024);
  CHECK_OK(tu_fill(q, &t, 0.0, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  clockid_t actor_clock;
  CHECK(pthread_getcpuclockid(a->thread, &actor_clock) == 0);
  const unsigned delay_us = 100000; /* each stream operation waits 100 ms */
  sim->fault_stream_delay(NULL, delay_us);
  int64_t w0 = ns_of(CLOCK_MONOTONIC), c0 = ns_of(actor_clock), s0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
  gpa_handle *h;
  CHECK_OK(tu_fill(q, &t, 2.0, &h));
  CHECK_OK(gpa_await(h, -1));
  int64_t w1 = ns_of(CLOCK_MONOTONIC), c1 = ns_of(actor_clock), s1 = ns_of(CLOCK_THREAD_CPUTIME_ID);
  gpa_handle_release(h);
  sim->fault_stream_delay(NULL, 0);
  double wall = (w1 - w0) / 1e6, actor = (c1 - c0) / 1e6, waiter = (s1 - s0) / 1e6;
  printf("ok: slow stream: %.0f ms wall, actor thread %.2f ms CPU, awaiting thread %.2f ms CPU\n", wall, actor,
         waiter);
  CHECK(wall >= delay_us / 1000.0);
  CHECK(actor < 0.05 * wall); /* a polling loop would burn the whole wall time */
  CHECK(waiter < 0.05 * wall);
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  tcu_sim sim = tcu_sim_api(a);
  oom(a, &sim);
  scratch_oom(a, &sim);
  staging_oom(a, &sim);
  launch_refused(a, &sim);
  host_fn_refused(a, &sim);
  no_busy_wait(a, &sim);
  sim.fault_clear();
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
