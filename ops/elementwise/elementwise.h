/* The elementwise family's params (host and CUDA adapters) and its CUDA
 * kernels (kernels/cuda/elementwise.cu, module "ew"). */
#ifndef GPA_OPS_ELEMENTWISE_H
#define GPA_OPS_ELEMENTWISE_H
#include "ops/family.h"

typedef struct gpa__ew_params {
  double alpha;
} gpa__ew_params;

gpa_status gpa__ew_add_cu(const gpa_op_exec *x);
gpa_status gpa__ew_scale_cu(const gpa_op_exec *x);
gpa_status gpa__ew_axpy_cu(const gpa_op_exec *x);
gpa_status gpa__ew_mask_zero_cu(const gpa_op_exec *x);
gpa_status gpa__ew_mm_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__ew_mm_bwd_cu(const gpa_op_exec *x);
gpa_status gpa__ew_bc_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__ew_bc_bwd_cu(const gpa_op_exec *x);
gpa_status gpa__ew_transpose_cu(const gpa_op_exec *x);

/* transpose's view of x (rank >= 2): *b batches (the leading dims) of
 * [*m, *n] (the last two). */
static inline void gpa__transpose_dims(const gpa_tensor *x, int64_t *b, int64_t *m, int64_t *n) {
  *m = x->shape[x->rank - 2], *n = x->shape[x->rank - 1], *b = 1;
  for (uint32_t i = 0; i + 2 < x->rank; i++) *b *= x->shape[i];
}

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_ELEMENTWISE(K)           \
  K(ADD, ew, gpa_ew_add_f32)                     \
  K(AXPY, ew, gpa_ew_axpy_f32)                   \
  K(MASK_ZERO, ew, gpa_ew_mask_zero_f32)         \
  K(SUM_OVER_L, ew, gpa_ew_sum_over_l_f32)       \
  K(MM_BWD, ew, gpa_ew_masked_mean_bwd_f32)      \
  K(ADD_BCAST, ew, gpa_ew_add_broadcast_f32)     \
  K(ADD_BF, ew, gpa_ew_add_bf16)                 \
  K(AXPY_BF, ew, gpa_ew_axpy_bf16)               \
  K(MASK_ZERO_BF, ew, gpa_ew_mask_zero_bf16)     \
  K(SUM_OVER_L_BF, ew, gpa_ew_sum_over_l_bf16)   \
  K(MM_BWD_BF, ew, gpa_ew_masked_mean_bwd_bf16)  \
  K(ADD_BCAST_BF, ew, gpa_ew_add_broadcast_bf16) \
  K(TRANSPOSE1, ew, gpa_ew_transpose_1)          \
  K(TRANSPOSE2, ew, gpa_ew_transpose_2)          \
  K(TRANSPOSE4, ew, gpa_ew_transpose_4)          \
  K(TRANSPOSE8, ew, gpa_ew_transpose_8)          \
  K(ADD_MIX, ew, gpa_ew_add_f32_bf16)

#endif
