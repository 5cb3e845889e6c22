/* Planted bugs: each kernel breaks one rule a GPU punishes; the tests check
 * that the sim reports it (launch failure with block/thread ids) instead of
 * hanging or silently succeeding. */
#include "gpa_kernel.h"

/* Odd and even threads wait at different __syncthreads. */
extern "C" __global__ void bug_divergent_barrier(int *out) {
  if (threadIdx.x & 1) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

/* Lanes 0-15 wait at a block barrier while 16-31 wait in a full-warp shuffle. */
extern "C" __global__ void bug_deadlock(int *out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 0;
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
  }
}

/* Upper half-warp exits; the rest shuffle with a full mask. */
extern "C" __global__ void bug_exited_lane(int *out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1);
}

/* Writes one element past the end of out[n]. */
extern "C" __global__ void bug_oob_global(float *out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f; /* off by one */
}

/* Writes one float past the launch's dynamic shared memory. */
extern "C" __global__ void bug_oob_dyn_shared(float *out, int n) {
  GPA_DYNAMIC_SHARED(float, buf);
  buf[threadIdx.x + 1] = (float)threadIdx.x; /* thread n-1 writes buf[n] */
  __syncthreads();
  if (threadIdx.x == 0) out[0] = buf[n - 1];
}

/* Overruns a static __shared__ array (caught by the ASan build). */
extern "C" __global__ void bug_oob_static_shared(float *out, int k) {
  __shared__ float s[32];
  s[threadIdx.x + k] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[0];
}

/* Device-side trap. */
extern "C" __global__ void bug_trap(int *out) {
  if (threadIdx.x == 7) __trap();
  out[threadIdx.x] = 1;
}

/* Uses its pointer: the launch checks must see a freed or foreign pointer. */
extern "C" __global__ void bug_use_ptr(float *p) {
  if (threadIdx.x == 0) p[0] = 1.0f;
}
