/* Kernels for the SIMT emulator tests: barriers, shuffles, votes, atomics,
 * dynamic shared memory. Each has a C reference in the test that runs it. */
#include "gpa_kernel.h"

/* Reverses each block's slice through static shared memory; 2-D blocks. */
extern "C" __global__ void sim_reverse(const int *in, int *out) {
  __shared__ int s[1024];
  const int nt = blockDim.x * blockDim.y;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int base = blockIdx.x * nt;
  s[t] = in[base + t];
  __syncthreads();
  out[base + t] = s[nt - 1 - t];
}

/* Block-wide sum by a shared-memory tree (many barrier phases) and
 * __syncthreads_count / _and / _or of simple predicates. */
extern "C" __global__ void sim_block_sum(const float *in, float *sums, int *votes) {
  __shared__ float s[1024];
  const int t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = s[0];
  const int c = __syncthreads_count(t % 3 == 0);
  const int a = __syncthreads_and(t >= 0);
  const int o = __syncthreads_or(t == 5);
  if (t == 0) {
    votes[blockIdx.x * 3 + 0] = c;
    votes[blockIdx.x * 3 + 1] = a;
    votes[blockIdx.x * 3 + 2] = o;
  }
}

/* Every warp collective; out has 10 ints per thread. */
extern "C" __global__ void sim_shuffles(const int *in, int *out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32;
  const int v = in[g];
  int *o = out + g * 10;
  o[0] = __shfl_sync(0xffffffffu, v, 3);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2);
  o[2] = __shfl_down_sync(0xffffffffu, v, 5);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 7);
  o[4] = __shfl_sync(0xffffffffu, v, lane + 1, 8); /* width 8: wraps within the segment */
  o[5] = (int)__ballot_sync(0xffffffffu, v & 1);
  o[6] = __any_sync(0xffffffffu, v == 1000);
  o[7] = __all_sync(0xffffffffu, v >= 0);
  float f = (float)v;
  for (int d = 16; d > 0; d >>= 1) f += __shfl_xor_sync(0xffffffffu, f, d);
  o[8] = (int)f;
  __syncwarp();
  /* a partial mask: the even lanes only */
  if ((lane & 1) == 0) o[9] = __shfl_down_sync(0x55555555u, v, 2);
  else o[9] = -1;
}

/* Atomics across blocks (run on several workers). */
extern "C" __global__ void sim_atomics(int *i, unsigned *u, float *f, double *d, unsigned long long *ull, int *mx) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(i, 1);
  atomicAdd(u, 2u);
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicAdd(ull, 3ull);
  atomicMax(mx, g);
  int old = atomicCAS(i + 1, g, g + 1); /* a chain: only the holder of the value advances it */
  (void)old;
}

/* Per-block sum through dynamic shared memory sized at launch. */
extern "C" __global__ void sim_dyn_sum(const float *in, float *out, int per_thread) {
  GPA_DYNAMIC_SHARED(float, buf);
  const int t = threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < per_thread; k++) {
    buf[t * per_thread + k] = in[(blockIdx.x * blockDim.x + t) * per_thread + k];
  }
  __syncthreads();
  if (t == 0) {
    for (int k = 0; k < (int)blockDim.x * per_thread; k++) acc += buf[k];
    out[blockIdx.x] = acc;
  }
}

/* Dynamic shared memory as a block finds it (out: its first `words`
 * words, per block), then zeroed, so that a later block on the same
 * worker that saw this block's leftovers would read zeros. */
extern "C" __global__ void sim_dyn_poison(unsigned *out, int words) {
  GPA_DYNAMIC_SHARED(unsigned, buf);
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[blockIdx.x * words + i] = buf[i];
  __syncthreads();
  for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = 0;
}

/* Scalar parameter layout: mixed sizes and alignments (packed-buffer form). */
extern "C" __global__ void sim_params(char c, double dv, short s, int *out, float fv, long long ll) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = c;
    out[1] = (int)dv;
    out[2] = s;
    out[3] = (int)fv;
    out[4] = (int)(ll >> 32);
  }
}
