/* conv1d in f32 on tensor cores, 3xTF32 (mma.sync m16n8k8 tf32 with fp32
 * accumulation; gpa_mma.h gpa_split_tf32 / gpa_mma1688_3xtf32, the scheme
 * of attention_f32tc.cu): every operand is split into a tf32 value and a
 * tf32 residual and a b ~ ab bb + ab bs + as bb, so a product is off by
 * about 3 * 2^-22 |a b| (fp32: 2^-24) and the sums keep f32 accuracy; one
 * tf32 product (2^-11) would not. Driven by ops/conv1d/cuda_tc32.c.
 *
 * The same implicit GEMMs as the SIMT kernels of conv1d.cu, on x, dy and W
 * in their own layouts (no packed copies, no scratch but dW's partials):
 *   y  [co][t]    = sum_r W[co][r] x[r / K][t s - pad_l + (r % K) dil]
 *   dx [ci][p]    = sum_r W[r / K][ci][r % K] dy[r / K][(p + pad_l - (r % K) dil) / s]
 *                   (only where the division is exact and in [0, Lout))
 *   dW [co][r]    = sum_b sum_t dy[b][co][t] x[b][r / K][t s - pad_l + (r % K) dil]
 * r = channel K + tap runs over the reduction (y, dx) or the columns (dW)
 * straight through channel boundaries. Per stage, BK = 32 steps of the
 * reduction: A's tile (W for y and dx, dy for dW: 64 rows x 32) and a
 * window of the other operand, [channels the stage (or dW's column tile)
 * touches][positions the tile reaches], zeros outside [0, L) (padding,
 * causal or not) and past the last channel. A B element is then one shared
 * read at window row r / K - first, position n s + (r % K) dil (y), found
 * through a 32-entry table per stage (y, dx) or 4 offsets a lane (dW).
 * A stage's global loads go into registers before the previous stage's
 * mma and into shared memory after it (one buffer, two barriers a stage).
 *
 * Fragments (gpa_mma.h, m16n8k8 tf32; g = lane / 4, t = lane % 4): A (g, t),
 * (g + 8, t), (g, t + 4), (g + 8, t + 4); B (k t, n g), (k t + 4, n g).
 * A's tile rows are BK + 4 floats ([m][k]) or BM + 8 ([k][m], dx, whose W
 * slice runs along ci): lanes (g, t) read banks 4g + t or 8t + g, all 32
 * different. No atomics; every sum has one order per shape (deterministic:
 * dW's splits are a function of the shape only, summed in split order by
 * gpa_conv_dw_sum_f32). */
#include "conv1d_tc32_geo.h"
#include "gpa_bf16.h" /* GPA_UNROLL */
#include "gpa_mma.h"

#define C3_BM GPA_CONV_TC32_BM
#define C3_BN GPA_CONV_TC32_BN
#define C3_BK GPA_CONV_TC32_BK
#define C3_LDA GPA_CONV_TC32_LDA
#define C3_LDM GPA_CONV_TC32_LDM
#define C3_XMAX GPA_CONV_TC32_XMAX

/* WN warps along n: 2 (4 warps of 32 x 32, 128 threads) or 4 (8 warps of
 * 32 x 16, 256 threads: twice the warps an SM where the grid has about
 * one block an SM, the main job's y and dx). Either way each output's sum
 * runs over the same k8 steps in the same order: the same bits. */
template <int WN>
struct c3_cfg {
  static constexpr int kNT = 64 * WN, kNI = 8 / WN, kWNW = 64 / WN, kSLOTS = C3_XMAX / kNT;
};

/* floor(a / s), s > 0 */
static __device__ __forceinline__ int c3_floordiv(int a, int s) { return a >= 0 ? a / s : -((s - 1 - a) / s); }

/* A(m, k) of the stage's tile: [m][k] (KM false) or [k][m] */
template <bool KM>
static __device__ __forceinline__ float c3_a(const float *as, int m, int k) {
  return KM ? as[k * C3_LDM + m] : as[m * C3_LDA + k];
}

