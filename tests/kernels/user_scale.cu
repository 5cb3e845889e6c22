// A user's own kernel for the kernel-image custom op test (test_custom_kernel.c):
// y = alpha * x + beta. Built like a user would: nvcc fatbin + (for the
// simulated device) the emulated module, through gpa_cuda_kernels().
#include "gpa_kernel.h"

struct scale_params {
  double alpha;
  double beta;
};

extern "C" __global__ void user_scale(const float *x, float *y, scale_params p, long long nx, long long ny) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < ny && i < nx) y[i] = (float)(p.alpha * x[i] + p.beta);
}
