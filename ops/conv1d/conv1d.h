/* conv1d's params (host and CUDA adapters) and its CUDA kernels
 * (kernels/cuda/linear.cu, module "lin"); GEMMs go to cuBLAS (f32:
 * ops/conv1d/cuda.c, bf16 storage: ops/conv1d/cuda_bf16.c). */
#ifndef GPA_OPS_CONV1D_H
#define GPA_OPS_CONV1D_H
#include "ops/family.h"

typedef struct gpa__conv_params {
  int64_t stride, padding, dilation, groups, causal;
} gpa__conv_params;

gpa_status gpa__conv_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__conv_bwd_cu(const gpa_op_exec *x);

/* The CUDA adapters' geometry (cuda.c fills it; cuda_bf16.c, the bf16
 * storage path, reads it): R = cin_g K rows of a column matrix. */
typedef struct gpa__conv_cu_geom {
  long long B, Cin, L, Cout, K, stride, pad_l, dil, G, Lout, cin_g, cout_g, R;
} gpa__conv_cu_geom;
gpa_status gpa__conv_fwd_bf16_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_bwd_bf16_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_CONV1D(K)            \
  K(CONV_IM2COL, lin, gpa_conv_im2col_f32)   \
  K(CONV_COL2IM, lin, gpa_conv_col2im_f32)   \
  K(CONV_BIAS, lin, gpa_conv_bias_f32)       \
  K(CONV_DB, lin, gpa_conv_db_f32)           \
  K(CONV_DW_SUM, lin, gpa_conv_dw_sum_f32)   \
  K(CONV_DB_BF, lin, gpa_conv_db_bf16)       \
  K(CONV_IM2COL_BF, lin, gpa_conv_im2col_bf16) \
  K(CONV_OUT_BF, lin, gpa_conv_out_bf16)     \
  K(CONV_PERM_BF, lin, gpa_conv_perm_bf16)   \
  K(CONV_COL2IM_BF, lin, gpa_conv_col2im_bf16)

#endif
