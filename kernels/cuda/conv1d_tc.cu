/* conv1d with bf16 storage on tensor cores (mma.sync m16n8k16, fp32
 * accumulate; gpa_mma.h), driven by ops/conv1d/cuda_tc.c: y, dx and dW as
 * implicit GEMMs, one per kernel tap k summed into the same accumulators.
 *
 * Why channels-last copies: ldmatrix reads rows of 16 contiguous,
 * 16-byte-aligned bytes. In x's own layout [C][L] the tap k shifts a
 * row's positions by k dil, which is rarely a multiple of 8 elements, so
 * no tile row of the implicit im2col matrix is an aligned run there. In a
 * copy [B G][L][cin_p] (channels contiguous, padded with zeros to a
 * multiple of 8) every GEMM operand row is one position's channels: the
 * tap, the stride, the dilation and the padding only choose which row, and
 * a row outside [0, L) is a zero fill (cp.async with src-size 0). The
 * copies (gpa_conv_tc_pack_bf16, the size of x or dy, not K times it: no
 * im2col) and W's re-lay per tap (gpa_conv_tc_wpack_bf16) are one pass
 * each; the GEMMs then read K times what they stage, from L2.
 *
 *   y  [co][t]  = sum_k sum_c Wf[k][co][c] xT[t s - pad_l + k dil][c]
 *   dx [ci][p]  = sum_k sum_o Wd[k][ci][o] dyT[(p + pad_l - k dil) / s][o]
 *                 (only where the division is exact and in [0, Lout))
 *   dW [co][c][k] = sum_b sum_t dyT[t][co] xT[t s - pad_l + k dil][c]
 * y and dx: A [m][c] row-major (ldmatrix), B as [n][c] rows (ldmatrix, the
 * "col" operand), reduction over (channel block, k). dW: A and B both
 * stored [t][.] (ldmatrix .trans), reduction over slices of BK timesteps
 * of one batch, a fixed run of slices per split (blockIdx.z); one split
 * writes dW, several write partials that gpa_conv_dw_sum_f32 adds in split
 * order. No atomics: every sum has one order per shape (deterministic).
 *
 * Layout nlc (x [B][L][Cin], dy [B][Lout][Cout]): already channels last,
 * so where every group's channels are a multiple of 8 the kernels read x
 * and dy in place (no copies; g.a_*, g.d_* say where rows lie), and y and
 * dx go out through shared memory as [n][m] tiles, 16 bytes (8 channels)
 * a store.
 *
 * Tiles (conv1d_tc_geo.h): 128 x 64 per block of 4 warps, 64 x 32 a warp.
 * 128 rows keep 16 mma per 6 ldmatrix.x4 with 64 accumulators a thread (no
 * spills at 128 threads); the main job's channel counts (96, 512) fill
 * whole or most row tiles. 3 stages of 32-deep cp.async tiles (46080
 * bytes) keep two stages of copies in flight under the default 48 KiB.
 *
 * Accuracy: bf16 products are exact in fp32 and summed in fp32; y and dx
 * are rounded to bf16 once, dW stays f32 (as the SIMT kernels). */
#include "conv1d_tc_geo.h"
#include "gpa_bf16.h"
#include "gpa_mma.h"

#define CT_BM GPA_CONV_TC_BM
#define CT_BN GPA_CONV_TC_BN
#define CT_BK GPA_CONV_TC_BK
#define CT_NS GPA_CONV_TC_STAGES
#define CT_NT GPA_CONV_TC_NT
#define CT_LDK GPA_CONV_TC_LDK
#define CT_LDM GPA_CONV_TC_LDM
#define CT_LDN GPA_CONV_TC_LDN

typedef __nv_bfloat16 ct_bf;

/* dst [rows][LD] += 16-byte chunks of 8 channels; the chunk (row r, chunk
 * j) comes from src + row_off(r) + 8 j when ok, else zeros. */
#define CT_CHUNK(dst, LD, src, off, ok, r, j) gpa_cp_async16((dst) + (r) * (LD) + 8 * (j), (ok) ? (src) + (off) + 8 * (j) : (src), (ok))

