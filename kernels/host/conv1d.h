/* Host kernels of the 1-D convolution (fp32, row-major), im2col + GEMM.
 *   x[B,Cin,L], W[Cout,Cin/groups,K], b[Cout] (nullable) -> y[B,Cout,Lout]
 *   y[b,co,t] = b[co] + sum_{ci,k} W[co,ci,k] x[b, g*Cin_g + ci, t*stride - pad_l + k*dilation]
 * (g = co / Cout_g; positions outside [0, L) read 0),
 *   Lout = (L + pad_l + pad_r - dilation*(K-1) - 1) / stride + 1.
 * The work is cut into units that each run whole on one thread of par (see
 * conv1d.c). Stride 1 runs one GEMM per tap on x shifted, units claimed
 * dynamically (W repacked in scratch, at most 8 MiB, and dW in the
 * backward), other geometries im2col + one GEMM per chunk (col2im
 * backward), with one column buffer per thread, together within GPA__CONV1D_SCRATCH_CAP bytes whatever
 * B and L are (unless a single column is larger: Cin/groups*K past 4M); a
 * 1x1 convolution with stride 1 and no padding reads x directly.
 * Channels last (geom.nlc): x [B,L,Cin], y [B,Lout,Cout], the same units
 * and sums; the GEMMs read and write the activations in place as
 * transposed operands, the direct kernel's panels gather from them and its
 * tiles scatter into y, im2col and col2im go along positions Cin apart. */
#ifndef GPA_KERNELS_HOST_CONV1D_H
#define GPA_KERNELS_HOST_CONV1D_H
#include <stddef.h>
#include <stdint.h>

#include "kernels/host/host_par.h"

#define GPA__CONV1D_SCRATCH_CAP ((uint64_t)16 << 20)

typedef struct gpa__conv1d_geom {
  int64_t B, Cin, L, Cout, K;
  int64_t stride, pad_l, pad_r, dilation, groups;
  int64_t Lout; /* filled by gpa__conv1d_geom_init */
  int im2col;   /* 1: the im2col path even where the shift path applies (benches and tests compare them) */
  int no_direct; /* 1: the forward's shift path even where the direct kernel applies (conv1d_direct.h) */
  int nlc;       /* 1: channels last: x, dx [B,L,Cin] and y, dy [B,Lout,Cout] (W, dW unchanged) */
} gpa__conv1d_geom;

/* Computes Lout; returns 0 if the geometry is invalid (Lout < 1 with L > 0,
 * stride/dilation/groups < 1, channels not divisible by groups). */
int gpa__conv1d_geom_init(gpa__conv1d_geom *g);
/* Scratch bytes the forward (bwd = 0) or backward (bwd = 1) needs when run
 * with par (the split depends on its thread count; pass the same par). */
uint64_t gpa__conv1d_scratch_bytes(const gpa__conv1d_geom *g, int bwd, const gpa__par *par);

void gpa__conv1d_fwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *x, const float *W,
                     const float *b, float *y, float *scratch);
/* dx (nullable), dW, db (nullable) from dy[B,Cout,Lout]. Bitwise
 * reproducible: every sum runs in a fixed order. */
void gpa__conv1d_bwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *dy, const float *x,
                     const float *W, float *dx, float *dW, float *db, float *scratch);

#endif
