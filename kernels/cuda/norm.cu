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
 * block order in double. No atomics. */
#include "gpa_bf16.h"
#include "gpa_rows.h"

/* vec4: D % 4 == 0 and x, y, gamma, beta 16-byte aligned (checked by the host). */
extern "C" __global__ void gpa_ln_fwd_f32(const float *__restrict__ x, const float *__restrict__ gamma,
                                          const float *__restrict__ beta, float *__restrict__ y,
                                          float *__restrict__ mean_out, float *__restrict__ rstd_out, long long n,
                                          int d, float eps, int vec4, int g) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const int len = ok ? d : 0;
    const float *xr = x + (ok ? row : 0) * d;
    float *yr = y + (ok ? row : 0) * d;
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
        float4 o;
        o.x = ((v.x - m1) - c) * r * gm.x + b.x;
        o.y = ((v.y - m1) - c) * r * gm.y + b.y;
        o.z = ((v.z - m1) - c) * r * gm.z + b.z;
        o.w = ((v.w - m1) - c) * r * gm.w + b.w;
        *reinterpret_cast<float4 *>(yr + i) = o;
      }
    } else {
      for (int i = sub; i < len; i += g) yr[i] = ((xr[i] - m1) - c) * r * gamma[i] + beta[i];
    }
    if (ok && sub == 0) {
      if (mean_out) mean_out[row] = m1;
      if (rstd_out) rstd_out[row] = r;
    }
  }
}

/* dx, a group of g lanes per row. */
extern "C" __global__ void gpa_ln_bwd_dx_f32(const float *__restrict__ x, const float *__restrict__ dy,
                                             const float *__restrict__ gamma, const float *__restrict__ mean,
                                             const float *__restrict__ rstd, float *__restrict__ dx, long long n,
                                             int d, int g) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const int len = ok ? d : 0;
    const long long r0 = ok ? row : 0;
    const float *xr = x + r0 * d, *dyr = dy + r0 * d;
    float *dxr = dx + r0 * d;
    const float m = ok ? mean[row] : 0.0f, r = ok ? rstd[row] : 0.0f;
    float sa = 0.0f, sb = 0.0f;
    for (int i = sub; i < len; i += g) {
      const float xh = (xr[i] - m) * r;
      /* Rounded as the second loop rounds it: with the product contracted
       * into an FMA there, d = 1 gave dx = the product's rounding error, not 0. */
      const float gg = __fmul_rn(dyr[i], gamma[i]);
      sa += gg;
      sb += gg * xh;
    }
    sa = gpa_group_sum(sa, g);
    sb = gpa_group_sum(sb, g);
    const float ma = sa / (float)d, mb = sb / (float)d;
    for (int i = sub; i < len; i += g) {
      const float xh = (xr[i] - m) * r;
      dxr[i] = r * ((__fmul_rn(dyr[i], gamma[i]) - ma) - xh * mb);
    }
  }
}

/* Partials: blockIdx.y = block of `rows` rows; one thread per column.
 * part[blk][0][j] = sum dy*xh, part[blk][1][j] = sum dy (float, row order). */
extern "C" __global__ void gpa_ln_bwd_part_f32(const float *__restrict__ x, const float *__restrict__ dy,
                                               const float *__restrict__ mean, const float *__restrict__ rstd,
                                               float *__restrict__ part, long long n, int d, int rows) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const long long blk = blockIdx.y;
  long long r0 = blk * rows, r1 = r0 + rows;
  if (r1 > n) r1 = n;
  float g = 0.0f, b = 0.0f;
  for (long long r = r0; r < r1; r++) {
    const float xh = (x[r * d + j] - mean[r]) * rstd[r];
    const float v = dy[r * d + j];
    g += v * xh;
    b += v;
  }
  part[blk * 2 * d + j] = g;
  part[blk * 2 * d + d + j] = b;
}

extern "C" __global__ void gpa_ln_bwd_cols_f32(const float *__restrict__ part, float *__restrict__ dgamma,
                                               float *__restrict__ dbeta, int d, int nblk) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  double g = 0.0, b = 0.0;
  for (int k = 0; k < nblk; k++) {
    g += (double)part[(long long)k * 2 * d + j];
    b += (double)part[(long long)k * 2 * d + d + j];
  }
  dgamma[j] = (float)g;
  dbeta[j] = (float)b;
}

/* ---- bf16 storage: x, y, dy, dx bf16; gamma, beta, mean, rstd and the
 * partials fp32. The same math as the fp32 kernels on the widened values,
 * each output rounded once. vec8: D % 8 == 0 and x, y, gamma, beta 16-byte
 * aligned (eight bf16 values per 16-byte load, gamma/beta as two float4). */

static __device__ __forceinline__ void ln_load8f(const float *p, float *v) {
  const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

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

extern "C" __global__ void gpa_ln_bwd_dx_bf16(const gpa_bf16 *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                              const float *__restrict__ gamma, const float *__restrict__ mean,
                                              const float *__restrict__ rstd, gpa_bf16 *__restrict__ dx, long long n,
                                              int d, int g) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const int len = ok ? d : 0;
    const long long r0 = ok ? row : 0;
    const gpa_bf16 *xr = x + r0 * d, *dyr = dy + r0 * d;
    gpa_bf16 *dxr = dx + r0 * d;
    const float m = ok ? mean[row] : 0.0f, r = ok ? rstd[row] : 0.0f;
    float sa = 0.0f, sb = 0.0f;
    for (int i = sub; i < len; i += g) {
      const float xh = (gpa_bf2f(xr[i]) - m) * r;
      const float gg = __fmul_rn(gpa_bf2f(dyr[i]), gamma[i]); /* as in the f32 kernel */
      sa += gg;
      sb += gg * xh;
    }
    sa = gpa_group_sum(sa, g);
    sb = gpa_group_sum(sb, g);
    const float ma = sa / (float)d, mb = sb / (float)d;
    for (int i = sub; i < len; i += g) {
      const float xh = (gpa_bf2f(xr[i]) - m) * r;
      dxr[i] = gpa_f2bf(r * ((__fmul_rn(gpa_bf2f(dyr[i]), gamma[i]) - ma) - xh * mb));
    }
  }
}

extern "C" __global__ void gpa_ln_bwd_part_bf16(const gpa_bf16 *__restrict__ x, const gpa_bf16 *__restrict__ dy,
                                                const float *__restrict__ mean, const float *__restrict__ rstd,
                                                float *__restrict__ part, long long n, int d, int rows) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const long long blk = blockIdx.y;
  long long r0 = blk * rows, r1 = r0 + rows;
  if (r1 > n) r1 = n;
  float g = 0.0f, b = 0.0f;
  for (long long r = r0; r < r1; r++) {
    const float xh = (gpa_bf2f(x[r * d + j]) - mean[r]) * rstd[r];
    const float v = gpa_bf2f(dy[r * d + j]);
    g += v * xh;
    b += v;
  }
  part[blk * 2 * d + j] = g;
  part[blk * 2 * d + d + j] = b;
}
