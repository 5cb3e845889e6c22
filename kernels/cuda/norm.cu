/* LayerNorm forward and backward of the CUDA backend (fp32 storage, and
 * bf16 storage of x/y/dy/dx at the end of the file). The sim engineer's layernorm.cu is a
 * separate, simpler forward used by the simulator's own benchmark.
 *
 * Forward: a group of G lanes per row (gpa_rows.h: a warp per row for long
 * rows, several rows per warp for short ones); float4 loads when the row and
 * the pointers allow. One pass of statistics: sums of d = x - x0 and d^2 in
 * double, x0 the row's first element (a shift inside the data, so a large
 * row mean costs no accuracy; the host's corrected two-pass form gives the
 * same values to fp32 rounding); y = ((x - m1) - c) * rstd * gamma + beta
 * with m1 the mean rounded to fp32 and c the rest.
 *
 * Backward: dx with a group of lanes per row (fp32 sums of dy*gamma and dy*gamma*xh,
 * as the host); dgamma/dbeta deterministic: per-block-of-rows partials
 * (fixed rows, fixed order), then one thread per column adds the partials in
 * block order in double. No atomics. Both take 16-byte accesses (float4, 8
 * bf16) where D and the pointers allow: one template per kernel for both
 * storage types, at the end of the file. The mixed forms (x f32 with y bf16
 * forward, dy bf16 backward: where an fp32 layernorm meets bf16 GEMMs in
 * mixed precision) are the fp32 kernels with a bf16 side: the fp32 bits,
 * rounded once where bf16 is written, so they replace a cast beside the op. */
#include "gpa_bf16.h"
#include "gpa_rows.h"
#include "launch_shapes.h"
#include "split_sum.h"

/* ---- loads and stores by storage type ------------------------------------
 * Scalar (gpa_ldf, gpa_stf) and vector (ln_ldv, ln_stv: V values by the
 * array's length) accesses of fp32 or bf16 rows, widened to fp32 / rounded
 * once. A vector of V values is 16 bytes for the kernels of one storage
 * type (4 floats, 8 bf16); the mixed kernels (x f32 with y or dy bf16:
 * the fp32 kernels' geometry, V = 4) move the bf16 side 8 bytes at a time,
 * so they sum in the fp32 kernels' order and give their bits (rounded once
 * where bf16 is written). */

static __device__ __forceinline__ void ln_load8f(const float *p, float *v) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
static __device__ __forceinline__ void ln_ldv(const float *p, float (&v)[4]) { gpa_ld16(p, v); }
static __device__ __forceinline__ void ln_ldv(const float *p, float (&v)[8]) { ln_load8f(p, v); }
static __device__ __forceinline__ void ln_ldv(const gpa_bf16 *p, float (&v)[8]) { gpa_bf8_load(p, v); }
static __device__ __forceinline__ void ln_ldv(const gpa_bf16 *p, float (&v)[4]) { /* p 8-byte aligned */
  const uint2 u = *reinterpret_cast<const uint2 *>(p);
  v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
  v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
}
static __device__ __forceinline__ void ln_stv(float *p, const float (&v)[4]) { gpa_st16(p, v); }
static __device__ __forceinline__ void ln_stv(gpa_bf16 *p, const float (&v)[8]) { gpa_bf8_store(p, v); }
static __device__ __forceinline__ void ln_stv(gpa_bf16 *p, const float (&v)[4]) {
  *reinterpret_cast<uint2 *>(p) = make_uint2(gpa_bf2_pack(v[0], v[1]), gpa_bf2_pack(v[2], v[3]));
}
/* V gamma values (fp32 for either storage), by the array's length */
static __device__ __forceinline__ void ln_ldg(const float *p, float (&v)[4]) { ln_ldv(p, v); }
static __device__ __forceinline__ void ln_ldg(const float *p, float (&v)[8]) { ln_ldv(p, v); }

/* vec4: D % 4 == 0 and x, gamma, beta 16-byte aligned, y 16-byte (f32)
 * or 8-byte (bf16: the mixed form) aligned (checked by the host). */
