/* The one GEMM entry of the host kernels: cblas_sgemm (OpenBLAS) in row-major
 * form, with the edge cases BLAS rejects handled here (a zero dimension, a
 * leading dimension of 0, sizes past int).
 *
 * Threading: the backend's worker pool runs the GEMMs, not OpenBLAS's own
 * threads. Next to the pool, OpenBLAS's threads (one per CPU by default)
 * fought the pool's workers for the cores: its idle threads keep spinning
 * after a call, and steps of a training loop ran 4-5x slower on 2 cores
 * (docs/ops.md, "BLAS threads"). So when a GEMM comes with a pool of more
 * than one thread, gpa__sgemm splits C into one block of rows (or columns)
 * per thread, each a single-threaded cblas_sgemm. OpenBLAS runs on one
 * thread from its load on (blas_lib.c: openblas_set_num_threads(1), when
 * the library has it): the pool is the one thread budget. The
 * block bounds depend on the sizes and the pool's thread count only, and
 * each element of C is computed whole by one call: results do not depend on
 * scheduling. */
#ifndef GPA_KERNELS_HOST_BLAS_H
#define GPA_KERNELS_HOST_BLAS_H
#include <stdint.h>

#include "kernels/host/host_par.h"

/* C[M,N] = A'[M,K] * B'[K,N] + beta * C, where A' = A or A^T (ta != 0),
 * B' = B or B^T (tb != 0); row-major with leading dimensions lda/ldb/ldc.
 * beta 0 overwrites C (NaNs in C do not leak). Every dimension must fit in
 * int (callers validate at submit: gpa__blas_dim_ok). par: the pool (NULL or
 * one thread: one cblas_sgemm on the calling thread). Not from inside a
 * parallel loop. */
void gpa__sgemm(const gpa__par *par, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* For a caller that splits its work over par itself and runs whole GEMMs
 * inside its own parallel loop (gpa__sgemm(NULL, ...) per chunk, e.g.
 * conv1d): sets OpenBLAS to one thread, as gpa__sgemm does for a pool of more
 * than one thread, so that each chunk's GEMM stays on its thread. Call before
 * the loop. */
void gpa__sgemm_own_split(const gpa__par *par);

/* Whether n can be a BLAS dimension or leading dimension (fits in int). */
static inline int gpa__blas_dim_ok(int64_t n) { return n >= 0 && n <= 0x7fffffff; }

/* 1 once gpa__sgemm has set OpenBLAS to one thread (for benches and docs). */
int gpa__blas_single_threaded(void);

#endif
