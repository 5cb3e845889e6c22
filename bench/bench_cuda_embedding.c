/* gpa-bench cuda_emb_bwd: embedding_bwd on CUDA without a sort (the rows
 * path, ops/embedding/cuda_rows.c) against the sort path, in one run:
 * ns with GPA_EMB_BWD_ROWS=1, ref_ns with GPA_EMB_BWD_ROWS=0, each on an
 * actor of its own (the variable is read at each call), so
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

/* Device time per op of every row on an actor created with
 * GPA_EMB_BWD_ROWS = knob (read at actor creation, so set while no actor
 * exists); 0 where a row failed. */
static int time_rows(const char *knob, double *ns, int *sim) {
  setenv("GPA_EMB_BWD_ROWS", knob, 1);
  gpa_actor *a = gpa_bench_cuda_actor("cuda_emb_bwd", sim);
  if (!a) return 0;
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(*sim ? 1 : 20), k = *sim ? 1 : 50;
  for (int i = 0; i < NROWS; i++) {
    const erow *r = &rows[i];
    uint64_t seed = 77 + (uint64_t)i; /* the same data on both actors */
    const int64_t dys[3] = {r->B, r->L, r->D}, dts[2] = {r->V, r->D};
    gpa_tensor in[2] = {gpa_bench_device_tensor(a, q, r->dt, 3, dys, &seed), text_ids(a, q, r->B, r->L, r->V, &seed)};
    gpa_tensor dt = gpa_bench_device_tensor(a, q, GPA_F32, 2, dts, &seed);
    gpa_op_call call = {"embedding_bwd", in, 2, &dt, 1, NULL, 0};
    char err[256];
    ns[i] = gpa_bench_batch_ns(q, &call, k, reps, NULL, err, sizeof err);
    if (ns[i] <= 0) fprintf(stderr, "gpa-bench cuda_emb_bwd: %s (GPA_EMB_BWD_ROWS=%s): %s\n", r->label, knob, err);
    gpa_buffer_release(a, in[0].buffer);
    gpa_buffer_release(a, in[1].buffer);
    gpa_buffer_release(a, dt.buffer);
  }
  gpa_actor_destroy(a);
  return 1;
}

void gpa_bench_cuda_emb_bwd(void) {
  const char *was = getenv("GPA_EMB_BWD_ROWS");
  char *keep = was ? strdup(was) : NULL;
  double rows_ns[NROWS], sort_ns[NROWS];
  int sim = 0, ok = time_rows("1", rows_ns, &sim) && time_rows("0", sort_ns, &sim);
  if (keep) setenv("GPA_EMB_BWD_ROWS", keep, 1);
  else unsetenv("GPA_EMB_BWD_ROWS");
  free(keep);
  for (int i = 0; ok && i < NROWS; i++) {
    const erow *r = &rows[i];
    if (rows_ns[i] <= 0 || sort_ns[i] <= 0) continue;
    const double es = r->dt == GPA_BF16 ? 2.0 : 4.0, n = (double)r->B * r->L;
    char shape[96];
    snprintf(shape, sizeof shape, "%s (rule: %s)", r->label,
             n <= 8192 && r->V <= 1024 ? "rows" : "sort"); /* ops/embedding/cuda_rows.c */
    gpa_bench_result res = {.name = "cuda_emb_bwd", .backend = sim ? "sim" : "cuda", .shape = shape,
                            .ref = "the sort path, GPA_EMB_BWD_ROWS=0", .ns = rows_ns[i], .ref_ns = sort_ns[i],
                            .bytes = es * n * r->D + 4.0 * n + 4.0 * r->V * r->D,
                            .extra = sim ? "\"note\":\"simulated device: emulated times, plumbing check only\""
                                         : "\"note\":\"device time per op from CUDA events\""};
    gpa_bench_emit(&res);
  }
}