/* acc += A B over one stage (4 k8 steps) of a warp's 32 x WNW tile (2 x NI
 * mma tiles); bval(k, ni) is B's element (k, n) with n = wn WNW + ni 8 + g. */
template <int WN, bool KM, class BV>
static __device__ __forceinline__ void c3_stage(float (&acc)[2][c3_cfg<WN>::kNI][4], const float *as, int wm, int g,
                                                int t, BV bval) {
  GPA_UNROLL for (int kk = 0; kk < C3_BK; kk += 8) {
    unsigned ab[2][4], asm_[2][4];
    GPA_UNROLL for (int mi = 0; mi < 2; mi++) {
      const int m = wm * 32 + mi * 16 + g;
      gpa_split_tf32(c3_a<KM>(as, m, kk + t), ab[mi][0], asm_[mi][0]);
      gpa_split_tf32(c3_a<KM>(as, m + 8, kk + t), ab[mi][1], asm_[mi][1]);
      gpa_split_tf32(c3_a<KM>(as, m, kk + t + 4), ab[mi][2], asm_[mi][2]);
      gpa_split_tf32(c3_a<KM>(as, m + 8, kk + t + 4), ab[mi][3], asm_[mi][3]);
    }
    GPA_UNROLL for (int ni = 0; ni < c3_cfg<WN>::kNI; ni++) {
      unsigned bb[2], bs[2];
      gpa_split_tf32(bval(kk + t, ni), bb[0], bs[0]);
      gpa_split_tf32(bval(kk + t + 4, ni), bb[1], bs[1]);
      /* The k8 step's three products into a fresh accumulator, added to
       * acc by FADD: the tensor core truncates each mma's sum (toward
       * zero, at an ulp of its largest term), so acc kept in the mma lost
       * up to 3 ulps of the running sum every 8 steps, all one way, which
       * on the H100 put y and dx outside the f32 parity bound at
       * reductions of 200 and more (docs/cuda.md). Here the truncation is
       * against 8 products, and acc's adds round to nearest. */
      GPA_UNROLL for (int mi = 0; mi < 2; mi++) {
        float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        gpa_mma1688_3xtf32(p, ab[mi], asm_[mi], bb, bs);
        GPA_UNROLL for (int v = 0; v < 4; v++) acc[mi][ni][v] += p[v];
      }
    }
  }
}

/* The stage loop: load(it) fills the registers with stage it, store(it)
 * moves them (and the stage's table) to shared memory, bval reads B. */
template <int WN, bool KM, class LD, class ST, class BV>
static __device__ __forceinline__ void c3_run(float (&acc)[2][c3_cfg<WN>::kNI][4], const float *as, int nit, LD load,
                                              ST store, BV bval) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  GPA_UNROLL for (int i = 0; i < 2; i++) GPA_UNROLL for (int j = 0; j < c3_cfg<WN>::kNI; j++) GPA_UNROLL for (int v = 0;
                                                                                                       v < 4; v++)
          acc[i][j][v] = 0.0f;
  load(0);
  store(0);
  __syncthreads();
  for (int it = 0; it < nit; it++) {
    if (it + 1 < nit) load(it + 1); /* in flight during this stage's mma */
    c3_stage<WN, KM>(acc, as, w / WN, lane >> 2, lane & 3, bval);
    if (it + 1 < nit) {
      __syncthreads(); /* every warp is done with stage it */
      store(it + 1);
      __syncthreads();
    }
  }
}

/* Rows (m) and columns (n, 2 a lane per mma tile) of a thread's outputs,
 * relative to the block tile: f(m, n, value). */
