/* Accuracy of the host GELU kernels (both forms, forward and backward) over
 * the whole float range: every 4093rd bit pattern of both signs (normal,
 * denormal, +-inf, NaN), a dense grid over [-16, 16] and the points around
 * the kernels' clamps, against double references in the forms that do not
 * cancel (x Phi(x) through erfc; the tanh form as x / (1 + exp(-2u))).
 *
 * Criterion: relative error <= 1e-5 (the parity tolerance) wherever
 * |reference| >= 1e-15 (for dx: relative to the size of its two terms, see
 * ref_grad); below that (the far negative tail, where y and dx
 * underflow towards 0) absolute error <= 1e-20. NaN gives NaN; +inf gives
 * y = +inf, dx = dy; -inf gives y = -0 or a |y| < 1e-30, dx ~ 0. The worst
 * relative errors per region are printed (docs/ops.md quotes them). Runs
 * the kernels directly (device independent): the path this CPU takes
 * (AVX2+FMA where it has them), then the portable one. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/gelu.h"
#include "util/testutil.h"

/* The portable path (CPUs without AVX2+FMA) as a second copy of the
 * kernels, compiled here with the CPU check answering 0. */
#include "kernels/host/simd_exp.h"
#define gpa__cpu_avx2() 0
#define gpa__gelu_fwd_f32 portable_gelu_fwd
#define gpa__gelu_bwd_f32 portable_gelu_bwd
#include "kernels/host/gelu.c"
#undef gpa__gelu_fwd_f32
#undef gpa__gelu_bwd_f32
#undef gpa__cpu_avx2

static double ref_fwd(double x, int tanh_form) {
  if (tanh_form) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * u));
  }
  return 0.5 * x * erfc(-x / sqrt(2.0));
}

/* d gelu / dx = p + q; *scale = |p| + |q|: the derivative crosses 0 near
 * x = -0.75 by cancellation of its two terms, so its error is measured
 * against the terms' size there, not against the (vanishing) sum */
static double ref_grad(double x, int tanh_form, double *scale) {
  double p, q;
  if (tanh_form) {
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
    double s = 1.0 / (1.0 + exp(-2.0 * u)), s1 = 1.0 / (1.0 + exp(2.0 * u)); /* sigmoid(2u), 1 - that */
    p = s, q = x * s * s1 * 2.0 * k * (1.0 + 3.0 * 0.044715 * x * x);
  } else {
    p = 0.5 * erfc(-x / sqrt(2.0)), q = x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
  }
  *scale = fabs(p) + fabs(q);
  return p + q;
}

typedef struct worst {
  double rel[3]; /* |x| <= 8, 8 < |x| <= 16 (|ref| >= 1e-15), rest */
  float at[3];
} worst;

static float from_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static int failures;

static void check_one(const char *what, float x, float got, double ref, double scale, double dy, worst *w) {
  if (isnan(x)) {
    if (!isnan(got)) fprintf(stderr, "%s: x = NaN gave %.9g\n", what, got), failures++;
    return;
  }
  if (isinf(x)) { /* limits: y(+inf) = +inf, y(-inf) = 0; dx(+inf) = dy, dx(-inf) = 0 */
    int grad = dy != 0;
    double want = x > 0 ? (grad ? dy : INFINITY) : 0.0;
    int ok = x > 0 && !grad ? got == INFINITY : fabs(got - want) <= 1e-30;
    if (!ok) fprintf(stderr, "%s: x = %g gave %.9g, want %g\n", what, x, got, want), failures++;
    return;
  }
  double err = fabs((double)got - ref), a = scale;
  int ok = a >= 1e-15 ? err <= 1e-5 * a : err <= 1e-20;
  if (!ok || isnan(got)) {
    if (failures < 20) fprintf(stderr, "%s: x = %.9g got %.9g ref %.17g (rel %.3g)\n", what, x, got, ref, err / a);
    failures++;
  }
  if (a >= 1e-15) {
    int r = fabsf(x) <= 8 ? 0 : fabsf(x) <= 16 ? 1 : 2;
    if (err / a > w->rel[r]) w->rel[r] = err / a, w->at[r] = x;
  }
}

int main(void) {
  /* inputs: the bit-pattern sweep, the grid, the clamp neighbourhoods, specials */
  const uint32_t stride = 4093;
  int64_t n = (int64_t)(0xFFFFFFFFu / stride) + 1 + (32 << 12) + 1 + 4 * 2001 + 16;
  float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
  float *dy = malloc((size_t)n * sizeof *dy);
  CHECK(x && y && dy);
  int64_t m = 0;
  for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += stride) x[m++] = from_bits((uint32_t)b);
  for (int i = -(16 << 12); i <= (16 << 12); i++) x[m++] = (float)i / 4096.0f;
  const float clamps[] = {9.9f, 13.0f, 10.0f, 13.2f};
  for (int c = 0; c < 4; c++)
    for (int i = -1000; i <= 1000; i++) x[m++] = (i & 1 ? -1 : 1) * clamps[c] * (1.0f + (float)i * 1e-5f);
  const float specials[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1.1754944e-38f, -1.1754944e-38f, 3.4028235e38f,
                            -3.4028235e38f, INFINITY, -INFINITY, NAN, -NAN, 1e-20f, -1e-20f, 0.75179f, -0.75179f};
  for (int i = 0; i < 16; i++) x[m++] = specials[i];
  CHECK(m <= n);
  for (int64_t i = 0; i < m; i++) dy[i] = 1.0f;

  for (int path = 0; path < 2; path++)
  for (int form = 0; form <= 1; form++) {
    const char *fn = form ? "tanh" : "erf", *pn = path ? "portable" : gpa__cpu_avx2() ? "avx2" : "portable";
    worst wf = {{0}, {0}}, wb = {{0}, {0}};
    char what[64];
    (path ? portable_gelu_fwd : gpa__gelu_fwd_f32)(NULL, y, x, m, form);
    snprintf(what, sizeof what, "gelu_fwd %s %s", fn, pn);
    for (int64_t i = 0; i < m; i++) {
      double r = ref_fwd(x[i], form);
      check_one(what, x[i], y[i], r, fabs(r), 0, &wf);
    }
    (path ? portable_gelu_bwd : gpa__gelu_bwd_f32)(NULL, y, x, dy, m, form);
    snprintf(what, sizeof what, "gelu_bwd %s %s", fn, pn);
    for (int64_t i = 0; i < m; i++) {
      double sc, r = ref_grad(x[i], form, &sc);
      check_one(what, x[i], y[i], r, sc, 1, &wb);
    }
    printf("%s %s: worst relative error fwd |x|<=8 %.3g (x=%.7g), 8<|x|<=16 %.3g (x=%.7g), beyond %.3g; "
           "bwd %.3g (x=%.7g), %.3g (x=%.7g), %.3g\n",
           pn, fn, wf.rel[0], wf.at[0], wf.rel[1], wf.at[1], wf.rel[2], wb.rel[0], wb.at[0], wb.rel[1], wb.at[1],
           wb.rel[2]);
  }
  free(x), free(y), free(dy);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