/* The 4 x 4 mma tiles of one 16-deep k step of a warp. */
static __device__ __forceinline__ void ct_mma_step(float acc[4][4][4], const unsigned a[4][4], const unsigned b[2][4]) {
  GPA_UNROLL for (int mi = 0; mi < 4; mi++) GPA_UNROLL for (int nj = 0; nj < 2; nj++) {
      gpa_mma16816<ct_bf>(acc[mi][2 * nj], a[mi], b[nj]);
      gpa_mma16816<ct_bf>(acc[mi][2 * nj + 1], a[mi], b[nj] + 2);
    }
}

/* A block's CT_NS-stage cp.async pipeline over nit reduction steps into acc
 * (zeroed first): load(it, s) issues step it's copies into stage buffer s,
 * CT_NS - 1 steps ahead, one commit group a step (empty past the end);
 * mma(s) runs the warp's products of the stage buffer s once every
 * thread's copies of it have landed. No copy outlives the call. */
template <class Load, class Mma>
static __device__ __forceinline__ void ct_pipeline(float (&acc)[4][4][4], int nit, Load &&load, Mma &&mma) {
  GPA_UNROLL for (int i = 0; i < 4; i++) GPA_UNROLL for (int j = 0; j < 4; j++) GPA_UNROLL for (int v = 0; v < 4; v++)
        acc[i][j][v] = 0.0f;
  GPA_UNROLL for (int s = 0; s < CT_NS - 1; s++) {
    if (s < nit) load(s, s);
    gpa_cp_async_commit();
  }
  for (int it = 0; it < nit; it++) {
    /* step it's group: CT_NS - 1 were committed before the loop, one per
     * iteration after */
    gpa_cp_async_wait<CT_NS - 2>();
    __syncthreads();
    /* the buffer of step it - 1, which every thread finished before the barrier */
    if (it + CT_NS - 1 < nit) load(it + CT_NS - 1, (it + CT_NS - 1) % CT_NS);
    gpa_cp_async_commit();
    mma(it % CT_NS);
  }
  gpa_cp_async_wait<0>(); /* the empty trailing groups */
}

/* y (DX false) or dx (DX true): out[b][grp m_len + m][n] for one block's
 * 128 x 64 tile. act: xT or dyT [B G][act_rows][red_p]; wp: Wf or Wd
 * [G][K][m_len][red_p]. */