template <typename TY>
static __device__ void ln_fwd4(const float *__restrict__ x, const float *__restrict__ gamma,
                               const float *__restrict__ beta, TY *__restrict__ y, float *__restrict__ mean_out,
                               float *__restrict__ rstd_out, long long n, int d, float eps, int vec4, int g) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const int len = ok ? d : 0;
    const float *xr = x + (ok ? row : 0) * d;
    TY *yr = y + (ok ? row : 0) * d;
    /* sums of d = x - x0 and d^2 in double, x0 the row's first element (a
     * shift inside the data: no cancellation even for a large mean) */
    const float x0 = len ? xr[0] : 0.0f;
    double sd = 0.0, sq = 0.0;
    const double md = (double)x0;
    if (vec4) {
      for (int i = sub * 4; i < len; i += 4 * g) {
        const float4 v = *reinterpret_cast<const float4 *>(xr + i);
        const double a = (double)v.x - md, b = (double)v.y - md, c = (double)v.z - md, e = (double)v.w - md;
        sd += (a + b) + (c + e);
        sq += (a * a + b * b) + (c * c + e * e);
      }
    } else {
      for (int i = sub; i < len; i += g) {
        const double a = (double)xr[i] - md;
        sd += a;
        sq += a * a;
      }
    }
    sd = gpa_group_sum_d(sd, g);
    sq = gpa_group_sum_d(sq, g);
    const double cor = d ? sd / (double)d : 0.0; /* mean - x0 */
    double var = d ? (sq - (double)d * cor * cor) / (double)d : 0.0;
    if (var < 0.0) var = 0.0;
    const double rd = 1.0 / sqrt(var + (double)eps);
    /* the mean as m1 (float) + c (the tiny rest), as the host's form */
    const float m1 = (float)(md + cor), c = (float)((md + cor) - (double)m1), r = (float)rd;
    if (vec4) {
      for (int i = sub * 4; i < len; i += 4 * g) {
        const float4 v = *reinterpret_cast<const float4 *>(xr + i);
        const float4 gm = *reinterpret_cast<const float4 *>(gamma + i);
        const float4 b = *reinterpret_cast<const float4 *>(beta + i);
        float o[4];
        o[0] = ((v.x - m1) - c) * r * gm.x + b.x;
        o[1] = ((v.y - m1) - c) * r * gm.y + b.y;
        o[2] = ((v.z - m1) - c) * r * gm.z + b.z;
        o[3] = ((v.w - m1) - c) * r * gm.w + b.w;
        ln_stv(yr + i, o);
      }
    } else {
      for (int i = sub; i < len; i += g) gpa_stf(yr, i, ((xr[i] - m1) - c) * r * gamma[i] + beta[i]);
    }
    if (ok && sub == 0) {
      if (mean_out) mean_out[row] = m1;
      if (rstd_out) rstd_out[row] = r;
    }
  }
}

extern "C" __global__ void gpa_ln_fwd_f32(const float *__restrict__ x, const float *__restrict__ gamma,
                                          const float *__restrict__ beta, float *__restrict__ y,
                                          float *__restrict__ mean_out, float *__restrict__ rstd_out, long long n,
                                          int d, float eps, int vec4, int g) {
  ln_fwd4<float>(x, gamma, beta, y, mean_out, rstd_out, n, d, eps, vec4, g);
}
/* the mixed form: x f32, y bf16 (the fp32 kernel's values, each rounded once) */
extern "C" __global__ void gpa_ln_fwd_f32_bf16(const float *__restrict__ x, const float *__restrict__ gamma,
                                               const float *__restrict__ beta, gpa_bf16 *__restrict__ y,
                                               float *__restrict__ mean_out, float *__restrict__ rstd_out,
                                               long long n, int d, float eps, int vec4, int g) {
  ln_fwd4<gpa_bf16>(x, gamma, beta, y, mean_out, rstd_out, n, d, eps, vec4, g);
}

/* dgamma/dbeta from the partials: a block of 32 columns x GPA_LN_SLICES
 * slices; slice s adds partials s, s + GPA_LN_SLICES, ... in double (loads of
 * four partials issued before their adds: one memory latency per four
 * instead of per partial), then slice 0 adds the slices in order. The
 * order is fixed by nblk: deterministic. One thread per column adding
 * every partial in turn was latency bound when nblk is large. */
extern "C" __global__ void __launch_bounds__(32 * GPA_LN_SLICES)
    gpa_ln_bwd_cols_f32(const float *__restrict__ part, float *__restrict__ dgamma, float *__restrict__ dbeta, int d,
                        int nblk) {
  __shared__ double sg[GPA_LN_SLICES][32], sb[GPA_LN_SLICES][32];
  const int tx = threadIdx.x, ty = threadIdx.y, j = blockIdx.x * 32 + tx;
  double g = 0.0, b = 0.0;
  if (j < d) {
    int k = ty;
    for (; k + 3 * GPA_LN_SLICES < nblk; k += 4 * GPA_LN_SLICES) {
      float pg[4], pb[4];
GPA_UNROLL
      for (int u = 0; u < 4; u++) {
        const long long o = (long long)(k + u * GPA_LN_SLICES) * 2 * d + j;
        pg[u] = part[o];
        pb[u] = part[o + d];
      }
GPA_UNROLL
      for (int u = 0; u < 4; u++) g += (double)pg[u], b += (double)pb[u];
    }
    for (; k < nblk; k += GPA_LN_SLICES) {
      g += (double)part[(long long)k * 2 * d + j];
      b += (double)part[(long long)k * 2 * d + d + j];
    }
  }
  sg[ty][tx] = g;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && j < d) {
    for (int s2 = 1; s2 < GPA_LN_SLICES; s2++) g += sg[s2][tx], b += sb[s2][tx];
    dgamma[j] = (float)g;
    dbeta[j] = (float)b;
  }
}

/* ---- bf16 storage: x, y, dy, dx bf16; gamma, beta, mean, rstd and the
 * partials fp32. The same math as the fp32 kernels on the widened values,
 * each output rounded once. vec8: D % 8 == 0 and x, y, gamma, beta 16-byte
 * aligned (eight bf16 values per 16-byte load, gamma/beta as two float4). */

