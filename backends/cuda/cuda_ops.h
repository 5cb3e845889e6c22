/* Helpers for the CUDA implementations of built-in ops (backends/cuda/ops_*.c). */
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

typedef struct gpa__cu_impl {
  const char *name;
  gpa_op_impl_fn fn;
} gpa__cu_impl;

/* Attributes by name, from the registration that parsed them (the params
 * layouts are private to the op families; names and offsets are in the
 * registration's schema). dflt when the op has no such attribute. */
double gpa__cu_attr_f(const gpa_op_exec *x, const char *name, double dflt);
int64_t gpa__cu_attr_i(const gpa_op_exec *x, const char *name, int64_t dflt);

/* Kernels: module and function ids (kernels.c). Modules load lazily. */
CUfunction gpa__cu_fn(const gpa_op_exec *x, int id);
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

#endif
