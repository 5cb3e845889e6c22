/* Embedding and metric ops on CUDA (kernels/cuda/embedding.cu, metrics.cu);
 * bf16 tensors (embedding table/y and dy, cross-entropy logits/dlogits)
 * select the _bf16 kernels.
 * Index checks run on the device; their outcome is read when the op
 * completes (gpa__cu_post_check), so nothing synchronizes here. */
#include <stdio.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernel_list.h"

#define THREADS 256
#define RES_BYTES 256 /* the check's two results, at the start of the scratch */

static gpa_status memset32(const gpa_op_exec *x, CUdeviceptr p, unsigned v, size_t n) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  return gpa__cu_check(C, C->cu.cuMemsetD32Async(p, v, n, (CUstream)x->stream), "cuMemsetD32Async", x->msg,
                       x->msg_size);
}

/* Checks idx[0..n) against [0, v) (ignore_index when use_ignore) on the
 * device and arranges for the result to be read at completion. */
static gpa_status check_idx(const gpa_op_exec *x, CUdeviceptr res, const void *idx, long long n, long long v,
                            long long ignore, int use_ignore, int kind, const char *op, long long a, long long b) {
  if (n <= 0) return GPA_OK;
  GPA__CU_TRY(memset32(x, res, 0xffffffffu, 4));
  void *ix = (void *)idx;
  void *a1[] = {&ix, &n, &v, &ignore, &use_ignore, &res};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_IDX_CHECK, gpa__cu_blocks(x, n, THREADS), 1, 1, THREADS, 1, 0, a1));
  void *a2[] = {&ix, &res};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_IDX_FETCH, 1, 1, 1, 32, 1, 0, a2));
  return gpa__cu_post_check(x, kind, op, res, a, b);
}

static gpa_status emb_fwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *ids = &x->inputs[0], *tab = &x->inputs[1];
  long long n = ids->shape[0] * ids->shape[1], d = tab->shape[1], v = tab->shape[0];
  if (n <= 0) return GPA_OK;
  CUdeviceptr res = gpa__cu_scratch(x, RES_BYTES);
  if (!res) return GPA_ENOMEM;
  GPA__CU_TRY(check_idx(x, res, x->in[0], n, v, 0, 0, GPA__CU_POST_IDS2D, "embedding_fwd", ids->shape[1], v));
  void *y = x->out[0], *ip = x->in[0], *tp = x->in[1];
  void *args[] = {&y, &ip, &tp, &n, &d, &v};
  if (n * d <= 0) return GPA_OK;
  int id = tab->dtype == GPA_BF16 ? GPA__K_EMB_FWD_BF : GPA__K_EMB_FWD;
  return gpa__cu_launch(x, id, gpa__cu_blocks(x, n * d, THREADS), 1, 1, THREADS, 1, 0, args);
}

static gpa_status emb_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *ids = &x->inputs[1], *dt = &x->outputs[0];
  long long n = ids->shape[0] * ids->shape[1], v = dt->shape[0], d = dt->shape[1];
  int acc = (int)gpa__cu_attr_i(x, "accumulate", 0);
  if (v <= 0 || d <= 0) return GPA_OK;
  long long npow2 = 1;
  while (npow2 < n) npow2 *= 2;
  CUdeviceptr scr = gpa__cu_scratch(x, RES_BYTES + (uint64_t)(n > 0 ? npow2 : 1) * 8);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, keys = scr + RES_BYTES;
  GPA__CU_TRY(check_idx(x, res, x->in[1], n, v, 0, 0, GPA__CU_POST_IDS2D, "embedding_bwd", ids->shape[1], v));
  void *ip = x->in[1], *dy = x->in[0], *out = x->out[0];
  if (n > 0) {
    void *ak[] = {&keys, &ip, &n, &npow2};
    unsigned grid = gpa__cu_blocks(x, npow2, THREADS);
    GPA__CU_TRY(gpa__cu_launch(x, GPA__K_EMB_KEYS, grid, 1, 1, THREADS, 1, 0, ak));
    for (long long k = 2; k <= npow2; k *= 2)
      for (long long j = k / 2; j > 0; j /= 2) {
        void *ab[] = {&keys, &npow2, &j, &k};
        GPA__CU_TRY(gpa__cu_launch(x, GPA__K_EMB_BITONIC, grid, 1, 1, THREADS, 1, 0, ab));
      }
  }
  void *args[] = {&out, &dy, &keys, &n, &v, &d, &acc};
  int id = x->inputs[0].dtype == GPA_BF16 ? GPA__K_EMB_BWD_BF : GPA__K_EMB_BWD;
  return gpa__cu_launch(x, id, gpa__cu_blocks(x, v * d, THREADS), 1, 1, THREADS, 1, 0, args);
}