extern "C" __global__ void gpa_ln_fwd_bf16(const gpa_bf16 *__restrict__ x, const float *__restrict__ gamma,
                                           const float *__restrict__ beta, gpa_bf16 *__restrict__ y,
                                           float *__restrict__ mean_out, float *__restrict__ rstd_out, long long n,
                                           int d, float eps, int vec8, int g) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const int len = ok ? d : 0;
    const gpa_bf16 *xr = x + (ok ? row : 0) * d;
    gpa_bf16 *yr = y + (ok ? row : 0) * d;
    const double md = len ? (double)gpa_bf2f(xr[0]) : 0.0;
    double sd = 0.0, sq = 0.0;
    if (vec8) {
      for (int i = sub * 8; i < len; i += 8 * g) {
        float v[8];
        gpa_bf8_load(xr + i, v);
GPA_UNROLL
        for (int k = 0; k < 8; k++) {
          const double a = (double)v[k] - md;
          sd += a;
          sq += a * a;
        }
      }
    } else {
      for (int i = sub; i < len; i += g) {
        const double a = (double)gpa_bf2f(xr[i]) - md;
        sd += a;
        sq += a * a;
      }
    }
    sd = gpa_group_sum_d(sd, g);
    sq = gpa_group_sum_d(sq, g);
    const double cor = d ? sd / (double)d : 0.0;
    double var = d ? (sq - (double)d * cor * cor) / (double)d : 0.0;
    if (var < 0.0) var = 0.0;
    const double rd = 1.0 / sqrt(var + (double)eps);
    const float m1 = (float)(md + cor), c = (float)((md + cor) - (double)m1), r = (float)rd;
    if (vec8) {
      for (int i = sub * 8; i < len; i += 8 * g) {
        float v[8], gm[8], b[8];
        gpa_bf8_load(xr + i, v);
        ln_load8f(gamma + i, gm);
        ln_load8f(beta + i, b);
GPA_UNROLL
        for (int k = 0; k < 8; k++) v[k] = ((v[k] - m1) - c) * r * gm[k] + b[k];
        gpa_bf8_store(yr + i, v);
      }
    } else {
      for (int i = sub; i < len; i += g) yr[i] = gpa_f2bf(((gpa_bf2f(xr[i]) - m1) - c) * r * gamma[i] + beta[i]);
    }
    if (ok && sub == 0) {
      if (mean_out) mean_out[row] = m1;
      if (rstd_out) rstd_out[row] = r;
    }
  }
}

/* ---- backward, both storage types (T = float or gpa_bf16; V values per
 * 16-byte access: 4 floats or 8 bf16) and the mixed form (x and dx f32, dy
 * bf16 (TD), V = 4: the fp32 kernels' order; dx2, when not NULL, gets dx
 * rounded to bf16 as well, the copy a bf16 GEMM reads). `vec`: D % V == 0
 * and the row tensors (and gamma) 16-byte aligned (bf16 of the mixed form
 * 8-byte; checked by the host); else scalar accesses, as for odd D or
 * views at odd offsets. */

/* dx, a group of g lanes per row: fp32 sums of dy*gamma and dy*gamma*xh,
 * then dx = rstd (dy*gamma - mean_a - xh mean_b), each rounded once. The
 * vector path gives each lane V adjacent values per step instead of one:
 * the same terms, summed in another order (fp32 rounding of the two row
 * sums; well inside the parity tolerance). */
template <typename T, typename TD, int V>
static __device__ void ln_dx(const T *__restrict__ x, const TD *__restrict__ dy, const float *__restrict__ gamma,
                             const float *__restrict__ mean, const float *__restrict__ rstd, T *__restrict__ dx,
                             gpa_bf16 *__restrict__ dx2, long long n, int d, int g, int vec) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const int len = ok ? d : 0;
    const long long r0 = ok ? row : 0;
    const T *xr = x + r0 * d;
    const TD *dyr = dy + r0 * d;
    T *dxr = dx + r0 * d;
    gpa_bf16 *dx2r = dx2 ? dx2 + r0 * d : dx2;
    const float m = ok ? mean[row] : 0.0f, r = ok ? rstd[row] : 0.0f;
    float sa = 0.0f, sb = 0.0f;
    if (vec) {
      for (int i = sub * V; i < len; i += V * g) {
        float xv[V], dv[V], gm[V];
        ln_ldv(xr + i, xv);
        ln_ldv(dyr + i, dv);
        ln_ldg(gamma + i, gm);
GPA_UNROLL
        for (int k = 0; k < V; k++) {
          const float gg = __fmul_rn(dv[k], gm[k]);
          sa += gg;
          sb += gg * ((xv[k] - m) * r);
        }
      }
    } else {
      for (int i = sub; i < len; i += g) {
        const float xh = (gpa_ldf(xr, i) - m) * r;
        /* Rounded as the second loop rounds it: with the product contracted
         * into an FMA there, d = 1 gave dx = the product's rounding error, not 0. */
        const float gg = __fmul_rn(gpa_ldf(dyr, i), gamma[i]);
        sa += gg;
        sb += gg * xh;
      }
    }
    sa = gpa_group_sum(sa, g);
    sb = gpa_group_sum(sb, g);
    const float ma = sa / (float)d, mb = sb / (float)d;
    if (vec) {
      for (int i = sub * V; i < len; i += V * g) {
        float xv[V], dv[V], gm[V];
        ln_ldv(xr + i, xv);
        ln_ldv(dyr + i, dv);
        ln_ldg(gamma + i, gm);
GPA_UNROLL
        for (int k = 0; k < V; k++) xv[k] = r * ((__fmul_rn(dv[k], gm[k]) - ma) - ((xv[k] - m) * r) * mb);
        ln_stv(dxr + i, xv);
        if (dx2r) ln_stv(dx2r + i, xv);
      }
    } else {
      for (int i = sub; i < len; i += g) {
        const float xh = (gpa_ldf(xr, i) - m) * r;
        const float v = r * ((__fmul_rn(gpa_ldf(dyr, i), gamma[i]) - ma) - xh * mb);
        gpa_stf(dxr, i, v);
        if (dx2r) gpa_stf(dx2r, i, v);
      }
    }
  }
}