template <int WN, class F>
static __device__ __forceinline__ void c3_out(const float (&acc)[2][c3_cfg<WN>::kNI][4], F f) {
  typedef c3_cfg<WN> C;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, wm = w / WN, wn = w % WN, g = lane >> 2, t = lane & 3;
  GPA_UNROLL for (int mi = 0; mi < 2; mi++) GPA_UNROLL for (int h = 0; h < 2; h++) GPA_UNROLL for (int ni = 0;
                                                                                                    ni < C::kNI; ni++)
          GPA_UNROLL for (int e = 0; e < 2; e++) f(wm * 32 + mi * 16 + g + 8 * h, wn * C::kWNW + ni * 8 + 2 * t + e,
                                                   acc[mi][ni][2 * h + e]);
}

/* The window's registers: element e = tid + i NT of [rows][span] is row
 * e / span, position e % span, stepped without a division per element;
 * v(row, pos) is its value (0 past `count`). */
template <int WN, class V>
static __device__ __forceinline__ void c3_window(float (&rx)[c3_cfg<WN>::kSLOTS], int span, int count, V v) {
  typedef c3_cfg<WN> C;
  int c = threadIdx.x / span, u = threadIdx.x - c * span;
  GPA_UNROLL for (int i = 0; i < C::kSLOTS; i++) {
    rx[i] = i * C::kNT + (int)threadIdx.x < count ? v(c, u) : 0.0f;
    u += C::kNT;
    while (u >= span) {
      u -= span;
      c++;
    }
  }
}

/* A [m][k] tile and the window into shared memory */
template <int WN, bool KM>
static __device__ __forceinline__ void c3_put(float *as, float *xs, const float (&ra)[c3_cfg<WN>::kSLOTS],
                                              const float (&rx)[c3_cfg<WN>::kSLOTS]) {
  typedef c3_cfg<WN> C;
  const int tid = threadIdx.x;
  GPA_UNROLL for (int i = 0; i < C::kSLOTS; i++) {
    const int e = tid + i * C::kNT;
    if (KM)
      as[(e >> 6) * C3_LDM + (e & 63)] = ra[i];
    else
      as[(e >> 5) * C3_LDA + (e & 31)] = ra[i];
    xs[e] = rx[i];
  }
}

/* a table entry: window offset, position shift (dx) */
struct c3_pair {
  int x, y;
};
struct c3_smem {
  float *as, *xs;
  c3_pair *tab;
};
static __device__ __forceinline__ c3_smem c3_layout(float *sm) {
  return {sm, sm + GPA_CONV_TC32_AFLOATS, reinterpret_cast<c3_pair *>(sm + GPA_CONV_TC32_AFLOATS + GPA_CONV_TC32_XMAX)};
}

