/* conv1d's params (host and CUDA adapters) and its CUDA kernels
 * (kernels/cuda/linear.cu, module "lin"); GEMMs go to cuBLAS. */
#ifndef GPA_OPS_CONV1D_H
#define GPA_OPS_CONV1D_H
#include "ops/family.h"

typedef struct gpa__conv_params {
  int64_t stride, padding, dilation, groups, causal;
} gpa__conv_params;

gpa_status gpa__conv_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__conv_bwd_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_CONV1D(K)            \
  K(CONV_IM2COL, lin, gpa_conv_im2col_f32)   \
  K(CONV_COL2IM, lin, gpa_conv_col2im_f32)   \
  K(CONV_BIAS, lin, gpa_conv_bias_f32)       \
  K(CONV_DB, lin, gpa_conv_db_f32)           \
  K(CONV_DW_SUM, lin, gpa_conv_dw_sum_f32)

#endif