/* dgamma/dbeta partials: blockIdx.y = block of `rows` rows; a thread per
 * column (scalar) or per V adjacent columns (vec: 16-byte loads of x and
 * dy, 4x / 8x the bytes per load of the scalar path; the bf16 scalar path
 * read 2 bytes a load and ran at 0.59 of PyTorch on an H100, issue 25).
 * part[blk][0][j] = sum dy*xh, part[blk][1][j] = sum dy, fp32 in row order:
 * every column's sum is the same in both paths, bit for bit. */
template <typename T, typename TD, int V>
static __device__ void ln_part(const T *__restrict__ x, const TD *__restrict__ dy, const float *__restrict__ mean,
                               const float *__restrict__ rstd, float *__restrict__ part, long long n, int d, int rows,
                               int vec) {
  const long long blk = blockIdx.y;
  long long r0 = blk * rows, r1 = r0 + rows;
  if (r1 > n) r1 = n;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  float *pg = part + blk * 2 * d, *pb = pg + d;
  if (vec) {
    const int j = t * V;
    if (j >= d) return;
    float g[V], b[V];
GPA_UNROLL
    for (int k = 0; k < V; k++) g[k] = b[k] = 0.0f;
    /* rows in fours: the four rows' loads issued before their sums (one
     * memory latency per four rows); the sums in row order as before */
    long long r = r0;
    for (; r + 4 <= r1; r += 4) {
      float xv[4][V], dv[4][V], m[4], rs[4];
GPA_UNROLL
      for (int u = 0; u < 4; u++) {
        ln_ldv(x + (r + u) * d + j, xv[u]);
        ln_ldv(dy + (r + u) * d + j, dv[u]);
        m[u] = mean[r + u], rs[u] = rstd[r + u];
      }
GPA_UNROLL
      for (int u = 0; u < 4; u++)
GPA_UNROLL
        for (int k = 0; k < V; k++) {
          const float xh = (xv[u][k] - m[u]) * rs[u];
          g[k] += dv[u][k] * xh;
          b[k] += dv[u][k];
        }
    }
    for (; r < r1; r++) {
      float xv[V], dv[V];
      ln_ldv(x + r * d + j, xv);
      ln_ldv(dy + r * d + j, dv);
      const float m = mean[r], rs = rstd[r];
GPA_UNROLL
      for (int k = 0; k < V; k++) {
        const float xh = (xv[k] - m) * rs;
        g[k] += dv[k] * xh;
        b[k] += dv[k];
      }
    }
GPA_UNROLL
    for (int k = 0; k < V; k += 4) { /* fp32 partials for either storage: V/4 float4 stores */
      gpa_st16(pg + j + k, g + k);
      gpa_st16(pb + j + k, b + k);
    }
    return;
  }
  if (t >= d) return;
  float g = 0.0f, b = 0.0f;
  for (long long r = r0; r < r1; r++) {
    const float xh = (gpa_ldf(x, r * d + t) - mean[r]) * rstd[r];
    const float v = gpa_ldf(dy, r * d + t);
    g += v * xh;
    b += v;
  }
  pg[t] = g;
  pb[t] = b;
}

/* ---- dgamma/dbeta of narrow rows in one launch (split_sum.h) --------------
 * For D up to GPA_LN_SPLIT_MAX_D (ops/layernorm/cuda.c), where the partials
 * above and gpa_ln_bwd_cols_f32 launched a few blocks of columns that each
 * walked a thousand partials (20 us a launch at 4096 x 96 on an H100).
 * Block (32, GPA_LN_SLICES): a tile of 32 threads across the row (V
 * columns each where 16-byte accesses go, else one) by SL slices of rows;
 * blockIdx.y = a chunk of `rows` rows. Slice s sums the chunk's rows s,
 * s + SL, ... in fp32 as ln_part does; the slices are added in order in
 * double into the chunk's partial (part[chunk][0 = dgamma, 1 = dbeta][d],
 * double); the tile's last block adds the chunks the same way (slice s:
 * chunks s, s + SL, ...; then the slices in order). Every column's order
 * is the same in the 16-byte and the scalar paths (one ln_acc for both):
 * the same sums bit for bit. */
#define LN_SL GPA_LN_SLICES

