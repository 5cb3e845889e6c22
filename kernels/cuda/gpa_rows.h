/* Row kernels of the CUDA backend: a row is reduced by a group of G lanes
 * (G a power of two, 1..32, about one lane per 32 elements), so one warp handles 32/G rows. Small rows then
 * keep every lane busy and need log2(G) shuffle rounds per reduction instead
 * of 5 (the host picks G from the row length: gpa__cu_row_group). Every lane
 * of a warp runs the same number of row iterations and joins every shuffle:
 * lanes past the last row, or of a row that is skipped, reduce zeros. */
#ifndef GPA_ROWS_H
#define GPA_ROWS_H
#include "gpa_kernel.h"

/* for (row ...) over [0, n): sets `row`, `sub` (lane in its group) and `ok`. */
#define GPA_ROW_LOOP(n, G, row, sub, ok)                                                                  \
  const int sub = threadIdx.x % (G);                                                                       \
  for (long long base_ = ((long long)blockIdx.x * blockDim.y + threadIdx.y) * (32 / (G)); base_ < (n);     \
       base_ += (long long)gridDim.x * blockDim.y * (32 / (G)))                                            \
    for (long long row = base_ + threadIdx.x / (G), once_ = 1; once_; once_ = 0)                           \
      for (const bool ok = row < (n); once_; once_ = 0)

static __device__ __forceinline__ float gpa_group_sum(float v, int g) {
  for (int o = g / 2; o > 0; o >>= 1) v += __shfl_xor_sync(GPA_FULL_MASK, v, o, g);
  return v;
}
static __device__ __forceinline__ double gpa_group_sum_d(double v, int g) {
  for (int o = g / 2; o > 0; o >>= 1) v += __shfl_xor_sync(GPA_FULL_MASK, v, o, g);
  return v;
}
static __device__ __forceinline__ float gpa_group_max(float v, int g) {
  for (int o = g / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(GPA_FULL_MASK, v, o, g));
  return v;
}
#endif
