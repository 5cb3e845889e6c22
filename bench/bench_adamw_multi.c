/* adamw_multi: the main job's optimizer step (gpa-train-lm at D 96, vocab
 * 60, 4 conv blocks of 3 taps: 28 tensors, 160668 floats) as 2 adamw_multi
 * messages against the same step as 28 adamw messages (the reference), each
 * a batch synced on the actor GPA_DEVICE selects (cpu, sim, cuda): wall time
 * per step, best of GPA_BENCH_REPS (default 50). On a GPU the difference is
 * the host and launch cost of 26 messages; on cpu the message overhead.
 * Second row, gpa-train-lm --bf16's step: the 15 GEMM weights' bf16 copies
 * written by the 2 adamw_multi messages (bf16_copies) against the same 2
 * messages and a cast per weight after them (what the main job did before:
 * 15 launches and a re-read of those fp32 weights). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { NT = 28, GROUP = 16 };

typedef struct mstep {
  gpa_queue *q;
  gpa_tensor t[NT][4];
  gpa_tensor w[NT]; /* bf16 copies of the GEMM weights (buffer 0: none) */
  int multi, failed;
  int copies;       /* 0: none; 1: bf16_copies outputs; 2: a cast per copy after the step */
  int64_t step;
} mstep;

static void run(void *ctx) {
  mstep *s = ctx;
  s->step++;
  gpa_attr hp[5] = {{"lr", GPA_ATTR_FLOAT, 0, 1e-3}, {"step", GPA_ATTR_INT, s->step, 0},
                    {"weight_decay", GPA_ATTR_FLOAT, 0, 0.01}, {"decay_mask", GPA_ATTR_INT, -1, 0},
                    {"bf16_copies", GPA_ATTR_INT, 0, 0}};
  int st = gpa_batch_begin(s->q, s->multi ? "adamw_multi" : "adamw_x28");
  for (int i0 = 0; i0 < NT && !st; i0 += s->multi ? GROUP : 1) {
    int n = !s->multi ? 1 : NT - i0 < GROUP ? NT - i0 : GROUP;
    gpa_tensor in[4 * GROUP], out[4 * GROUP];
    uint32_t n_out = 3u * (uint32_t)n;
    hp[4].i = 0;
    for (int k = 0; k < n; k++) {
      const gpa_tensor *t = s->t[i0 + k];
      memcpy(&in[4 * k], t, 4 * sizeof *t);
      out[3 * k] = t[0], out[3 * k + 1] = t[2], out[3 * k + 2] = t[3];
    }
    for (int k = 0; k < n && s->copies == 1; k++)
      if (s->w[i0 + k].buffer) out[n_out++] = s->w[i0 + k], hp[4].i |= (int64_t)1 << k;
    gpa_op_call c = {s->multi ? "adamw_multi" : "adamw", in, 4u * (uint32_t)n, out, n_out, hp,
                     s->multi ? (s->copies == 1 ? 5u : 4u) : 3u};
    st = gpa_submit(s->q, &c, NULL);
    for (int k = 0; k < n && s->copies == 2 && !st; k++)
      if (s->w[i0 + k].buffer)
        st = gpa_submit(s->q, &(gpa_op_call){"cast", &s->t[i0 + k][0], 1, &s->w[i0 + k], 1, NULL, 0}, NULL);
  }
  if (gpa_sync_batch(s->q, NULL) || st) s->failed = 1;
}

