/* conv1d with bf16 storage on CUDA: x, W, b, y, dy, dx bf16; dW, db f32
 * (docs/ops.md, conv1d). bf16 GEMMs (cublasGemmEx, CUBLAS_COMPUTE_32F:
 * tensor cores, fp32 sums), every output formed in fp32 and rounded once,
 * as the host's widened path rounds its f32 result once.
 *
 * The batches of a chunk are folded into the GEMMs' long dimension
 * (kernels/cuda/linear.cu, "bf16 conv1d"): col [R][nb Lout] bf16 by im2col,
 * dy' [Cout][nb Lout] bf16 (a permuted copy of dy), so per group
 *   forward   acc [cout_g][nb Lout] = W_g col            (fp32 scratch), then y = bf16(acc + b)
 *   dW        dW_g [cout_g][R] (+)= dy'_g col^T          (fp32, straight into dW; chunks add in order)
 *   dx        dcol [R][nb Lout] = W_g^T dy'_g            (fp32 scratch), then col2im, dx = bf16(sum)
 * one GEMM each instead of one per batch. Deterministic: fixed chunks and
 * order, cuBLAS GEMMs without atomics, db by the f32 path's block tree. */
#include <limits.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/conv1d/conv1d.h"
#include "ops/cuda_kernels.h"

#define CONV_BF_SCRATCH_CAP ((uint64_t)256 << 20)

static const float one = 1.0f, zero = 0.0f;

static uint64_t up256(uint64_t v) { return (v + 255) & ~(uint64_t)255; }

/* Batches per chunk: the scratch of `per` bytes a batch fits the cap, and
 * nb Lout (the GEMMs' ld) and R nb Lout fit an int. */
static long long chunk_of(const gpa__conv_cu_geom *g, uint64_t per) {
  long long c = per ? (long long)(CONV_BF_SCRATCH_CAP / per) : g->B;
  long long by_int = (long long)(INT_MAX / ((g->R > g->Cout ? g->R : g->Cout) * g->Lout));
  if (c > by_int) c = by_int;
  if (c < 1) c = 1;
  return c < g->B ? c : g->B;
}

static gpa_status gemm(const gpa_op_exec *x, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, long long m,
                       long long n, long long k, const void *A, long long lda, const void *B, long long ldb,
                       const float *beta, void *C, long long ldc, const char *what) {
  gpa__cu_ctx *cx = gpa__cu_of(x);
  return gpa__cu_blas_status(x,
                             cx->blas.cublasGemmEx(h, ta, tb, (int)m, (int)n, (int)k, &one, A, CUDA_R_16BF, (int)lda, B,
                                                   CUDA_R_16BF, (int)ldb, beta, C, CUDA_R_32F, (int)ldc,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                             what);
}

static gpa_status im2col(const gpa_op_exec *x, const gpa__conv_cu_geom *g, void *col, const void *xb, long long nb,
                         long long c0) {
  long long cin = g->Cin, cin_g = g->cin_g, l = g->L, k = g->K, lout = g->Lout, st = g->stride, pl = g->pad_l,
            dil = g->dil;
  void *xp = (void *)xb;
  void *args[] = {&col, &xp, &nb, &cin, &c0, &cin_g, &l, &k, &lout, &st, &pl, &dil};
  return gpa__cu_launch1d(x, GPA__K_CONV_IM2COL_BF, g->R * nb * lout, args);
}

gpa_status gpa__conv_fwd_bf16_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g) {
  if (g->B == 0) return GPA_OK;
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  uint64_t per_col = (uint64_t)g->R * (uint64_t)g->Lout * 2, per_acc = (uint64_t)g->cout_g * (uint64_t)g->Lout * 4;
  long long nbc = chunk_of(g, per_col + per_acc);
  uint64_t colb = up256((uint64_t)nbc * per_col);
  CUdeviceptr s = gpa__cu_scratch(x, colb + (uint64_t)nbc * per_acc);
  if (!s) return GPA_ENOMEM;
  void *col = (void *)(uintptr_t)s, *acc = (void *)(uintptr_t)(s + colb);
  const unsigned short *xs = x->in[0], *W = x->in[1];
  void *bias = x->n_inputs > 2 ? x->in[2] : NULL;
  for (long long b0 = 0; b0 < g->B; b0 += nbc) {
    long long nb = g->B - b0 < nbc ? g->B - b0 : nbc, nl = nb * g->Lout;
    void *y = (unsigned short *)x->out[0] + b0 * g->Cout * g->Lout;
    for (long long gi = 0; gi < g->G; gi++) {
      GPA__CU_TRY(im2col(x, g, col, xs + b0 * g->Cin * g->L, nb, gi * g->cin_g));
      /* acc [cout_g][nl] = W_g [cout_g][R] col [R][nl] (column-major: acc^T = col^T W_g^T) */
      GPA__CU_TRY(gemm(x, h, CUBLAS_OP_N, CUBLAS_OP_N, nl, g->cout_g, g->R, col, nl, W + gi * g->cout_g * g->R, g->R,
                       &zero, acc, nl, "conv1d_fwd: cublasGemmEx (bf16)"));
      long long cout = g->Cout, c0 = gi * g->cout_g, cout_g = g->cout_g, lout = g->Lout;
      void *args[] = {&y, &acc, &bias, &nb, &cout, &c0, &cout_g, &lout};
      GPA__CU_TRY(gpa__cu_launch1d(x, GPA__K_CONV_OUT_BF, cout_g * nl, args));
    }
  }
  return GPA_OK;
}