/* The product and the fma spelled out: left to the compiler, the 16-byte
 * path's unrolled rows and the scalar path's were contracted differently
 * (host compiler, emulated build), and their sums differed in the last bit. */
static __device__ __forceinline__ void ln_acc(float &g, float &b, float x, float dy, float m, float rs) {
  g = __fmaf_rn(dy, __fmul_rn(x - m, rs), g);
  b += dy;
}

/* Adds the slices' sums (g[k], b[k]: this thread's w columns) in slice
 * order into the tile's columns of part (a chunk's partial), or, part
 * NULL, of dgamma/dbeta. sh: 2 x SL x 32 V doubles. */
template <int V>
static __device__ void ln_split_add(double *sh, const double (&g)[V], const double (&b)[V], int w, int c0, int d,
                                    double *part, float *dgamma, float *dbeta) {
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, tw = 32 * V;
GPA_UNROLL
  for (int k = 0; k < V; k++) {
    sh[ty * tw + tx * V + k] = g[k];
    sh[(LN_SL + ty) * tw + tx * V + k] = b[k];
  }
  __syncthreads();
  for (int e = ty * 32 + tx; e < 2 * 32 * w; e += 32 * LN_SL) {
    const int which = e / (32 * w), cl = e % (32 * w), at = (cl / w) * V + cl % w;
    if (c0 + cl >= d) continue;
    double s = 0.0;
    for (int sl = 0; sl < LN_SL; sl++) s += sh[(which * LN_SL + sl) * tw + at];
    if (part) part[(long long)which * d + c0 + cl] = s;
    else (which ? dbeta : dgamma)[c0 + cl] = (float)s;
  }
  __syncthreads(); /* sh is written again by the last block's pass */
}

template <typename T, typename TD, int V>
static __device__ void ln_split(double *sh, unsigned *flag, const T *__restrict__ x, const TD *__restrict__ dy,
                                const float *__restrict__ mean, const float *__restrict__ rstd, double *part,
                                float *__restrict__ dgamma, float *__restrict__ dbeta, unsigned *ctr, long long n,
                                int d, int rows, int vec) {
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, w = vec ? V : 1;
  const int c0 = (int)blockIdx.x * 32 * w, j = c0 + tx * w;
  const long long chunk = blockIdx.y, r0 = chunk * rows, r1 = r0 + rows < n ? r0 + rows : n;
  float g[V], b[V];
GPA_UNROLL
  for (int k = 0; k < V; k++) g[k] = b[k] = 0.0f;
  if (j < d) {
    long long r = r0 + ty;
    if (vec) { /* d % V == 0: the V columns are in the row */
      for (; r + 3 * LN_SL < r1; r += 4 * LN_SL) { /* four rows' loads before their sums */
        float xv[4][V], dv[4][V], m[4], rs[4];
GPA_UNROLL
        for (int u = 0; u < 4; u++) {
          const long long ru = r + u * LN_SL;
          ln_ldv(x + ru * d + j, xv[u]);
          ln_ldv(dy + ru * d + j, dv[u]);
          m[u] = mean[ru], rs[u] = rstd[ru];
        }
GPA_UNROLL
        for (int u = 0; u < 4; u++)
GPA_UNROLL
          for (int k = 0; k < V; k++) ln_acc(g[k], b[k], xv[u][k], dv[u][k], m[u], rs[u]);
      }
      for (; r < r1; r += LN_SL) {
        float xv[V], dv[V];
        ln_ldv(x + r * d + j, xv);
        ln_ldv(dy + r * d + j, dv);
        const float m = mean[r], rs = rstd[r];
GPA_UNROLL
        for (int k = 0; k < V; k++) ln_acc(g[k], b[k], xv[k], dv[k], m, rs);
      }
    } else {
      for (; r + 3 * LN_SL < r1; r += 4 * LN_SL) {
        float xv[4], dv[4], m[4], rs[4];
GPA_UNROLL
        for (int u = 0; u < 4; u++) {
          const long long ru = r + u * LN_SL;
          xv[u] = gpa_ldf(x, ru * d + j), dv[u] = gpa_ldf(dy, ru * d + j), m[u] = mean[ru], rs[u] = rstd[ru];
        }
GPA_UNROLL
        for (int u = 0; u < 4; u++) ln_acc(g[0], b[0], xv[u], dv[u], m[u], rs[u]);
      }
      for (; r < r1; r += LN_SL) ln_acc(g[0], b[0], gpa_ldf(x, r * d + j), gpa_ldf(dy, r * d + j), mean[r], rstd[r]);
    }
  }
  double gd[V], bd[V];
GPA_UNROLL
  for (int k = 0; k < V; k++) gd[k] = g[k], bd[k] = b[k];
  const int one = gridDim.y == 1; /* a single chunk: its sums are the result */
  ln_split_add<V>(sh, gd, bd, w, c0, d, one ? (double *)0 : part + chunk * 2 * d, dgamma, dbeta);
  if (one || !gpa_split_last(ctr + blockIdx.x, gridDim.y, flag)) return;
GPA_UNROLL
  for (int k = 0; k < V; k++) gd[k] = bd[k] = 0.0;
  if (j < d) {
    const int nc = (int)gridDim.y;
    int c = ty;
    for (; c + LN_SL < nc; c += 2 * LN_SL) { /* two chunks' loads before their sums */
      const double *p = part + (long long)c * 2 * d + j, *q = p + (long long)LN_SL * 2 * d;
      double pg[2][V], pb[2][V];
GPA_UNROLL
      for (int k = 0; k < V; k++)
        if (k < w) pg[0][k] = gpa_split_ld(p + k), pb[0][k] = gpa_split_ld(p + d + k), pg[1][k] = gpa_split_ld(q + k),
               pb[1][k] = gpa_split_ld(q + d + k);
GPA_UNROLL
      for (int k = 0; k < V; k++)
        if (k < w) gd[k] += pg[0][k], bd[k] += pb[0][k], gd[k] += pg[1][k], bd[k] += pb[1][k];
    }
    for (; c < nc; c += LN_SL) {
      const double *p = part + (long long)c * 2 * d + j;
GPA_UNROLL
      for (int k = 0; k < V; k++)
        if (k < w) gd[k] += gpa_split_ld(p + k), bd[k] += gpa_split_ld(p + d + k);
    }
  }
  ln_split_add<V>(sh, gd, bd, w, c0, d, (double *)0, dgamma, dbeta);
}

