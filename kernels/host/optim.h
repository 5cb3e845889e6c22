/* Optimizer host kernels (fp32, elementwise, in place or not: every output
 * may alias its input of the same role exactly).
 *   AdamW (decoupled weight decay, as torch.optim.AdamW):
 *     p' = p - lr*wd*p;  m' = b1 m + (1-b1) g;  v' = b2 v + (1-b2) g^2
 *     p' -= lr * (m' / (1 - b1^step)) / (sqrt(v' / (1 - b2^step)) + eps)
 *   SGD with momentum (as torch.optim.SGD, dampening 0; buf starts at 0):
 *     g' = g + wd*p;  buf' = mu*buf + g';  d = nesterov ? g' + mu*buf' : buf'
 *     p' = p - lr*d */
#ifndef GPA_KERNELS_HOST_OPTIM_H
#define GPA_KERNELS_HOST_OPTIM_H
#include <stdint.h>

#include "kernels/host/host_par.h"

typedef struct gpa__adamw_hp {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step; /* >= 1 */
} gpa__adamw_hp;

typedef struct gpa__sgd_hp {
  double lr, momentum, weight_decay;
  int nesterov;
} gpa__sgd_hp;

void gpa__adamw_f32(const gpa__par *par, float *p_out, float *m_out, float *v_out, const float *p,
                    const float *g, const float *m, const float *v, int64_t n, const gpa__adamw_hp *hp);
void gpa__sgd_f32(const gpa__par *par, float *p_out, float *buf_out, const float *p, const float *g,
                  const float *buf, int64_t n, const gpa__sgd_hp *hp);

#endif
