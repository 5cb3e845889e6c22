/* Tensor-core and 16-bit kernels for the emulator tests: wmma GEMM tiles in
 * half and bf16 with fp32 accumulate, and the device-only fp16/bf16 and math
 * intrinsics the kernels use. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include "gpa_kernel.h"
using namespace nvcuda;

/* C[MxN] (row-major) = 2 * A[MxK] (row-major) x B[KxN] (col-major); one warp per 16x16 tile. */
extern "C" __global__ void sim_wmma_f16(const __half *a, const __half *b, float *c, int m, int n, int k) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, tiles_n = n / 16;
  const int tm = warp / tiles_n, tn = warp % tiles_n;
  if (tm >= m / 16) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int kk = 0; kk < k; kk += 16) {
    wmma::load_matrix_sync(fa, a + (size_t)tm * 16 * k + kk, k);
    wmma::load_matrix_sync(fb, b + (size_t)tn * 16 * k + kk, k);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 2.0f;
  wmma::store_matrix_sync(c + (size_t)tm * 16 * n + tn * 16, acc, n, wmma::mem_row_major);
}

/* C[MxN] (col-major) = A[MxK] (col-major) x B[KxN] (row-major) + C, bf16 inputs. */
extern "C" __global__ void sim_wmma_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *c, int m, int n,
                                         int k) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, tiles_m = m / 16;
  const int tm = warp % tiles_m, tn = warp / tiles_m;
  if (tn >= n / 16) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  float *ct = c + (size_t)tn * 16 * m + tm * 16;
  wmma::load_matrix_sync(acc, ct, m, wmma::mem_col_major);
  for (int kk = 0; kk < k; kk += 16) {
    wmma::load_matrix_sync(fa, a + (size_t)kk * m + tm * 16, m);
    wmma::load_matrix_sync(fb, b + (size_t)kk * n + tn * 16, n);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(ct, acc, m, wmma::mem_col_major);
}

/* 16-bit intrinsics and math; 8 outputs per element. */
extern "C" __global__ void sim_half_math(const float *x, float *out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  const __half h = __float2half(v);
  const __nv_bfloat16 bf = __float2bfloat16(v);
  float *o = out + (size_t)i * 8;
  o[0] = __half2float(__hfma(h, h, __float2half(1.0f)));
  o[1] = __bfloat162float(__hfma(bf, bf, __float2bfloat16(1.0f)));
  o[2] = __half2float(hexp(h));
  o[3] = __bfloat162float(hsqrt(__habs(bf)));
  o[4] = __half2float(__shfl_xor_sync(0xffffffffu, h, 1));
  o[5] = __expf(v) + rsqrtf(fabsf(v) + 1.0f);
  o[6] = tanhf(v) + erff(v) + __fdividef(v, 3.0f);
  __half2 h2 = __floats2half2_rn(v, 2.0f * v);
  __half2 acc2 = __floats2half2_rn(0.0f, 0.0f);
  __half2 *accp = &acc2;
  atomicAdd(accp, h2);
  o[7] = __low2float(acc2) + __high2float(__hmul2(h2, h2));
}
