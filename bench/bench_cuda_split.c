/* gpa-bench cuda_split_sums: the ops whose column sums issue 25 split over
 * chunks of rows (kernels/cuda/split_sum.h), at the main job's shapes:
 * layernorm_bwd 4096 x 96, linear_bwd 4096 rows 96 -> 96 with GELU (f32)
 * and 96 -> 60 (bf16), conv1d_bwd B32 C96 L128 K3 causal (f32, bf16).
 * Each is timed (device time per op, CUDA events, k ops a batch) on two
 * actors of one run: ns with the split (the default), ref_ns with
 * GPA_CUDA_SPLIT_SUMS=0 (the single-pass launches of before), so ratio > 1
 * is the split's gain on the whole op (dx and dW included, unchanged). On
 * sim only the plumbing runs: emulated times mean nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

enum { ROWS = 6, MAXT = 8 };

typedef struct srow {
  const char *name, *op, *shape;
  int dt, nin, nout;
  int64_t shp[MAXT][3]; /* inputs then outputs; rank from the count of nonzero dims */
  int odt[3];           /* outputs' dtypes (dW, db, dgamma stay f32) */
  gpa_attr attr;
  int nattr;
} srow;

static const srow rows[ROWS] = {
    {"cuda_split_layernorm_bwd", "layernorm_bwd", "f32 4096x96", GPA_F32, 5, 3,
     {{4096, 96}, {4096, 96}, {96}, {4096}, {4096}, {4096, 96}, {96}, {96}}, {GPA_F32, GPA_F32, GPA_F32}, {0}, 0},
    {"cuda_split_layernorm_bwd", "layernorm_bwd", "bf16 4096x96", GPA_BF16, 5, 3,
     {{4096, 96}, {4096, 96}, {96}, {4096}, {4096}, {4096, 96}, {96}, {96}}, {GPA_BF16, GPA_F32, GPA_F32}, {0}, 0},
    {"cuda_split_linear_bwd", "linear_bwd", "f32 4096x96x96 gelu", GPA_F32, 4, 3,
     {{4096, 96}, {4096, 96}, {96, 96}, {4096, 96}, {4096, 96}, {96, 96}, {96}},
     {GPA_F32, GPA_F32, GPA_F32}, {"gelu", GPA_ATTR_INT, 1, 0}, 1},
    {"cuda_split_linear_bwd", "linear_bwd", "bf16 4096x96x60", GPA_BF16, 3, 3,
     {{4096, 60}, {4096, 96}, {60, 96}, {4096, 96}, {60, 96}, {60}}, {GPA_BF16, GPA_F32, GPA_F32}, {0}, 0},
    {"cuda_split_conv1d_bwd", "conv1d_bwd", "f32 B32 C96 L128 K3 causal", GPA_F32, 3, 3,
     {{32, 96, 128}, {32, 96, 128}, {96, 96, 3}, {32, 96, 128}, {96, 96, 3}, {96}},
     {GPA_F32, GPA_F32, GPA_F32}, {"causal", GPA_ATTR_INT, 1, 0}, 1},
    {"cuda_split_conv1d_bwd", "conv1d_bwd", "bf16 B32 C96 L128 K3 causal", GPA_BF16, 3, 3,
     {{32, 96, 128}, {32, 96, 128}, {96, 96, 3}, {32, 96, 128}, {96, 96, 3}, {96}},
     {GPA_BF16, GPA_F32, GPA_F32}, {"causal", GPA_ATTR_INT, 1, 0}, 1},
};

static int rank_of(const int64_t *s) { return s[2] ? 3 : s[1] ? 2 : 1; }

/* layernorm's gamma, mean and rstd are f32 whatever x is */
static int in_dtype(const srow *r, int i) { return !strcmp(r->op, "layernorm_bwd") && i >= 2 ? GPA_F32 : r->dt; }

/* Device time per op of every row on an actor created now (the caller set
 * the environment); 0 where a row failed or the backend is not a GPU's. */
static int time_rows(double *ns, int *sim) {
  gpa_actor *a = gpa_bench_cuda_actor("cuda_split_sums", sim);
  if (!a) return 0;
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(5), k = *sim ? 1 : 20;
  uint64_t seed = 31;
  for (int i = 0; i < ROWS; i++) {
    const srow *r = &rows[i];
    gpa_tensor t[MAXT];
    for (int j = 0; j < r->nin + r->nout; j++)
      t[j] = gpa_bench_device_tensor(a, q, j < r->nin ? in_dtype(r, j) : r->odt[j - r->nin], rank_of(r->shp[j]),
                                     r->shp[j], &seed);
    gpa_op_call call = {r->op, t, (uint32_t)r->nin, t + r->nin, (uint32_t)r->nout, &r->attr, (uint32_t)r->nattr};
    char err[256];
    ns[i] = gpa_bench_batch_ns(q, &call, k, reps, NULL, err, sizeof err);
    if (ns[i] <= 0) fprintf(stderr, "gpa-bench cuda_split_sums: %s %s: %s\n", r->op, r->shape, err);
    for (int j = 0; j < r->nin + r->nout; j++) gpa_buffer_release(a, t[j].buffer);
  }
  gpa_actor_destroy(a);
  return 1;
}

void gpa_bench_cuda_split_sums(void) {
  double split[ROWS], one[ROWS];
  int sim = 0;
  if (!time_rows(split, &sim)) return;
  /* the option is read at each actor creation: a second actor takes the old launches */
  const char *was = getenv("GPA_CUDA_SPLIT_SUMS");
  char *keep = was ? strdup(was) : NULL;
  setenv("GPA_CUDA_SPLIT_SUMS", "0", 1);
  int ok = time_rows(one, &sim);
  if (keep) setenv("GPA_CUDA_SPLIT_SUMS", keep, 1);
  else unsetenv("GPA_CUDA_SPLIT_SUMS");
  free(keep);
  if (!ok) return;
  for (int i = 0; i < ROWS; i++) {
    if (split[i] <= 0 || one[i] <= 0) continue;
    gpa_bench_result res = {.name = rows[i].name, .backend = sim ? "sim" : "cuda", .shape = rows[i].shape,
                            .ref = "the same op, GPA_CUDA_SPLIT_SUMS=0", .ns = split[i], .ref_ns = one[i],
                            .extra = sim ? "\"note\":\"simulated device: emulated times, plumbing check only\""
                                         : "\"note\":\"device time per op from CUDA events\""};
    gpa_bench_emit(&res);
  }
}
