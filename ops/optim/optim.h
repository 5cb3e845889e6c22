/* The optimizers' params (host and CUDA adapters) and their CUDA kernels
 * (kernels/cuda/elementwise.cu, module "ew"). */
#ifndef GPA_OPS_OPTIM_H
#define GPA_OPS_OPTIM_H
#include "ops/family.h"

typedef struct gpa__opt_params {
  double lr, beta1, beta2, eps, weight_decay, momentum;
  int64_t step, nesterov;
} gpa__opt_params;

/* adamw_multi (adamw_multi.c): adamw's attributes, decay_mask (bit k:
 * tensor k takes weight_decay; -1: all) and bf16_copies (bit k: tensor k
 * also writes param' rounded to bf16 into an output after the 3 * count). */
typedef struct gpa__adamw_multi_params {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step, decay_mask, bf16_copies;
} gpa__adamw_multi_params;

/* adamw's attributes (name, kind, required, field, defaults, range) over a
 * params struct T with these field names: adamw's (optim.c) and
 * adamw_multi's (adamw_multi.c) lists begin with them. */
#define GPA__ADAMW_ATTR_SPECS(T)                                                \
  {"lr", GPA_ATTR_FLOAT, 1, offsetof(T, lr), 0, 0.0, 0.0, 1e6},                \
      {"beta1", GPA_ATTR_FLOAT, 0, offsetof(T, beta1), 0, 0.9, 0.0, 0.999999},  \
      {"beta2", GPA_ATTR_FLOAT, 0, offsetof(T, beta2), 0, 0.999, 0.0, 0.999999}, \
      {"eps", GPA_ATTR_FLOAT, 0, offsetof(T, eps), 0, 1e-8, 0.0, 1.0},          \
      {"weight_decay", GPA_ATTR_FLOAT, 0, offsetof(T, weight_decay), 0, 0.01, 0.0, 1e6}, \
      {"step", GPA_ATTR_INT, 1, offsetof(T, step), 0, 0.0, 1.0, 9.2e18}

/* tensor k's weight decay under the call's decay_mask */
static inline double gpa__adamw_multi_wd(const gpa__adamw_multi_params *p, uint32_t k) {
  return p->decay_mask < 0 || (p->decay_mask >> k & 1) ? p->weight_decay : 0.0;
}

/* adamw's fp32 factors, folded on the host in double as the host kernel
 * does (cuda.c): adamw and adamw_multi take them from here alike */
typedef struct gpa__adamw_cu_factors {
  float decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps;
} gpa__adamw_cu_factors;
gpa__adamw_cu_factors gpa__adamw_cu_fold(double lr, double beta1, double beta2, double eps, double weight_decay,
                                         int64_t step);

gpa_status gpa__adamw_cu(const gpa_op_exec *x);
gpa_status gpa__sgd_cu(const gpa_op_exec *x);
gpa_status gpa__adamw_multi_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_OPTIM(K)    \
  K(ADAMW, ew, gpa_adamw_f32)       \
  K(SGD, ew, gpa_sgd_f32)           \
  K(ADAMW_BF, ew, gpa_adamw_bf16)   \
  K(SGD_BF, ew, gpa_sgd_bf16)       \
  K(ADAMW_MULTI, ew, gpa_adamw_multi_f32)

#endif
