/* What the CUDA adapters of op families (ops/<family>/cuda.c) use: kernel
 * launches by id (ids from ops/cuda_kernels.h), scratch, cuBLAS, the host
 * fallback and a few launch-shape helpers. */
#ifndef GPA_BACKENDS_CUDA_OPS_H
#define GPA_BACKENDS_CUDA_OPS_H
#include "backends/cuda/cuda_internal.h"

#define GPA__DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* Returns the status of e when it is not GPA_OK. */
#define GPA__CU_TRY(e)                      \
  do {                                      \
    gpa_status cu_try_st_ = (e);            \
    if (cu_try_st_ != GPA_OK) return cu_try_st_; \
  } while (0)

/* The op families' kernels (ops/cuda_kernels.c): module images and names,
 * and each kernel's module and name, indexed by the ids of ops/cuda_kernels.h. */
typedef struct gpa__cu_kdef {
  int mod;
  const char *name;
} gpa__cu_kdef;
extern const unsigned char *const gpa__cu_mod_images[];
extern const char *const gpa__cu_mod_names[];
extern const gpa__cu_kdef gpa__cu_kdefs[];

/* Kernels: module and function ids (kernels.c). Modules load lazily; a
 * function once found is cached, and that look-up is inline (every launch
 * makes one). */
CUfunction gpa__cu_fn_load(const gpa_op_exec *x, int id);
static inline CUfunction gpa__cu_fn(const gpa_op_exec *x, int id) {
  CUfunction f = gpa__cu_of(x)->fns[id];
  return f ? f : gpa__cu_fn_load(x, id);
}
/* Launches kernel id on the op's stream; args as cuLaunchKernel's kernelParams. */
gpa_status gpa__cu_launch(const gpa_op_exec *x, int id, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned smem, void **args);
/* Row kernels (kernels/cuda/gpa_rows.h): lanes per row for rows of len
 * elements (a power of two, 1..32), and blocks of (32, warps) threads for n
 * rows. */
int gpa__cu_row_group(long long len);
unsigned gpa__cu_row_blocks(const gpa_op_exec *x, long long n, int group, int warps);
/* Blocks for a grid-stride elementwise launch over n items. */
unsigned gpa__cu_blocks(const gpa_op_exec *x, int64_t n, unsigned threads);

#define GPA__CU_THREADS 256 /* per block of a grid-stride elementwise launch */

/* 1 unless GPA_CUDA_SPLIT_SUMS=0: the column sums of layernorm_bwd,
 * linear_bwd and conv1d_bwd's bias split their rows over a 2-D grid where
 * a block per column tile would leave the GPU idle (kernels/cuda/split_sum.h);
 * 0 keeps the single-pass launches of before, to measure both in one run. */
static inline int gpa__cu_split_sums(const gpa_op_exec *x) { return gpa__cu_of(x)->host.cuda_split_sums != 1; }

static inline long long gpa__cu_numel(const gpa_tensor *t) { return (long long)gpa_tensor_numel(t); }

/* A grid-stride launch over n items (nothing when n <= 0). */
static inline gpa_status gpa__cu_launch1d(const gpa_op_exec *x, int id, long long n, void **args) {
  if (n <= 0) return GPA_OK;
  return gpa__cu_launch(x, id, gpa__cu_blocks(x, n, GPA__CU_THREADS), 1, 1, GPA__CU_THREADS, 1, 0, args);
}
/* A bf16 launch over n items, 8 per thread (one 16-byte access) when vec. */
static inline gpa_status gpa__cu_launch_bf(const gpa_op_exec *x, int id, long long n, int vec, void **args) {
  return gpa__cu_launch1d(x, id, vec ? (n + 7) / 8 : n, args);
}
/* 16-byte alignment of every tensor of x (the bf16 kernels' 8-wide path). */
static inline int gpa__cu_aligned16(const gpa_op_exec *x) {
  int ok = 1;
  for (uint32_t i = 0; i < x->n_inputs; i++) ok &= ((uintptr_t)x->in[i] & 15) == 0;
  for (uint32_t i = 0; i < x->n_outputs; i++) ok &= ((uintptr_t)x->out[i] & 15) == 0;
  return ok;
}
/* Zeroes n floats at p on the op's stream. */
gpa_status gpa__cu_zero_f32(const gpa_op_exec *x, void *p, long long n);
/* A cuBLAS status as ours: GPA_OK, or "what: cuBLAS's text" and EDEVICE/ENOMEM. */
gpa_status gpa__cu_blas_status(const gpa_op_exec *x, cublasStatus_t s, const char *what);

#endif
