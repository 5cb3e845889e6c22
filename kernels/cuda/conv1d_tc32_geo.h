/* The geometry conv1d's f32 tensor-core kernels (kernels/cuda/conv1d_tc32.cu,
 * 3xTF32) take by value, filled by ops/conv1d/cuda_tc32.c: plain C, shared
 * by the host adapter and both kernel compilers. Every index fits an int
 * (the adapter declines larger tensors). */
#ifndef GPA_CONV1D_TC32_GEO_H
#define GPA_CONV1D_TC32_GEO_H
#include "conv1d_shape.h"

/* Block tile GPA_CONV_TC32_BM x GPA_CONV_TC32_BN outputs, 4 warps as 2 x 2,
 * each warp 32 x 32 (2 x 4 mma tiles of m16n8k8: 32 fp32 accumulators a
 * thread). The reduction goes GPA_CONV_TC32_BK deep per stage (4 k8 steps);
 * A's tile is [BM][BK + 4] ([m][k]: y, dW) or [BK][BM + 8] ([k][m]: dx), a
 * stride of 4 or 8 banks mod 32, so the 32 lanes of a fragment load (rows
 * g, columns t) hit 32 different banks. The other operand is a window of
 * the activation in its own layout ([channels][positions]) of at most
 * GPA_CONV_TC32_XMAX floats; a stage's loads are held in registers
 * (GPA_CONV_TC32_SLOTS a thread per operand) while the previous stage is
 * computed. */
#define GPA_CONV_TC32_BM 64
#define GPA_CONV_TC32_BN 64
#define GPA_CONV_TC32_BK 32
#define GPA_CONV_TC32_NT 128 /* the 4-warp kernels; the 8-warp ones (y, dx on small grids) twice that */
#define GPA_CONV_TC32_LDA (GPA_CONV_TC32_BK + 4)
#define GPA_CONV_TC32_LDM (GPA_CONV_TC32_BM + 8)
#define GPA_CONV_TC32_SLOTS 16
#define GPA_CONV_TC32_XMAX (GPA_CONV_TC32_SLOTS * GPA_CONV_TC32_NT)
/* floats of A's tile (either layout: 64 x 36 = 32 x 72) */
#define GPA_CONV_TC32_AFLOATS (GPA_CONV_TC32_BM * GPA_CONV_TC32_LDA)
/* bytes of shared memory: A, the window, the stage's table of BK int pairs */
#define GPA_CONV_TC32_SMEM ((GPA_CONV_TC32_AFLOATS + GPA_CONV_TC32_XMAX) * 4 + GPA_CONV_TC32_BK * 8)

typedef struct gpa_conv_tc32_geo {
  gpa_conv_shape s;
  int red;    /* y: cin_g K; dx: cout_g K (the reduction, r = channel K + tap); dW: columns cin_g K */
  int mt, nt; /* row tiles per group (blockIdx.y = group mt + tile); column tiles (per batch, or over dW's columns) */
  int span;   /* positions a window row holds */
  int nch;    /* dW: window rows (input channels a column tile touches, at most) */
  int per;    /* dW: slices (BK timesteps of one batch) per split (blockIdx.z), the last split shorter */
  int nslice; /* dW: slices in all, B ceil(Lout / BK) */
} gpa_conv_tc32_geo;

#endif
