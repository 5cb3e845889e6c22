/* gpa-bench cuda_mixed: the mixed-dtype forms of layernorm_fwd/bwd, add and
 * gelu_bwd (docs/ops.md, "Mixed forms") that replace gpa-train-lm --bf16's
 * activation casts, each timed against what it replaces in one run: the
 * op of one dtype and the cast(s) beside it, as the job ran them before
 * (layernorm_fwd then cast y; cast dy, layernorm_bwd, cast dx; cast the
 * branch, add; cast dy, gelu_bwd). Device time per sequence (CUDA events,
 * k sequences a batch): ns the mixed op, ref_ns the pair, so ratio > 1 is
 * the gain. Shapes: the main job's 4096 x 96 (launch-bound: what a cast
 * launch costs there) and 16384 x 4096 (memory-bound: the bytes the cast's
 * round trip moved). On sim only the plumbing runs (256-row shapes). */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

/* The best device time of k runs of calls[0..n) a batch, over reps batches
 * after a warm-up batch; 0 (and the message) on a failed batch. */
static double seq_ns(gpa_queue *q, const gpa_op_call *calls, int n, int k, int reps) {
  double best = 0;
  for (int r = 0; r <= reps; r++) {
    gpa_sync_batch(q, NULL);
    for (int i = 0; i < k; i++)
      for (int j = 0; j < n; j++) gpa_submit(q, &calls[j], NULL);
    gpa_batch_stats st = {.size = sizeof st};
    if (gpa_sync_batch(q, &st) != GPA_OK) {
      fprintf(stderr, "gpa-bench cuda_mixed: %s failed: %s\n", calls[0].op, st.first_error_message);
      return 0;
    }
    double ns = (double)st.device_ns / k;
    if (r && (best == 0 || ns < best)) best = ns;
  }
  return best;
}

static void emit(int sim, const char *name, const char *shape, double ns, double ref_ns, const char *ref) {
  if (ns <= 0 || ref_ns <= 0) return;
  gpa_bench_result r = {.name = name, .backend = sim ? "sim" : "cuda", .shape = shape, .ref = ref, .ns = ns,
                        .ref_ns = ref_ns,
                        .extra = sim ? "\"note\":\"simulated device: emulated times, plumbing check only\""
                                     : "\"note\":\"device time per sequence from CUDA events\""};
  gpa_bench_emit(&r);
}

#define CALL(op_, in_, nin_, out_, nout_) ((gpa_op_call){op_, in_, nin_, out_, nout_, NULL, 0})

