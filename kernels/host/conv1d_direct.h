/* Host conv1d forward, direct (stride 1): a register-blocked kernel of our
 * own (AVX2+FMA, or AVX-512F where the CPU has it) over the taps and input
 * channels together, without a BLAS call. W is packed once into 6-row
 * tiles [tile][ci][k][6]; each unit (batch, group, chunk of 128 output
 * positions) packs its part of x into a panel in which each input
 * channel's row holds its 128 + (K-1)*dilation positions once (each block
 * of nr = 16 (AVX2) or 32 (AVX-512F) positions and tap k reads its window
 * of it at k*dilation; zeros where the padding is), and every 6 x nr block of y is one chain of
 * FMAs over (ci, k) in order, started from the bias: no column matrix, no
 * read-modify-write of y between taps, the bias in the first write. Each y
 * element is computed whole by one unit, in an order fixed by the sizes:
 * the same bits whichever thread runs it and for any thread count (the
 * AVX2 and AVX-512F kernels sum in the same order). The backward's dx is
 * the forward of a transposed problem on the same kernel. See conv1d.c
 * for when it runs. */
#ifndef GPA_KERNELS_HOST_CONV1D_DIRECT_H
#define GPA_KERNELS_HOST_CONV1D_DIRECT_H
#include <stdint.h>

#include "kernels/host/conv1d.h"

/* Whether the direct forward applies to g (stride 1, the CPU has AVX2+FMA,
 * the packed W and one panel per thread within the scratch cap). */
int gpa__conv1d_direct_ok(const gpa__conv1d_geom *g, int64_t threads);
/* Floats of scratch it needs with `threads` slots. */
uint64_t gpa__conv1d_direct_floats(const gpa__conv1d_geom *g, int64_t threads);
/* y = conv(x, W) + b (b nullable); par as in conv1d.h; slots: the threads
 * the scratch was sized for (its units are claimed dynamically by them). */
void gpa__conv1d_direct_fwd(const gpa__par *par, int64_t slots, const gpa__conv1d_geom *g, const float *x,
                            const float *W, const float *b, float *y, float *scratch);

/* dx of the stride-1 convolution g is the forward of a transposed problem
 * t (dy as input, W flipped and transposed, pads (K-1)*dilation minus g's):
 * fills t and returns 1 where that applies (both pads within
 * (K-1)*dilation); gpa__conv1d_direct_ok(t, ...) and
 * gpa__conv1d_direct_floats(t, ...) then size it. */
int gpa__conv1d_direct_dx_geom(const gpa__conv1d_geom *g, gpa__conv1d_geom *t);
/* dx = the transposed problem t's forward of dy with g's W (no bias). The
 * slots claim extra(u, u + 1, extra_ctx) for u < n_extra first (the
 * backward's dW units, nullable), then dx's units. */
void gpa__conv1d_direct_dx(const gpa__par *par, int64_t slots, const gpa__conv1d_geom *t, const float *dy,
                           const float *W, float *dx, float *scratch, gpa__range_fn extra, void *extra_ctx,
                           int64_t n_extra);

/* Tests: 1 runs the AVX2 kernel even where the CPU has AVX-512F (as does
 * GPA_CONV1D_AVX512=0 in the environment). */
void gpa__conv1d_direct_avx2_only(int on);

#endif
