/* The geometry conv1d's bf16 tensor-core kernels (kernels/cuda/conv1d_tc.cu)
 * take by value, filled by ops/conv1d/cuda_tc.c: plain C, shared by the
 * host adapter and both kernel compilers. Every index fits an int (the
 * adapter declines larger tensors). */
#ifndef GPA_CONV1D_TC_GEO_H
#define GPA_CONV1D_TC_GEO_H

/* Block tile GPA_CONV_TC_BM x GPA_CONV_TC_BN outputs, 4 warps as 2 x 2,
 * each warp 64 x 32 (4 x 4 mma tiles of 16 x 8: per 16-deep k step 4
 * ldmatrix for A and 2 for B feed 16 mma, 64 fp32 accumulators a thread).
 * The reduction goes GPA_CONV_TC_BK deep per stage, GPA_CONV_TC_STAGES
 * stages in flight (cp.async). Rows of a [rows][BK] tile are BK + 8
 * elements (80 bytes) and rows of dW's [BK][BM], [BK][BN] tiles BM + 8, BN
 * + 8 (272, 144 bytes): 16 bytes past a multiple of 16 bank groups apart,
 * so the 8 rows of one ldmatrix phase hit 8 different 16-byte groups. */
#define GPA_CONV_TC_BM 128
#define GPA_CONV_TC_BN 64
#define GPA_CONV_TC_BK 32
#define GPA_CONV_TC_STAGES 3
#define GPA_CONV_TC_NT 128
#define GPA_CONV_TC_LDK (GPA_CONV_TC_BK + 8)
#define GPA_CONV_TC_LDM (GPA_CONV_TC_BM + 8)
#define GPA_CONV_TC_LDN (GPA_CONV_TC_BN + 8)
/* bytes of one stage: y and dx ([BM][LDK] + [BN][LDK]); dW's ([BK][LDM] + [BK][LDN]) is smaller */
#define GPA_CONV_TC_STAGE_BYTES ((GPA_CONV_TC_BM + GPA_CONV_TC_BN) * GPA_CONV_TC_LDK * 2)
#define GPA_CONV_TC_SMEM (GPA_CONV_TC_STAGES * GPA_CONV_TC_STAGE_BYTES) /* 46080: under the default 48 KiB */
/* the channels-last pack's tile (positions x channels), 32 x 8 threads */
#define GPA_CONV_TC_PACK 32

typedef struct gpa_conv_tc_geo {
  int B, G, L, Lout, K, stride, pad_l, dil;
  int cin_g, cout_g, cin_p, cout_p; /* channels per group; _p: rounded up to 8 in the packed copies */
  /* y, dx: the GEMM's rows (cout_g, cin_g), columns (Lout, L), the packed
   * activation's rows per batch-group (L, Lout) and channels (cin_p,
   * cout_p), the output's channels (Cout, Cin) */
  int m_len, n_len, act_rows, red_p, out_ch;
  int mt, nt;      /* row tiles per group; column tiles (per batch for y and dx, per k over cin_g for dW) */
  int per, nslice; /* dW: slices (BK timesteps of one batch) per split, and in all */
  /* Where the channels-last activations lie: batch b, group grp, row
   * (position) q starts at b bs + grp gs + q ld elements. a_: the y / dx
   * kernels' act, the dW kernel's x; d_: the dW kernel's dy. The packed
   * copies [B G][rows][ch_p]; under layout nlc x and dy themselves (ld
   * Cin or Cout, gs cin_g or cout_g). */
  int a_bs, a_gs, a_ld, d_bs, d_gs, d_ld;
  int nlc; /* y, dx: out [B][n_len][out_ch] (else [B][out_ch][n_len]) */
} gpa_conv_tc_geo;

#endif
