/* Metrics on CUDA (kernels/cuda/metrics.cu): per-row partial sums, then one
 * block sums them in a fixed order (deterministic); only scalars are read
 * back. bf16 logits select the _bf16 kernels. Targets are checked on the
 * device by the one-block kernel that reads them all anyway (the forward's
 * final sum, the backward's count: metrics.cu first_bad), the outcome read
 * at completion. */
#include "backends/cuda/cuda_ops.h"
#include "ops/cuda_kernels.h"
#include "ops/metrics/metrics.h"
#include "kernels/cuda/launch_shapes.h"

#define WARPS 8 /* per block of the row kernels */
/* Rows from which cross_entropy_bwd holds a row in registers (a block per
 * row, metrics.cu ce_bwd_row) instead of reading it twice with a lane
 * group: 4 KiB of logits, as layernorm's forward (below that the lane
 * groups' rows stay in L1 between the two reads; a guess from the cache
 * sizes, not measured). The forward takes the same kernel shape
 * (ce_fwd_row) from the same size. */
#define CE_ROW_MIN_BYTES 4096

/* Threads of ce_bwd_row for rows of v values, or 0 when it does not apply:
 * the row not in whole 16-byte vectors, a pointer not 16-byte aligned, the
 * row too short, or more threads needed than the kernel's bound. */
static unsigned ce_row_threads(const void *logits, const void *dlogits, long long v, int bf) {
  const long long per = bf ? 8 : 4, vecs = v / per;
  const long long t = ((vecs + GPA_CE_ROW_NV - 1) / GPA_CE_ROW_NV + 31) / 32 * 32;
  const int aligned = ((uintptr_t)logits & 15) == 0 && ((uintptr_t)dlogits & 15) == 0;
  const long long most = bf ? GPA_CE_ROW_MAX_THREADS_BF16 : GPA_CE_ROW_MAX_THREADS_F32; /* launch_shapes.h */
  return aligned && v % per == 0 && v * (bf ? 2 : 4) >= CE_ROW_MIN_BYTES && t <= most ? (unsigned)t : 0;
}

/* Blocks of the block-per-row kernels: a block a row. The row_cap grid
 * (16 blocks a SM, each taking rows a grid stride apart) ran the bf16
 * backward (85 registers x 128 threads: 5 blocks a SM fit) as 3.2 waves,
 * the last a fifth full, at 16384 x 4096 on an H100 (0.90 of PyTorch);
 * a block per row leaves the block scheduler to fill the SMs to the end.
 * The sim keeps its small grid (the rows loop a grid stride). */
static unsigned ce_row_grid(const gpa_op_exec *x, long long n) {
  return gpa__cu_of(x)->sim ? gpa__cu_row_blocks(x, n, 32, 1) : (unsigned)(n < (1 << 30) ? (n > 0 ? n : 1) : 1 << 30);
}

gpa_status gpa__ce_fwd_cu(const gpa_op_exec *x) {
  long long n = x->inputs[0].shape[0], v = x->inputs[0].shape[1];
  long long ign = ((const gpa__met_params *)x->params)->ignore_index;
  CUdeviceptr scr = gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES + (uint64_t)(n > 0 ? n : 1) * 8);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, part = scr + GPA__CU_INDEX_RES_BYTES;
  void *lg = x->in[0], *tg = x->in[1], *out = x->out[0];
  const int bf = x->inputs[0].dtype == GPA_BF16;
  unsigned threads = ce_row_threads(lg, NULL, v, bf);
  if (n > 0 && threads) {
    void *ra[] = {&part, &lg, &tg, &n, &v, &ign};
    GPA__CU_TRY(gpa__cu_launch(x, bf ? GPA__K_CE_ROWS_ROW_BF : GPA__K_CE_ROWS_ROW, ce_row_grid(x, n), 1, 1, threads, 1,
                               0, ra));
  } else if (n > 0) {
    int grp = gpa__cu_row_group(v);
    void *a1[] = {&part, &lg, &tg, &n, &v, &ign, &grp};
    int id = bf ? GPA__K_CE_ROWS_BF : GPA__K_CE_ROWS;
    GPA__CU_TRY(gpa__cu_launch(x, id, gpa__cu_row_blocks(x, n, grp, WARPS), 1, 1, 32, WARPS, 0, a1));
  }
  /* the final sum checks the targets (metrics.cu first_bad) */
  double div = 0;
  CUdeviceptr kres = n > 0 ? res : 0;
  void *a2[] = {&out, &part, &n, &div, &tg, &ign, &v, &kres};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_SUM_FINAL, 1, 1, 1, GPA__CU_THREADS, 1, 0, a2));
  return n > 0 ? gpa__cu_post_check(x, GPA__CU_POST_TARGETS, "cross_entropy_fwd", res, v, ign) : GPA_OK;
}