/* ---- forward, one block per row, the row held in registers ----------------
 * For long rows (the host picks it: D >= GPA__LN_ROW_MIN and 16-byte
 * accesses possible) the lane-group forward above reads each row twice,
 * and with 40 warps of 16 KiB rows per SM the second read misses L1 (and
 * part of L2): 0.90 of PyTorch at 16384 x 4096 f32 on an H100 (issue 25).
 * Here each of the block's threads loads its NV vectors of V values
 * (float4, 8 bf16; vector q = thread + k blockDim.x) once, the statistics
 * are the same shifted double sums, reduced by the warps' shuffle tree and
 * then the warps' totals in warp order (a fixed order: deterministic), and
 * y is formed from the registers. The sums' order differs from the lane
 * kernel's, so mean and rstd may differ from it in the last bit. */
template <typename T, typename TY, int V, int NV>
static __device__ void ln_fwd_row(double *red, const T *__restrict__ x, const float *__restrict__ gamma,
                                  const float *__restrict__ beta, TY *__restrict__ y, float *__restrict__ mean_out,
                                  float *__restrict__ rstd_out, long long n, int d, float eps) {
  const int tid = (int)threadIdx.x, nt = (int)blockDim.x, warp = tid / 32, lane = tid % 32, nw = nt / 32;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * d;
    TY *yr = y + row * d;
    const double md = (double)gpa_ldf(xr, 0);
    float v[NV][V];
    double sd = 0.0, sq = 0.0;
GPA_UNROLL
    for (int k = 0; k < NV; k++) {
      const int i = (tid + k * nt) * V;
      if (i < d) {
        ln_ldv(xr + i, v[k]);
GPA_UNROLL
        for (int e = 0; e < V; e++) {
          const double a = (double)v[k][e] - md;
          sd += a;
          sq += a * a;
        }
      }
    }
    sd = gpa_group_sum_d(sd, 32);
    sq = gpa_group_sum_d(sq, 32);
    if (lane == 0) red[warp] = sd, red[32 + warp] = sq;
    __syncthreads();
    sd = 0.0, sq = 0.0;
    for (int w = 0; w < nw; w++) sd += red[w], sq += red[32 + w];
    __syncthreads(); /* red is rewritten by the next row */
    const double cor = sd / (double)d;
    double var = (sq - (double)d * cor * cor) / (double)d;
    if (var < 0.0) var = 0.0;
    const double rd = 1.0 / sqrt(var + (double)eps);
    const float m1 = (float)(md + cor), c = (float)((md + cor) - (double)m1), r = (float)rd;
GPA_UNROLL
    for (int k = 0; k < NV; k++) {
      const int i = (tid + k * nt) * V;
      if (i < d) {
        float gm[V], b[V];
        ln_ldg(gamma + i, gm);
        ln_ldg(beta + i, b);
GPA_UNROLL
        for (int e = 0; e < V; e++) v[k][e] = ((v[k][e] - m1) - c) * r * gm[e] + b[e];
        ln_stv(yr + i, v[k]);
      }
    }
    if (tid == 0) {
      if (mean_out) mean_out[row] = m1;
      if (rstd_out) rstd_out[row] = r;
    }
  }
}

