/* adamw_multi: the main job's optimizer step (gpa-train-lm at D 96, vocab
 * 60, 4 conv blocks of 3 taps: 28 tensors, 160668 floats) as 2 adamw_multi
 * messages against the same step as 28 adamw messages (the reference), each
 * a batch synced on the actor GPA_DEVICE selects (cpu, sim, cuda): wall time
 * per step, best of GPA_BENCH_REPS (default 50). On a GPU the difference is
 * the host and launch cost of 26 messages; on cpu the message overhead. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { NT = 28, GROUP = 16 };

typedef struct mstep {
  gpa_queue *q;
  gpa_tensor t[NT][4];
  int multi, failed;
  int64_t step;
} mstep;

static void run(void *ctx) {
  mstep *s = ctx;
  s->step++;
  gpa_attr hp[4] = {{"lr", GPA_ATTR_FLOAT, 0, 1e-3}, {"step", GPA_ATTR_INT, s->step, 0},
                    {"weight_decay", GPA_ATTR_FLOAT, 0, 0.01}, {"decay_mask", GPA_ATTR_INT, -1, 0}};
  int st = gpa_batch_begin(s->q, s->multi ? "adamw_multi" : "adamw_x28");
  for (int i0 = 0; i0 < NT && !st; i0 += s->multi ? GROUP : 1) {
    int n = !s->multi ? 1 : NT - i0 < GROUP ? NT - i0 : GROUP;
    gpa_tensor in[4 * GROUP], out[3 * GROUP];
    for (int k = 0; k < n; k++) {
      const gpa_tensor *t = s->t[i0 + k];
      memcpy(&in[4 * k], t, 4 * sizeof *t);
      out[3 * k] = t[0], out[3 * k + 1] = t[2], out[3 * k + 2] = t[3];
    }
    gpa_op_call c = {s->multi ? "adamw_multi" : "adamw", in, 4u * (uint32_t)n, out, 3u * (uint32_t)n, hp,
                     s->multi ? 4u : 3u};
    st = gpa_submit(s->q, &c, NULL);
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
  int reps = gpa_bench_reps(50);
  double ref = -1, ns = -1;
  if (!s.failed) {
    ref = gpa_bench_best_ns(reps, run, &s);
    s.multi = 1;
    ns = gpa_bench_best_ns(reps, run, &s);
  }
  char shape[64];
  snprintf(shape, sizeof shape, "%d tensors, %lld floats", NT, (long long)total);
  gpa_bench_result r = {.name = "adamw_multi", .backend = gpa_actor_backend(a), .shape = shape,
                        .ref = "adamw_x28", .ns = s.failed ? -1 : ns, .ref_ns = s.failed ? -1 : ref,
                        .bytes = 28.0 * (double)total, .extra = "\"messages\":2,\"ref_messages\":28"};
  if (s.failed) fprintf(stderr, "adamw_multi: failed: %s\n", gpa_last_error_message());
  gpa_bench_emit(&r);
  gpa_actor_destroy(a);
}
