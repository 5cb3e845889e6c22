/* gpa-bench cuda_emb_bwd: embedding_bwd on CUDA without a sort (the rows
 * path, ops/embedding/cuda_rows.c) against the sort path, in one run on
 * one actor: ns with GPA_EMB_BWD_ROWS=1, ref_ns with GPA_EMB_BWD_ROWS=0
 * (the knob is read at each call; it changes only between batches), so
 * ratio > 1 is the rows path's gain on the whole op (device time per op,
 * CUDA events, k ops a batch). Shapes: the main job's (gpa-train-lm: 32 x
 * 128 byte ids of English-like text into 256 rows of 96), f32 and bf16 dy;
 * and the corner of the size rule (8192 ids, 1024 rows), where the rows
 * path should still win if the rule is right. `shape` says which path the
 * rule (knob unset) takes there. On sim only the plumbing runs: emulated
 * times mean nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

typedef struct erow {
  const char *label;
  int B, L, V, D, dt;
} erow;

static const erow rows[] = {
    {"main job f32 B32 L128 V256 D96", 32, 128, 256, 96, GPA_F32},
    {"main job bf16 dy B32 L128 V256 D96", 32, 128, 256, 96, GPA_BF16},
    {"rule corner f32 B64 L128 V1024 D96", 64, 128, 1024, 96, GPA_F32},
};
enum { NROWS = sizeof rows / sizeof rows[0] };

/* a byte of English-like text: letter frequencies (per mille), the rest a
 * uniform tail over all 256 values */
static int32_t text_byte(uint64_t *s, int V) {
  static const char order[] = " etaoinshrdlcumwfgypbvkjxqz";
  static const int pm[] = {170, 93, 67, 60, 57, 53, 51, 49, 47, 44, 32, 31, 23, 22, 19, 19,
                           17,  15, 15, 14, 11, 8,  6,  1,  1,  1,  1};
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  int r = (int)((*s >> 33) % 1000);
  for (size_t i = 0; i < sizeof pm / sizeof pm[0]; i++) {
    if (r < pm[i]) return (unsigned char)order[i] % V;
    r -= pm[i];
  }
  return (int32_t)((*s >> 45) % (uint64_t)V);
}

static gpa_tensor text_ids(gpa_actor *a, gpa_queue *q, int B, int L, int V, uint64_t *seed) {
  gpa_tensor t = {.dtype = GPA_I32, .rank = 2, .shape = {B, L}};
  const size_t n = (size_t)B * (size_t)L;
  int32_t *h = malloc(n * 4);
  if (!h || gpa_buffer_acquire(a, NULL, n * 4, &t.buffer) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_emb_bwd: %s\n", gpa_last_error_message());
    exit(1);
  }
  for (size_t i = 0; i < n; i++) h[i] = text_byte(seed, V);
  gpa_upload(q, &t, h, n * 4, 0, NULL);
  gpa_sync_batch(q, NULL);
  free(h);
  return t;
}

/* device time per op under GPA_EMB_BWD_ROWS = knob; 0 on failure */
static double time_with(gpa_queue *q, const gpa_op_call *call, const char *knob, int k, int reps) {
  setenv("GPA_EMB_BWD_ROWS", knob, 1);
  char err[256];
  double ns = gpa_bench_batch_ns(q, call, k, reps, NULL, err, sizeof err);
  if (ns <= 0) fprintf(stderr, "gpa-bench cuda_emb_bwd: %s: %s\n", call->op, err);
  return ns;
}

void gpa_bench_cuda_emb_bwd(void) {
  int sim = 0;
  gpa_actor *a = gpa_bench_cuda_actor("cuda_emb_bwd", &sim);
  if (!a) return;
  gpa_queue *q = gpa_actor_default_queue(a);
  const char *was = getenv("GPA_EMB_BWD_ROWS");
  char *keep = was ? strdup(was) : NULL;
  const int reps = gpa_bench_reps(sim ? 1 : 20), k = sim ? 1 : 50;
  uint64_t seed = 77;
  for (int i = 0; i < NROWS; i++) {
    const erow *r = &rows[i];
    const int64_t dys[3] = {r->B, r->L, r->D}, dts[2] = {r->V, r->D};
    gpa_tensor in[2] = {gpa_bench_device_tensor(a, q, r->dt, 3, dys, &seed), text_ids(a, q, r->B, r->L, r->V, &seed)};
    gpa_tensor dt = gpa_bench_device_tensor(a, q, GPA_F32, 2, dts, &seed);
    gpa_op_call call = {"embedding_bwd", in, 2, &dt, 1, NULL, 0};
    const double rows_ns = time_with(q, &call, "1", k, reps), sort_ns = time_with(q, &call, "0", k, reps);
    if (rows_ns > 0 && sort_ns > 0) {
      const double es = r->dt == GPA_BF16 ? 2.0 : 4.0, n = (double)r->B * r->L;
      char shape[96];
      snprintf(shape, sizeof shape, "%s (rule: %s)", r->label,
               n <= 8192 && r->V <= 1024 ? "rows" : "sort"); /* ops/embedding/cuda_rows.c */
      gpa_bench_result res = {.name = "cuda_emb_bwd", .backend = sim ? "sim" : "cuda", .shape = shape,
                              .ref = "the sort path, GPA_EMB_BWD_ROWS=0", .ns = rows_ns, .ref_ns = sort_ns,
                              .bytes = es * n * r->D + 4.0 * n + 4.0 * r->V * r->D,
                              .extra = sim ? "\"note\":\"simulated device: emulated times, plumbing check only\""
                                           : "\"note\":\"device time per op from CUDA events\""};
      gpa_bench_emit(&res);
    }
    gpa_buffer_release(a, in[0].buffer);
    gpa_buffer_release(a, in[1].buffer);
    gpa_buffer_release(a, dt.buffer);
  }
  if (keep) setenv("GPA_EMB_BWD_ROWS", keep, 1);
  else unsetenv("GPA_EMB_BWD_ROWS");
  free(keep);
  gpa_actor_destroy(a);
}