#define WARPS 8 /* per block of the row kernels */

static gpa_status ce_fwd_cu(const gpa_op_exec *x) {
  long long n = x->inputs[0].shape[0], v = x->inputs[0].shape[1];
  long long ign = gpa__cu_attr_i(x, "ignore_index", -100);
  CUdeviceptr scr = gpa__cu_scratch(x, RES_BYTES + (uint64_t)(n > 0 ? n : 1) * 8);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, part = scr + RES_BYTES;
  GPA__CU_TRY(check_idx(x, res, x->in[1], n, v, ign, 1, GPA__CU_POST_TARGETS, "cross_entropy_fwd", v, ign));
  void *lg = x->in[0], *tg = x->in[1], *out = x->out[0];
  if (n > 0) {
    int grp = gpa__cu_row_group(v);
    void *a1[] = {&part, &lg, &tg, &n, &v, &ign, &grp};
    int id = x->inputs[0].dtype == GPA_BF16 ? GPA__K_CE_ROWS_BF : GPA__K_CE_ROWS;
    GPA__CU_TRY(gpa__cu_launch(x, id, gpa__cu_row_blocks(x, n, grp, WARPS), 1, 1, 32, WARPS, 0, a1));
  }
  double div = 0;
  void *a2[] = {&out, &part, &n, &div, &tg, &ign};
  return gpa__cu_launch(x, GPA__K_SUM_FINAL, 1, 1, 1, THREADS, 1, 0, a2);
}

static gpa_status ce_bwd_cu(const gpa_op_exec *x) {
  long long n = x->inputs[0].shape[0], v = x->inputs[0].shape[1];
  long long ign = gpa__cu_attr_i(x, "ignore_index", -100);
  double scale = gpa__cu_attr_f(x, "scale", 1.0);
  if (n <= 0 || v <= 0) return GPA_OK;
  CUdeviceptr scr = gpa__cu_scratch(x, RES_BYTES + 8);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, cnt = scr + RES_BYTES;
  GPA__CU_TRY(check_idx(x, res, x->in[1], n, v, ign, 1, GPA__CU_POST_TARGETS, "cross_entropy_bwd", v, ign));
  void *lg = x->in[0], *tg = x->in[1], *out = x->out[0];
  void *a1[] = {&cnt, &tg, &n, &ign};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_CE_COUNT, 1, 1, 1, THREADS, 1, 0, a1));
  int grp = gpa__cu_row_group(v);
  void *a2[] = {&out, &lg, &tg, &cnt, &n, &v, &ign, &scale, &grp};
  int id = x->inputs[0].dtype == GPA_BF16 ? GPA__K_CE_BWD_BF : GPA__K_CE_BWD;
  return gpa__cu_launch(x, id, gpa__cu_row_blocks(x, n, grp, WARPS), 1, 1, 32, WARPS, 0, a2);
}

static gpa_status pair_cu(const gpa_op_exec *x, int cosine) {
  const gpa_tensor *y = &x->inputs[0];
  long long d = y->shape[y->rank - 1], rows = 1;
  for (uint32_t i = 0; i + 1 < y->rank; i++) rows *= y->shape[i];
  double eps = gpa__cu_attr_f(x, "eps", 1e-8);
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
  long long ign = 0;
  void *a2[] = {&out, &part, &rows, &div, &tg, &ign};
  return gpa__cu_launch(x, GPA__K_SUM_FINAL, 1, 1, 1, THREADS, 1, 0, a2);
}
static gpa_status mse_cu(const gpa_op_exec *x) { return pair_cu(x, 0); }
static gpa_status cos_cu(const gpa_op_exec *x) { return pair_cu(x, 1); }

const gpa__cu_impl gpa__cu_ops_emb_met[] = {
    {"embedding_fwd", emb_fwd_cu},
    {"embedding_bwd", emb_bwd_cu},
    {"cross_entropy_fwd", ce_fwd_cu},
    {"cross_entropy_bwd", ce_bwd_cu},
    {"mse", mse_cu},
    {"cosine", cos_cu},
    {NULL, NULL},
};
