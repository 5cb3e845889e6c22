/* Small in-cache GEMM for tiles (attention; conv1d's channels-last dW
 * units, kernels/host/conv1d.c): C[M,N] (+)= A[M,K] B[K,N].
 * B and C row-major with leading dimensions; A(r, k) = A[r*ars + k*acs], so
 * A may be read transposed (ars = 1, acs = ld) at no cost. Single-threaded, no allocation: meant
 * to be called from inside a parallel loop, where a BLAS call would fight
 * the backend's workers for the cores.
 *
 * Every C element is one FMA chain over k = 0..K-1 in order, starting from 0
 * (acc == 0) or from C (acc != 0): the value of an element does not depend
 * on M, N or where the element sits in a register block. AVX-512F register
 * blocks of 6x32, or AVX2+FMA ones of 6x16, when the CPU has them, plain C
 * otherwise: the same bits from each. */
#ifndef GPA_KERNELS_HOST_TGEMM_H
#define GPA_KERNELS_HOST_TGEMM_H
#include <stdint.h>

void gpa__tgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                int64_t ldb, float *C, int64_t ldc, int acc);

/* Tests: 1 caps the kernel at AVX2 (as does GPA_TGEMM_AVX512=0 in the
 * environment), 2 runs the plain C one, 0 chooses by the CPU again. */
void gpa__tgemm_isa(int cap);

/* The kernel gpa__tgemm runs now: 2 AVX-512F, 1 AVX2+FMA, 0 plain C (the
 * CPU's best, within gpa__tgemm_isa's cap). */
int gpa__tgemm_kernel(void);

/* dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols. */
void gpa__transpose(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst, int64_t ldd);

#endif
