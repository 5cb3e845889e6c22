/* cast on CUDA (kernels/cuda/cast.cu): a grid-stride kernel per dtype pair,
 * eight values per thread as 16-byte accesses (a uint4 of 16-bit values,
 * two float4s of f32) when both pointers are 16-byte aligned, else (and for
 * the tail) one value at a time. One dtype to itself is the core copy. */
#include "backends/cuda/cuda_ops.h"
#include "ops/cast/cast.h"
#include "ops/core/core.h"
#include "ops/cuda_kernels.h"

static int kernel_of(int from, int to) {
  if (from == GPA_F32) return to == GPA_BF16 ? GPA__K_CAST_F32_BF16 : GPA__K_CAST_F32_F16;
  if (from == GPA_BF16) return to == GPA_F32 ? GPA__K_CAST_BF16_F32 : GPA__K_CAST_BF16_F16;
  return to == GPA_F32 ? GPA__K_CAST_F16_F32 : GPA__K_CAST_F16_BF16;
}

gpa_status gpa__cast_cu(const gpa_op_exec *x) {
  int from = x->inputs[0].dtype, to = x->outputs[0].dtype;
  if (from == to) return gpa__copy_cu(x);
  long long n = gpa__cu_numel(&x->inputs[0]);
  void *y = x->out[0], *xx = x->in[0];
  int vec = gpa__cu_aligned16(x);
  void *args[] = {&y, &xx, &n, &vec};
  return gpa__cu_launch_bf(x, kernel_of(from, to), n, vec, args);
}
