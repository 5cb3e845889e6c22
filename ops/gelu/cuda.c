/* GELU on CUDA (kernels/cuda/elementwise.cu): grid-stride kernels, 16
 * bytes per access when every pointer is 16-byte aligned (f32: a float4,
 * bf16: 8 values), else (and for the tail) scalar. */
#include "backends/cuda/cuda_ops.h"
#include "ops/cuda_kernels.h"
#include "ops/gelu/gelu.h"

gpa_status gpa__gelu_fwd_cu(const gpa_op_exec *x) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  int approx = (int)((const gpa__gelu_params *)x->params)->approximate;
  void *y = x->out[0], *xx = x->in[0];
  int vec = gpa__cu_aligned16(x);
  void *args[] = {&y, &xx, &n, &approx, &vec};
  if ((x->inputs[0].dtype == GPA_BF16)) return gpa__cu_launch_bf(x, GPA__K_GELU_FWD_BF, n, vec, args);
  return gpa__cu_launch1d(x, GPA__K_GELU_FWD, vec ? (n + 3) / 4 : n, args);
}

gpa_status gpa__gelu_bwd_cu(const gpa_op_exec *x) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  int approx = (int)((const gpa__gelu_params *)x->params)->approximate;
  void *dx = x->out[0], *xx = x->in[0], *dy = x->in[1];
  int vec = gpa__cu_aligned16(x);
  void *args[] = {&dx, &xx, &dy, &n, &approx, &vec};
  if (x->inputs[0].dtype == GPA_BF16 && x->inputs[1].dtype == GPA_F32) /* mixed: dy f32, 4 values a step */
    return gpa__cu_launch1d(x, GPA__K_GELU_BWD_MIX, vec ? (n + 3) / 4 : n, args);
  if ((x->inputs[0].dtype == GPA_BF16)) return gpa__cu_launch_bf(x, GPA__K_GELU_BWD_BF, n, vec, args);
  return gpa__cu_launch1d(x, GPA__K_GELU_BWD, vec ? (n + 3) / 4 : n, args);
}