template <bool DX>
static __device__ void ct_rows(ct_bf *sm, gpa_bf16 *out, const gpa_bf16 *act, const gpa_bf16 *wp,
                               const gpa_bf16 *bias, const gpa_conv_tc_geo &g) {
  const int tile = blockIdx.x % g.nt, b = blockIdx.x / g.nt;
  const int grp = blockIdx.y / g.mt, m0 = (blockIdx.y % g.mt) * CT_BM, n0 = tile * CT_BN;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, wm = w >> 1, wn = w & 1;
  const ct_bf *A = reinterpret_cast<const ct_bf *>(wp) + (long long)grp * g.K * g.m_len * g.red_p;
  const ct_bf *X = reinterpret_cast<const ct_bf *>(act) + (long long)b * g.a_bs + (long long)grp * g.a_gs;
  const int ncb = (g.red_p + CT_BK - 1) / CT_BK, nit = ncb * g.K;
  /* the copies of reduction step `it` (channel block it / K, tap it % K) into stage buffer s */
  auto load = [&](int it, int s) {
    ct_bf *as = sm + s * (CT_BM + CT_BN) * CT_LDK, *bs = as + CT_BM * CT_LDK;
    const int c0 = (it / g.K) * CT_BK, k = it % g.K;
    const ct_bf *Ak = A + (long long)k * g.m_len * g.red_p;
    GPA_UNROLL for (int i = 0; i < CT_BM * CT_BK / 8 / CT_NT; i++) {
      const int e = tid + i * CT_NT, r = e >> 2, j = e & 3;
      const bool ok = m0 + r < g.m_len && c0 + 8 * j < g.red_p;
      CT_CHUNK(as, CT_LDK, Ak, (m0 + r) * g.red_p + c0, ok, r, j);
    }
    GPA_UNROLL for (int i = 0; i < CT_BN * CT_BK / 8 / CT_NT; i++) {
      const int e = tid + i * CT_NT, r = e >> 2, j = e & 3, n = n0 + r;
      int q;
      bool ok;
      if (DX) {
        const int u = n + g.pad_l - k * g.dil; /* t s for the t this tap reads */
        q = u / g.stride;
        ok = u >= 0 && q * g.stride == u && q < g.act_rows;
      } else {
        q = n * g.stride - g.pad_l + k * g.dil;
        ok = q >= 0 && q < g.act_rows;
      }
      ok = ok && n < g.n_len && c0 + 8 * j < g.red_p;
      CT_CHUNK(bs, CT_LDK, X, q * g.a_ld + c0, ok, r, j);
    }
  };
  float acc[4][4][4];
  ct_pipeline(acc, nit, load, [&](int s) {
    const ct_bf *as = sm + s * (CT_BM + CT_BN) * CT_LDK, *bs = as + CT_BM * CT_LDK;
    GPA_UNROLL for (int kk = 0; kk < CT_BK; kk += 16) {
      unsigned a[4][4], bb[2][4];
      GPA_UNROLL for (int mi = 0; mi < 4; mi++)
        gpa_ldmatrix_x4(a[mi], as + (wm * 64 + mi * 16 + (lane & 15)) * CT_LDK + kk + (lane >> 4) * 8);
      /* matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) */
      GPA_UNROLL for (int nj = 0; nj < 2; nj++)
        gpa_ldmatrix_x4(bb[nj], bs + (wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8) * CT_LDK + kk +
                                    ((lane >> 3) & 1) * 8);
      ct_mma_step(acc, a, bb);
    }
  });
  const int gq = lane >> 2, tq = lane & 3;
  if (g.nlc) {
    /* out [B][n_len][out_ch]: the tile as [n][m] in the idle stage buffers,
     * then rows of 8 channels (16 bytes; m_len and out_ch are multiples of
     * 8 here, so a row is all inside or all outside) */
    const int lds = CT_BM + 8; /* 272-byte rows: 16-byte aligned */
    gpa_bf16 *st = reinterpret_cast<gpa_bf16 *>(sm);
    __syncthreads(); /* every warp's last ldmatrix is done */
    GPA_UNROLL for (int mi = 0; mi < 4; mi++) GPA_UNROLL for (int h = 0; h < 2; h++) {
        const int ml = wm * 64 + mi * 16 + gq + 8 * h, m = m0 + ml;
        const float bv = bias && m < g.m_len ? gpa_bf2f(bias[grp * g.m_len + m]) : 0.0f;
        GPA_UNROLL for (int ni = 0; ni < 4; ni++) GPA_UNROLL for (int e = 0; e < 2; e++)
            st[(wn * 32 + ni * 8 + 2 * tq + e) * lds + ml] = gpa_f2bf(acc[mi][ni][2 * h + e] + bv);
      }
    __syncthreads();
    for (int i = tid; i < CT_BN * CT_BM / 8; i += CT_NT) {
      const int nl = i / (CT_BM / 8), j = i % (CT_BM / 8), n = n0 + nl, m = m0 + 8 * j;
      if (n < g.n_len && m < g.m_len)
        *reinterpret_cast<uint4 *>(out + ((long long)b * g.n_len + n) * g.out_ch + grp * g.m_len + m) =
            *reinterpret_cast<const uint4 *>(st + nl * lds + 8 * j);
    }
    return;
  }
  GPA_UNROLL for (int mi = 0; mi < 4; mi++) GPA_UNROLL for (int h = 0; h < 2; h++) {
      const int m = m0 + wm * 64 + mi * 16 + gq + 8 * h;
      if (m >= g.m_len) continue;
      const int ch = grp * g.m_len + m;
      const float bv = bias ? gpa_bf2f(bias[ch]) : 0.0f;
      gpa_bf16 *row = out + ((long long)b * g.out_ch + ch) * g.n_len;
      GPA_UNROLL for (int ni = 0; ni < 4; ni++) GPA_UNROLL for (int e = 0; e < 2; e++) {
          const int n = n0 + wn * 32 + ni * 8 + 2 * tq + e;
          if (n < g.n_len) row[n] = gpa_f2bf(acc[mi][ni][2 * h + e] + bv);
        }
    }
}

