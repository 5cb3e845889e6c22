/* GELU. With AVX2+FMA (checked at run time): one fused pass, 8 lanes, our
 * own erfc (below) and exp (simd_exp.h): memory-bound on two cores. Else:
 * chunks of CH elements whose transcendental part goes through vmath.c (libm
 * or libmvec), the rest plain loops the compiler vectorizes. */
#include "kernels/host/gelu.h"

#include <string.h>

#include "kernels/host/nt_store.h"
#include "kernels/host/simd_exp.h"
#include "kernels/host/vmath.h"

#define CH 1024
#define GELU_GRAIN 16384
#define K_TANH 0.7978845608028654f /* sqrt(2/pi) */
#define C_TANH 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT2PI 0.3989422804014327f

typedef struct gelu_ctx {
  float *out;
  const float *x, *dy;
  int approximate;
  int avx2, nt;
} gelu_ctx;

#ifdef GPA__HAVE_AVX2_PATH
/* ---- AVX2+FMA: one fused pass over memory, 8 lanes at a time ------------
 *
 * erf form, without erfc from libm: for a = |x|, z = a/sqrt2,
 *   erfc(z) = t * exp(-z^2) * 2 Q(t),  t = 1 / (1 + 0.3 z),
 * where Q(t) = erfcx(z) / (2t) is smooth on t in (0, 1]. Q is a degree-8
 * polynomial fitted (Chebyshev, mpmath) on t in [0.2519, 1], i.e. |x| <= 14.
 * x is clamped to +-13.2 (exp(-x^2/2) >= 1.5e-38, a normal float): past
 * that Phi(x) is 1 in float, or below 1e-38.
 * Fit error 1.0e-8 relative, 5.3e-8 with the coefficients rounded to float;
 * the float evaluation (Horner, one reciprocal, exp) adds a few ulp: about
 * 3e-7 relative at worst, well inside the parity tolerance (1e-5). Relative,
 * not absolute: the negative tail keeps its digits (no 1 + erf(u) there).
 * exp(-x^2/2) takes x^2 as hi + lo (FMA), since its relative error grows
 * with the argument (x^2 * 2^-24 would be 1e-5 at |x| = 13).
 * The same exp(-x^2/2) is the backward's density term. */
#define GQ0 8.458664268e-02f
#define GQ1 8.547236025e-02f
#define GQ2 7.341475785e-02f
#define GQ3 1.102009416e-01f
#define GQ4 -5.332492292e-02f
#define GQ5 2.820096314e-01f
#define GQ6 -2.628555596e-01f
#define GQ7 2.458591610e-01f
#define GQ8 -6.536302716e-02f
#define GQ_P 0.21213203435596426f /* 0.3 / sqrt2 */

/* Phi(x) = 0.5 erfc(-x/sqrt2), and exp(-x^2/2) in *e. */
GPA__AVX2_ATTR static inline __m256 cdf8(__m256 x, __m256 *e) {
  const __m256 one = _mm256_set1_ps(1.0f);
  /* min/max with x second: NaN stays NaN */
  __m256 xc = _mm256_max_ps(_mm256_set1_ps(-13.2f), _mm256_min_ps(_mm256_set1_ps(13.2f), x));
  __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), xc);
  __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(a, _mm256_set1_ps(GQ_P), one));
  __m256 hi = _mm256_mul_ps(xc, xc);
  __m256 lo = _mm256_fmsub_ps(xc, xc, hi);
  __m256 g = gpa__exp8_in_range(_mm256_mul_ps(hi, _mm256_set1_ps(-0.5f))); /* >= -87.12 */
  g = _mm256_fnmadd_ps(_mm256_mul_ps(g, _mm256_set1_ps(0.5f)), lo, g); /* exp(-lo/2) ~ 1 - lo/2 */
  __m256 q = _mm256_set1_ps(GQ8);
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ7));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ6));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ5));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ4));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ3));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ2));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ1));
  q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(GQ0));
  __m256 c = _mm256_mul_ps(_mm256_mul_ps(t, g), q); /* 0.5 erfc(|x|/sqrt2) */
  *e = g;
  /* x >= 0: 1 - c; x < 0 (and NaN): c */
  return _mm256_blendv_ps(c, _mm256_sub_ps(one, c), _mm256_cmp_ps(xc, _mm256_setzero_ps(), _CMP_GE_OQ));
}

GPA__AVX2_ATTR static inline __m256 fwd_erf8(__m256 x) {
  __m256 e;
  return _mm256_mul_ps(x, cdf8(x, &e));
}

GPA__AVX2_ATTR static inline __m256 bwd_erf8(__m256 x, __m256 dy) {
  __m256 e, p = cdf8(x, &e);
  return _mm256_mul_ps(dy, _mm256_fmadd_ps(_mm256_mul_ps(x, _mm256_set1_ps(INV_SQRT2PI)), e, p));
}

/* -2u = x (A + B x^2) */
#define TA (-2.0f * K_TANH)
#define TB (-2.0f * K_TANH * C_TANH)

