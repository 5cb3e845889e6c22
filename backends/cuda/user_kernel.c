/* User ops given as a kernel from the caller's image (gpa_op_desc's
 * cuda_image / cuda_kernel / cuda_launch_shape). Modules are loaded on first
 * use and cached per actor by image; the launch passes the input then output
 * device pointers, the params block by value (when params_size > 0), then
 * each tensor's element count as a 64-bit integer, in the same order. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"

static CUfunction user_fn(gpa__cu_ctx *C, const gpa_op_desc *op, char *msg, size_t cap) {
  for (uint32_t i = 0; i < C->n_user; i++)
    if (C->user[i].op == op) return C->user[i].fn;
  if (C->n_user == GPA__CU_USER_MAX) {
    snprintf(msg, cap, "%s: more than %d kernel-image ops in one actor", op->name, GPA__CU_USER_MAX);
    return NULL;
  }
  CUmodule mod = NULL;
  for (uint32_t i = 0; i < C->n_user && !mod; i++)
    if (C->user[i].image == op->cuda_image) mod = C->user[i].mod;
  if (!mod) {
    CUresult e = C->cu.cuModuleLoadData(&mod, op->cuda_image);
    if (e != CUDA_SUCCESS) {
      char what[96];
      snprintf(what, sizeof what, "%s: loading its cuda_image", op->name);
      gpa__cu_check(C, e, what, msg, cap);
      return NULL;
    }
  }
  CUfunction fn;
  CUresult e = C->cu.cuModuleGetFunction(&fn, mod, op->cuda_kernel);
  if (e != CUDA_SUCCESS) {
    /* A wrong name is the caller's mistake, not a device failure. */
    snprintf(msg, cap, "%s: no kernel '%s' in its cuda_image", op->name, op->cuda_kernel);
    bool shared = false;
    for (uint32_t i = 0; i < C->n_user; i++) shared |= C->user[i].mod == mod;
    if (!shared) C->cu.cuModuleUnload(mod);
    return NULL;
  }
  C->user[C->n_user++] = (gpa__cu_user){op, op->cuda_image, mod, fn};
  return fn;
}

gpa_status gpa__cu_user_kernel(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  const gpa_op_desc *op = C->cur_op;
  CUfunction fn = user_fn(C, op, x->msg, x->msg_size);
  if (!fn) return C->failed ? GPA_EDEVICE : GPA_EINVAL;
  gpa_op_sig sig = {x->inputs, x->n_inputs, x->outputs, x->n_outputs, x->params, x->user_data};
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, smem = 0;
  gpa_status st = op->cuda_launch_shape(&sig, grid, block, &smem);
  if (st != GPA_OK) {
    if (!x->msg[0]) snprintf(x->msg, x->msg_size, "%s: cuda_launch_shape failed", op->name);
    return st;
  }
  uint32_t n = x->n_inputs + x->n_outputs;
  CUdeviceptr ptr[GPA__MAX_TENSORS];
  long long numel[GPA__MAX_TENSORS];
  void *args[2 * GPA__MAX_TENSORS + 1];
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    ptr[i] = GPA__DP(i < x->n_inputs ? x->in[i] : x->out[i - x->n_inputs]);
    args[k++] = &ptr[i];
  }
  if (op->params_size) args[k++] = (void *)x->params;
  for (uint32_t i = 0; i < n; i++) {
    numel[i] = (long long)gpa_tensor_numel(i < x->n_inputs ? &x->inputs[i] : &x->outputs[i - x->n_inputs]);
    args[k++] = &numel[i];
  }
  if (smem > 48 * 1024) {
    CUresult e = C->cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
    if (e != CUDA_SUCCESS) return gpa__cu_check(C, e, "cuFuncSetAttribute", x->msg, x->msg_size);
  }
  CUresult e = C->cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                                    (CUstream)x->stream, args, NULL);
  if (e != CUDA_SUCCESS) {
    char what[96];
    snprintf(what, sizeof what, "%s: launching %s", op->name, op->cuda_kernel);
    return gpa__cu_check(C, e, what, x->msg, x->msg_size);
  }
  return GPA_OK;
}
