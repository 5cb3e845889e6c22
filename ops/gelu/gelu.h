/* GELU's params (host and CUDA adapters) and its CUDA kernels
 * (kernels/cuda/elementwise.cu, module "ew"). */
#ifndef GPA_OPS_GELU_H
#define GPA_OPS_GELU_H
#include "ops/family.h"

typedef struct gpa__gelu_params {
  int64_t approximate; /* 0: erf form, 1: tanh form */
} gpa__gelu_params;

gpa_status gpa__gelu_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__gelu_bwd_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_GELU(K)         \
  K(GELU_FWD, ew, gpa_gelu_fwd_f32)     \
  K(GELU_BWD, ew, gpa_gelu_bwd_f32)     \
  K(GELU_FWD_BF, ew, gpa_gelu_fwd_bf16) \
  K(GELU_BWD_BF, ew, gpa_gelu_bwd_bf16)  \
  K(GELU_BWD_MIX, ew, gpa_gelu_bwd_bf16_f32dy)

#endif
