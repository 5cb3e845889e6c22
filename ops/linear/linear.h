/* linear's params (host and CUDA adapters) and its CUDA kernels
 * (kernels/cuda/linear.cu, module "lin"); GEMMs go to cuBLAS/cuBLASLt. */
#ifndef GPA_OPS_LINEAR_H
#define GPA_OPS_LINEAR_H
#include "ops/family.h"

typedef struct gpa__lin_params {
  int64_t gelu;   /* y = gelu(x W^T + b); the backward takes pre */
  int64_t g_bf16; /* backward, bf16, gelu: g = dy gelu'(pre) rounded to bf16 once for the GEMMs */
} gpa__lin_params;

gpa_status gpa__lin_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__lin_gelu_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__lin_bwd_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_LINEAR(K)                \
  K(LIN_EPI, lin, gpa_lin_epilogue_f32)          \
  K(LIN_EPI_BF, lin, gpa_lin_epilogue_bf16)      \
  K(LIN_DB_BF, lin, gpa_lin_db_bf16)             \
  K(LIN_COLSUM, lin, gpa_colsum_f32)             \
  K(LIN_DGELU_BF, lin, gpa_lin_dgelu_split_bf16)

#endif
