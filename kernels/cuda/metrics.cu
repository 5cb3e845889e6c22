/* Metrics of the CUDA backend: cross-entropy (loss and gradient), MSE and
 * cosine, reduced on the device; only the scalar result is ever read back.
 * Per-row partials in double (one block per row), then one block adds them
 * in a fixed order (deterministic). Formulas follow kernels/host/metrics.c:
 * the target's exp term is kept apart so softmax - 1 stays exact when the
 * target dominates. */
#include "gpa_kernel.h"

#define THREADS 256

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

static __device__ float block_max_f(float v, float *sh) {
  const int t = threadIdx.x;
  __syncthreads();
  sh[t] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);
    __syncthreads();
  }
  return sh[0];
}

/* Row statistics: m = max, et = exp(x[t] - m), rest = sum of the others. */
static __device__ void row_stats(const float *x, long long v, long long t, float *m_out, double *et, double *rest,
                                 double *shd, float *shf) {
  float m = -INFINITY;
  for (long long i = threadIdx.x; i < v; i += THREADS) m = fmaxf(m, x[i]);
  m = block_max_f(m, shf);
  double s = 0.0;
  for (long long i = threadIdx.x; i < v; i += THREADS)
    if (i != t) s += (double)expf(x[i] - m);
  *rest = block_sum_d(s, shd);
  *et = (t >= 0 && t < v) ? (double)expf(x[t] - m) : 0.0;
  *m_out = m;
}

extern "C" __global__ void __launch_bounds__(THREADS) gpa_ce_rows(double *part, const float *logits, const int *tg,
                                                                  long long n, long long v, long long ignore) {
  __shared__ double shd[THREADS];
  __shared__ float shf[THREADS];
  for (long long r = blockIdx.x; r < n; r += gridDim.x) {
    const long long t = tg[r];
    if (t == ignore || t < 0 || t >= v) {
      if (threadIdx.x == 0) part[r] = 0.0;
      continue;
    }
    const float *x = logits + r * v;
    float m;
    double et, rest;
    row_stats(x, v, t, &m, &et, &rest, shd, shf);
    if (threadIdx.x == 0) part[r] = log(et + rest) - ((double)x[t] - (double)m);
  }
}

/* out = sum(part[0..n)) / div, or 0 when div == 0; with tg != NULL, div is
 * the number of targets that are not ignore_index. One block. */
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

extern "C" __global__ void __launch_bounds__(THREADS) gpa_ce_bwd(float *dl, const float *logits, const int *tg,
                                                                 const long long *cnt, long long n, long long v,
                                                                 long long ignore, double scale) {
  __shared__ double shd[THREADS];
  __shared__ float shf[THREADS];
  const long long count = *cnt > 0 ? *cnt : 1;
  const double k = scale / (double)count;
  for (long long r = blockIdx.x; r < n; r += gridDim.x) {
    const long long t = tg[r];
    float *o = dl + r * v;
    if (t == ignore || t < 0 || t >= v) {
      for (long long i = threadIdx.x; i < v; i += THREADS) o[i] = 0.0f;
      continue;
    }
    const float *x = logits + r * v;
    float m;
    double et, rest;
    row_stats(x, v, t, &m, &et, &rest, shd, shf);
    const double z = et + rest;
    const float f = (float)(k / z);
    for (long long i = threadIdx.x; i < v; i += THREADS) o[i] = i == t ? (float)(-k * rest / z) : expf(x[i] - m) * f;
  }
}

/* part[r] = sum (y - t)^2 (cosine == 0) or dot / max(|y||t|, eps). */
extern "C" __global__ void __launch_bounds__(THREADS) gpa_pair_rows(double *part, const float *y, const float *t,
                                                                    long long rows, long long d, double eps,
                                                                    int cosine) {
  __shared__ double sh[THREADS];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *a = y + r * d, *b = t + r * d;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0;
    for (long long i = threadIdx.x; i < d; i += THREADS) {
      const double u = a[i], w = b[i];
      if (cosine) {
        s0 += u * w;
        s1 += u * u;
        s2 += w * w;
      } else {
        s0 += (u - w) * (u - w);
      }
    }
    s0 = block_sum_d(s0, sh);
    if (cosine) {
      s1 = block_sum_d(s1, sh);
      s2 = block_sum_d(s2, sh);
    }
    if (threadIdx.x == 0) {
      if (cosine) {
        const double den = sqrt(s1 * s2);
        part[r] = s0 / (den > eps ? den : eps);
      } else {
        part[r] = s0;
      }
    }
  }
}