/* NV = 4 vectors a thread: blockDim.x = ceil(D / (4 V)) rounded up to a warp (<= 1024) */
extern "C" __global__ void gpa_ln_fwd_row_f32(const float *__restrict__ x, const float *__restrict__ gamma,
                                              const float *__restrict__ beta, float *__restrict__ y,
                                              float *__restrict__ mean_out, float *__restrict__ rstd_out, long long n,
                                              int d, float eps) {
  __shared__ double red[64];
  ln_fwd_row<float, float, 4, 4>(red, x, gamma, beta, y, mean_out, rstd_out, n, d, eps);
}
extern "C" __global__ void gpa_ln_fwd_row_f32_bf16(const float *__restrict__ x, const float *__restrict__ gamma,
                                                   const float *__restrict__ beta, gpa_bf16 *__restrict__ y,
                                                   float *__restrict__ mean_out, float *__restrict__ rstd_out,
                                                   long long n, int d, float eps) {
  __shared__ double red[64];
  ln_fwd_row<float, gpa_bf16, 4, 4>(red, x, gamma, beta, y, mean_out, rstd_out, n, d, eps);
}
extern "C" __global__ void gpa_ln_fwd_row_bf16(const gpa_bf16 *__restrict__ x, const float *__restrict__ gamma,
                                               const float *__restrict__ beta, gpa_bf16 *__restrict__ y,
                                               float *__restrict__ mean_out, float *__restrict__ rstd_out, long long n,
                                               int d, float eps) {
  __shared__ double red[64];
  ln_fwd_row<gpa_bf16, gpa_bf16, 8, 4>(red, x, gamma, beta, y, mean_out, rstd_out, n, d, eps);
}

/* dx, one block per row with x and dy held in registers (long rows, as the
 * forward's ln_fwd_row): x and dy read once instead of twice. The same
 * math as ln_dx; the two fp32 row sums are reduced by shuffles and then the
 * warps in order (deterministic; another order than ln_dx's, so dx may
 * differ from it by rounding). */
template <typename T, typename TD, int V, int NV>
static __device__ void ln_dx_row(float *red, const T *__restrict__ x, const TD *__restrict__ dy,
                                 const float *__restrict__ gamma, const float *__restrict__ mean,
                                 const float *__restrict__ rstd, T *__restrict__ dx, gpa_bf16 *__restrict__ dx2,
                                 long long n, int d) {
  const int tid = (int)threadIdx.x, nt = (int)blockDim.x, warp = tid / 32, lane = tid % 32, nw = nt / 32;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const T *xr = x + row * d;
    const TD *dyr = dy + row * d;
    T *dxr = dx + row * d;
    gpa_bf16 *dx2r = dx2 ? dx2 + row * d : dx2;
    const float m = mean[row], r = rstd[row];
    float xv[NV][V], gv[NV][V]; /* xh, and dy * gamma */
    float sa = 0.0f, sb = 0.0f;
GPA_UNROLL
    for (int k = 0; k < NV; k++) {
      const int i = (tid + k * nt) * V;
      if (i < d) {
        float gm[V];
        ln_ldv(xr + i, xv[k]);
        ln_ldv(dyr + i, gv[k]);
        ln_ldg(gamma + i, gm);
GPA_UNROLL
        for (int e = 0; e < V; e++) {
          xv[k][e] = (xv[k][e] - m) * r;
          gv[k][e] = __fmul_rn(gv[k][e], gm[e]); /* rounded as in ln_dx (d = 1 gives dx = 0) */
          sa += gv[k][e];
          sb += gv[k][e] * xv[k][e];
        }
      }
    }
    sa = gpa_group_sum(sa, 32);
    sb = gpa_group_sum(sb, 32);
    if (lane == 0) red[warp] = sa, red[32 + warp] = sb;
    __syncthreads();
    sa = 0.0f, sb = 0.0f;
    for (int w = 0; w < nw; w++) sa += red[w], sb += red[32 + w];
    __syncthreads(); /* red is rewritten by the next row */
    const float ma = sa / (float)d, mb = sb / (float)d;
GPA_UNROLL
    for (int k = 0; k < NV; k++) {
      const int i = (tid + k * nt) * V;
      if (i < d) {
GPA_UNROLL
        for (int e = 0; e < V; e++) xv[k][e] = r * ((gv[k][e] - ma) - xv[k][e] * mb);
        ln_stv(dxr + i, xv[k]);
        if (dx2r) ln_stv(dx2r + i, xv[k]);
      }
    }
  }
}

/* NV vectors a thread (f32 4, bf16 2): blockDim.x = ceil(D / (NV V)) rounded up to a warp (<= 1024) */
extern "C" __global__ void gpa_ln_bwd_dx_row_f32(const float *__restrict__ x, const float *__restrict__ dy,
                                                 const float *__restrict__ gamma, const float *__restrict__ mean,
                                                 const float *__restrict__ rstd, float *__restrict__ dx, long long n,
                                                 int d) {
  __shared__ float red[64];
  ln_dx_row<float, float, 4, 4>(red, x, dy, gamma, mean, rstd, dx, (gpa_bf16 *)0, n, d);
}
extern "C" __global__ void gpa_ln_bwd_dx_row_bf16(const gpa_bf16 *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                                  const float *__restrict__ gamma, const float *__restrict__ mean,
                                                  const float *__restrict__ rstd, gpa_bf16 *__restrict__ dx,
                                                  long long n, int d) {
  __shared__ float red[64];
  ln_dx_row<gpa_bf16, gpa_bf16, 8, 2>(red, x, dy, gamma, mean, rstd, dx, (gpa_bf16 *)0, n, d);
}

