/* conv1d's forward and dx as implicit GEMMs for small grids
 * (ops/conv1d/cuda_igsmall.c): the products of kernels/cuda/conv1d.cu in
 * tiles of GPA_CONV_S_TM x GPA_CONV_S_TN outputs with the reduction split
 * over GPA_CONV_S_SPLIT thread groups of one block. At the main job's
 * shape (B32, 96 channels, L128) the 64 x 64 tiles give 128 blocks of 256
 * threads, one an SM, 8 warps, latency-bound (issue 25); 32 x 32 tiles fit
 * 96 channels exactly and give 384 blocks, and the split keeps 256 threads
 * on each, so an SM holds about 23 warps.
 *
 * Each stage stages both operands in shared memory as rows of the
 * reduction (r = channel K + tap): A [r][TM] (W for y, W^T for dx, rows
 * padded to GPA_CONV_S_LDA) and B [r][TN], the x positions (y) or dy
 * entries (dx) that tap reaches at each column, zeros outside the tensor
 * and, for dx at stride s, where no t has t s == p + pad_l - k dil. The
 * padding, dilation and stride live in the staging alone; the inner loop
 * is one float4 of each operand per 16 FMAs for any shape. Group q of a
 * block takes the stage's rows r = q, q + SPLIT, ...; at the end the
 * groups' partial tiles go through shared memory and are added in group
 * order, so every output has one order of sums for a given shape (no
 * atomics: the same bits every run). f32 and bf16 storage (bf16 widened
 * in the staging, each output rounded once). */
#include "conv1d_geo.h"
#include "gpa_bf16.h"

#define STM GPA_CONV_S_TM
#define STN GPA_CONV_S_TN
#define SLDA GPA_CONV_S_LDA
#define SPLIT GPA_CONV_S_SPLIT
#define SNT GPA_CONV_S_NT
#define GT (STM * STN / 16) /* threads of a group: 4 x 4 outputs each */
/* the reduction loop two rows at a time: unrolled further, ptxas kept more
 * loads in flight than 80 registers hold (spills at 3 blocks an SM) */
#ifdef GPA_SIM_EMU
#define CS_UNROLL2
#define CS_ROLLED
#else
#define CS_UNROLL2 _Pragma("unroll 2")
#define CS_ROLLED _Pragma("unroll 1")
#endif
#define CHUNK 4 /* staging loads in flight a thread, per operand */

/* MODE 0: y = W * x (+ bias), rows co, columns t, reduction (c, k) over cin_g.
 * MODE 1, 2: dx = W^T * dy, rows ci, columns p, reduction (o, k) over cout_g;
 * 1 at stride 1, 2 at any stride. blockIdx.x = b nt + column tile,
 * blockIdx.y = group mt + row tile. */
