/* gpa-sim ABI between emulated kernel modules and the runtime library.
 *
 * An emulated module (libgpa_sim_mod_<name>.so) is a .cu file compiled by the
 * host C++ compiler with gpa_sim_emu.h force-included. It exports exactly one
 * symbol, gpa_sim_module_v1(), which describes its kernels; everything else in
 * it is hidden so two modules with same-named __device__ helpers never clash.
 * The runtime (libgpa_sim_cuda.so) exports the gpa_sim_* calls below, which
 * the emulation header uses for thread ids, barriers and warp collectives.
 * C++ only: both sides are C++ (the kernels compile as C++ under emulation). */
#ifndef GPA_SIM_ABI_H
#define GPA_SIM_ABI_H
#include <stddef.h>
#include <stdint.h>
#include <vector_types.h>
#include <vector_functions.h>

#define GPA_SIM_ABI_VERSION 1u
#define GPA_SIM_EXPORT __attribute__((visibility("default")))

/* What one emulated CUDA thread sees. Constant for the life of its fiber. */
struct gpa_sim_thread {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned lane;      /* linear thread id % 32 */
  unsigned warp;      /* linear thread id / 32 */
  unsigned linear;    /* x + y*bx + z*bx*by */
  void *dyn_shared;   /* this block's dynamic shared memory */
};

/* One kernel: its parameters (for cuLaunchKernel's two parameter forms and
 * the launch-time pointer checks) and a trampoline that unpacks a packed
 * parameter buffer (natural C struct layout, as CU_LAUNCH_PARAM_BUFFER_POINTER
 * expects) and calls the kernel for the calling fiber. */
struct gpa_sim_kernel {
  const char *name;
  unsigned n_params;
  const uint16_t *param_size;
  const uint16_t *param_align;
  const uint8_t *param_is_ptr;
  void (*run)(const unsigned char *args);
};

enum { GPA_SIM_MODULE_SERIAL = 1u }; /* static __shared__ is process-global (ASan builds): one block at a time */

struct gpa_sim_module {
  uint32_t abi;            /* GPA_SIM_ABI_VERSION */
  uint32_t flags;          /* GPA_SIM_MODULE_* */
  uint64_t fatbin_id;      /* gpa_sim_fatbin_id() of the fatbin built from the same sources */
  const char *name;        /* the gpa_cuda_kernels() target name */
  const gpa_sim_kernel *const *kernels;
  unsigned n_kernels;
};
typedef const gpa_sim_module *(*gpa_sim_module_fn)(void);

/* Block barrier flavours and warp collectives, implemented by the runtime. */
enum gpa_sim_bar_op { GPA_SIM_BAR_SYNC, GPA_SIM_BAR_COUNT, GPA_SIM_BAR_AND, GPA_SIM_BAR_OR };
enum gpa_sim_warp_op {
  GPA_SIM_W_SYNC, GPA_SIM_W_IDX, GPA_SIM_W_UP, GPA_SIM_W_DOWN, GPA_SIM_W_XOR,
  GPA_SIM_W_BALLOT, GPA_SIM_W_ANY, GPA_SIM_W_ALL,
  GPA_SIM_W_RADD, GPA_SIM_W_RMIN, GPA_SIM_W_RMAX, GPA_SIM_W_RMINU, GPA_SIM_W_RMAXU,
  GPA_SIM_W_RAND, GPA_SIM_W_ROR, GPA_SIM_W_RXOR
};

extern "C" {
/* The calling fiber's ids; `const` is true per fiber (fibers never migrate
 * and a fiber runs one CUDA thread), so the compiler may reuse the result. */
GPA_SIM_EXPORT const gpa_sim_thread *gpa_sim_self(void) __attribute__((const));
/* Block barrier; `line` is the source line of the barrier: threads of one
 * barrier phase arriving from different lines are a divergent barrier. */
GPA_SIM_EXPORT int gpa_sim_barrier(int op, int pred, int line);
/* Warp collective: op over lanes of `mask`; value/arg/width per op. */
GPA_SIM_EXPORT unsigned long long gpa_sim_warp(int op, unsigned mask, unsigned long long value, int arg,
                                               int width);
/* Fails the launch with a message (device-side trap / assert). */
GPA_SIM_EXPORT void gpa_sim_trap(const char *what) __attribute__((noreturn));
}
#endif
