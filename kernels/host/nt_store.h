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

#endif
