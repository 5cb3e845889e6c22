/* Kernel modules (the kernels/cuda .cu files, embedded fatbins) loaded lazily per
 * module and cached by the actor; functions cached by id. The modules and
 * kernels are the op families' (tables in ops/cuda_kernels.c). */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"

#define mod_image gpa__cu_mod_images
#define mod_name gpa__cu_mod_names
#define kdefs gpa__cu_kdefs

CUfunction gpa__cu_fn_load(const gpa_op_exec *x, int id) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  int m = kdefs[id].mod;
  if (!C->mods[m]) {
    CUresult e = C->cu.cuModuleLoadData(&C->mods[m], mod_image[m]);
    if (e != CUDA_SUCCESS) {
      char what[96];
      snprintf(what, sizeof what, "loading kernel module %s", mod_name[m]);
      gpa__cu_check(C, e, what, x->msg, x->msg_size);
      C->mods[m] = NULL;
      return NULL;
    }
  }
  CUresult e = C->cu.cuModuleGetFunction(&C->fns[id], C->mods[m], kdefs[id].name);
  if (e != CUDA_SUCCESS) {
    gpa__cu_check(C, e, kdefs[id].name, x->msg, x->msg_size);
    C->fns[id] = NULL;
  }
  return C->fns[id];
}

gpa_status gpa__cu_launch(const gpa_op_exec *x, int id, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned smem, void **args) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  CUfunction f = gpa__cu_fn(x, id);
  if (!f) return C->failed ? GPA_EDEVICE : GPA_EUNSUPPORTED;
  if (!gx || !gy || !gz) return GPA_OK;
  CUresult e = C->cu.cuLaunchKernel(f, gx, gy, gz, bx, by, 1, smem, (CUstream)x->stream, args, NULL);
  return gpa__cu_check(C, e, kdefs[id].name, x->msg, x->msg_size);
}

unsigned gpa__cu_blocks(const gpa_op_exec *x, int64_t n, unsigned threads) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  int64_t b = (n + threads - 1) / threads, cap = C->grid_cap;
  if (b > cap) b = cap;
  return b < 1 ? 1 : (unsigned)b;
}

int gpa__cu_row_group(long long len) {
  int g = 1;
  while (g < 32 && (long long)g * 32 < len) g *= 2; /* up to 32 elements a lane */
  return g;
}

unsigned gpa__cu_row_blocks(const gpa_op_exec *x, long long n, int group, int warps) {
  long long rows_per_block = (long long)warps * (32 / group);
  long long b = (n + rows_per_block - 1) / rows_per_block, cap = gpa__cu_of(x)->row_cap;
  return (unsigned)(b < 1 ? 1 : b < cap ? b : cap);
}

void gpa__cu_kernels_release(gpa__cu_ctx *C) {
  for (int i = 0; i < GPA__CU_MODULES_MAX; i++)
    if (C->mods[i]) C->cu.cuModuleUnload(C->mods[i]);
  memset(C->mods, 0, sizeof C->mods);
  memset(C->fns, 0, sizeof C->fns);
  /* user ops' modules: several ops may share one image's module */
  for (uint32_t i = 0; i < C->n_user; i++) {
    bool first = true;
    for (uint32_t j = 0; j < i; j++) first &= C->user[j].mod != C->user[i].mod;
    if (first) C->cu.cuModuleUnload(C->user[i].mod);
  }
  C->n_user = 0;
}

gpa_status gpa__cu_zero_f32(const gpa_op_exec *x, void *p, long long n) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (n <= 0) return GPA_OK;
  return gpa__cu_check(C, C->cu.cuMemsetD32Async(GPA__DP(p), 0, (size_t)n, (CUstream)x->stream),
                       "cuMemsetD32Async", x->msg, x->msg_size);
}

gpa_status gpa__cu_blas_status(const gpa_op_exec *x, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return GPA_OK;
  gpa__cu_ctx *C = gpa__cu_of(x);
  snprintf(x->msg, x->msg_size, "%s: %s", what, C->blas.cublasGetStatusString(s));
  return s == CUBLAS_STATUS_ALLOC_FAILED ? GPA_ENOMEM : GPA_EDEVICE;
}
