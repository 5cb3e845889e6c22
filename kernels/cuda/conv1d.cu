/* conv1d as implicit GEMMs (ops/conv1d/cuda_igemm.c): the forward, dx and
 * dW products read x and dy where they lie, with the causal or symmetric
 * left padding, dilation, stride and groups folded into the indices, so
 * no column matrix (im2col) or col2im pass exists. f32 and bf16 storage
 * (bf16 widened to fp32 in shared memory; fp32 FMA sums, each bf16 output
 * rounded once; dW f32).
 *
 * Block tile GPA_CONV_TM x GPA_CONV_TN (kernels/cuda/conv1d_geo.h), 256
 * threads, 4 x 4 outputs each: rows ty*4 .. ty*4+3 read as one float4 of
 * shared memory (a broadcast within the half warp), columns tx + 16 j so
 * that a warp's column reads are consecutive (no bank conflicts at
 * stride 1).
 *   y:  rows co, columns t of one batch; per stage bc input channels: the
 *       W slice [bc K][TM] and x [bc][span] over the tile's positions,
 *       zeros outside [0, L) (the padding).
 *   dx: rows ci, columns p of one batch; per stage bc output channels: W^T
 *       [bc K][TM] and dy [bc][span] over the t that reach the tile; at
 *       stride s only t*s == p + pad_l - k*dil contributes.
 *   dW: rows co, columns r = ci K + k; the B Lout sum in slices of bt
 *       timesteps of one batch, a fixed run of `per` slices per split
 *       (blockIdx.z). One split writes dW; several write partials that
 *       gpa_conv_dw_sum_f32 adds in split order. No atomics anywhere: every
 *       sum has one order for a given shape (deterministic).
 *
 * Channels last (g.s.nlc: x, dx [B][L][Cin], y, dy [B][Lout][Cout]): the
 * same tiles, shared layouts and sums (the same bits as ncl); only the
 * global indexing changes. The stagings of x and dy walk channels fastest
 * there (a warp's loads run along a position's channels), and a thread's 4
 * output rows (4 consecutive channels) go out as one 16-byte (f32) or
 * 8-byte (bf16) store where the channels are aligned. */
#include "conv1d_geo.h"
#include "gpa_bf16.h"

#define TM GPA_CONV_TM
#define TN GPA_CONV_TN
#define NT GPA_CONV_NT

/* Offset of channel c, position p in one batch's activation of C channels
 * and len positions (from its group's first channel). */
static __device__ __forceinline__ long long cv_ix(bool nlc, int C, int len, int c, int p) {
  return nlc ? (long long)p * C + c : (long long)c * len + p;
}
/* The first element of batch b, channel c0 of such an activation. */
static __device__ __forceinline__ long long cv_base(bool nlc, int C, int len, int b, int c0) {
  return nlc ? (long long)b * len * C + c0 : ((long long)b * C + c0) * len;
}

/* r[0..3] at p[i], p[i + 1], ...: one 16-byte (f32) or 8-byte (bf16) store
 * when i is a multiple of 4 (the caller knows the base is aligned) */
static __device__ __forceinline__ void cv_st4(float *p, long long i, const float r[4]) {
  float4 v;
  v.x = r[0], v.y = r[1], v.z = r[2], v.w = r[3];
  *reinterpret_cast<float4 *>(p + i) = v;
}
static __device__ __forceinline__ void cv_st4(gpa_bf16 *p, long long i, const float r[4]) {
  uint2 u;
  u.x = gpa_bf2_pack(r[0], r[1]); /* the host's rounding (gpa_bf16.h) */
  u.y = gpa_bf2_pack(r[2], r[3]);
  *reinterpret_cast<uint2 *>(p + i) = u;
}

/* Channels last: the thread's 4 rows ch0 .. ch0 + 3 (ch0 its first row's
 * channel, the first `valid` of them inside the group) of column p, at
 * out + p C + ch0: one vector store when all 4 are valid, C and ch0 are
 * multiples of 4 and the tensor's base is aligned for it (vec), else one
 * by one. */
