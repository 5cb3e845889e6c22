/* LayerNorm's params (read by the host and CUDA adapters alike) and its
 * CUDA kernels (kernels/cuda/norm.cu, module "norm"). */
#ifndef GPA_OPS_LAYERNORM_H
#define GPA_OPS_LAYERNORM_H
#include "ops/family.h"

typedef struct gpa__ln_params {
  double eps;
} gpa__ln_params;

gpa_status gpa__ln_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__ln_bwd_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_LAYERNORM(K)            \
  K(LN_FWD, norm, gpa_ln_fwd_f32)               \
  K(LN_BWD_DX, norm, gpa_ln_bwd_dx_f32)         \
  K(LN_BWD_PART, norm, gpa_ln_bwd_part_f32)     \
  K(LN_BWD_COLS, norm, gpa_ln_bwd_cols_f32)     \
  K(LN_FWD_BF, norm, gpa_ln_fwd_bf16)           \
  K(LN_BWD_DX_BF, norm, gpa_ln_bwd_dx_bf16)     \
  K(LN_BWD_PART_BF, norm, gpa_ln_bwd_part_bf16) \
  K(LN_FWD_ROW, norm, gpa_ln_fwd_row_f32)       \
  K(LN_FWD_ROW_BF, norm, gpa_ln_fwd_row_bf16)   \
  K(LN_BWD_DX_ROW, norm, gpa_ln_bwd_dx_row_f32) \
  K(LN_BWD_DX_ROW_BF, norm, gpa_ln_bwd_dx_row_bf16) \
  K(LN_BWD_SPLIT, norm, gpa_ln_bwd_split_f32)   \
  K(LN_BWD_SPLIT_BF, norm, gpa_ln_bwd_split_bf16) \
  K(LN_FWD_MIX, norm, gpa_ln_fwd_f32_bf16)        \
  K(LN_FWD_ROW_MIX, norm, gpa_ln_fwd_row_f32_bf16) \
  K(LN_BWD_DX_MIX, norm, gpa_ln_bwd_dx_bf16dy)    \
  K(LN_BWD_DX_ROW_MIX, norm, gpa_ln_bwd_dx_row_bf16dy) \
  K(LN_BWD_PART_MIX, norm, gpa_ln_bwd_part_bf16dy) \
  K(LN_BWD_SPLIT_MIX, norm, gpa_ln_bwd_split_bf16dy)

#endif
