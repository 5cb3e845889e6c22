/* LayerNorm host kernels (fp32).
 *   forward:  mean = sum(x)/D; var = sum((x - mean)^2)/D (corrected two-pass,
 *             so rows with a large mean stay accurate); rstd = 1/sqrt(var + eps);
 *             y = (x - mean) * rstd * gamma + beta.
 *   backward: xhat = (x - mean) * rstd with the given mean and rstd;
 *             g = dy * gamma; dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
 *             dgamma = sum_rows dy * xhat; dbeta = sum_rows dy.
 * The column sums are taken per block of LN_BLOCK_ROWS rows, then the blocks
 * are added in order: bitwise the same for any thread count. */
#ifndef GPA_KERNELS_HOST_LAYERNORM_H
#define GPA_KERNELS_HOST_LAYERNORM_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/host/host_par.h"

#define GPA__LN_BLOCK_ROWS 32

void gpa__layernorm_fwd_f32(const gpa__par *par, float *y, float *mean, float *rstd, const float *x,
                            const float *gamma, const float *beta, int64_t N, int64_t D, double eps);

/* Scratch bytes gpa__layernorm_bwd_f32 needs (0 when N or D is 0). */
size_t gpa__layernorm_bwd_scratch(int64_t N, int64_t D);
void gpa__layernorm_bwd_f32(const gpa__par *par, float *dx, float *dgamma, float *dbeta, const float *x,
                            const float *dy, const float *gamma, const float *mean, const float *rstd,
                            int64_t N, int64_t D, void *scratch);

#endif
