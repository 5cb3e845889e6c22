/* Host kernels of the linear layer (fp32, row-major):
 *   pre = x[N,in] W[out,in]^T + b[out],  y = gelu ? gelu_tanh(pre) : pre
 * GEMMs through gpa__sgemm (OpenBLAS, split across par: see blas.h); the
 * cheap passes (bias broadcast, GELU, its derivative, db) through par.
 * GELU is the tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#ifndef GPA_KERNELS_HOST_LINEAR_H
#define GPA_KERNELS_HOST_LINEAR_H
#include <stdint.h>

#include "kernels/host/host_par.h"

/* y[N,out]; b nullable. gelu != 0: y = gelu(pre) and, when pre is not NULL,
 * the pre-activation is written to pre[N,out] too (the backward needs it). */
void gpa__linear_fwd(const gpa__par *par, const float *x, const float *W, const float *b, float *y, float *pre,
                     int64_t N, int64_t in, int64_t out, int gelu);

/* Gradients from dy[N,out] (the gradient of y). gelu != 0: y was
 * gelu(pre) and pre[N,out] is required; g = dy * gelu'(pre) is formed in
 * gscratch[N*out] (required then). Else g = dy.
 *   dx[N,in] = g W (skipped when dx is NULL), dW[out,in] = g^T x,
 *   db[out] = column sums of g (skipped when NULL; fixed order, so
 *   bitwise reproducible for any thread count). */
void gpa__linear_bwd(const gpa__par *par, const float *dy, const float *x, const float *W, const float *pre,
                     float *dx, float *dW, float *db, int64_t N, int64_t in, int64_t out, int gelu,
                     float *gscratch);

#endif
