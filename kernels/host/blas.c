/* gpa__sgemm: cblas_sgemm with the edge cases handled, split across the
 * backend's pool. See blas.h. */
#include "kernels/host/blas.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/blas_lib.h"
#include "kernels/host/tgemm.h"

/* Blocks of C are multiples of this many rows/columns (OpenBLAS's AVX2
 * kernels work in 16 x 4 and 8 x 8 tiles), and a GEMM below GRAIN_FLOPS is
 * not split (a block's packing and hand-off would cost more than it saves). */
#define ALIGN 16
#define GRAIN_FLOPS (1 << 21)

static _Atomic int single; /* 1: OpenBLAS set to one thread by us */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void make_single(void) {
  const gpa__blas_lib *b = gpa__blas(); /* the load sets OpenBLAS to one thread */
  if (!b->set_threads) return; /* another CBLAS, or none: its threading is its own */
  b->set_threads(1);
  atomic_store(&single, 1);
}

int gpa__blas_single_threaded(void) { return atomic_load(&single); }

void gpa__sgemm_own_split(const gpa__par *par) {
  if (par && par->pfor && par->threads > 1) pthread_once(&once, make_single);
}

typedef struct gemm_ctx {
  int ta, tb;
  int64_t M, N, K, lda, ldb, ldc, step; /* step: rows (by_rows) or columns per block */
  const float *A, *B;
  float *C;
  float beta;
  int by_rows;
} gemm_ctx;

/* Without a BLAS: our register-blocked kernel (tgemm), B transposed into
 * a copy when it comes transposed. Correct, not fast. */
static void own_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                     int64_t ldb, float beta, float *C, int64_t ldc) {
  float *bt = tb ? malloc((size_t)K * (size_t)N * sizeof(float)) : NULL;
  if (tb && !bt) { /* no room for the copy: plain loops */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * B[j * ldb + k];
        C[i * ldc + j] = beta == 0.0f ? acc : beta * C[i * ldc + j] + acc;
      }
    return;
  }
  if (tb) {
    gpa__transpose(N, K, B, ldb, bt, N);
    B = bt;
    ldb = N;
  }
  if (beta != 0.0f && beta != 1.0f)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] *= beta;
  gpa__tgemm(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, beta != 0.0f);
  free(bt);
}

static void one(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc) {
  gpa__cblas_sgemm_fn sgemm = gpa__blas()->sgemm;
  if (!sgemm) {
    own_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  sgemm(GPA__CBLAS_ROW_MAJOR, ta ? GPA__CBLAS_TRANS : GPA__CBLAS_NO_TRANS, tb ? GPA__CBLAS_TRANS : GPA__CBLAS_NO_TRANS,
        (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

static void gemm_blocks(int64_t b0, int64_t b1, void *p) {
  const gemm_ctx *c = p;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t lo = blk * c->step, dim = c->by_rows ? c->M : c->N;
    int64_t hi = lo + c->step < dim ? lo + c->step : dim;
    if (hi <= lo) continue;
    if (c->by_rows) /* rows lo..hi of A' (A^T: columns of A) and of C */
      one(c->ta, c->tb, hi - lo, c->N, c->K, c->ta ? c->A + lo : c->A + lo * c->lda, c->lda, c->B, c->ldb, c->beta,
          c->C + lo * c->ldc, c->ldc);
    else /* columns lo..hi of B' (B^T: rows of B) and of C */
      one(c->ta, c->tb, c->M, hi - lo, c->K, c->A, c->lda, c->tb ? c->B + lo * c->ldb : c->B + lo, c->ldb, c->beta,
          c->C + lo, c->ldc);
  }
}

void gpa__sgemm(const gpa__par *par, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* C = beta * C; BLAS may reject K = 0 leading dimensions */
    for (int64_t i = 0; i < M; i++) {
      float *c = C + i * ldc;
      if (beta == 0.0f)
        memset(c, 0, (size_t)N * sizeof(float));
      else if (beta != 1.0f)
        for (int64_t j = 0; j < N; j++) c[j] *= beta;
    }
    return;
  }
  int threads = par && par->pfor ? par->threads : 1;
  if (threads > 1) pthread_once(&once, make_single);
  /* The larger of M and N is split: the other operand is packed once per
   * block, so the duplicated packing is the smaller one. */
  int by_rows = M >= N;
  int64_t dim = by_rows ? M : N;
  int64_t parts = threads;
  if (parts > dim / ALIGN) parts = dim / ALIGN;
  if (2.0 * (double)M * (double)N * (double)K < (double)GRAIN_FLOPS * (double)threads) parts = 1;
  if (parts <= 1) {
    one(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int64_t step = (dim + parts - 1) / parts;
  step = (step + ALIGN - 1) / ALIGN * ALIGN;
  gemm_ctx c = {ta, tb, M, N, K, lda, ldb, ldc, step, A, B, C, beta, by_rows};
  gpa__pfor(par, (dim + step - 1) / step, 1, gemm_blocks, &c);
}
