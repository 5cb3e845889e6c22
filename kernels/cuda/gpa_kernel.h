/* Common header of kernels/cuda/NAME.cu: what both compilers must agree on.
 *
 * Each .cu is compiled twice (cmake/cuda.cmake): by nvcc into the fatbin the
 * library loads, and by the host C++ compiler into an emulated module for
 * the simulated device (sim/, docs/sim.md), where GPA_SIM_EMU is defined.
 *
 * Dynamic shared memory: write
 *     GPA_DYNAMIC_SHARED(float, buf);
 * at the top of the kernel body; it declares `float *buf` pointing at the
 * block's dynamic shared memory (16-byte aligned) under both compilers.
 * Plain `extern __shared__ T x[]` does not compile under emulation. */
#ifndef GPA_KERNEL_H
#define GPA_KERNEL_H

#ifdef GPA_SIM_EMU
#define GPA_DYNAMIC_SHARED(T, name) T *name = reinterpret_cast<T *>(gpa_sim_dynamic_shared())
#else
#define GPA_DYNAMIC_SHARED(T, name)                              \
  extern __shared__ __align__(16) unsigned char gpa_dyn_smem_[]; \
  T *name = reinterpret_cast<T *>(gpa_dyn_smem_)
#endif

#define GPA_FULL_MASK 0xffffffffu

/* Sum over the 32 lanes of a warp (every lane gets the total). */
static __device__ __forceinline__ float gpa_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(GPA_FULL_MASK, v, o);
  return v;
}
#endif