static void run_shape(gpa_actor *a, int sim, int64_t N, int64_t D, int k, int reps) {
  gpa_queue *q = gpa_actor_default_queue(a);
  uint64_t seed = 41;
  int64_t sh[2] = {N, D}, vec[1] = {D}, rows[1] = {N};
  gpa_tensor x = gpa_bench_device_tensor(a, q, GPA_F32, 2, sh, &seed);
  gpa_tensor yf = gpa_bench_device_tensor(a, q, GPA_F32, 2, sh, &seed);
  gpa_tensor hf = gpa_bench_device_tensor(a, q, GPA_F32, 2, sh, &seed);
  gpa_tensor yb = gpa_bench_device_tensor(a, q, GPA_BF16, 2, sh, &seed);
  gpa_tensor hb = gpa_bench_device_tensor(a, q, GPA_BF16, 2, sh, &seed);
  gpa_tensor gb = gpa_bench_device_tensor(a, q, GPA_BF16, 2, sh, &seed);
  gpa_tensor g = gpa_bench_device_tensor(a, q, GPA_F32, 1, vec, &seed);
  gpa_tensor b = gpa_bench_device_tensor(a, q, GPA_F32, 1, vec, &seed);
  gpa_tensor dg = gpa_bench_device_tensor(a, q, GPA_F32, 1, vec, &seed);
  gpa_tensor db = gpa_bench_device_tensor(a, q, GPA_F32, 1, vec, &seed);
  gpa_tensor mu = gpa_bench_device_tensor(a, q, GPA_F32, 1, rows, &seed);
  gpa_tensor rs = gpa_bench_device_tensor(a, q, GPA_F32, 1, rows, &seed);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)N, (long long)D);
  /* layernorm_fwd: y bf16 against y f32 + cast */
  gpa_tensor lin[3] = {x, g, b}, lout_b[3] = {yb, mu, rs}, lout_f[3] = {yf, mu, rs};
  gpa_op_call fm[1] = {CALL("layernorm_fwd", lin, 3, lout_b, 3)};
  gpa_op_call fp[2] = {CALL("layernorm_fwd", lin, 3, lout_f, 3), CALL("cast", &yf, 1, &yb, 1)};
  emit(sim, "cuda_mixed_layernorm_fwd", shape, seq_ns(q, fm, 1, k, reps), seq_ns(q, fp, 2, k, reps),
       "layernorm_fwd f32 + cast y");
  /* layernorm_bwd: dy bf16, dx f32 and its bf16 copy, against cast dy + f32 op + cast dx */
  gpa_tensor bin_b[5] = {x, hb, g, mu, rs}, bin_f[5] = {x, hf, g, mu, rs};
  gpa_tensor bout_b[4] = {yf, dg, db, gb}, bout_f[3] = {yf, dg, db};
  gpa_op_call bm[1] = {CALL("layernorm_bwd", bin_b, 5, bout_b, 4)};
  gpa_op_call bp[3] = {CALL("cast", &hb, 1, &hf, 1), CALL("layernorm_bwd", bin_f, 5, bout_f, 3),
                       CALL("cast", &yf, 1, &gb, 1)};
  emit(sim, "cuda_mixed_layernorm_bwd", shape, seq_ns(q, bm, 1, k, reps), seq_ns(q, bp, 3, k, reps),
       "cast dy + layernorm_bwd f32 + cast dx");
  /* add: f32 + bf16 -> f32 against cast + add */
  gpa_tensor am_in[2] = {x, hb}, ap_in[2] = {x, hf};
  gpa_op_call am[1] = {CALL("add", am_in, 2, &yf, 1)};
  gpa_op_call ap[2] = {CALL("cast", &hb, 1, &hf, 1), CALL("add", ap_in, 2, &yf, 1)};
  emit(sim, "cuda_mixed_add", shape, seq_ns(q, am, 1, k, reps), seq_ns(q, ap, 2, k, reps), "cast b + add f32");
  /* gelu_bwd: x bf16, dy f32 against cast dy + bf16 op */
  gpa_tensor gm_in[2] = {yb, x}, gp_in[2] = {yb, hb};
  gpa_op_call gm[1] = {CALL("gelu_bwd", gm_in, 2, &gb, 1)};
  gpa_op_call gp[2] = {CALL("cast", &x, 1, &hb, 1), CALL("gelu_bwd", gp_in, 2, &gb, 1)};
  emit(sim, "cuda_mixed_gelu_bwd", shape, seq_ns(q, gm, 1, k, reps), seq_ns(q, gp, 2, k, reps),
       "cast dy + gelu_bwd bf16");
  gpa_sync_batch(q, NULL);
  const gpa_tensor all[12] = {x, yf, hf, yb, hb, gb, g, b, dg, db, mu, rs};
  for (int i = 0; i < 12; i++) gpa_buffer_release(a, all[i].buffer);
}

void gpa_bench_cuda_mixed(void) {
  int sim = 0;
  gpa_actor *a = gpa_bench_cuda_actor("cuda_mixed", &sim);
  if (!a) return;
  const int reps = gpa_bench_reps(5), k = sim ? 1 : 20;
  run_shape(a, sim, sim ? 256 : 4096, 96, k, reps);
  run_shape(a, sim, sim ? 256 : 16384, sim ? 1024 : 4096, k, reps);
  gpa_actor_destroy(a);
}
