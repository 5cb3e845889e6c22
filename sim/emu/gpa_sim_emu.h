/* gpa-sim emulation prelude: force-included (-include) when a kernels/cuda/NAME.cu
 * file is compiled by the host C++ compiler into an emulated module.
 *
 * It gives the CUDA C++ dialect a meaning on the CPU: qualifiers become plain
 * C++ (__global__ functions are ordinary functions run once per fiber), the
 * built-in ids read the calling fiber's record, barriers and warp collectives
 * call the runtime, which switches fibers. Why the order below: CUDA's
 * host_defines.h defines the qualifiers only when undefined and is pulled in
 * by vector_types.h and the fp16 headers, so it is included first and the
 * qualifiers are redefined afterwards. Never `#define __noinline__` (it is an
 * attribute spelling libstdc++ uses). */
#ifndef GPA_SIM_EMU_H
#define GPA_SIM_EMU_H
#include <vector_types.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "gpa_sim_abi.h"

#define GPA_SIM_EMU 1
#undef __host__
#undef __device__
#undef __global__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __launch_bounds__
#undef __grid_constant__
#define __host__
#define __device__
#define __global__
#define __constant__
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
/* Static __shared__: one copy per OS worker; a worker runs one block at a time
 * and fibers never migrate, so per-thread storage is per-block storage. ASan
 * builds use plain statics instead (thread_local arrays get no redzones) and
 * the module is flagged SERIAL so blocks of it never run concurrently. */
#ifdef GPA_ASAN
#define __shared__ static
#define GPA_SIM_MODULE_FLAGS GPA_SIM_MODULE_SERIAL
#else
#define __shared__ static thread_local
#define GPA_SIM_MODULE_FLAGS 0u
#endif

static constexpr int warpSize = 32;
#define threadIdx (gpa_sim_self()->thread_idx)
#define blockIdx (gpa_sim_self()->block_idx)
#define blockDim (gpa_sim_self()->block_dim)
#define gridDim (gpa_sim_self()->grid_dim)

/* Dynamic shared memory: see kernels/cuda/gpa_kernel.h (GPA_DYNAMIC_SHARED). */
static inline void *gpa_sim_dynamic_shared(void) { return gpa_sim_self()->dyn_shared; }

/* ---- block barriers: macros so the runtime learns the source line of each
 * barrier (divergence check). A return address would not do: compilers
 * duplicate barrier calls when they unswitch or peel loops. */
#define __syncthreads() gpa_sim_barrier(GPA_SIM_BAR_SYNC, 1, __LINE__)
#define __syncthreads_count(p) gpa_sim_barrier(GPA_SIM_BAR_COUNT, (p) != 0, __LINE__)
#define __syncthreads_and(p) gpa_sim_barrier(GPA_SIM_BAR_AND, (p) != 0, __LINE__)
#define __syncthreads_or(p) gpa_sim_barrier(GPA_SIM_BAR_OR, (p) != 0, __LINE__)

/* ---- warp collectives. Values travel as 64-bit payloads (any trivially
 * copyable type of at most 8 bytes: int, float, double, half, half2, ...). */
template <class T> inline unsigned long long gpa_sim_pack(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  unsigned long long u = 0;
  memcpy(&u, (const void *)&v, sizeof(T));
  return u;
}
template <class T> inline T gpa_sim_unpack(unsigned long long u) {
  T v;
  memcpy((void *)&v, &u, sizeof(T));
  return v;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { gpa_sim_warp(GPA_SIM_W_SYNC, mask, 0, 0, 32); }
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  return gpa_sim_unpack<T>(gpa_sim_warp(GPA_SIM_W_IDX, mask, gpa_sim_pack(v), src, width));
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return gpa_sim_unpack<T>(gpa_sim_warp(GPA_SIM_W_UP, mask, gpa_sim_pack(v), (int)delta, width));
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return gpa_sim_unpack<T>(gpa_sim_warp(GPA_SIM_W_DOWN, mask, gpa_sim_pack(v), (int)delta, width));
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return gpa_sim_unpack<T>(gpa_sim_warp(GPA_SIM_W_XOR, mask, gpa_sim_pack(v), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int p) {
  return (unsigned)gpa_sim_warp(GPA_SIM_W_BALLOT, mask, p != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int p) { return (int)gpa_sim_warp(GPA_SIM_W_ANY, mask, p != 0, 0, 32); }
inline int __all_sync(unsigned mask, int p) { return (int)gpa_sim_warp(GPA_SIM_W_ALL, mask, p != 0, 0, 32); }
inline unsigned __activemask(void) { return (unsigned)gpa_sim_warp(GPA_SIM_W_BALLOT, 0xffffffffu, 1, 0, 32); }
inline int __reduce_add_sync(unsigned m, int v) { return (int)gpa_sim_warp(GPA_SIM_W_RADD, m, (unsigned)v, 0, 32); }
inline unsigned __reduce_add_sync(unsigned m, unsigned v) { return (unsigned)gpa_sim_warp(GPA_SIM_W_RADD, m, v, 0, 32); }
inline int __reduce_min_sync(unsigned m, int v) { return (int)gpa_sim_warp(GPA_SIM_W_RMIN, m, (unsigned)v, 0, 32); }
inline int __reduce_max_sync(unsigned m, int v) { return (int)gpa_sim_warp(GPA_SIM_W_RMAX, m, (unsigned)v, 0, 32); }
inline unsigned __reduce_min_sync(unsigned m, unsigned v) { return (unsigned)gpa_sim_warp(GPA_SIM_W_RMINU, m, v, 0, 32); }
inline unsigned __reduce_max_sync(unsigned m, unsigned v) { return (unsigned)gpa_sim_warp(GPA_SIM_W_RMAXU, m, v, 0, 32); }
inline unsigned __reduce_and_sync(unsigned m, unsigned v) { return (unsigned)gpa_sim_warp(GPA_SIM_W_RAND, m, v, 0, 32); }
inline unsigned __reduce_or_sync(unsigned m, unsigned v) { return (unsigned)gpa_sim_warp(GPA_SIM_W_ROR, m, v, 0, 32); }
inline unsigned __reduce_xor_sync(unsigned m, unsigned v) { return (unsigned)gpa_sim_warp(GPA_SIM_W_RXOR, m, v, 0, 32); }

/* ---- memory fences, traps, clocks */
inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __trap(void) { gpa_sim_trap("__trap() called"); }
#if defined(__x86_64__)
inline long long clock64(void) { return (long long)__builtin_ia32_rdtsc(); }
#else
inline long long clock64(void) { return (long long)__builtin_readcyclecounter(); }
#endif
inline void __nanosleep(unsigned) {}
template <class T> inline T __ldg(const T *p) { return *p; }

#include "gpa_sim_atomics.h"
#include "gpa_sim_math.h"
#include "gpa_sim_half.h"
#include "gpa_sim_register.h"
#endif