template <typename T, int MODE>
static __device__ void cs_gemm(float *sm, T *out, const T *act, const T *w, const T *bias, const gpa_conv_geo &g) {
  constexpr bool DX = MODE != 0;
  const int tile = blockIdx.x % g.nt, b = blockIdx.x / g.nt;
  const int grp = blockIdx.y / g.mt, m0 = (blockIdx.y % g.mt) * STM, n0 = tile * STN;
  const int tid = threadIdx.x, q = tid / GT, tx = tid % (STN / 4), ty = (tid % GT) / (STN / 4);
  const int rows = DX ? g.s.cin_g : g.s.cout_g, cols = DX ? g.s.L : g.s.Lout, red = DX ? g.s.cout_g : g.s.cin_g;
  const int s = MODE == 1 ? 1 : g.s.stride;
  float *as = sm, *bs = sm + g.bc * g.s.K * SLDA;
  const T *wg = w + (long long)grp * g.s.cout_g * g.s.cin_g * g.s.K;
  /* the activation read: x of batch b and the group's input channels (y),
   * dy of batch b and the group's output channels (dx) */
  const T *ab = DX ? act + ((long long)b * g.s.Cout + (long long)grp * g.s.cout_g) * g.s.Lout
                   : act + ((long long)b * g.s.Cin + (long long)grp * g.s.cin_g) * g.s.L;
  const int alen = DX ? g.s.Lout : g.s.L;
  /* Staging roles. A: thread row am of the tile, reduction rows ar + 8 j;
   * a warp stores 4 rows x 8 reduction rows, banks 4 r + m: all 32
   * differ (SLDA = TM + 4). B: column bn, reduction rows br + 8 j; a
   * warp stores one reduction row, consecutive columns. Both step their
   * (channel, tap) by 8 rows: dc channels and dk taps, then a carry. */
  constexpr int AROWS = SNT / STM, BROWS = SNT / STN;
  constexpr int AJ = GPA_CONV_S_ROWS / AROWS, BJ = GPA_CONV_S_ROWS / BROWS; /* a thread's rows of a stage, at most */
  const int am = tid / AROWS, ar = tid % AROWS, bn = tid % STN, br = tid / STN;
  const int dca = AROWS / g.s.K, dka = AROWS % g.s.K, dcb = BROWS / g.s.K, dkb = BROWS % g.s.K;
  const bool arow_ok = m0 + am < rows;
  /* y: W's row co is contiguous over (c, k); dx: W[o][ci][k] for this ci */
  const T *arow = DX ? wg + (long long)(m0 + am) * g.s.K : wg + (long long)(m0 + am) * g.s.cin_g * g.s.K;
  /* where tap 0 of column n0 + bn reads: x position (y), t s (dx) */
  const int base = DX ? n0 + bn + g.s.pad_l : (n0 + bn) * g.s.stride - g.s.pad_l;
  float acc[4][4];
  GPA_UNROLL for (int i = 0; i < 4; i++)
    GPA_UNROLL for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (int c0 = 0; c0 < red; c0 += g.bc) {
    const int nr = min(g.bc, red - c0) * g.s.K;
    __syncthreads(); /* the previous stage's reads are done */
    /* Loads in runs of CHUNK before their stores: a load-store loop waits
     * out one L2 round trip per row; all of a stage's at once took ptxas
     * past 80 registers (spills). */
    {
      int c = ar / g.s.K, k = ar % g.s.K;
      CS_ROLLED for (int j0 = 0; j0 < AJ && ar + j0 * AROWS < nr; j0 += CHUNK) {
        float v[CHUNK];
        GPA_UNROLL for (int j = 0; j < CHUNK; j++) {
          const int r = ar + (j0 + j) * AROWS;
          v[j] = 0.0f;
          if (arow_ok && r < nr)
            v[j] = DX ? gpa_ldf(arow, (long long)(c0 + c) * g.s.cin_g * g.s.K + k)
                      : gpa_ldf(arow, (long long)c0 * g.s.K + r);
          c += dca;
          k += dka;
          if (k >= g.s.K) k -= g.s.K, c++;
        }
        GPA_UNROLL for (int j = 0; j < CHUNK; j++)
          if (ar + (j0 + j) * AROWS < nr) as[(ar + (j0 + j) * AROWS) * SLDA + am] = v[j];
      }
    }
    {
      int c = br / g.s.K, k = br % g.s.K;
      CS_ROLLED for (int j0 = 0; j0 < BJ && br + j0 * BROWS < nr; j0 += CHUNK) {
        float v[CHUNK];
        GPA_UNROLL for (int j = 0; j < CHUNK; j++) {
          const int r = br + (j0 + j) * BROWS;
          v[j] = 0.0f;
          if (DX) {
            const int qq = base - k * g.s.dil; /* t s for this tap */
            int t = qq;
            bool ok = qq >= 0;
            if (MODE == 2) {
              t = qq / s;
              ok = ok && t * s == qq;
            }
            if (r < nr && ok && t < alen) v[j] = gpa_ldf(ab, (long long)(c0 + c) * alen + t);
          } else {
            const int pos = base + k * g.s.dil;
            if (r < nr && pos >= 0 && pos < alen) v[j] = gpa_ldf(ab, (long long)(c0 + c) * alen + pos);
          }
          c += dcb;
          k += dkb;
          if (k >= g.s.K) k -= g.s.K, c++;
        }
        GPA_UNROLL for (int j = 0; j < CHUNK; j++)
          if (br + (j0 + j) * BROWS < nr) bs[(br + (j0 + j) * BROWS) * STN + bn] = v[j];
      }
    }
    __syncthreads();
    CS_UNROLL2 for (int r = q; r < nr; r += SPLIT) {
      const float4 a = *reinterpret_cast<const float4 *>(as + r * SLDA + ty * 4);
      const float4 v4 = *reinterpret_cast<const float4 *>(bs + r * STN + tx * 4);
      const float av[4] = {a.x, a.y, a.z, a.w}, v[4] = {v4.x, v4.y, v4.z, v4.w};
      GPA_UNROLL for (int i = 0; i < 4; i++)
        GPA_UNROLL for (int j = 0; j < 4; j++) acc[i][j] += av[i] * v[j];
    }
  }
  /* the groups' partial tiles [SPLIT][TM][TN], then each thread adds a row
   * quarter of 4 columns over the groups in order */
  __syncthreads();
  float *part = sm;
  GPA_UNROLL for (int i = 0; i < 4; i++)
    *reinterpret_cast<float4 *>(part + (q * STM + ty * 4 + i) * STN + tx * 4) =
        make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
  __syncthreads();
  for (int o = tid; o < STM * STN / 4; o += SNT) {
    const int orow = o / (STN / 4), ocol = (o % (STN / 4)) * 4;
    float4 sum = *reinterpret_cast<const float4 *>(part + orow * STN + ocol);
    GPA_UNROLL for (int p = 1; p < SPLIT; p++) {
      const float4 u = *reinterpret_cast<const float4 *>(part + (p * STM + orow) * STN + ocol);
      sum.x += u.x;
      sum.y += u.y;
      sum.z += u.z;
      sum.w += u.w;
    }
    const int m = m0 + orow;
    if (m >= rows) continue;
    const float sv[4] = {sum.x, sum.y, sum.z, sum.w};
    if (DX) {
      T *dr = out + ((long long)b * g.s.Cin + (long long)grp * g.s.cin_g + m) * g.s.L;
      GPA_UNROLL for (int j = 0; j < 4; j++)
        if (n0 + ocol + j < cols) gpa_stf(dr, n0 + ocol + j, sv[j]);
    } else {
      const int cg = grp * g.s.cout_g + m;
      const float bv = bias ? gpa_ldf(bias, cg) : 0.0f;
      T *yr = out + ((long long)b * g.s.Cout + cg) * g.s.Lout;
      GPA_UNROLL for (int j = 0; j < 4; j++)
        if (n0 + ocol + j < cols) gpa_stf(yr, n0 + ocol + j, sv[j] + bv);
    }
  }
}

