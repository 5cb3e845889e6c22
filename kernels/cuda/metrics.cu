/* Metrics of the CUDA backend: cross-entropy (loss and gradient), MSE and
 * cosine, reduced on the device; only the scalar result is ever read back.
 * Per-row partials in double (a lane group per row, gpa_rows.h: shuffle
 * trees, no block barriers), then one block adds them in a fixed order (deterministic). Formulas follow kernels/host/metrics.c:
 * the target's exp term is kept apart so softmax - 1 stays exact when the
 * target dominates. Cross-entropy also reads bf16 logits (widened) and
 * writes bf16 dlogits (rounded once): the same template bodies. */
#include "gpa_bf16.h"
#include "gpa_rows.h"
#include "launch_shapes.h"

#define THREADS 256 /* gpa_sum_final, gpa_ce_count: one block */
#define NONE_POS 0xffffffffffffffffull /* no bad target */

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
    const float xi = gpa_ldf(x, i);
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
  *et = (len && t >= 0 && t < len) ? (double)expf(gpa_ldf(x, t) - mr) : 0.0;
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
    if (ok && sub == 0) part[row] = use ? log(et + rest) - ((double)gpa_ldf(x, t) - (double)m) : 0.0;
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

/* Block minimum (blockDim.x == THREADS); every thread gets it. */
static __device__ unsigned long long block_min_u64(unsigned long long v, unsigned long long *sh) {
  const int t = threadIdx.x;
  __syncthreads();
  sh[t] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) sh[t] = sh[t + s] < sh[t] ? sh[t + s] : sh[t];
    __syncthreads();
  }
  return sh[0];
}

/* The targets' index check (ops/cuda_index.c's gpa_idx_check and
 * gpa_idx_fetch, embedding.cu) done by the one block that reads every
 * target anyway (gpa_sum_final of cross_entropy_fwd, gpa_ce_count of
 * cross_entropy_bwd): each thread's first bad position is its lowest (it
 * walks up), the block's minimum the first; res[0] = it (~0 if none),
 * res[1] = its target, as the check kernels leave them. Two launches and
 * a memset fewer on the op's path. */
static __device__ __forceinline__ void first_bad(unsigned long long *bad, const int *tg, long long i, long long v,
                                                 long long ignore) {
  const long long t = tg[i];
  if (*bad == NONE_POS && t != ignore && (t < 0 || t >= v)) *bad = (unsigned long long)i;
}
static __device__ void write_bad(unsigned long long *res, unsigned long long bad, const int *tg,
                                 unsigned long long *sh) {
  bad = block_min_u64(bad, sh);
  if (threadIdx.x == 0) {
    res[0] = bad;
    res[1] = bad != NONE_POS ? (unsigned long long)(long long)tg[bad] : 0;
  }
}

/* res != NULL (cross-entropy): the targets are checked against [0, v) */
extern "C" __global__ void __launch_bounds__(THREADS) gpa_sum_final(float *out, const double *part, long long n,
                                                                    double div, const int *tg, long long ignore,
                                                                    long long v, unsigned long long *res) {
  __shared__ double sh[THREADS];
  __shared__ unsigned long long shb[THREADS];
  double s = 0.0, c = 0.0;
  unsigned long long bad = NONE_POS;
  for (long long i = threadIdx.x; i < n; i += THREADS) {
    s += part[i];
    if (tg) c += tg[i] != ignore ? 1.0 : 0.0;
    if (res) first_bad(&bad, tg, i, v, ignore);
  }
  s = block_sum_d(s, sh);
  if (tg) div = block_sum_d(c, sh);
  if (res) write_bad(res, bad, tg, shb);
  if (threadIdx.x == 0) *out = div > 0.0 ? (float)(s / div) : 0.0f;
}

/* cnt[0] = number of targets that are not ignore_index; the targets
 * checked into res (gpa_sum_final's). One block. */