/* dW for one tap k and one 128 (co) x 64 (c) tile over this split's
 * slices; out = dW when one split, else part + split Cout cin_g K. */
static __device__ void ct_dw(ct_bf *sm, float *out, const gpa_bf16 *dyT, const gpa_bf16 *xT,
                             const gpa_conv_tc_geo &g) {
  const int k = blockIdx.x / g.nt, c0 = (blockIdx.x % g.nt) * CT_BN, z = blockIdx.z;
  const int grp = blockIdx.y / g.mt, m0 = (blockIdx.y % g.mt) * CT_BM;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, wm = w >> 1, wn = w & 1;
  const int tps = (g.Lout + CT_BK - 1) / CT_BK, s_beg = z * g.per, s_end = min(g.nslice, s_beg + g.per);
  const int nit = s_end - s_beg;
  auto load = [&](int it, int s) {
    ct_bf *as = sm + s * CT_BK * (CT_LDM + CT_LDN), *bs = as + CT_BK * CT_LDM;
    const int sl = s_beg + it, b = sl / tps, t0 = (sl % tps) * CT_BK;
    const ct_bf *D = reinterpret_cast<const ct_bf *>(dyT) + (long long)b * g.d_bs + (long long)grp * g.d_gs;
    const ct_bf *X = reinterpret_cast<const ct_bf *>(xT) + (long long)b * g.a_bs + (long long)grp * g.a_gs;
    GPA_UNROLL for (int i = 0; i < CT_BK * CT_BM / 8 / CT_NT; i++) {
      const int e = tid + i * CT_NT, r = e >> 4, j = e & 15, t = t0 + r;
      const bool ok = t < g.Lout && m0 + 8 * j < g.cout_p;
      CT_CHUNK(as, CT_LDM, D, t * g.d_ld + m0, ok, r, j);
    }
    GPA_UNROLL for (int i = 0; i < CT_BK * CT_BN / 8 / CT_NT; i++) {
      const int e = tid + i * CT_NT, r = e >> 3, j = e & 7, t = t0 + r;
      const int q = t * g.stride - g.pad_l + k * g.dil;
      const bool ok = t < g.Lout && q >= 0 && q < g.L && c0 + 8 * j < g.cin_p;
      CT_CHUNK(bs, CT_LDN, X, q * g.a_ld + c0, ok, r, j);
    }
  };
  float acc[4][4][4];
  ct_pipeline(acc, nit, load, [&](int s) {
    const ct_bf *as = sm + s * CT_BK * (CT_LDM + CT_LDN), *bs = as + CT_BK * CT_LDM;
    GPA_UNROLL for (int kk = 0; kk < CT_BK; kk += 16) {
      unsigned a[4][4], bb[2][4];
      /* A stored [t][co]: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15) */
      GPA_UNROLL for (int mi = 0; mi < 4; mi++)
        gpa_ldmatrix_x4_trans(a[mi], as + (kk + (lane & 7) + (lane >> 4) * 8) * CT_LDM + wm * 64 + mi * 16 +
                                         ((lane >> 3) & 1) * 8);
      /* B stored [t][c]: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) */
      GPA_UNROLL for (int nj = 0; nj < 2; nj++)
        gpa_ldmatrix_x4_trans(bb[nj], bs + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * CT_LDN + wn * 32 + nj * 16 +
                                          (lane >> 4) * 8);
      ct_mma_step(acc, a, bb);
    }
  });
  const int R = g.cin_g * g.K, gq = lane >> 2, tq = lane & 3;
  float *o = g.per < g.nslice ? out + (long long)z * g.G * g.cout_g * R : out;
  GPA_UNROLL for (int mi = 0; mi < 4; mi++) GPA_UNROLL for (int h = 0; h < 2; h++) {
      const int co = m0 + wm * 64 + mi * 16 + gq + 8 * h;
      if (co >= g.cout_g) continue;
      float *orow = o + ((long long)grp * g.cout_g + co) * R + k;
      GPA_UNROLL for (int ni = 0; ni < 4; ni++) GPA_UNROLL for (int e = 0; e < 2; e++) {
          const int c = c0 + wn * 32 + ni * 8 + 2 * tq + e;
          if (c < g.cin_g) orow[(long long)c * g.K] = acc[mi][ni][2 * h + e];
        }
    }
}

