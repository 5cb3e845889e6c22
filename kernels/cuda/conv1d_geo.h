/* The geometry conv1d's implicit-GEMM kernels (kernels/cuda/conv1d.cu)
 * take by value, filled by ops/conv1d/cuda_igemm.c: plain C, shared by the
 * host adapter and both kernel compilers. Every index fits an int (the
 * adapter declines larger tensors). */
#ifndef GPA_CONV1D_GEO_H
#define GPA_CONV1D_GEO_H
#include "conv1d_shape.h"

/* Block tile: CV_TM output rows (co for y and dW, ci for dx) by CV_TN
 * columns (t for y, p for dx, r = ci K + k for dW); CV_NT threads as 16 x
 * 16, each 4 x 4 outputs (rows ty*4.., columns tx + 16 j). */
#define GPA_CONV_TM 64
#define GPA_CONV_TN 64
#define GPA_CONV_NT 256
/* dynamic shared memory per block: at most the default 48 KiB */
#define GPA_CONV_SMEM_MAX (48 * 1024)

/* The small-grid kernels of y and dx (kernels/cuda/conv1d_small.cu): tiles
 * of GPA_CONV_S_TM x GPA_CONV_S_TN, GPA_CONV_S_NT threads as
 * GPA_CONV_S_SPLIT groups of TM TN / 16 (4 x 4 outputs each) that split
 * the reduction; A's rows padded to GPA_CONV_S_LDA floats (float4-aligned,
 * the staging's stores spread over all banks). The same gpa_conv_geo,
 * with mt, nt over these tiles and bc the reduction channels of a stage. */
#define GPA_CONV_S_TM 32
#define GPA_CONV_S_TN 32
#define GPA_CONV_S_LDA (GPA_CONV_S_TM + 4)
#define GPA_CONV_S_SPLIT 4
#define GPA_CONV_S_NT 256
#define GPA_CONV_S_MINB 3 /* blocks an SM the registers must allow (__launch_bounds__) */
/* reduction rows (channel x tap) a stage holds, at most: 32 channels at K
 * = 3; K up to this (a stage's loads are held in registers, 12 a thread
 * per operand) */
#define GPA_CONV_S_ROWS 96

typedef struct gpa_conv_geo {
  gpa_conv_shape s;
  int mt;     /* row tiles per group (blockIdx.y = group * mt + tile) */
  int nt;     /* column tiles: per batch (y, dx: blockIdx.x = b nt + tile) or over R (dW) */
  int bc;     /* y, dx: reduction channels per shared stage */
  int span;   /* shared positions per channel */
  int bt;     /* dW: timesteps per slice (one batch's t0 .. t0 + bt) */
  int nch;    /* dW: input channels a column tile touches (at most) */
  int per;    /* dW: slices per split (blockIdx.z), the last split shorter */
  int nslice; /* dW: slices in all, B ceil(Lout / bt) */
  int vec;    /* y, dx under nlc: the output's base is aligned for a 4-value vector store */
} gpa_conv_geo;

#endif
