/* Non-temporal (streaming) stores for the host kernels' large outputs.
 *
 * An ordinary store first reads the line it writes (16 bytes of traffic per
 * 12 in a triad-like loop); a streaming store does not, but leaves the data
 * in memory, not in the cache. So the kernels stream only when what one call
 * touches (inputs and outputs) exceeds the last-level cache, as glibc's
 * memcpy does for large copies: there the output would be evicted before
 * the next op reads it anyway. Kernels that stream end each range with
 * _mm_sfence, so the pool's hand-back (a release) orders the stores. */
#ifndef GPA_KERNELS_HOST_NT_STORE_H
#define GPA_KERNELS_HOST_NT_STORE_H
#include <stdint.h>

/* 1 if a call touching `bytes` should stream its output. Any thread. */
int gpa__nt_worth(uint64_t bytes);
/* Forces the choice (1: always stream, 0: never) instead of comparing with
 * the last-level cache: the options table's GPA_HOST_NT, and kernel tests.
 * Call before the first kernel runs. */
void gpa__nt_force(int always);

/* Kernels that stream compute a piece of output into a small buffer (in L1)
 * with their ordinary loop, then stream it out: dst[0..n) = src[0..n) with
 * non-temporal stores (ordinary ones for the unaligned head and the tail).
 * gpa__nt_zero streams zeros. Both end without a fence: call
 * gpa__nt_fence() once at the end of the range. */
void gpa__nt_copy(float *dst, const float *src, int64_t n);
void gpa__nt_zero(float *dst, int64_t n);
void gpa__nt_fence(void);

#endif
