/* conv1d's params (host and CUDA adapters) and its CUDA kernels: for bf16
 * storage the tensor-core implicit GEMMs of kernels/cuda/conv1d_tc.cu
 * (module "conv", ops/conv1d/cuda_tc.c) wherever they fit, for f32 the
 * 3xTF32 ones of kernels/cuda/conv1d_tc32.cu (ops/conv1d/cuda_tc32.c); the SIMT
 * implicit GEMMs of kernels/cuda/conv1d.cu (module "conv",
 * ops/conv1d/cuda_igemm.c) wherever they fit, else im2col / col2im
 * (kernels/cuda/linear.cu, module "lin") and cuBLAS GEMMs (f32:
 * ops/conv1d/cuda.c, bf16 storage: ops/conv1d/cuda_bf16.c). */
#ifndef GPA_OPS_CONV1D_H
#define GPA_OPS_CONV1D_H
#include "ops/family.h"

typedef struct gpa__conv_params {
  int64_t stride, padding, dilation, groups, causal;
  int64_t layout; /* GPA_CONV1D_NCL or GPA_CONV1D_NLC (validated at submit) */
} gpa__conv_params;

gpa_status gpa__conv_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__conv_bwd_cu(const gpa_op_exec *x);

/* The CUDA adapters' geometry (cuda.c fills it; cuda_bf16.c, the bf16
 * storage path, reads it): R = cin_g K rows of a column matrix. */
typedef struct gpa__conv_cu_geom {
  long long B, Cin, L, Cout, K, stride, pad_l, dil, G, Lout, cin_g, cout_g, R;
  int nlc; /* layout nlc: x, dx [B,L,Cin], y, dy [B,Lout,Cout] */
} gpa__conv_cu_geom;
/* ops/conv1d/cuda.c: db [Cout] f32, the sum of dy [nb][Cout][lout] over
 * batches and positions by the db kernels' block tree (a fixed order:
 * deterministic), for every backward path; GPA_OK without a third output. */
gpa_status gpa__conv_db_cu(const gpa_op_exec *x, long long nb, long long cout, long long lout);
/* the same for channels-last dy [rows][cout] (rows = B Lout): its column sums */
gpa_status gpa__conv_db_rows_cu(const gpa_op_exec *x, long long rows, long long cout);
gpa_status gpa__conv_fwd_bf16_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_bwd_bf16_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
/* ops/conv1d/cuda_igemm.c: the implicit-GEMM kernels (f32 and bf16 storage)
 * take the shape when every index fits an int, the grids fit, and one
 * stage of each kernel fits 48 KiB of shared memory. */
int gpa__conv_ig_fits(const gpa__conv_cu_geom *g);
gpa_status gpa__conv_fwd_ig_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_bwd_ig_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
/* ops/conv1d/cuda_igsmall.c: y and dx on the small-grid SIMT kernels
 * (kernels/cuda/conv1d_small.cu). gpa__conv_igs_pick: whether they take a
 * shape the 64 x 64 kernels would run as big_blocks blocks
 * (GPA_CONV_IG_SMALL, the shape, and their limits; called only where
 * gpa__conv_ig_fits holds). The launchers take g with its shape filled. */
struct gpa_conv_geo;
struct gpa_conv_shape;
/* the kernels' int shape (kernels/cuda/conv1d_shape.h), the first member
 * of every conv kernel geometry, from c (ops/conv1d/cuda_igemm.c) */
void gpa__conv_shape_of(const gpa__conv_cu_geom *c, struct gpa_conv_shape *s);
int gpa__conv_igs_pick(const gpa_op_exec *x, const gpa__conv_cu_geom *c, long long big_blocks);
gpa_status gpa__conv_fwd_igs_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c, struct gpa_conv_geo *g);
gpa_status gpa__conv_dx_igs_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c, struct gpa_conv_geo *g, int bf);
/* ops/conv1d/cuda_tc.c: bf16 storage on tensor cores (kernels/cuda/conv1d_tc.cu)
 * when every index fits an int, the grids fit, the call's scratch stays
 * under its cap, and GPA_CONV_TC is not "0". */
int gpa__conv_tc_fits(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_fwd_tc_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_bwd_tc_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
/* ops/conv1d/cuda_tc32.c: f32 storage on tensor cores in 3xTF32
 * (kernels/cuda/conv1d_tc32.cu) where the SIMT kernels fit, each stage's
 * window fits, and GPA_CONV_TC is not "0". */
int gpa__conv_tc32_fits(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_fwd_tc32_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);
gpa_status gpa__conv_bwd_tc32_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *g);

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
  K(CONV_COL2IM_BF, lin, gpa_conv_col2im_bf16) \
  K(CONV_IG_FWD, conv, gpa_conv_ig_fwd_f32)    \
  K(CONV_IG_FWD_BF, conv, gpa_conv_ig_fwd_bf16) \
  K(CONV_IG_DX, conv, gpa_conv_ig_dx_f32)      \
  K(CONV_IG_DX_BF, conv, gpa_conv_ig_dx_bf16)  \
  K(CONV_IG_DW, conv, gpa_conv_ig_dw_f32)      \
  K(CONV_IG_DW_BF, conv, gpa_conv_ig_dw_bf16)  \
  K(CONV_IGS_FWD, conv, gpa_conv_igs_fwd_f32)  \
  K(CONV_IGS_FWD_BF, conv, gpa_conv_igs_fwd_bf16) \
  K(CONV_IGS_DX, conv, gpa_conv_igs_dx_f32)    \
  K(CONV_IGS_DX_BF, conv, gpa_conv_igs_dx_bf16) \
  K(CONV_TC_FWD, conv, gpa_conv_tc_fwd_bf16)   \
  K(CONV_TC_DX, conv, gpa_conv_tc_dx_bf16)     \
  K(CONV_TC_DW, conv, gpa_conv_tc_dw_bf16)     \
  K(CONV_TC_PACK, conv, gpa_conv_tc_pack_bf16) \
  K(CONV_TC_WPACK, conv, gpa_conv_tc_wpack_bf16) \
  K(CONV_TC32_FWD, conv, gpa_conv_tc32_fwd_f32)  \
  K(CONV_TC32_FWD8, conv, gpa_conv_tc32_fwd8_f32) \
  K(CONV_TC32_DX, conv, gpa_conv_tc32_dx_f32)    \
  K(CONV_TC32_DX8, conv, gpa_conv_tc32_dx8_f32)  \
  K(CONV_TC32_DW, conv, gpa_conv_tc32_dw_f32)    \
  K(CONV_TC32_DW_SUM, conv, gpa_conv_tc32_dw_sum_f32)

#endif