extern "C" __global__ void gpa_ln_bwd_dx_f32(const float *__restrict__ x, const float *__restrict__ dy,
                                             const float *__restrict__ gamma, const float *__restrict__ mean,
                                             const float *__restrict__ rstd, float *__restrict__ dx, long long n,
                                             int d, int g, int vec) {
  ln_dx<float, float, 4>(x, dy, gamma, mean, rstd, dx, (gpa_bf16 *)0, n, d, g, vec);
}
extern "C" __global__ void gpa_ln_bwd_dx_bf16(const gpa_bf16 *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                              const float *__restrict__ gamma, const float *__restrict__ mean,
                                              const float *__restrict__ rstd, gpa_bf16 *__restrict__ dx, long long n,
                                              int d, int g, int vec) {
  ln_dx<gpa_bf16, gpa_bf16, 8>(x, dy, gamma, mean, rstd, dx, (gpa_bf16 *)0, n, d, g, vec);
}
extern "C" __global__ void gpa_ln_bwd_part_f32(const float *__restrict__ x, const float *__restrict__ dy,
                                               const float *__restrict__ mean, const float *__restrict__ rstd,
                                               float *__restrict__ part, long long n, int d, int rows, int vec) {
  ln_part<float, float, 4>(x, dy, mean, rstd, part, n, d, rows, vec);
}
extern "C" __global__ void gpa_ln_bwd_part_bf16(const gpa_bf16 *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                                const float *__restrict__ mean, const float *__restrict__ rstd,
                                                float *__restrict__ part, long long n, int d, int rows, int vec) {
  ln_part<gpa_bf16, gpa_bf16, 8>(x, dy, mean, rstd, part, n, d, rows, vec);
}

/* grid (column tiles, chunks), block (32, GPA_LN_SLICES); ctr: a counter per column tile */
extern "C" __global__ void __launch_bounds__(32 * GPA_LN_SLICES)
    gpa_ln_bwd_split_f32(const float *__restrict__ x, const float *__restrict__ dy, const float *__restrict__ mean,
                         const float *__restrict__ rstd, double *part, float *__restrict__ dgamma,
                         float *__restrict__ dbeta, unsigned *ctr, long long n, int d, int rows, int vec) {
  __shared__ double sh[2 * GPA_LN_SLICES * 32 * 4];
  __shared__ unsigned flag;
  ln_split<float, float, 4>(sh, &flag, x, dy, mean, rstd, part, dgamma, dbeta, ctr, n, d, rows, vec);
}
extern "C" __global__ void __launch_bounds__(32 * GPA_LN_SLICES)
    gpa_ln_bwd_split_bf16(const gpa_bf16 *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                          const float *__restrict__ mean, const float *__restrict__ rstd, double *part,
                          float *__restrict__ dgamma, float *__restrict__ dbeta, unsigned *ctr, long long n, int d,
                          int rows, int vec) {
  __shared__ double sh[2 * GPA_LN_SLICES * 32 * 8];
  __shared__ unsigned flag;
  ln_split<gpa_bf16, gpa_bf16, 8>(sh, &flag, x, dy, mean, rstd, part, dgamma, dbeta, ctr, n, d, rows, vec);
}

/* ---- the mixed form of the backward: x and dx f32, dy bf16 (a bf16 GEMM's
 * input gradient meeting the fp32 residual stream), dx2 (nullable) dx
 * rounded to bf16 too. The fp32 kernels' geometry and order (V = 4, dy
 * 8 bytes a load): their bits on the widened dy. */
extern "C" __global__ void gpa_ln_bwd_dx_row_bf16dy(const float *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                                    const float *__restrict__ gamma, const float *__restrict__ mean,
                                                    const float *__restrict__ rstd, float *__restrict__ dx,
                                                    long long n, int d, gpa_bf16 *__restrict__ dx2) {
  __shared__ float red[64];
  ln_dx_row<float, gpa_bf16, 4, 4>(red, x, dy, gamma, mean, rstd, dx, dx2, n, d);
}
extern "C" __global__ void gpa_ln_bwd_dx_bf16dy(const float *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                                const float *__restrict__ gamma, const float *__restrict__ mean,
                                                const float *__restrict__ rstd, float *__restrict__ dx, long long n,
                                                int d, int g, int vec, gpa_bf16 *__restrict__ dx2) {
  ln_dx<float, gpa_bf16, 4>(x, dy, gamma, mean, rstd, dx, dx2, n, d, g, vec);
}
extern "C" __global__ void gpa_ln_bwd_part_bf16dy(const float *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                                  const float *__restrict__ mean, const float *__restrict__ rstd,
                                                  float *__restrict__ part, long long n, int d, int rows, int vec) {
  ln_part<float, gpa_bf16, 4>(x, dy, mean, rstd, part, n, d, rows, vec);
}
extern "C" __global__ void __launch_bounds__(32 * GPA_LN_SLICES)
    gpa_ln_bwd_split_bf16dy(const float *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                            const float *__restrict__ mean, const float *__restrict__ rstd, double *part,
                            float *__restrict__ dgamma, float *__restrict__ dbeta, unsigned *ctr, long long n, int d,
                            int rows, int vec) {
  __shared__ double sh[2 * GPA_LN_SLICES * 32 * 4];
  __shared__ unsigned flag;
  ln_split<float, gpa_bf16, 4>(sh, &flag, x, dy, mean, rstd, part, dgamma, dbeta, ctr, n, d, rows, vec);
}
