/* Host linear layer: see linear.h.
 *
 * Forward: the bias is broadcast into the output rows first and the GEMM
 * accumulates onto it (beta = 1), so a bias costs one streaming write of
 * the output and no extra read pass; GELU is one vectorized pass after the
 * GEMM (the pre-activation copy, when asked for, comes from the same pass).
 * Backward: g (= dy, or dy * gelu'(pre)), then dx = g W and dW = g^T x as
 * two GEMMs, db as column sums in fixed row order. */
#include "kernels/host/linear.h"

#include <math.h>
#include <string.h>

#include "kernels/host/blas.h"
#include "kernels/host/simd_exp.h"

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* gelu(x) = x * s, s = 1 / (1 + exp(-2u)) = 0.5 (1 + tanh u),
 * gelu'(x) = s + x * 2 s (1 - s) * c (1 + 3 a x^2). */
static inline float gelu_s(float x) {
  float u = GELU_C * (x + GELU_A * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

#ifdef GPA__HAVE_AVX2_PATH
GPA__AVX2_ATTR static inline __m256 gelu_s8(__m256 x) {
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 u = _mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(-2.0f * GELU_C)),
                           _mm256_fmadd_ps(x2, _mm256_set1_ps(GELU_A), _mm256_set1_ps(1.0f)));
  return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), gpa__exp8(u)));
}
GPA__AVX2_ATTR static void gelu_avx2(float *y, float *pre, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (pre) _mm256_storeu_ps(pre + i, v);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, gelu_s8(v)));
  }
  for (; i < n; i++) {
    float v = x[i];
    if (pre) pre[i] = v;
    y[i] = v * gelu_s(v);
  }
}
GPA__AVX2_ATTR static void gelu_grad_avx2(float *g, const float *dy, const float *x, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i), s = gelu_s8(v);
    __m256 x2 = _mm256_mul_ps(v, v);
    __m256 du = _mm256_mul_ps(_mm256_set1_ps(2.0f * GELU_C),
                              _mm256_fmadd_ps(x2, _mm256_set1_ps(3.0f * GELU_A), one));
    __m256 d = _mm256_fmadd_ps(_mm256_mul_ps(v, _mm256_mul_ps(s, _mm256_sub_ps(one, s))), du, s);
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), d));
  }
  for (; i < n; i++) {
    float v = x[i], s = gelu_s(v);
    float d = s + v * s * (1.0f - s) * 2.0f * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
    g[i] = dy[i] * d;
  }
}
#endif

static void gelu_span(float *y, float *pre, const float *x, int64_t n) {
#ifdef GPA__HAVE_AVX2_PATH
  if (gpa__cpu_avx2()) { gelu_avx2(y, pre, x, n); return; }
#endif
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    if (pre) pre[i] = v;
    y[i] = v * gelu_s(v);
  }
}

static void gelu_grad_span(float *g, const float *dy, const float *x, int64_t n) {
#ifdef GPA__HAVE_AVX2_PATH
  if (gpa__cpu_avx2()) { gelu_grad_avx2(g, dy, x, n); return; }
#endif
  for (int64_t i = 0; i < n; i++) {
    float v = x[i], s = gelu_s(v);
    float d = s + v * s * (1.0f - s) * 2.0f * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
    g[i] = dy[i] * d;
  }
}

/* Elementwise passes split in blocks of this many floats. */
#define EW_GRAIN 16384

typedef struct ew_ctx {
  float *y, *pre;
  const float *x, *dy;
} ew_ctx;

static void gelu_range(int64_t b, int64_t e, void *p) {
  const ew_ctx *c = p;
  gelu_span(c->y + b, c->pre ? c->pre + b : NULL, c->x + b, e - b);
}
static void gelu_grad_range(int64_t b, int64_t e, void *p) {
  const ew_ctx *c = p;
  gelu_grad_span(c->y + b, c->dy + b, c->x + b, e - b);
}

void gpa__gelu_tanh(const gpa__par *par, float *y, const float *x, int64_t n) {
  ew_ctx c = {y, NULL, x, NULL};
  gpa__pfor(par, n, EW_GRAIN, gelu_range, &c);
}

void gpa__gelu_tanh_grad(const gpa__par *par, float *g, const float *dy, const float *x, int64_t n) {
  ew_ctx c = {g, NULL, x, dy};
  gpa__pfor(par, n, EW_GRAIN, gelu_grad_range, &c);
}

typedef struct bias_ctx {
  float *y;
  const float *b;
  int64_t out;
} bias_ctx;

static void bias_rows(int64_t r0, int64_t r1, void *p) {
  const bias_ctx *c = p;
  for (int64_t r = r0; r < r1; r++) memcpy(c->y + r * c->out, c->b, (size_t)c->out * sizeof(float));
}

void gpa__linear_fwd(const gpa__par *par, const float *x, const float *W, const float *b, float *y, float *pre,
                     int64_t N, int64_t in, int64_t out, int gelu) {
  if (N <= 0 || out <= 0) return;
  /* The GEMM writes the pre-activation where GELU can read it: into y
   * (GELU then runs in place and copies to pre) or straight into pre. */
  float *acc = y;
  if (b) {
    bias_ctx bc = {acc, b, out};
    gpa__pfor(par, N, EW_GRAIN / out + 1, bias_rows, &bc);
  }
  gpa__sgemm(0, 1, N, out, in, x, in, W, in, b ? 1.0f : 0.0f, acc, out);
  if (gelu) {
    ew_ctx c = {y, pre, acc, NULL};
    gpa__pfor(par, N * out, EW_GRAIN, gelu_range, &c);
  }
}

/* db[j] = sum_r g[r, j], columns in blocks, rows in order. */
typedef struct colsum_ctx {
  float *db;
  const float *g;
  int64_t N, out;
} colsum_ctx;

#define COLSUM_BLOCK 256

static void colsum_range(int64_t b0, int64_t b1, void *p) {
  const colsum_ctx *c = p;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t j0 = blk * COLSUM_BLOCK, j1 = j0 + COLSUM_BLOCK < c->out ? j0 + COLSUM_BLOCK : c->out;
    float *restrict d = c->db;
    for (int64_t j = j0; j < j1; j++) d[j] = 0.0f;
    for (int64_t r = 0; r < c->N; r++) {
      const float *restrict g = c->g + r * c->out;
      for (int64_t j = j0; j < j1; j++) d[j] += g[j];
    }
  }
}

void gpa__linear_bwd(const gpa__par *par, const float *dy, const float *x, const float *W, const float *pre,
                     float *dx, float *dW, float *db, int64_t N, int64_t in, int64_t out, int gelu,
                     float *gscratch) {
  const float *g = dy;
  if (gelu && N > 0 && out > 0) {
    gpa__gelu_tanh_grad(par, gscratch, dy, pre, N * out);
    g = gscratch;
  }
  if (dx) gpa__sgemm(0, 0, N, in, out, g, out, W, in, 0.0f, dx, in);
  if (dW) gpa__sgemm(1, 0, out, in, N, g, out, x, in, 0.0f, dW, in);
  if (db && out > 0) {
    colsum_ctx c = {db, g, N, out};
    gpa__pfor(par, (out + COLSUM_BLOCK - 1) / COLSUM_BLOCK, 1, colsum_range, &c);
  }
}
