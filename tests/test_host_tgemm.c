/* The attention's tile GEMM (kernels/host/tgemm.c): its AVX-512F, AVX2 and
 * plain C kernels give the same bits (each C element one FMA chain over k
 * in order, from 0 or from C) and match a double reference, on shapes with
 * row and column edges of every size (M and N past multiples of 6 and of
 * 16 and 32), A read directly and transposed, C overwritten and
 * accumulated; nothing is written outside C's M x N block. Kernels the CPU
 * lacks are skipped (their cases run on the next one down). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/tgemm.h"
#include "util/nn_test.h"
#include "util/testutil.h"

#define SENT 12345.0f /* in C's padding: a kernel that writes outside the block changes it */

static void one(int64_t M, int64_t N, int64_t K, int trans, int acc, uint64_t *seed) {
  int64_t lda = (trans ? M : K) + 3, ldb = N + 5, ldc = N + 7;
  int64_t ars = trans ? 1 : lda, acs = trans ? lda : 1;
  size_t na = (size_t)(trans ? K : M) * lda, nb = (size_t)K * ldb, nc = (size_t)M * ldc;
  float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C[3];
  gpa_nt_fill(A, (int64_t)na, -1, 1, seed);
  gpa_nt_fill(B, (int64_t)nb, -1, 1, seed);
  gpa_nt_fill(C0, (int64_t)nc, -1, 1, seed);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = N; j < ldc; j++) C0[i * ldc + j] = SENT;
  for (int v = 0; v < 3; v++) { /* v: 0 auto (AVX-512F where there), 1 AVX2 at most, 2 plain C */
    C[v] = malloc(nc * 4);
    memcpy(C[v], C0, nc * 4);
    gpa__tgemm_isa(v);
    gpa__tgemm(M, N, K, A, ars, acs, B, ldb, C[v], ldc, acc);
  }
  gpa__tgemm_isa(0);
  double worst = 0;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < ldc; j++) {
      size_t o = (size_t)(i * ldc + j);
      if (j >= N) {
        CHECK(C[0][o] == SENT && C[1][o] == SENT && C[2][o] == SENT);
        continue;
      }
      double r = acc ? C0[o] : 0.0, mag = fabs(r);
      for (int64_t k = 0; k < K; k++) {
        double t = (double)A[i * ars + k * acs] * B[k * ldb + j];
        r += t, mag += fabs(t);
      }
      double e = fabs(C[2][o] - r) / (mag > 1e-30 ? mag : 1);
      worst = e > worst ? e : worst;
      CHECK(!memcmp(&C[0][o], &C[2][o], 4) && !memcmp(&C[1][o], &C[2][o], 4));
    }
  CHECK(worst < 1e-5);
  free(A), free(B), free(C0), free(C[0]), free(C[1]), free(C[2]);
}

int main(void) {
  uint64_t seed = 2626;
  static const int64_t Ms[] = {1, 5, 6, 7, 13, 64}, Ns[] = {1, 8, 15, 16, 17, 31, 32, 33, 64, 72}, Ks[] = {1, 7, 64};
  for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
    for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; b++)
      for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++)
        for (int t = 0; t < 2; t++) one(Ms[a], Ns[b], Ks[k], t, (int)(a + b + k + t) & 1, &seed);
  one(128, 64, 128, 0, 0, &seed); /* the forward's K Q^T tile */
  one(64, 128, 128, 1, 1, &seed); /* P V with P read transposed */
  return 0;
}