extern "C" __global__ void __launch_bounds__(CT_NT) gpa_conv_tc_fwd_bf16(gpa_bf16 *y, const gpa_bf16 *xT,
                                                                        const gpa_bf16 *wf, const gpa_bf16 *bias,
                                                                        gpa_conv_tc_geo g) {
  GPA_DYNAMIC_SHARED(ct_bf, sm);
  ct_rows<false>(sm, y, xT, wf, bias, g);
}
extern "C" __global__ void __launch_bounds__(CT_NT) gpa_conv_tc_dx_bf16(gpa_bf16 *dx, const gpa_bf16 *dyT,
                                                                       const gpa_bf16 *wd, gpa_conv_tc_geo g) {
  GPA_DYNAMIC_SHARED(ct_bf, sm);
  ct_rows<true>(sm, dx, dyT, wd, nullptr, g);
}
extern "C" __global__ void __launch_bounds__(CT_NT) gpa_conv_tc_dw_bf16(float *out, const gpa_bf16 *dyT,
                                                                       const gpa_bf16 *xT, gpa_conv_tc_geo g) {
  GPA_DYNAMIC_SHARED(ct_bf, sm);
  ct_dw(sm, out, dyT, xT, g);
}

/* dst [bg][len][rows_p] = src [bg][rows][len] transposed, channels rows ..
 * rows_p zero: the channels-last copies of x and dy. A block moves a 32
 * (positions) x 32 (channels) tile through shared memory so that both the
 * reads (along positions) and the writes (along channels) are coalesced.
 * grid.x = bg x position tiles, grid.y = channel tiles of rows_p; 32 x 8
 * threads. */
extern "C" __global__ void __launch_bounds__(256) gpa_conv_tc_pack_bf16(gpa_bf16 *dst, const gpa_bf16 *src, int rows,
                                                                        int len, int rows_p) {
  GPA_DYNAMIC_SHARED(gpa_bf16, tl); /* [32 channels][33 positions] */
  const int P = GPA_CONV_TC_PACK, lt = (len + P - 1) / P;
  const int bg = blockIdx.x / lt, l0 = (blockIdx.x % lt) * P, c0 = blockIdx.y * P;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const gpa_bf16 *s = src + (long long)bg * rows * len;
  for (int i = ty; i < P; i += 8) {
    const int c = c0 + i, l = l0 + tx;
    tl[i * (P + 1) + tx] = c < rows && l < len ? s[(long long)c * len + l] : (gpa_bf16)0;
  }
  __syncthreads();
  gpa_bf16 *d = dst + (long long)bg * len * rows_p;
  for (int i = ty; i < P; i += 8) {
    const int l = l0 + i, c = c0 + tx;
    if (l < len && c < rows_p) d[(long long)l * rows_p + c] = tl[tx * (P + 1) + i];
  }
}

/* W [G m_src][n_src][K] re-laid per tap: dst [G][K][M][n_p], zeros past the
 * source. y (trans 0): M = cout_g rows co, n over cin_g; dx (trans 1):
 * M = cin_g rows ci, n over cout_g (W^T). */
extern "C" __global__ void gpa_conv_tc_wpack_bf16(gpa_bf16 *dst, const gpa_bf16 *w, int G, int K, int cout_g,
                                                  int cin_g, int n_p, int trans) {
  const int M = trans ? cin_g : cout_g, nn = trans ? cout_g : cin_g;
  const long long total = (long long)G * K * M * n_p;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int n = (int)(i % n_p), m = (int)(i / n_p % M), k = (int)(i / ((long long)n_p * M) % K);
    const int grp = (int)(i / ((long long)n_p * M * K));
    const int co = trans ? n : m, ci = trans ? m : n;
    dst[i] = n < nn ? w[(((long long)grp * cout_g + co) * cin_g + ci) * K + k] : (gpa_bf16)0;
  }
}
