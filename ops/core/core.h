/* The core ops' params (fill's value) and CUDA implementations (driver
 * copies and memsets: no kernels of their own). */
#ifndef GPA_OPS_CORE_H
#define GPA_OPS_CORE_H
#include "ops/family.h"

typedef struct gpa__fill_params {
  double value;
} gpa__fill_params;

gpa_status gpa__noop_cu(const gpa_op_exec *x);
gpa_status gpa__copy_cu(const gpa_op_exec *x);
gpa_status gpa__fill_cu(const gpa_op_exec *x);

#define GPA__CU_KERNELS_CORE(K)

#endif