gpa_status gpa__ce_bwd_cu(const gpa_op_exec *x) {
  long long n = x->inputs[0].shape[0], v = x->inputs[0].shape[1];
  long long ign = ((const gpa__met_params *)x->params)->ignore_index;
  double scale = ((const gpa__met_params *)x->params)->scale;
  if (n <= 0 || v <= 0) return GPA_OK;
  CUdeviceptr scr = gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES + 8);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, cnt = scr + GPA__CU_INDEX_RES_BYTES;
  void *lg = x->in[0], *tg = x->in[1], *out = x->out[0];
  void *a1[] = {&cnt, &tg, &n, &ign, &v, &res}; /* the count checks the targets (metrics.cu first_bad) */
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_CE_COUNT, 1, 1, 1, GPA__CU_THREADS, 1, 0, a1));
  GPA__CU_TRY(gpa__cu_post_check(x, GPA__CU_POST_TARGETS, "cross_entropy_bwd", res, v, ign));
  const int bf = x->inputs[0].dtype == GPA_BF16;
  unsigned threads = ce_row_threads(x->in[0], x->out[0], v, bf);
  if (threads) {
    void *ra[] = {&out, &lg, &tg, &cnt, &n, &v, &ign, &scale};
    return gpa__cu_launch(x, bf ? GPA__K_CE_BWD_ROW_BF : GPA__K_CE_BWD_ROW, ce_row_grid(x, n), 1, 1, threads, 1, 0,
                          ra);
  }
  int grp = gpa__cu_row_group(v);
  void *a2[] = {&out, &lg, &tg, &cnt, &n, &v, &ign, &scale, &grp};
  int id = bf ? GPA__K_CE_BWD_BF : GPA__K_CE_BWD;
  return gpa__cu_launch(x, id, gpa__cu_row_blocks(x, n, grp, WARPS), 1, 1, 32, WARPS, 0, a2);
}

static gpa_status pair_cu(const gpa_op_exec *x, int cosine) {
  const gpa_tensor *y = &x->inputs[0];
  long long d = y->shape[y->rank - 1], rows = 1;
  for (uint32_t i = 0; i + 1 < y->rank; i++) rows *= y->shape[i];
  double eps = ((const gpa__met_params *)x->params)->eps; /* mse: unused */
  CUdeviceptr part = gpa__cu_scratch(x, (uint64_t)(rows > 0 ? rows : 1) * 8);
  if (!part) return GPA_ENOMEM;
  void *yp = x->in[0], *tp = x->in[1], *out = x->out[0];
  if (rows > 0) {
    int grp = gpa__cu_row_group(d);
    void *a1[] = {&part, &yp, &tp, &rows, &d, &eps, &cosine, &grp};
    GPA__CU_TRY(
        gpa__cu_launch(x, GPA__K_PAIR_ROWS, gpa__cu_row_blocks(x, rows, grp, WARPS), 1, 1, 32, WARPS, 0, a1));
  }
  double div = cosine ? (double)rows : (double)rows * (double)(d > 0 ? d : 0);
  void *tg = NULL;
  long long ign = 0, v = 0;
  CUdeviceptr res = 0;
  void *a2[] = {&out, &part, &rows, &div, &tg, &ign, &v, &res};
  return gpa__cu_launch(x, GPA__K_SUM_FINAL, 1, 1, 1, GPA__CU_THREADS, 1, 0, a2);
}
gpa_status gpa__mse_cu(const gpa_op_exec *x) { return pair_cu(x, 0); }
gpa_status gpa__cosine_cu(const gpa_op_exec *x) { return pair_cu(x, 1); }
