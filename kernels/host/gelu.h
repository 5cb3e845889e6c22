/* GELU host kernels (fp32), both forms:
 *   erf:  y = x * Phi(x) = 0.5 x erfc(-x / sqrt 2)
 *   tanh: y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
 *         computed as x / (1 + exp(-2u)) (no cancellation for x < 0).
 * dx = dy * dy/dx. y/dx may alias x/dy. par NULL runs inline. */
#ifndef GPA_KERNELS_HOST_GELU_H
#define GPA_KERNELS_HOST_GELU_H
#include <stdint.h>

#include "kernels/host/host_par.h"

enum { GPA__GELU_ERF = 0, GPA__GELU_TANH = 1 };

void gpa__gelu_fwd_f32(const gpa__par *par, float *y, const float *x, int64_t n, int approximate);
void gpa__gelu_bwd_f32(const gpa__par *par, float *dx, const float *x, const float *dy, int64_t n,
                       int approximate);

#endif