/* __launch_bounds__ spelled out: cmake/cuda.cmake finds the kernels by that pattern */
extern "C" __global__ void __launch_bounds__(SNT, GPA_CONV_S_MINB)
    gpa_conv_igs_fwd_f32(float *y, const float *x, const float *w, const float *bias, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  cs_gemm<float, 0>(sm, y, x, w, bias, g);
}
extern "C" __global__ void __launch_bounds__(SNT, GPA_CONV_S_MINB)
    gpa_conv_igs_fwd_bf16(gpa_bf16 *y, const gpa_bf16 *x, const gpa_bf16 *w, const gpa_bf16 *bias, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  cs_gemm<gpa_bf16, 0>(sm, y, x, w, bias, g);
}
extern "C" __global__ void __launch_bounds__(SNT, GPA_CONV_S_MINB)
    gpa_conv_igs_dx_f32(float *dx, const float *dy, const float *w, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  if (g.s.stride == 1)
    cs_gemm<float, 1>(sm, dx, dy, w, nullptr, g);
  else
    cs_gemm<float, 2>(sm, dx, dy, w, nullptr, g);
}
extern "C" __global__ void __launch_bounds__(SNT, GPA_CONV_S_MINB)
    gpa_conv_igs_dx_bf16(gpa_bf16 *dx, const gpa_bf16 *dy, const gpa_bf16 *w, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  if (g.s.stride == 1)
    cs_gemm<gpa_bf16, 1>(sm, dx, dy, w, nullptr, g);
  else
    cs_gemm<gpa_bf16, 2>(sm, dx, dy, w, nullptr, g);
}