GPA__AVX2_ATTR static inline __m256 fwd_tanh8(__m256 x) {
  /* exp(-2u) = inf (clamped to e^88 by exp8) gives y = -0: no clamp needed */
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 e = gpa__exp8(_mm256_mul_ps(x, _mm256_fmadd_ps(x2, _mm256_set1_ps(TB), _mm256_set1_ps(TA))));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

GPA__AVX2_ATTR static inline __m256 bwd_tanh8(__m256 x, __m256 dy) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 a = _mm256_mul_ps(x, _mm256_fmadd_ps(x2, _mm256_set1_ps(TB), _mm256_set1_ps(TA)));
  /* clamped so that (1 + e)^-1 and e (1 + e)^-1 stay finite and nonzero */
  a = _mm256_max_ps(_mm256_set1_ps(-80.0f), _mm256_min_ps(_mm256_set1_ps(80.0f), a));
  __m256 e = gpa__exp8_in_range(a);
  __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e)); /* sigmoid(2u) */
  __m256 s1 = _mm256_mul_ps(e, s);                       /* 1 - sigmoid(2u) */
  __m256 du = _mm256_fmadd_ps(x2, _mm256_set1_ps(3.0f * K_TANH * C_TANH), _mm256_set1_ps(K_TANH));
  __m256 k = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), s), _mm256_mul_ps(s1, du));
  return _mm256_mul_ps(dy, _mm256_add_ps(s, k));
}

/* The loops: whole vectors, then the tail through a zero-padded block. With
 * nt (see nt_store.h), a head up to y's 32-byte alignment goes through the
 * padded block too, and the body streams. */
#define GELU_LOOP1(NAME, F)                                                              \
  GPA__AVX2_ATTR static void NAME##_part(float *y, const float *x, int64_t n) {         \
    float t[8] = {0};                                                                    \
    memcpy(t, x, (size_t)n * sizeof *t);                                                 \
    _mm256_storeu_ps(t, F(_mm256_loadu_ps(t)));                                          \
    memcpy(y, t, (size_t)n * sizeof *t);                                                 \
  }                                                                                      \
  GPA__AVX2_ATTR static void NAME(float *y, const float *x, int64_t n, int nt) {        \
    int64_t i = 0;                                                                       \
    if (nt) {                                                                            \
      int64_t h = (int64_t)((32 - ((uintptr_t)y & 31)) & 31) / 4;                        \
      if (h > n) h = n;                                                                  \
      if (h) NAME##_part(y, x, h);                                                       \
      for (i = h; i + 8 <= n; i += 8) _mm256_stream_ps(y + i, F(_mm256_loadu_ps(x + i))); \
      _mm_sfence();                                                                      \
    } else {                                                                             \
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, F(_mm256_loadu_ps(x + i)));    \
    }                                                                                    \
    if (i < n) NAME##_part(y + i, x + i, n - i);                                         \
  }
#define GELU_LOOP2(NAME, F)                                                                       \
  GPA__AVX2_ATTR static void NAME##_part(float *dx, const float *x, const float *dy, int64_t n) { \
    float t[8] = {0}, u[8] = {0};                                                                 \
    memcpy(t, x, (size_t)n * sizeof *t);                                                          \
    memcpy(u, dy, (size_t)n * sizeof *u);                                                         \
    _mm256_storeu_ps(t, F(_mm256_loadu_ps(t), _mm256_loadu_ps(u)));                              \
    memcpy(dx, t, (size_t)n * sizeof *t);                                                         \
  }                                                                                               \
  GPA__AVX2_ATTR static void NAME(float *dx, const float *x, const float *dy, int64_t n, int nt) { \
    int64_t i = 0;                                                                                \
    if (nt) {                                                                                     \
      int64_t h = (int64_t)((32 - ((uintptr_t)dx & 31)) & 31) / 4;                                \
      if (h > n) h = n;                                                                           \
      if (h) NAME##_part(dx, x, dy, h);                                                           \
      for (i = h; i + 8 <= n; i += 8)                                                             \
        _mm256_stream_ps(dx + i, F(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i)));            \
      _mm_sfence();                                                                               \
    } else {                                                                                      \
      for (; i + 8 <= n; i += 8)                                                                  \
        _mm256_storeu_ps(dx + i, F(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i)));            \
    }                                                                                             \
    if (i < n) NAME##_part(dx + i, x + i, dy + i, n - i);                                         \
  }
GELU_LOOP1(fwd_erf_avx2, fwd_erf8)
GELU_LOOP1(fwd_tanh_avx2, fwd_tanh8)
GELU_LOOP2(bwd_erf_avx2, bwd_erf8)
GELU_LOOP2(bwd_tanh_avx2, bwd_tanh8)
#endif