void gpa_bench_adamw_multi(void) {
  gpa_actor *a;
  if (gpa_actor_create(NULL, &a) != GPA_OK) {
    fprintf(stderr, "adamw_multi: skipped: %s\n", gpa_last_error_message());
    return;
  }
  const int64_t D = 96, V = 60, K = 3;
  int64_t n[NT], m = 0;
  n[m++] = V * D; /* embedding */
  for (int b = 0; b < 4; b++) n[m++] = D, n[m++] = D, n[m++] = D * D * K, n[m++] = D; /* ln_g, ln_b, W, b */
  n[m++] = D, n[m++] = D;                                                              /* attention ln */
  for (int i = 0; i < 4; i++) n[m++] = D * D;                                          /* Wq Wk Wv Wo */
  n[m++] = D, n[m++] = D, n[m++] = D, n[m++] = V * D, n[m++] = V;                      /* bo, head ln, Wh, bh */
  mstep s = {.q = gpa_actor_default_queue(a)};
  int64_t total = 0;
  uint64_t seed = 1;
  for (int k = 0; k < NT; k++) {
    total += n[k];
    float *h = malloc((size_t)n[k] * 4);
    for (int r = 0; r < 4; r++) {
      gpa_tensor *t = &s.t[k][r];
      memset(t, 0, sizeof *t);
      t->dtype = GPA_F32, t->rank = 1, t->shape[0] = n[k];
      for (int64_t i = 0; i < n[k]; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = r == 3 ? 1e-4f : (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23);
      }
      gpa_handle *u = NULL;
      if (gpa_buffer_acquire(a, NULL, 4ull * (uint64_t)n[k], &t->buffer) ||
          gpa_upload(s.q, t, h, 4ull * (uint64_t)n[k], 0, &u) || gpa_await(u, -1))
        s.failed = 1;
      gpa_handle_release(u);
    }
    free(h);
  }
  /* the GEMM weights of gpa-train-lm --bf16: each block's W and b, Wq Wk Wv Wo bo, Wh bh */
  static const int gemm[] = {3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 21, 22, 23, 26, 27};
  int64_t copied = 0;
  for (size_t j = 0; j < sizeof gemm / sizeof gemm[0]; j++) {
    gpa_tensor *w = &s.w[gemm[j]];
    *w = s.t[gemm[j]][0];
    w->dtype = GPA_BF16;
    copied += n[gemm[j]];
    if (gpa_buffer_acquire(a, NULL, 2ull * (uint64_t)n[gemm[j]], &w->buffer)) s.failed = 1;
  }
  int reps = gpa_bench_reps(50);
  double ref = -1, ns = -1, cref = -1, cns = -1;
  if (!s.failed) {
    ref = gpa_bench_best_ns(reps, run, &s);
    s.multi = 1;
    ns = gpa_bench_best_ns(reps, run, &s);
    s.copies = 2;
    cref = gpa_bench_best_ns(reps, run, &s);
    s.copies = 1;
    cns = gpa_bench_best_ns(reps, run, &s);
  }
  char shape[64];
  snprintf(shape, sizeof shape, "%d tensors, %lld floats", NT, (long long)total);
  gpa_bench_result r = {.name = "adamw_multi", .backend = gpa_actor_backend(a), .shape = shape,
                        .ref = "adamw_x28", .ns = s.failed ? -1 : ns, .ref_ns = s.failed ? -1 : ref,
                        .bytes = 28.0 * (double)total, .extra = "\"messages\":2,\"ref_messages\":28"};
  if (s.failed) fprintf(stderr, "adamw_multi: failed: %s\n", gpa_last_error_message());
  gpa_bench_emit(&r);
  char cshape[96];
  snprintf(cshape, sizeof cshape, "%d tensors, %lld floats, %lld copied to bf16", NT, (long long)total,
           (long long)copied);
  gpa_bench_result rc = {.name = "adamw_multi_bf16_copies", .backend = gpa_actor_backend(a), .shape = cshape,
                         .ref = "adamw_multi+15_casts", .ns = s.failed ? -1 : cns, .ref_ns = s.failed ? -1 : cref,
                         .bytes = 28.0 * (double)total + 2.0 * (double)copied,
                         .extra = "\"messages\":2,\"ref_messages\":17"};
  gpa_bench_emit(&rc);
  gpa_actor_destroy(a);
}
