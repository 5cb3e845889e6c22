/* gpa__sgemm: cblas_sgemm with the edge cases handled. See blas.h. */
#include "kernels/host/blas.h"

#include <cblas.h>
#include <string.h>

void gpa__sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
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
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
              (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