gpa_status gpa__conv_bwd_bf16_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g) {
  const unsigned short *dy = x->in[0], *xs = x->in[1], *W = x->in[2];
  void *dx = x->out[0], *dW = x->out[1];
  GPA__CU_TRY(gpa__conv_db_cu(x, g->B, g->Cout, g->Lout));
  if (g->B == 0) return gpa__cu_zero_f32(x, dW, g->Cout * g->R);
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  uint64_t per_col = (uint64_t)g->R * (uint64_t)g->Lout * 2, per_dyp = (uint64_t)g->Cout * (uint64_t)g->Lout * 2;
  uint64_t per_dcol = (uint64_t)g->R * (uint64_t)g->Lout * 4;
  long long nbc = chunk_of(g, per_col + per_dyp + per_dcol);
  uint64_t colb = up256((uint64_t)nbc * per_col), dypb = up256((uint64_t)nbc * per_dyp);
  CUdeviceptr s = gpa__cu_scratch(x, colb + dypb + (uint64_t)nbc * per_dcol);
  if (!s) return GPA_ENOMEM;
  void *col = (void *)(uintptr_t)s, *dyq = (void *)(uintptr_t)(s + colb), *dcol = (void *)(uintptr_t)(s + colb + dypb);
  for (long long b0 = 0; b0 < g->B; b0 += nbc) {
    long long nb = g->B - b0 < nbc ? g->B - b0 : nbc, nl = nb * g->Lout;
    {
      long long cout = g->Cout, lout = g->Lout;
      void *src = (void *)(dy + b0 * g->Cout * g->Lout);
      void *args[] = {&dyq, &src, &nb, &cout, &lout};
      GPA__CU_TRY(gpa__cu_launch1d(x, GPA__K_CONV_PERM_BF, cout * nl, args));
    }
    for (long long gi = 0; gi < g->G; gi++) {
      const unsigned short *Wg = W + gi * g->cout_g * g->R, *dyg = (const unsigned short *)dyq + gi * g->cout_g * nl;
      float *dWg = (float *)dW + gi * g->cout_g * g->R;
      GPA__CU_TRY(im2col(x, g, col, xs + b0 * g->Cin * g->L, nb, gi * g->cin_g));
      /* dW_g [cout_g][R] (+)= dy'_g [cout_g][nl] col^T (column-major: dW_g^T = col dy'_g^T) */
      GPA__CU_TRY(gemm(x, h, CUBLAS_OP_T, CUBLAS_OP_N, g->R, g->cout_g, nl, col, nl, dyg, nl, b0 ? &one : &zero, dWg,
                       g->R, "conv1d_bwd: cublasGemmEx (dW, bf16)"));
      /* dcol [R][nl] = W_g^T dy'_g (column-major: dcol^T = dy'_g^T W_g) */
      GPA__CU_TRY(gemm(x, h, CUBLAS_OP_N, CUBLAS_OP_T, nl, g->R, g->cout_g, dyg, nl, Wg, g->R, &zero, dcol, nl,
                       "conv1d_bwd: cublasGemmEx (dx, bf16)"));
      long long cin = g->Cin, c0 = gi * g->cin_g, cin_g = g->cin_g, l = g->L, k = g->K, lout = g->Lout,
                st = g->stride, pl = g->pad_l, dil = g->dil;
      void *dxb = (unsigned short *)dx + b0 * g->Cin * g->L;
      void *args[] = {&dxb, &dcol, &nb, &cin, &c0, &cin_g, &l, &k, &lout, &st, &pl, &dil};
      GPA__CU_TRY(gpa__cu_launch1d(x, GPA__K_CONV_COL2IM_BF, nb * cin_g * l, args));
    }
  }
  return GPA_OK;
}
