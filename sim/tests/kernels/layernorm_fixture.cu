/* LayerNorm forward, fp32: y = (x - mean) * rstd * gamma + beta per row of
 * x[N, D], also writing mean[N] and rstd[N] (nullable) for the backward pass.
 *
 * One warp per row: lanes stride over the row (coalesced), a two-pass
 * mean/variance (numerically safer than E[x^2]-E[x]^2) with warp-shuffle
 * reductions, no shared memory and no block barrier. Launch with
 * blockDim = (32, rows_per_block) and gridDim.x = ceil(N / rows_per_block). */
#include "gpa_kernel.h"

extern "C" __global__ void gpa_layernorm_fwd_f32(const float *__restrict__ x, const float *__restrict__ gamma,
                                                 const float *__restrict__ beta, float *__restrict__ y,
                                                 float *__restrict__ mean_out, float *__restrict__ rstd_out, int n,
                                                 int d, float eps) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= n) return; /* whole warps leave together: rows are per warp */
  const int lane = threadIdx.x;
  const float *xr = x + (size_t)row * d;
  float *yr = y + (size_t)row * d;

  float s = 0.0f;
  for (int i = lane; i < d; i += 32) s += xr[i];
  const float mean = gpa_warp_sum(s) / (float)d;

  float v = 0.0f;
  for (int i = lane; i < d; i += 32) {
    const float c = xr[i] - mean;
    v += c * c;
  }
  const float rstd = rsqrtf(gpa_warp_sum(v) / (float)d + eps);

  for (int i = lane; i < d; i += 32) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
  if (lane == 0) {
    if (mean_out) mean_out[row] = mean;
    if (rstd_out) rstd_out[row] = rstd;
  }
}
