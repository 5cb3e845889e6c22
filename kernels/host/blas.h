/* The one GEMM entry of the host kernels: cblas_sgemm (OpenBLAS) in row-major
 * form, with the edge cases BLAS rejects handled here (a zero dimension, a
 * leading dimension of 0, sizes past int).
 *
 * Threading: OpenBLAS (Debian's pthread variant) runs its own thread pool,
 * openblas_get_num_threads() threads (all online CPUs unless
 * OPENBLAS_NUM_THREADS says otherwise). Kernels call gpa__sgemm from the
 * thread that runs the op (the actor thread), never from inside a parallel
 * loop, so the pool and the backend's workers never run GEMMs at once and the
 * cores are not oversubscribed. Benches measure their cblas reference the same
 * way (same thread, same pool). */
#ifndef GPA_KERNELS_HOST_BLAS_H
#define GPA_KERNELS_HOST_BLAS_H
#include <stdint.h>

/* C[M,N] = A'[M,K] * B'[K,N] + beta * C, where A' = A or A^T (ta != 0),
 * B' = B or B^T (tb != 0); row-major with leading dimensions lda/ldb/ldc.
 * beta 0 overwrites C (NaNs in C do not leak). Every dimension must fit in
 * int (callers validate at submit: gpa__blas_dim_ok). */
void gpa__sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* Whether n can be a BLAS dimension or leading dimension (fits in int). */
static inline int gpa__blas_dim_ok(int64_t n) { return n >= 0 && n <= 0x7fffffff; }

#endif
