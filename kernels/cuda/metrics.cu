/* Metrics of the CUDA backend: cross-entropy (loss and gradient), MSE and
 * cosine, reduced on the device; only the scalar result is ever read back.
 * Per-row partials in double (a lane group per row, gpa_rows.h: shuffle
 * trees, no block barriers), then one block adds them in a fixed order (deterministic). Formulas follow kernels/host/metrics.c:
 * the target's exp term is kept apart so softmax - 1 stays exact when the
 * target dominates. Cross-entropy also reads bf16 logits (widened) and
 * writes bf16 dlogits (rounded once): the same template bodies. */
#include "gpa_bf16.h"
#include "gpa_rows.h"

#define THREADS 256 /* gpa_sum_final, gpa_ce_count: one block */

/* Block sums (blockDim.x == THREADS); every thread gets the total. */
static __device__ double block_sum_d(double v, double *sh) {
  const int t = threadIdx.x;
  __syncthreads();
  sh[t] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  return sh[0];
}

static __device__ __forceinline__ float ld(const float *p, long long i) { return p[i]; }
static __device__ __forceinline__ float ld(const gpa_bf16 *p, long long i) { return gpa_bf2f(p[i]); }
static __device__ __forceinline__ void st(float *p, long long i, float v) { p[i] = v; }
static __device__ __forceinline__ void st(gpa_bf16 *p, long long i, float v) { p[i] = gpa_f2bf(v); }

/* Row statistics of one lane group (len 0: a row it skips): m = max,
 * et = exp(x[t] - m), rest = the sum of the other terms. One pass over the
 * row (an online softmax): each lane keeps its running max and its sum
 * relative to it, rescaled when the max grows; the lanes' sums are then
 * brought to the row's max. The forward reads the row once instead of
 * twice, the backward twice instead of three times. */
template <typename T>
static __device__ void row_stats(const T *x, long long len, long long t, int sub, int g, float *m_out, double *et,
                                 double *rest) {
  float m = -INFINITY;
  double s = 0.0;
  for (long long i = sub; i < len; i += g) {
    const float xi = ld(x, i);
    if (xi > m) {
      s *= (double)expf(m - xi); /* s is 0 (or NaN) while m is -inf */
      m = xi;
    }
    /* -inf entries (masked logits) before a lane's first finite one add
     * nothing (exp(-inf - -inf) would be NaN); NaN always propagates */
    if (i != t && (m != -INFINITY || xi != xi)) s += (double)expf(xi - m);
  }
  const float mr = gpa_group_max(m, g);
  *rest = gpa_group_sum_d(s * (double)expf(m - mr), g); /* a lane of -inf only: 0 * 0 */
  *et = (len && t >= 0 && t < len) ? (double)expf(ld(x, t) - mr) : 0.0;
  *m_out = mr;
}

template <typename T>
static __device__ void ce_rows(double *part, const T *logits, const int *tg, long long n, long long v,
                               long long ignore, int g) {
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const long long t = ok ? tg[row] : -1;
    const bool use = ok && t != ignore && t >= 0 && t < v;
    const T *x = logits + (use ? row : 0) * v;
    float m;
    double et, rest;
    row_stats(x, use ? v : 0, t, sub, g, &m, &et, &rest);
    if (ok && sub == 0) part[row] = use ? log(et + rest) - ((double)ld(x, t) - (double)m) : 0.0;
  }
}

extern "C" __global__ void gpa_ce_rows(double *part, const float *logits, const int *tg, long long n, long long v,
                                       long long ignore, int g) {
  ce_rows(part, logits, tg, n, v, ignore, g);
}

extern "C" __global__ void gpa_ce_rows_bf16(double *part, const gpa_bf16 *logits, const int *tg, long long n,
                                            long long v, long long ignore, int g) {
  ce_rows(part, logits, tg, n, v, ignore, g);
}

