/* Metric host kernels (fp32 in, double accumulation, one fp32 scalar out).
 * Per-row partials go to scratch (N doubles) and are added in row order:
 * bitwise the same for any thread count.
 *   cross entropy: row loss = logsumexp(logits[n, :]) - logits[n, t[n]];
 *     loss = sum over rows with t[n] != ignore_index / count (0 if count is 0).
 *   its gradient: dlogits[n, :] = scale * (softmax(logits[n, :]) - onehot(t[n])) / count,
 *     0 for ignored rows.
 *   mse = sum((y - t)^2) / (N*D) (0 if empty).
 *   cosine = mean over rows of dot(y, t) / max(|y| |t|, eps) (0 if N is 0). */
#ifndef GPA_KERNELS_HOST_METRICS_H
#define GPA_KERNELS_HOST_METRICS_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/host/host_par.h"

/* First row whose target is neither ignore_index nor in [0, V), or -1; *count
 * gets the number of rows that are not ignored. */
int64_t gpa__ce_first_bad_target(const int32_t *targets, int64_t N, int64_t V, int64_t ignore_index,
                                 int64_t *count);
/* scratch: N doubles. */
void gpa__cross_entropy_fwd_f32(const gpa__par *par, float *loss, const float *logits, const int32_t *targets,
                                int64_t N, int64_t V, int64_t ignore_index, double *scratch);
void gpa__cross_entropy_bwd_f32(const gpa__par *par, float *dlogits, const float *logits,
                                const int32_t *targets, int64_t N, int64_t V, int64_t ignore_index,
                                int64_t count, double scale);
void gpa__mse_f32(const gpa__par *par, float *out, const float *y, const float *t, int64_t N, int64_t D,
                  double *scratch);
void gpa__cosine_f32(const gpa__par *par, float *out, const float *y, const float *t, int64_t N, int64_t D,
                     double eps, double *scratch);

#endif
