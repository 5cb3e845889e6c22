/* The cast op's CUDA adapter and kernels (kernels/cuda/cast.cu, module
 * "ew"): one kernel per pair of float storage types. */
#ifndef GPA_OPS_CAST_H
#define GPA_OPS_CAST_H
#include "ops/family.h"

gpa_status gpa__cast_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_CAST(K)               \
  K(CAST_F32_BF16, ew, gpa_cast_f32_bf16)     \
  K(CAST_BF16_F32, ew, gpa_cast_bf16_f32)     \
  K(CAST_F32_F16, ew, gpa_cast_f32_f16)       \
  K(CAST_F16_F32, ew, gpa_cast_f16_f32)       \
  K(CAST_BF16_F16, ew, gpa_cast_bf16_f16)     \
  K(CAST_F16_BF16, ew, gpa_cast_f16_bf16)

#endif
