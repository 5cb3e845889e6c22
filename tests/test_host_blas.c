/* kernels/host/blas.c: GEMMs split across a pool, OpenBLAS set to one
 * thread. For every transpose form, splits by rows and by columns, tails
 * that are not a multiple of the block alignment, beta 0 and 1, and leading
 * dimensions wider than the matrices: the split result is the same bits on
 * every run (block bounds depend on sizes and thread count only) and agrees
 * with one unsplit cblas_sgemm to fp32 rounding (not bit for bit: OpenBLAS's
 * edge tiles sum in another order, as its own threads' split does), and
 * columns past N in each leading dimension are untouched. Device
 * independent: runs the kernels directly. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bench/cblas_loaded.h"
#include "kernels/host/blas.h"
#include "kernels/host/pool.h"
#include "util/nn_test.h"
#include "util/testutil.h"

typedef struct gcase {
  int ta, tb;
  int64_t M, N, K, pad; /* pad: extra columns in every leading dimension */
  float beta;
} gcase;

static void run_case(const gpa__par *par, const gcase *c) {
  int64_t rA = c->ta ? c->K : c->M, cA = c->ta ? c->M : c->K;
  int64_t rB = c->tb ? c->N : c->K, cB = c->tb ? c->K : c->N;
  int64_t lda = cA + c->pad, ldb = cB + c->pad, ldc = c->N + c->pad;
  float *A = malloc((size_t)(rA * lda) * 4), *B = malloc((size_t)(rB * ldb) * 4);
  float *C1 = malloc((size_t)(c->M * ldc) * 4), *C2 = malloc((size_t)(c->M * ldc) * 4);
  float *C3 = malloc((size_t)(c->M * ldc) * 4);
  CHECK(A && B && C1 && C2 && C3);
  gpa_nt_fill(A, rA * lda, -0.5, 0.5, &(uint64_t){1});
  gpa_nt_fill(B, rB * ldb, -0.5, 0.5, &(uint64_t){2});
  gpa_nt_fill(C1, c->M * ldc, -0.5, 0.5, &(uint64_t){3});
  memcpy(C2, C1, (size_t)(c->M * ldc) * 4);
  memcpy(C3, C1, (size_t)(c->M * ldc) * 4);
  gpa__sgemm(par, c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, c->beta, C2, ldc);
  gpa__sgemm(par, c->ta, c->tb, c->M, c->N, c->K, A, lda, B, ldb, c->beta, C3, ldc);
  if (memcmp(C2, C3, (size_t)(c->M * ldc) * 4)) {
    fprintf(stderr, "split GEMM not deterministic: ta=%d tb=%d M=%lld N=%lld K=%lld\n", c->ta, c->tb,
            (long long)c->M, (long long)c->N, (long long)c->K);
    exit(1);
  }
  for (int64_t i = 0; i < c->M; i++)
    for (int64_t j = 0; j < ldc; j++) {
      double ref = j < c->N ? c->beta * C1[i * ldc + j] : C1[i * ldc + j], mag = fabs(ref);
      if (j < c->N)
        for (int64_t k = 0; k < c->K; k++) {
          double a = c->ta ? A[k * lda + i] : A[i * lda + k], b = c->tb ? B[j * ldb + k] : B[k * ldb + j];
          ref += a * b;
          mag += fabs(a * b);
        }
      double got = C2[i * ldc + j];
      if (!(fabs(got - ref) <= 1e-6 * mag + (j < c->N ? 1e-30 : 0.0))) {
        fprintf(stderr, "split GEMM off: ta=%d tb=%d M=%lld N=%lld K=%lld at [%lld,%lld]: %.9g vs %.9g\n", c->ta,
                c->tb, (long long)c->M, (long long)c->N, (long long)c->K, (long long)i, (long long)j, got, ref);
        exit(1);
      }
    }
  free(A), free(B), free(C1), free(C2), free(C3);
}

int main(void) {
  CHECK(!gpa__blas_single_threaded());
  gpa__pool *pool = gpa__pool_create(3);
  CHECK(pool);
  gpa__par par = gpa__pool_par(pool);
  const gcase cases[] = {
      {0, 0, 300, 200, 150, 0, 0.0f}, /* split by rows (M >= N) */
      {0, 1, 100, 517, 96, 3, 1.0f},  /* by columns, tail of 517 - 2 * 176 */
      {1, 0, 333, 64, 200, 1, 0.0f},  /* A^T: blocks are columns of A */
      {1, 1, 40, 401, 300, 0, 1.0f},  /* B^T: blocks are rows of B */
      {0, 0, 1024, 17, 300, 0, 0.0f}, /* narrow C */
      {0, 0, 17, 16, 16, 0, 0.0f},    /* too small to split */
      {0, 0, 64, 64, 0, 2, 1.0f},     /* K = 0: C = beta C */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&par, &cases[i]);
  /* Splitting set OpenBLAS to one thread (its own threads would fight the pool). */
  CHECK(gpa__blas_single_threaded());
  CHECK(openblas_get_num_threads() == 1);
  gpa__pool_destroy(pool);
  printf("host_blas: ok\n");
  return 0;
}
