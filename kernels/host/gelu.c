/* GELU: chunks of CH elements; the transcendental part goes through the
 * vector math of vmath.c, the rest are plain loops the compiler vectorizes. */
#include "kernels/host/gelu.h"

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
} gelu_ctx;

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

void gpa__gelu_fwd_f32(const gpa__par *par, float *y, const float *x, int64_t n, int approximate) {
  gelu_ctx c = {.out = y, .x = x, .approximate = approximate};
  gpa__pfor(par, n, GELU_GRAIN, fwd_range, &c);
}

void gpa__gelu_bwd_f32(const gpa__par *par, float *dx, const float *x, const float *dy, int64_t n,
                       int approximate) {
  gelu_ctx c = {.out = dx, .x = x, .dy = dy, .approximate = approximate};
  gpa__pfor(par, n, GELU_GRAIN, bwd_range, &c);
}