extern "C" __global__ void __launch_bounds__(THREADS) gpa_ce_count(long long *cnt, const int *tg, long long n,
                                                                   long long ignore, long long v,
                                                                   unsigned long long *res) {
  __shared__ double sh[THREADS];
  __shared__ unsigned long long shb[THREADS];
  double c = 0.0;
  unsigned long long bad = NONE_POS;
  for (long long i = threadIdx.x; i < n; i += THREADS) {
    c += tg[i] != ignore ? 1.0 : 0.0;
    first_bad(&bad, tg, i, v, ignore);
  }
  c = block_sum_d(c, sh);
  write_bad(res, bad, tg, shb);
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
      for (long long i = sub; i < v; i += g) gpa_stf(o, i, 0.0f);
      continue;
    }
    const double z = et + rest;
    const float f = (float)(k / z);
    for (long long i = sub; i < v; i += g) gpa_stf(o, i, i == t ? (float)(-k * rest / z) : expf(gpa_ldf(x, i) - m) * f);
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

/* ---- one block per row, the row held in registers (backward, forward) --
 * The lane-group ce_bwd above reads each row twice (statistics, then the
 * gradient); at 16384 x 4096 f32 its warps' rows in flight (~64 per SM of
 * 16 KiB, ~135 MB over an H100) are more than L2 holds, so the second read
 * comes from DRAM: 3 passes of 268 MB, 0.59 of PyTorch (issue 25). Here
 * each thread loads its NV vectors of V values (float4, 8 bf16; vector q
 * = thread + k blockDim.x) once, the row's max and the sum of the other
 * terms are reduced by the warps' shuffle trees and then the warps'
 * results in warp order (a fixed order: deterministic), each exp is
 * computed once and kept in the registers, and dlogits is written from
 * them: one read and one write. Per value the formulas are ce_bwd's (the
 * same expf(x - m) * f, the same double terms); only the order of the
 * double sum differs. The host picks it (ops/metrics/cuda.c) when V
 * divides the row and every pointer is 16-byte aligned; the forward
 * (ce_fwd_row) too, for its 16-byte loads and no per-value rescaling. */
/* The row's statistics with the row in registers: loads the thread's NV
 * vectors into e, sets *m to the row's max and returns the double sum of
 * exp(x - m) over the row but its target t, leaving e[q][j] = exp(x - m).
 * Block-wide (every thread must call it); red* are rewritten by the next
 * call only after the barrier at its end. */
template <typename T, int V, int NV>
static __device__ double ce_row_stats(float *redf, double *redd, const T *__restrict__ xr, long long v, long long t,
                                      float (&e)[NV][V], float *m_out) {
  const int tid = (int)threadIdx.x, nt = (int)blockDim.x, warp = tid / 32, lane = tid % 32, nw = nt / 32;
  float m = -INFINITY;
GPA_UNROLL
  for (int q = 0; q < NV; q++) {
    const long long i = (long long)(tid + q * nt) * V;
    if (i < v) {
      gpa_ld16(xr + i, e[q]);
GPA_UNROLL
      for (int j = 0; j < V; j++) m = e[q][j] > m ? e[q][j] : m; /* as ce_bwd's: NaN never raises m */
    }
  }
  m = gpa_group_max(m, 32);
  if (lane == 0) redf[warp] = m;
  __syncthreads();
  m = redf[0];
  for (int w = 1; w < nw; w++) m = fmaxf(m, redf[w]);
  double s = 0.0;
GPA_UNROLL
  for (int q = 0; q < NV; q++) {
    const long long i = (long long)(tid + q * nt) * V;
    /* the target's place in this vector, or -1: a 32-bit compare with a
     * constant per value instead of a 64-bit one */
    const int jt = t >= i && t < i + V ? (int)(t - i) : -1;
    if (i < v && m != -INFINITY) {
GPA_UNROLL
      for (int j = 0; j < V; j++) {
        e[q][j] = expf(e[q][j] - m);
        if (j != jt) s += (double)e[q][j]; /* the target apart */
      }
    } else if (i < v) {
      /* the row's max is -inf: -inf entries add nothing (exp(-inf - -inf)
       * would be NaN), a NaN propagates */
GPA_UNROLL
      for (int j = 0; j < V; j++) {
        const float xi = e[q][j];
        e[q][j] = expf(xi - m);
        if (j != jt && xi != xi) s += (double)e[q][j];
      }
    }
  }
  s = gpa_group_sum_d(s, 32);
  if (lane == 0) redd[warp] = s;
  __syncthreads();
  double rest = 0.0;
  for (int w = 0; w < nw; w++) rest += redd[w];
  __syncthreads(); /* redf and redd are rewritten by the next row */
  *m_out = m;
  return rest;
}