template <typename T>
static __device__ __forceinline__ void cv_st_col(T *out, int C, int p, int ch0, int valid, bool vec, const float r[4],
                                                 const float *add) {
  float v[4];
  GPA_UNROLL for (int i = 0; i < 4; i++) v[i] = r[i] + (add && i < valid ? add[i] : 0.0f);
  const long long o = (long long)p * C + ch0;
  if (vec && valid == 4 && (C & 3) == 0 && (ch0 & 3) == 0)
    cv_st4(out, o, v);
  else
    GPA_UNROLL for (int i = 0; i < 4; i++) if (i < valid) gpa_stf(out, o + i, v[i]); /* constant indices: registers */
}

/* floor(a / s), s > 0 */
static __device__ __forceinline__ int cv_floordiv(int a, int s) { return a >= 0 ? a / s : -((s - 1 - a) / s); }

/* acc[i][j] += a[i] v[j]: the 4 x 4 outer product of one reduction step */
#define CV_FMA4x4(acc, a, v)                                                       \
  GPA_UNROLL for (int i_ = 0; i_ < 4; i_++) {                                      \
    const float wi_ = i_ == 0 ? (a).x : i_ == 1 ? (a).y : i_ == 2 ? (a).z : (a).w; \
    GPA_UNROLL for (int j_ = 0; j_ < 4; j_++) acc[i_][j_] += wi_ * (v)[j_]; \
  }

/* y[b, grp cout_g + co, t] = bias + sum over c, k of W[co, c, k] x[b, grp cin_g + c, t s - pad_l + k dil] */
template <typename T>
static __device__ void cv_fwd(float *sm, T *y, const T *x, const T *w, const T *bias, const gpa_conv_geo &g) {
  const int tile = blockIdx.x % g.nt, b = blockIdx.x / g.nt;
  const int grp = blockIdx.y / g.mt, co0 = (blockIdx.y % g.mt) * TM, t0 = tile * TN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int wrows = g.bc * g.s.K;
  float *ws = sm, *xs = sm + wrows * TM;
  const bool nlc = g.s.nlc;
  const T *xb = x + cv_base(nlc, g.s.Cin, g.s.L, b, grp * g.s.cin_g);
  const T *wg = w + (long long)grp * g.s.cout_g * g.s.cin_g * g.s.K;
  const int pos0 = t0 * g.s.stride - g.s.pad_l;
  float acc[4][4];
  GPA_UNROLL for (int i = 0; i < 4; i++) GPA_UNROLL for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (int c0 = 0; c0 < g.s.cin_g; c0 += g.bc) {
    __syncthreads(); /* the previous stage's reads are done */
    for (int i = threadIdx.x; i < wrows * TM; i += NT) {
      const int m = i % TM, rr = i / TM, co = co0 + m;
      ws[i] = co < g.s.cout_g && c0 + rr / g.s.K < g.s.cin_g
                  ? gpa_ldf(wg, ((long long)co * g.s.cin_g + c0) * g.s.K + rr)
                  : 0.0f;
    }
    for (int i = threadIdx.x; i < g.bc * g.span; i += NT) {
      const int u = nlc ? i / g.bc : i % g.span, cc = nlc ? i % g.bc : i / g.span, c = c0 + cc, pos = pos0 + u;
      xs[cc * g.span + u] =
          c < g.s.cin_g && pos >= 0 && pos < g.s.L ? gpa_ldf(xb, cv_ix(nlc, g.s.Cin, g.s.L, c, pos)) : 0.0f;
    }
    __syncthreads();
    const int nc = min(g.bc, g.s.cin_g - c0);
    for (int c = 0; c < nc; c++)
      for (int k = 0; k < g.s.K; k++) {
        const float4 wv = *reinterpret_cast<const float4 *>(ws + (c * g.s.K + k) * TM + ty * 4);
        const float *xr = xs + c * g.span + k * g.s.dil + tx * g.s.stride;
        float v[4];
        GPA_UNROLL for (int j = 0; j < 4; j++) v[j] = xr[j * 16 * g.s.stride];
        CV_FMA4x4(acc, wv, v);
      }
  }
  if (nlc) {
    const int cf = co0 + ty * 4, valid = max(0, min(4, g.s.cout_g - cf)), ch0 = grp * g.s.cout_g + cf;
    float bv[4];
    GPA_UNROLL for (int i = 0; i < 4; i++) bv[i] = bias && i < valid ? gpa_ldf(bias, ch0 + i) : 0.0f;
    T *yb = y + (long long)b * g.s.Lout * g.s.Cout;
    GPA_UNROLL for (int j = 0; j < 4; j++) {
      const int t = t0 + tx + 16 * j;
      const float r[4] = {acc[0][j], acc[1][j], acc[2][j], acc[3][j]};
      if (t < g.s.Lout && valid > 0) cv_st_col(yb, g.s.Cout, t, ch0, valid, g.vec != 0, r, bv);
    }
    return;
  }
  GPA_UNROLL for (int i = 0; i < 4; i++) {
    const int co = co0 + ty * 4 + i;
    if (co >= g.s.cout_g) continue;
    const int cg = grp * g.s.cout_g + co;
    const float bv = bias ? gpa_ldf(bias, cg) : 0.0f;
    T *yr = y + ((long long)b * g.s.Cout + cg) * g.s.Lout;
    GPA_UNROLL for (int j = 0; j < 4; j++) {
      const int t = t0 + tx + 16 * j;
      if (t < g.s.Lout) gpa_stf(yr, t, acc[i][j] + bv);
    }
  }
}

