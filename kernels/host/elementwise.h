/* Elementwise host kernels (fp32). Plain pointers and sizes; par NULL runs
 * inline. Outputs may alias an input of the same shape exactly (in-place);
 * partial overlaps are not supported. Masks: nonzero = keep; u8 or i32. */
#ifndef GPA_KERNELS_HOST_ELEMENTWISE_H
#define GPA_KERNELS_HOST_ELEMENTWISE_H
#include <stdint.h>

#include "kernels/host/host_par.h"

enum { GPA__MASK_U8 = 0, GPA__MASK_I32 = 1 };

/* y = a + b over n elements. */
void gpa__add_f32(const gpa__par *par, float *y, const float *a, const float *b, int64_t n);
/* y = alpha * x */
void gpa__scale_f32(const gpa__par *par, float *y, const float *x, float alpha, int64_t n);
/* y = alpha * x + y0 (y may be y0: in place) */
void gpa__axpy_f32(const gpa__par *par, float *y, const float *x, const float *y0, float alpha, int64_t n);
/* y[r, :] = mask[r] ? x[r, :] : 0 for r < rows (rows = B*L), d = D (1 for [B,L]). */
void gpa__mask_zero_f32(const gpa__par *par, float *y, const float *x, const void *mask, int mask_type,
                        int64_t rows, int64_t d);
/* y[b, :] = sum over l of x[b, l, :] where mask[b, l] != 0 (mask NULL: all),
 * divided by the count when mean != 0 (count 0: y = 0). Sums in double, in
 * order of l. Used by masked_mean_fwd and add_broadcast_bwd. */
void gpa__sum_over_l_f32(const gpa__par *par, float *y, const float *x, const void *mask, int mask_type,
                         int64_t B, int64_t L, int64_t D, int mean);
/* dx[b, l, :] = mask[b, l] ? dy[b, :] / count(b) : 0 (count 0: 0). */
void gpa__masked_mean_bwd_f32(const gpa__par *par, float *dx, const float *dy, const void *mask,
                              int mask_type, int64_t B, int64_t L, int64_t D);
/* y[b, j, i] = x[b, i, j] for x [batches, m, n] of es-byte elements (1, 2,
 * 4 or 8); y must not overlap x. */
void gpa__transpose_batched(const gpa__par *par, void *y, const void *x, int64_t batches, int64_t m, int64_t n,
                    uint32_t es);
/* y[b, l, :] = x[b, l, :] + v[b, :] */
void gpa__add_broadcast_fwd_f32(const gpa__par *par, float *y, const float *x, const float *v, int64_t B,
                                int64_t L, int64_t D);

#endif