/* y: rows co, columns t of one batch and group; reduction r over cin_g K */
template <int WN>
static __device__ void c3_fwd(float *sm, float *y, const float *x, const float *w, const float *bias,
                              const gpa_conv_tc32_geo &g) {
  typedef c3_cfg<WN> C;
  const int tile = blockIdx.x % g.nt, b = blockIdx.x / g.nt;
  const int grp = blockIdx.y / g.mt, m0 = (blockIdx.y % g.mt) * C3_BM, n0 = tile * C3_BN;
  const int tid = threadIdx.x, lane = tid & 31, wn = (tid >> 5) % WN, gl = lane >> 2;
  const c3_smem S = c3_layout(sm);
  const float *wg = w + (long long)grp * g.s.cout_g * g.red;
  const float *xb = x + ((long long)b * g.s.Cin + (long long)grp * g.s.cin_g) * g.s.L;
  const int pos0 = n0 * g.s.stride - g.s.pad_l, nit = (g.red + C3_BK - 1) / C3_BK;
  float ra[C::kSLOTS], rx[C::kSLOTS];
  auto load = [&](int it) {
    const int r0 = it * C3_BK, cb = r0 / g.s.K, last = min(r0 + C3_BK, g.red) - 1;
    { /* slot i: row (tid / 32) + i NT / 32, column tid % 32; one pointer
       * stepped by rows (indexing each slot from scratch took ptxas 227-230
       * registers for the 4-warp kernel, 168 this way: 3 blocks an SM) */
      const int k = tid & 31, mb = m0 + (tid >> 5);
      const bool kok = r0 + k < g.red;
      const float *ap = wg + (long long)mb * g.red + r0 + k;
      const long long step = (long long)(C::kNT / 32) * g.red;
      GPA_UNROLL for (int i = 0; i < C::kSLOTS; i++)
        ra[i] = kok && mb + i * (C::kNT / 32) < g.s.cout_g ? ap[i * step] : 0.0f;
    }
    c3_window<WN>(rx, g.span, (last / g.s.K - cb + 1) * g.span, [&](int c, int u) {
      const int pos = pos0 + u;
      return pos >= 0 && pos < g.s.L ? xb[(long long)(cb + c) * g.s.L + pos] : 0.0f;
    });
  };
  auto store = [&](int it) {
    c3_put<WN, false>(S.as, S.xs, ra, rx);
    if (tid < C3_BK) {
      const int r = it * C3_BK + tid, cb = it * C3_BK / g.s.K, c = r / g.s.K;
      S.tab[tid] = {r < g.red ? (c - cb) * g.span + (r - c * g.s.K) * g.s.dil : 0, 0};
    }
  };
  const int s = g.s.stride, nl = wn * C::kWNW + gl;
  auto bval = [&](int k, int ni) { return S.xs[S.tab[k].x + (nl + ni * 8) * s]; };
  float acc[2][C::kNI][4];
  c3_run<WN, false>(acc, S.as, nit, load, store, bval);
  c3_out<WN>(acc, [&](int m, int n, float v) {
    const int co = m0 + m, t = n0 + n;
    if (co < g.s.cout_g && t < g.s.Lout) {
      const int ch = grp * g.s.cout_g + co;
      y[((long long)b * g.s.Cout + ch) * g.s.Lout + t] = v + (bias ? bias[ch] : 0.0f);
    }
  });
}

/* dx: rows ci, columns p of one batch and group; reduction r over cout_g K
 * (o = r / K, tap r % K). S1: stride 1 (every tap reaches every p). */
template <int WN, bool S1>
static __device__ void c3_dx(float *sm, float *dx, const float *dy, const float *w, const gpa_conv_tc32_geo &g) {
  typedef c3_cfg<WN> C;
  const int tile = blockIdx.x % g.nt, b = blockIdx.x / g.nt;
  const int grp = blockIdx.y / g.mt, m0 = (blockIdx.y % g.mt) * C3_BM, n0 = tile * C3_BN;
  const int tid = threadIdx.x, lane = tid & 31, wn = (tid >> 5) % WN, gl = lane >> 2;
  const int s = S1 ? 1 : g.s.stride;
  const c3_smem S = c3_layout(sm);
  const float *wg = w + (long long)grp * g.s.cout_g * g.s.cin_g * g.s.K;
  const float *dyb = dy + ((long long)b * g.s.Cout + (long long)grp * g.s.cout_g) * g.s.Lout;
  /* the first t any column of the tile reaches (its last tap) */
  const int tmin = c3_floordiv(n0 + g.s.pad_l - (g.s.K - 1) * g.s.dil, s), nit = (g.red + C3_BK - 1) / C3_BK;
  float ra[C::kSLOTS], rx[C::kSLOTS];
  auto load = [&](int it) {
    const int r0 = it * C3_BK, ob = r0 / g.s.K, last = min(r0 + C3_BK, g.red) - 1;
    /* slot i: row m = tid % 64, reduction step (tid / 64) + WN i: o and the tap stepped */
    const int m = tid & 63, ci = m0 + m;
    int r = r0 + (tid >> 6), o = r / g.s.K, k = r - o * g.s.K;
    GPA_UNROLL for (int i = 0; i < C::kSLOTS; i++) {
      ra[i] = ci < g.s.cin_g && r < g.red ? wg[((long long)o * g.s.cin_g + ci) * g.s.K + k] : 0.0f;
      r += WN;
      k += WN;
      while (k >= g.s.K) {
        k -= g.s.K;
        o++;
      }
    }
    c3_window<WN>(rx, g.span, (last / g.s.K - ob + 1) * g.span, [&](int c, int u) {
      const int tt = tmin + u;
      return tt >= 0 && tt < g.s.Lout ? dyb[(long long)(ob + c) * g.s.Lout + tt] : 0.0f;
    });
  };
  auto store = [&](int it) {
    c3_put<WN, true>(S.as, S.xs, ra, rx);
    if (tid < C3_BK) {
      const int r = it * C3_BK + tid, ob = it * C3_BK / g.s.K, o = r / g.s.K;
      /* position q of column n: n + .y, a window index (q / s) where s divides q */
      S.tab[tid] = r < g.red ? c3_pair{(o - ob) * g.span, n0 + g.s.pad_l - (r - o * g.s.K) * g.s.dil - tmin * s}
                             : c3_pair{0, 0};
    }
  };
  const int nl = wn * C::kWNW + gl;
  auto bval = [&](int k, int ni) {
    const c3_pair e = S.tab[k];
    const int q = nl + ni * 8 + e.y;
    if (S1) return S.xs[e.x + q];
    return q % s == 0 ? S.xs[e.x + q / s] : 0.0f;
  };
  float acc[2][C::kNI][4];
  c3_run<WN, true>(acc, S.as, nit, load, store, bval);
  c3_out<WN>(acc, [&](int m, int n, float v) {
    const int ci = m0 + m, p = n0 + n;
    if (ci < g.s.cin_g && p < g.s.L) dx[((long long)b * g.s.Cin + (long long)grp * g.s.cin_g + ci) * g.s.L + p] = v;
  });
}

