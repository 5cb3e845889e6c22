/* Built-in core ops on CUDA: noop (only the completion), copy (a D2D copy,
 * through scratch when the views overlap) and fill (cuMemsetD8/16/32). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/core/core.h"

gpa_status gpa__noop_cu(const gpa_op_exec *x) {
  (void)x;
  return GPA_OK;
}

gpa_status gpa__copy_cu(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  uint64_t n = (uint64_t)gpa_tensor_numel(&x->inputs[0]) * gpa_dtype_size(x->inputs[0].dtype);
  if (!n) return GPA_OK;
  CUdeviceptr s = GPA__DP(x->in[0]), d = GPA__DP(x->out[0]);
  CUstream st = (CUstream)x->stream;
  if (s == d) return GPA_OK;
  CUresult e;
  if (s < d + n && d < s + n) {
    CUdeviceptr tmp = gpa__cu_scratch(x, n);
    if (!tmp) return GPA_ENOMEM;
    e = C->cu.cuMemcpyDtoDAsync(tmp, s, n, st);
    if (e == CUDA_SUCCESS) e = C->cu.cuMemcpyDtoDAsync(d, tmp, n, st);
  } else {
    e = C->cu.cuMemcpyDtoDAsync(d, s, n, st);
  }
  return gpa__cu_check(C, e, "copy: cuMemcpyDtoDAsync", x->msg, x->msg_size);
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

gpa_status gpa__fill_cu(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  const gpa_tensor *t = &x->outputs[0];
  double v = ((const gpa__fill_params *)x->params)->value;
  int64_t n = gpa_tensor_numel(t);
  if (n <= 0) return GPA_OK;
  CUdeviceptr d = GPA__DP(x->out[0]);
  CUstream st = (CUstream)x->stream;
  CUresult e;
  float f = (float)v;
  uint32_t u32;
  uint16_t u16;
  switch (t->dtype) {
    case GPA_F32: memcpy(&u32, &f, 4); e = C->cu.cuMemsetD32Async(d, u32, (size_t)n, st); break;
    case GPA_I32: u32 = (uint32_t)(int32_t)v; e = C->cu.cuMemsetD32Async(d, u32, (size_t)n, st); break;
    case GPA_BF16: u16 = f32_to_bf16(f); e = C->cu.cuMemsetD16Async(d, u16, (size_t)n, st); break;
    case GPA_F16: {
      _Float16 h = (_Float16)f;
      memcpy(&u16, &h, 2);
      e = C->cu.cuMemsetD16Async(d, u16, (size_t)n, st);
      break;
    }
    case GPA_U8: e = C->cu.cuMemsetD8Async(d, (unsigned char)v, (size_t)n, st); break;
    default: {
      int64_t i = (int64_t)v;
      uint32_t lo = (uint32_t)i, hi = (uint32_t)((uint64_t)i >> 32);
      if (lo != hi) return gpa__cu_fallback(x);
      e = C->cu.cuMemsetD32Async(d, lo, (size_t)n * 2, st);
    }
  }
  return gpa__cu_check(C, e, "fill: cuMemset", x->msg, x->msg_size);
}