extern "C" __global__ void __launch_bounds__(THREADS) gpa_sum_final(float *out, const double *part, long long n,
                                                                    double div, const int *tg, long long ignore) {
  __shared__ double sh[THREADS];
  double s = 0.0, c = 0.0;
  for (long long i = threadIdx.x; i < n; i += THREADS) {
    s += part[i];
    if (tg) c += tg[i] != ignore ? 1.0 : 0.0;
  }
  s = block_sum_d(s, sh);
  if (tg) div = block_sum_d(c, sh);
  if (threadIdx.x == 0) *out = div > 0.0 ? (float)(s / div) : 0.0f;
}

/* cnt[0] = number of targets that are not ignore_index. One block. */
extern "C" __global__ void __launch_bounds__(THREADS) gpa_ce_count(long long *cnt, const int *tg, long long n,
                                                                   long long ignore) {
  __shared__ double sh[THREADS];
  double c = 0.0;
  for (long long i = threadIdx.x; i < n; i += THREADS) c += tg[i] != ignore ? 1.0 : 0.0;
  c = block_sum_d(c, sh);
  if (threadIdx.x == 0) *cnt = (long long)c;
}

template <typename T>
static __device__ void ce_bwd(T *dl, const T *logits, const int *tg, const long long *cnt, long long n, long long v,
                              long long ignore, double scale, int g) {
  const long long count = *cnt > 0 ? *cnt : 1;
  const double k = scale / (double)count;
  GPA_ROW_LOOP(n, g, row, sub, ok) {
    const long long t = ok ? tg[row] : -1;
    const bool use = ok && t != ignore && t >= 0 && t < v;
    const T *x = logits + (use ? row : 0) * v;
    T *o = dl + (ok ? row : 0) * v;
    float m;
    double et, rest;
    row_stats(x, use ? v : 0, t, sub, g, &m, &et, &rest);
    if (!ok) continue; /* after the group's last shuffle: no collective follows in this iteration */
    if (!use) {
      for (long long i = sub; i < v; i += g) st(o, i, 0.0f);
      continue;
    }
    const double z = et + rest;
    const float f = (float)(k / z);
    for (long long i = sub; i < v; i += g) st(o, i, i == t ? (float)(-k * rest / z) : expf(ld(x, i) - m) * f);
  }
}

extern "C" __global__ void gpa_ce_bwd(float *dl, const float *logits, const int *tg, const long long *cnt,
                                      long long n, long long v, long long ignore, double scale, int g) {
  ce_bwd(dl, logits, tg, cnt, n, v, ignore, scale, g);
}

extern "C" __global__ void gpa_ce_bwd_bf16(gpa_bf16 *dl, const gpa_bf16 *logits, const int *tg, const long long *cnt,
                                           long long n, long long v, long long ignore, double scale, int g) {
  ce_bwd(dl, logits, tg, cnt, n, v, ignore, scale, g);
}

/* part[r] = sum (y - t)^2 (cosine == 0) or dot / max(|y||t|, eps). */
extern "C" __global__ void gpa_pair_rows(double *part, const float *y, const float *t, long long rows, long long d,
                                         double eps, int cosine, int g) {
  GPA_ROW_LOOP(rows, g, row, sub, ok) {
    const long long len = ok ? d : 0;
    const float *a = y + (ok ? row : 0) * d, *b = t + (ok ? row : 0) * d;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0;
    for (long long i = sub; i < len; i += g) {
      const double u = a[i], w = b[i];
      if (cosine) {
        s0 += u * w;
        s1 += u * u;
        s2 += w * w;
      } else {
        s0 += (u - w) * (u - w);
      }
    }
    s0 = gpa_group_sum_d(s0, g);
    if (cosine) {
      s1 = gpa_group_sum_d(s1, g);
      s2 = gpa_group_sum_d(s2, g);
    }
    if (ok && sub == 0) {
      if (cosine) {
        const double den = sqrt(s1 * s2);
        part[row] = s0 / (den > eps ? den : eps);
      } else {
        part[row] = s0;
      }
    }
  }
}
