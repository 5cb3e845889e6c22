/* Where the time of one op through a cpu actor goes (actor_overhead): what
 * the *_actor rows of the op benches pay over the direct kernel call.
 * gelu_fwd (tanh) on 4M floats, one submit + await per call, a profiler
 * callback stamping the op's start and end on the actor thread. Per call:
 *   submit_to_start  the message reaching the op (with the actor's wake-up
 *                    when it slept);
 *   run              the op on the actor's pool;
 *   end_to_await     the completion reaching the waiter (with its wake-up
 *                    when it slept: an op of a millisecond outlasts
 *                    gpa_await's spin);
 *   direct           the same kernel called on the benches' pool, alternated.
 * warm: calls back to back; cold: 96 MiB written between calls, long enough
 * for the actor, its pool and the waiter to sleep, as in the *_actor rows,
 * which run a triad between calls. Medians (and quartiles) in µs over
 * GPA_BENCH_REPS calls (default 40). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"
#include "bench.h"
#include "bench_nn_host.h"
#include "gpuactor.h"
#include "kernels/host/gelu.h"

enum { AO_N = 4 << 20, AO_COOL = 96 << 20 };

typedef struct ao_stamp {
  int64_t start, end; /* gpa__clock_ns, as the profiler's */
} ao_stamp;

static void ao_on_op(const gpa_prof_op *op, void *user) {
  ao_stamp *s = user;
  if (!strcmp(op->name, "gelu_fwd")) s->start = op->start_ns, s->end = op->end_ns;
}

static void ao_emit(const char *name, double *v[4], int reps) {
  static const char *const key[4] = {"submit_to_start", "run", "end_to_await", "direct"};
  printf("{\"name\":\"%s\",\"backend\":\"cpu\",\"shape\":\"%d,tanh\",\"unit\":\"us\"", name, AO_N);
  for (int k = 0; k < 4; k++) {
    gpa_bench_sort(v[k], (size_t)reps);
    printf(",\"%s\":%.1f,\"%s_q1\":%.1f,\"%s_q3\":%.1f", key[k], v[k][reps / 2], key[k], v[k][reps / 4], key[k],
           v[k][3 * reps / 4]);
  }
  printf("}\n");
  fflush(stdout);
}

void gpa_bench_actor_overhead(void) {
  int reps = gpa_bench_reps(40);
  float *x = malloc(sizeof(float) * AO_N), *y = malloc(sizeof(float) * AO_N);
  char *cool = malloc(AO_COOL);
  double *v[4] = {malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps),
                  malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps)};
  gpa_actor_options o = {.size = sizeof o, .device = "cpu"};
  gpa_actor *a = NULL;
  static ao_stamp st;
  gpa_profiler pr = {.size = sizeof pr, .on_op = ao_on_op, .user_data = &st};
  gpa_tensor t[2];
  memset(t, 0, sizeof t);
  int ok = x && y && cool && v[0] && v[1] && v[2] && v[3] && gpa_actor_create(&o, &a) == GPA_OK &&
           gpa_actor_add_profiler(a, &pr) == GPA_OK;
  gpa_queue *q = ok ? gpa_actor_default_queue(a) : NULL;
  if (ok) gpa_bench_fill(x, AO_N, -4.0f, 4.0f, 21);
  for (int i = 0; ok && i < 2; i++) {
    t[i].dtype = GPA_F32, t[i].rank = 1, t[i].shape[0] = AO_N;
    ok = gpa_buffer_acquire(a, NULL, sizeof(float) * AO_N, &t[i].buffer) == GPA_OK;
  }
  gpa_handle *h = NULL;
  ok = ok && gpa_upload(q, &t[0], x, sizeof(float) * AO_N, 0, &h) == GPA_OK && gpa_await(h, -1) == GPA_OK;
  gpa_handle_release(h);
  const gpa_attr ap = {"approximate", GPA_ATTR_INT, 1, 0};
  const gpa_op_call call = {"gelu_fwd", t, 1, t + 1, 1, &ap, 1};
  for (int cold = 0; ok && cold < 2; cold++) {
    for (int r = -1; ok && r < reps; r++) { /* r = -1: warm-up */
      if (cold) memset(cool, r & 0xff, AO_COOL);
      int64_t t0 = gpa__clock_ns();
      gpa__gelu_fwd_f32(gpa_bench_host_par(), y, x, AO_N, 1);
      int64_t t1 = gpa__clock_ns();
      if (cold) memset(cool, r & 0xff, AO_COOL);
      int64_t t2 = gpa__clock_ns();
      h = NULL;
      ok = gpa_submit(q, &call, &h) == GPA_OK && gpa_await(h, -1) == GPA_OK;
      int64_t t3 = gpa__clock_ns();
      gpa_handle_release(h);
      if (r < 0) continue;
      v[0][r] = 1e-3 * (double)(st.start - t2);
      v[1][r] = 1e-3 * (double)(st.end - st.start);
      v[2][r] = 1e-3 * (double)(t3 - st.end);
      v[3][r] = 1e-3 * (double)(t1 - t0);
    }
    if (ok) ao_emit(cold ? "actor_overhead_cold" : "actor_overhead_warm", v, reps);
  }
  if (!ok) fprintf(stderr, "gpa-bench: actor_overhead could not run\n");
  if (a) gpa_actor_destroy(a);
  for (int k = 0; k < 4; k++) free(v[k]);
  free(x), free(y), free(cool);
}