/* dx[b, grp cin_g + ci, p] = sum over o, k with t s == p + pad_l - k dil, 0 <= t < Lout of
 * W[grp cout_g + o, ci, k] dy[b, grp cout_g + o, t]. S1: stride 1 (every k contributes). */
template <typename T, bool S1>
static __device__ void cv_dx(float *sm, T *dx, const T *dy, const T *w, const gpa_conv_geo &g) {
  const int tile = blockIdx.x % g.nt, b = blockIdx.x / g.nt;
  const int grp = blockIdx.y / g.mt, ci0 = (blockIdx.y % g.mt) * TM, p0 = tile * TN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int s = S1 ? 1 : g.s.stride, wrows = g.bc * g.s.K;
  float *ws = sm, *ds = sm + wrows * TM;
  const bool nlc = g.s.nlc;
  const T *dyb = dy + cv_base(nlc, g.s.Cout, g.s.Lout, b, grp * g.s.cout_g);
  const T *wg = w + (long long)grp * g.s.cout_g * g.s.cin_g * g.s.K;
  /* the first t any column of the tile reaches (its k = K - 1 term) */
  const int tmin = cv_floordiv(p0 + g.s.pad_l - (g.s.K - 1) * g.s.dil, s);
  float acc[4][4];
  GPA_UNROLL for (int i = 0; i < 4; i++) GPA_UNROLL for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (int o0 = 0; o0 < g.s.cout_g; o0 += g.bc) {
    __syncthreads();
    for (int i = threadIdx.x; i < wrows * TM; i += NT) {
      const int m = i % TM, rr = i / TM, ci = ci0 + m, o = o0 + rr / g.s.K;
      ws[i] =
          ci < g.s.cin_g && o < g.s.cout_g ? gpa_ldf(wg, ((long long)o * g.s.cin_g + ci) * g.s.K + rr % g.s.K) : 0.0f;
    }
    for (int i = threadIdx.x; i < g.bc * g.span; i += NT) {
      const int u = nlc ? i / g.bc : i % g.span, oc = nlc ? i % g.bc : i / g.span, o = o0 + oc, t = tmin + u;
      ds[oc * g.span + u] =
          o < g.s.cout_g && t >= 0 && t < g.s.Lout ? gpa_ldf(dyb, cv_ix(nlc, g.s.Cout, g.s.Lout, o, t)) : 0.0f;
    }
    __syncthreads();
    const int nc = min(g.bc, g.s.cout_g - o0);
    for (int c = 0; c < nc; c++)
      for (int k = 0; k < g.s.K; k++) {
        const float4 wv = *reinterpret_cast<const float4 *>(ws + (c * g.s.K + k) * TM + ty * 4);
        const float *dr = ds + c * g.span;
        float v[4];
        GPA_UNROLL for (int j = 0; j < 4; j++) {
          /* q = (p + pad_l - k dil) - tmin s >= 0: a multiple of s where a t exists */
          const int q = p0 + tx + 16 * j + g.s.pad_l - k * g.s.dil - tmin * s;
          if (S1)
            v[j] = dr[q];
          else
            v[j] = q % s == 0 ? dr[q / s] : 0.0f;
        }
        CV_FMA4x4(acc, wv, v);
      }
  }
  if (nlc) {
    const int cf = ci0 + ty * 4, valid = max(0, min(4, g.s.cin_g - cf));
    T *xb = dx + (long long)b * g.s.L * g.s.Cin;
    GPA_UNROLL for (int j = 0; j < 4; j++) {
      const int p = p0 + tx + 16 * j;
      const float r[4] = {acc[0][j], acc[1][j], acc[2][j], acc[3][j]};
      if (p < g.s.L && valid > 0)
        cv_st_col(xb, g.s.Cin, p, grp * g.s.cin_g + cf, valid, g.vec != 0, r, (const float *)nullptr);
    }
    return;
  }
  GPA_UNROLL for (int i = 0; i < 4; i++) {
    const int ci = ci0 + ty * 4 + i;
    if (ci >= g.s.cin_g) continue;
    T *xr = dx + ((long long)b * g.s.Cin + (long long)grp * g.s.cin_g + ci) * g.s.L;
    GPA_UNROLL for (int j = 0; j < 4; j++) {
      const int p = p0 + tx + 16 * j;
      if (p < g.s.L) gpa_stf(xr, p, acc[i][j]);
    }
  }
}