template <typename T, int V, int NV>
static __device__ void ce_bwd_row(float *redf, double *redd, T *__restrict__ dl, const T *__restrict__ logits,
                                  const int *__restrict__ tg, const long long *__restrict__ cnt, long long n,
                                  long long v, long long ignore, double scale) {
  const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
  const long long count = *cnt > 0 ? *cnt : 1;
  const double k = scale / (double)count;
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const long long t = tg[row];
    const T *xr = logits + row * v;
    T *o = dl + row * v;
    if (t == ignore || t < 0 || t >= v) { /* uniform over the block */
      const float z[V] = {0};
      for (long long i = (long long)tid * V; i < v; i += (long long)nt * V) gpa_st16(o + i, z);
      continue;
    }
    float e[NV][V], m;
    const double rest = ce_row_stats<T, V, NV>(redf, redd, xr, v, t, e, &m);
    const double et = (double)expf(gpa_ldf(xr, t) - m), z = et + rest;
    const float f = (float)(k / z), ft = (float)(-k * rest / z);
GPA_UNROLL
    for (int q = 0; q < NV; q++) {
      const long long i = (long long)(tid + q * nt) * V;
      if (i < v) {
GPA_UNROLL
        for (int j = 0; j < V; j++) e[q][j] = i + j == t ? ft : e[q][j] * f;
        gpa_st16(o + i, e[q]);
      }
    }
  }
}

/* The forward's per-row loss from the same statistics: the row read once
 * with 16-byte loads, no rescaling branch per value (ce_rows' online
 * softmax), the same part[row] formula. */
template <typename T, int V, int NV>
static __device__ void ce_fwd_row(float *redf, double *redd, double *part, const T *__restrict__ logits,
                                  const int *__restrict__ tg, long long n, long long v, long long ignore) {
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const long long t = tg[row];
    const T *xr = logits + row * v;
    if (t == ignore || t < 0 || t >= v) { /* uniform over the block */
      if (threadIdx.x == 0) part[row] = 0.0;
      continue;
    }
    float e[NV][V], m;
    const double rest = ce_row_stats<T, V, NV>(redf, redd, xr, v, t, e, &m);
    if (threadIdx.x == 0) {
      const double et = (double)expf(gpa_ldf(xr, t) - m);
      part[row] = log(et + rest) - ((double)gpa_ldf(xr, t) - (double)m);
    }
  }
}

extern "C" __global__ void __launch_bounds__(GPA_CE_ROW_MAX_THREADS_F32) gpa_ce_rows_row(double *part, const float *logits, const int *tg, long long n, long long v,
                                           long long ignore) {
  __shared__ float redf[32];
  __shared__ double redd[32];
  ce_fwd_row<float, 4, GPA_CE_ROW_NV>(redf, redd, part, logits, tg, n, v, ignore);
}

extern "C" __global__ void __launch_bounds__(GPA_CE_ROW_MAX_THREADS_BF16) gpa_ce_rows_row_bf16(double *part, const gpa_bf16 *logits, const int *tg, long long n,
                                                long long v, long long ignore) {
  __shared__ float redf[32];
  __shared__ double redd[32];
  ce_fwd_row<gpa_bf16, 8, GPA_CE_ROW_NV>(redf, redd, part, logits, tg, n, v, ignore);
}

/* NV vectors a thread: blockDim.x = ceil(V / (GPA_CE_ROW_NV x 4 or 8)) rounded up to a warp (<= 1024) */
extern "C" __global__ void __launch_bounds__(GPA_CE_ROW_MAX_THREADS_F32) gpa_ce_bwd_row(float *dl, const float *logits, const int *tg, const long long *cnt,
                                          long long n, long long v, long long ignore, double scale) {
  __shared__ float redf[32];
  __shared__ double redd[32];
  ce_bwd_row<float, 4, GPA_CE_ROW_NV>(redf, redd, dl, logits, tg, cnt, n, v, ignore, scale);
}

extern "C" __global__ void __launch_bounds__(GPA_CE_ROW_MAX_THREADS_BF16) gpa_ce_bwd_row_bf16(gpa_bf16 *dl, const gpa_bf16 *logits, const int *tg,
                                               const long long *cnt, long long n, long long v, long long ignore,
                                               double scale) {
  __shared__ float redf[32];
  __shared__ double redd[32];
  ce_bwd_row<gpa_bf16, 8, GPA_CE_ROW_NV>(redf, redd, dl, logits, tg, cnt, n, v, ignore, scale);
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
