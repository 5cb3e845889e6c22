/* Embedding host kernels (fp32 table, int32 ids).
 *   forward:  y[i, :] = table[ids[i], :] for i < n (n = B*L)
 *   backward: dtable[v, :] = (accumulate ? dtable[v, :] : 0) + sum of dy[i, :]
 *             over the positions i with ids[i] == v, added in order of i in
 *             double. The ids are bucketed by value (a stable counting sort)
 *             and the vocabulary is split among threads: no atomics, bitwise
 *             the same for any thread count.
 * Ids must be checked first (gpa__embedding_first_bad_id). */
#ifndef GPA_KERNELS_HOST_EMBEDDING_H
#define GPA_KERNELS_HOST_EMBEDDING_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/host/host_par.h"

/* Index of the first id outside [0, V), or -1 if all are in range. */
int64_t gpa__embedding_first_bad_id(const int32_t *ids, int64_t n, int64_t V);

void gpa__embedding_fwd_f32(const gpa__par *par, float *y, const int32_t *ids, const float *table, int64_t n,
                            int64_t D);

size_t gpa__embedding_bwd_scratch(int64_t n, int64_t V);
void gpa__embedding_bwd_f32(const gpa__par *par, float *dtable, const float *dy, const int32_t *ids,
                            int64_t n, int64_t V, int64_t D, int accumulate, void *scratch);

#endif