/* out[grp cout_g + co][r] = sum over this split's slices (b, t) of
 * dy[b, grp cout_g + co, t] x[b, grp cin_g + r / K, t s - pad_l + (r % K) dil];
 * out = dW when one split, else part + split Cout cin_g K. */
template <typename T>
static __device__ void cv_dw(float *sm, float *out, const T *dy, const T *x, const gpa_conv_geo &g) {
  const int R = g.s.cin_g * g.s.K, r0 = blockIdx.x * TN, z = blockIdx.z;
  const int grp = blockIdx.y / g.mt, co0 = (blockIdx.y % g.mt) * TM;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int cbase = r0 / g.s.K, tpb = (g.s.Lout + g.bt - 1) / g.bt;
  float *ds = sm, *xs = sm + g.bt * TM;
  int off[4];
  GPA_UNROLL for (int j = 0; j < 4; j++) {
    const int r = r0 + tx + 16 * j;
    off[j] = r < R ? (r / g.s.K - cbase) * g.span + (r % g.s.K) * g.s.dil : 0;
  }
  float acc[4][4];
  GPA_UNROLL for (int i = 0; i < 4; i++) GPA_UNROLL for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  const int s_end = min(g.nslice, (z + 1) * g.per);
  for (int sl = z * g.per; sl < s_end; sl++) {
    const int b = sl / tpb, t0 = (sl % tpb) * g.bt, nt = min(g.bt, g.s.Lout - t0);
    const bool nlc = g.s.nlc;
    const T *dyb = dy + cv_base(nlc, g.s.Cout, g.s.Lout, b, grp * g.s.cout_g);
    const T *xb = x + cv_base(nlc, g.s.Cin, g.s.L, b, grp * g.s.cin_g);
    const int pos0 = t0 * g.s.stride - g.s.pad_l;
    __syncthreads();
    for (int i = threadIdx.x; i < g.bt * TM; i += NT) { /* co fastest: along a position's channels under nlc */
      const int m = i % TM, t = i / TM, co = co0 + m;
      ds[i] = co < g.s.cout_g && t < nt ? gpa_ldf(dyb, cv_ix(nlc, g.s.Cout, g.s.Lout, co, t0 + t)) : 0.0f;
    }
    for (int i = threadIdx.x; i < g.nch * g.span; i += NT) {
      const int u = nlc ? i / g.nch : i % g.span, cc = nlc ? i % g.nch : i / g.span, c = cbase + cc, pos = pos0 + u;
      xs[cc * g.span + u] =
          c < g.s.cin_g && pos >= 0 && pos < g.s.L ? gpa_ldf(xb, cv_ix(nlc, g.s.Cin, g.s.L, c, pos)) : 0.0f;
    }
    __syncthreads();
    for (int t = 0; t < nt; t++) {
      const float4 dv = *reinterpret_cast<const float4 *>(ds + t * TM + ty * 4);
      const float *xr = xs + t * g.s.stride;
      float v[4];
      GPA_UNROLL for (int j = 0; j < 4; j++) v[j] = xr[off[j]];
      CV_FMA4x4(acc, dv, v);
    }
  }
  float *o = g.per < g.nslice ? out + (long long)z * g.s.Cout * R : out;
  GPA_UNROLL for (int i = 0; i < 4; i++) {
    const int co = co0 + ty * 4 + i;
    if (co >= g.s.cout_g) continue;
    float *orow = o + ((long long)grp * g.s.cout_g + co) * R;
    GPA_UNROLL for (int j = 0; j < 4; j++) {
      const int r = r0 + tx + 16 * j;
      if (r < R) orow[r] = acc[i][j];
    }
  }
}