GPA__KCLONES static void tanh_arg(float *restrict t, const float *restrict x, int64_t n) {
  /* t = -2u, clamped so that exp(t) and (1 + e)^-1 stay finite and nonzero */
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    float a = -2.0f * K_TANH * (v + C_TANH * v * v * v);
    a = a > 80.0f ? 80.0f : a;
    t[i] = a < -80.0f ? -80.0f : a;
  }
}

GPA__KCLONES static void neg_scale(float *restrict t, const float *restrict x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) t[i] = -s * x[i];
}

GPA__KCLONES static void fwd_tanh_fin(float *y, const float *x, const float *restrict e, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + e[i]);
}

GPA__KCLONES static void fwd_erf_fin(float *y, const float *x, const float *restrict c, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * c[i];
}

GPA__KCLONES static void bwd_tanh_fin(float *dx, const float *x, const float *dy, const float *restrict e,
                                      int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    float s = 1.0f / (1.0f + e[i]);     /* sigmoid(2u) */
    float s1 = e[i] * s;                /* 1 - sigmoid(2u) */
    float du = K_TANH * (1.0f + 3.0f * C_TANH * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * s1 * du);
  }
}

GPA__KCLONES static void bwd_erf_fin(float *dx, const float *x, const float *dy, const float *restrict c,
                                     const float *restrict g, int64_t n) {
  /* c = erfc(-x/sqrt2), g = exp(-x^2/2) */
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (0.5f * c[i] + x[i] * INV_SQRT2PI * g[i]);
}

GPA__KCLONES static void half_sq_neg(float *restrict t, const float *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) t[i] = -0.5f * x[i] * x[i];
}

static void fwd_range(int64_t s, int64_t e, void *p) {
  const gelu_ctx *c = p;
#ifdef GPA__HAVE_AVX2_PATH
  if (c->avx2) {
    (c->approximate == GPA__GELU_TANH ? fwd_tanh_avx2 : fwd_erf_avx2)(c->out + s, c->x + s, e - s, c->nt);
    return;
  }
#endif
  float t[CH];
  for (int64_t i = s; i < e; i += CH) {
    int64_t n = e - i < CH ? e - i : CH;
    const float *x = c->x + i;
    if (c->approximate == GPA__GELU_TANH) {
      /* forward needs no clamp: exp(-2u) = inf gives y = -0 */
      for (int64_t j = 0; j < n; j++) t[j] = -2.0f * K_TANH * (x[j] + C_TANH * x[j] * x[j] * x[j]);
      gpa__vexpf(t, t, n);
      fwd_tanh_fin(c->out + i, x, t, n);
    } else {
      neg_scale(t, x, INV_SQRT2, n);
      gpa__verfcf(t, t, n);
      fwd_erf_fin(c->out + i, x, t, n);
    }
  }
}

static void bwd_range(int64_t s, int64_t e, void *p) {
  const gelu_ctx *c = p;
#ifdef GPA__HAVE_AVX2_PATH
  if (c->avx2) {
    (c->approximate == GPA__GELU_TANH ? bwd_tanh_avx2 : bwd_erf_avx2)(c->out + s, c->x + s, c->dy + s, e - s, c->nt);
    return;
  }
#endif
  float t[CH], g[CH];
  for (int64_t i = s; i < e; i += CH) {
    int64_t n = e - i < CH ? e - i : CH;
    const float *x = c->x + i;
    if (c->approximate == GPA__GELU_TANH) {
      tanh_arg(t, x, n);
      gpa__vexpf(t, t, n);
      bwd_tanh_fin(c->out + i, x, c->dy + i, t, n);
    } else {
      neg_scale(t, x, INV_SQRT2, n);
      gpa__verfcf(t, t, n);
      half_sq_neg(g, x, n);
      gpa__vexpf(g, g, n);
      bwd_erf_fin(c->out + i, x, c->dy + i, t, g, n);
    }
  }
}

static int cpu_avx2(void) {
#ifdef GPA__HAVE_AVX2_PATH
  return gpa__cpu_avx2();
#else
  return 0;
#endif
}

void gpa__gelu_fwd_f32(const gpa__par *par, float *y, const float *x, int64_t n, int approximate) {
  gelu_ctx c = {.out = y, .x = x, .approximate = approximate, .avx2 = cpu_avx2(),
                .nt = gpa__nt_worth(8 * (uint64_t)(n > 0 ? n : 0)) && (void *)y != (const void *)x};
  gpa__pfor(par, n, GELU_GRAIN, fwd_range, &c);
}

void gpa__gelu_bwd_f32(const gpa__par *par, float *dx, const float *x, const float *dy, int64_t n,
                       int approximate) {
  gelu_ctx c = {.out = dx, .x = x, .dy = dy, .approximate = approximate, .avx2 = cpu_avx2(),
                .nt = gpa__nt_worth(12 * (uint64_t)(n > 0 ? n : 0)) && (void *)dx != (const void *)x &&
                      (void *)dx != (const void *)dy};
  gpa__pfor(par, n, GELU_GRAIN, bwd_range, &c);
}