/* dW: rows co, columns r = ci K + k (a tile of 64); reduction over this
 * split's slices of BK timesteps of one batch. out = dW when one split,
 * else part + split Cout cin_g K. */
static __device__ void c3_dw(float *sm, float *out, const float *dy, const float *x, const gpa_conv_tc32_geo &g) {
  constexpr int WN = 2;
  typedef c3_cfg<WN> C;
  const int R = g.red, r0 = blockIdx.x * C3_BN, z = blockIdx.z;
  const int grp = blockIdx.y / g.mt, m0 = (blockIdx.y % g.mt) * C3_BM;
  const int tid = threadIdx.x, lane = tid & 31, wn = (tid >> 5) % WN, gl = lane >> 2;
  const c3_smem S = c3_layout(sm);
  const int cbase = r0 / g.s.K, tps = (g.s.Lout + C3_BK - 1) / C3_BK;
  const int s_beg = z * g.per, nit = min(g.nslice, s_beg + g.per) - s_beg;
  const int s = g.s.stride;
  float ra[C::kSLOTS], rx[C::kSLOTS];
  auto load = [&](int it) {
    const int sl = s_beg + it, b = sl / tps, t0 = (sl % tps) * C3_BK, pos0 = t0 * s - g.s.pad_l;
    const float *dyb = dy + ((long long)b * g.s.Cout + (long long)grp * g.s.cout_g) * g.s.Lout;
    const float *xb = x + ((long long)b * g.s.Cin + (long long)grp * g.s.cin_g) * g.s.L;
    GPA_UNROLL for (int i = 0; i < C::kSLOTS; i++) {
      const int e = tid + i * C::kNT, m = e >> 5, tt = t0 + (e & 31);
      ra[i] = m0 + m < g.s.cout_g && tt < g.s.Lout ? dyb[(long long)(m0 + m) * g.s.Lout + tt] : 0.0f;
    }
    c3_window<WN>(rx, g.span, g.nch * g.span, [&](int c, int u) {
      const int pos = pos0 + u;
      return cbase + c < g.s.cin_g && pos >= 0 && pos < g.s.L ? xb[(long long)(cbase + c) * g.s.L + pos] : 0.0f;
    });
  };
  auto store = [&](int) { c3_put<WN, false>(S.as, S.xs, ra, rx); };
  /* this lane's 4 columns: window offsets (0 past R, whose dW is not written) */
  int off[C::kNI];
  GPA_UNROLL for (int ni = 0; ni < C::kNI; ni++) {
    const int r = r0 + wn * C::kWNW + ni * 8 + gl, c = r / g.s.K;
    off[ni] = r < R ? (c - cbase) * g.span + (r - c * g.s.K) * g.s.dil : 0;
  }
  auto bval = [&](int k, int ni) { return S.xs[off[ni] + k * s]; };
  float acc[2][C::kNI][4];
  c3_run<WN, false>(acc, S.as, nit, load, store, bval);
  float *o = g.per < g.nslice ? out + (long long)z * g.s.Cout * R : out;
  c3_out<WN>(acc, [&](int m, int n, float v) {
    const int co = m0 + m, r = r0 + n;
    if (co < g.s.cout_g && r < R) o[((long long)grp * g.s.cout_g + co) * R + r] = v;
  });
}