extern "C" __global__ void __launch_bounds__(NT, 2) gpa_conv_ig_fwd_f32(float *y, const float *x, const float *w,
                                                                   const float *bias, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  cv_fwd(sm, y, x, w, bias, g);
}
extern "C" __global__ void __launch_bounds__(NT, 2) gpa_conv_ig_fwd_bf16(gpa_bf16 *y, const gpa_bf16 *x,
                                                                    const gpa_bf16 *w, const gpa_bf16 *bias,
                                                                    gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  cv_fwd(sm, y, x, w, bias, g);
}
extern "C" __global__ void __launch_bounds__(NT, 2) gpa_conv_ig_dx_f32(float *dx, const float *dy, const float *w,
                                                                  gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  if (g.s.stride == 1)
    cv_dx<float, true>(sm, dx, dy, w, g);
  else
    cv_dx<float, false>(sm, dx, dy, w, g);
}
extern "C" __global__ void __launch_bounds__(NT, 2) gpa_conv_ig_dx_bf16(gpa_bf16 *dx, const gpa_bf16 *dy,
                                                                   const gpa_bf16 *w, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  if (g.s.stride == 1)
    cv_dx<gpa_bf16, true>(sm, dx, dy, w, g);
  else
    cv_dx<gpa_bf16, false>(sm, dx, dy, w, g);
}
extern "C" __global__ void __launch_bounds__(NT, 2) gpa_conv_ig_dw_f32(float *out, const float *dy, const float *x,
                                                                  gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  cv_dw(sm, out, dy, x, g);
}
extern "C" __global__ void __launch_bounds__(NT, 2) gpa_conv_ig_dw_bf16(float *out, const gpa_bf16 *dy,
                                                                   const gpa_bf16 *x, gpa_conv_geo g) {
  GPA_DYNAMIC_SHARED(float, sm);
  cv_dw(sm, out, dy, x, g);
}
