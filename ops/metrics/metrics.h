/* The metrics' params (host and CUDA adapters) and their CUDA kernels
 * (kernels/cuda/metrics.cu, module "met"). */
#ifndef GPA_OPS_METRICS_H
#define GPA_OPS_METRICS_H
#include "ops/family.h"

typedef struct gpa__met_params {
  int64_t ignore_index;
  double scale;
  double eps;
} gpa__met_params;

gpa_status gpa__ce_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__ce_bwd_cu(const gpa_op_exec *x);
gpa_status gpa__mse_cu(const gpa_op_exec *x);
gpa_status gpa__cosine_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_METRICS(K)    \
  K(CE_ROWS, met, gpa_ce_rows)        \
  K(SUM_FINAL, met, gpa_sum_final)    \
  K(CE_COUNT, met, gpa_ce_count)      \
  K(CE_BWD, met, gpa_ce_bwd)          \
  K(PAIR_ROWS, met, gpa_pair_rows)    \
  K(CE_ROWS_BF, met, gpa_ce_rows_bf16) \
  K(CE_BWD_BF, met, gpa_ce_bwd_bf16)  \
  K(CE_BWD_ROW, met, gpa_ce_bwd_row)  \
  K(CE_BWD_ROW_BF, met, gpa_ce_bwd_row_bf16) \
  K(CE_ROWS_ROW, met, gpa_ce_rows_row)  \
  K(CE_ROWS_ROW_BF, met, gpa_ce_rows_row_bf16)

#endif