#define C3_FWD_ARGS float *y, const float *x, const float *w, const float *bias, gpa_conv_tc32_geo g
#define C3_DX_ARGS float *dx, const float *dy, const float *w, gpa_conv_tc32_geo g
extern "C" __global__ void __launch_bounds__(128) gpa_conv_tc32_fwd_f32(C3_FWD_ARGS) {
  GPA_DYNAMIC_SHARED(float, sm);
  c3_fwd<2>(sm, y, x, w, bias, g);
}
/* (256, 2): two blocks an SM; unbounded, ptxas took the forward to 139
 * registers on sm_80 with c3_stage's fresh accumulator (one block an SM) */
extern "C" __global__ void __launch_bounds__(256, 2) gpa_conv_tc32_fwd8_f32(C3_FWD_ARGS) {
  GPA_DYNAMIC_SHARED(float, sm);
  c3_fwd<4>(sm, y, x, w, bias, g);
}
extern "C" __global__ void __launch_bounds__(128) gpa_conv_tc32_dx_f32(C3_DX_ARGS) {
  GPA_DYNAMIC_SHARED(float, sm);
  if (g.s.stride == 1)
    c3_dx<2, true>(sm, dx, dy, w, g);
  else
    c3_dx<2, false>(sm, dx, dy, w, g);
}
extern "C" __global__ void __launch_bounds__(256, 2) gpa_conv_tc32_dx8_f32(C3_DX_ARGS) {
  GPA_DYNAMIC_SHARED(float, sm);
  if (g.s.stride == 1)
    c3_dx<4, true>(sm, dx, dy, w, g);
  else
    c3_dx<4, false>(sm, dx, dy, w, g);
}
extern "C" __global__ void __launch_bounds__(128) gpa_conv_tc32_dw_f32(float *out, const float *dy, const float *x,
                                                                      gpa_conv_tc32_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  c3_dw(sm, out, dy, x, g);
}

/* dW[i] = sum over splits s in order of part[s n + i]: the same additions
 * in the same order as gpa_conv_dw_sum_f32 (the same bits), with 8
 * partials' loads issued before their adds and 128-thread blocks (twice
 * the blocks): the one-load-at-a-time loop over 26 splits at the main
 * job's 27,648 weights ran on 108 blocks and waited on each load. */
extern "C" __global__ void __launch_bounds__(128) gpa_conv_tc32_dw_sum_f32(float *dw, const float *part, int ns, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  int s = 0;
  for (; s + 8 <= ns; s += 8) {
    float v[8];
    GPA_UNROLL for (int j = 0; j < 8; j++) v[j] = part[(long long)(s + j) * n + i];
    GPA_UNROLL for (int j = 0; j < 8; j++) acc += v[j];
  }
  for (; s < ns; s++) acc += part[(long long)s * n + i];
  dw[i] = acc;
}
