/* Metric kernels; see metrics.h. Softmax rows go through gpa__vexpf in
 * chunks of CH on the stack. */
#include "kernels/host/metrics.h"

#include <math.h>
#include <string.h>

#include "kernels/host/vmath.h"

#define CH 1024
#define MET_GRAIN 16384 /* elements per task */

typedef struct met_ctx {
  float *out;
  const float *a, *b;
  const int32_t *t;
  int64_t N, V;
  int64_t ignore;
  double scale, eps;
  double *part;
} met_ctx;


GPA__KCLONES static float row_max(const float *restrict x, int64_t V) {
  float m[16];
  int64_t i = 0;
  for (int j = 0; j < 16; j++) m[j] = -INFINITY;
  for (; i + 16 <= V; i += 16)
    for (int j = 0; j < 16; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  float r = -INFINITY;
  for (int j = 0; j < 16; j++) r = m[j] > r ? m[j] : r;
  for (; i < V; i++) r = x[i] > r ? x[i] : r;
  return r;
}

GPA__KCLONES static void sub_const(float *restrict t, const float *restrict x, float c, int64_t n) {
  for (int64_t i = 0; i < n; i++) t[i] = x[i] - c;
}

/* Sum of one chunk (<= CH values of exp, all in [0, 1]): 32 float lanes;
 * the chunks are added in double. */
GPA__KCLONES static double sum_f32(const float *restrict t, int64_t n) {
  float a[32] = {0};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 32; j++) a[j] += t[i + j];
  float s = 0.0f;
  for (; i < n; i++) s += t[i];
  for (int j = 0; j < 32; j++) s += a[j];
  return (double)s;
}

/* exp(x - m) over the row into buf (one chunk at a time when buf is a CH
 * scratch, the whole row when buf_is_row); returns the sum of all terms but
 * the target's, which goes to *et. Keeping the target apart keeps its
 * complement exact when the target dominates (loss and softmax - 1 near 0). */
static double row_exp_rest(const float *x, float m, int64_t V, int64_t t, float *buf, int buf_is_row, double *et) {
  double rest = 0.0;
  for (int64_t i = 0; i < V; i += CH) {
    int64_t n = V - i < CH ? V - i : CH;
    float *o = buf_is_row ? buf + i : buf;
    sub_const(o, x + i, m, n);
    gpa__vexpf(o, o, n);
    if (t >= i && t < i + n) {
      float keep = o[t - i];
      *et = (double)keep;
      o[t - i] = 0.0f;
      rest += sum_f32(o, n);
      o[t - i] = keep;
    } else {
      rest += sum_f32(o, n);
    }
  }
  return rest;
}

int64_t gpa__ce_first_bad_target(const int32_t *targets, int64_t N, int64_t V, int64_t ignore_index,
                                 int64_t *count) {
  int64_t cnt = 0;
  for (int64_t n = 0; n < N; n++) {
    int64_t t = targets[n];
    if (t == ignore_index) continue;
    if (t < 0 || t >= V) return n;
    cnt++;
  }
  *count = cnt;
  return -1;
}

static void ce_fwd_rows(int64_t s, int64_t e, void *p) {
  const met_ctx *c = p;
  for (int64_t n = s; n < e; n++) {
    int64_t t = c->t[n];
    if (t == c->ignore) { c->part[n] = 0.0; continue; }
    const float *x = c->a + n * c->V;
    float m = row_max(x, c->V), buf[CH];
    double et = 0.0, rest = row_exp_rest(x, m, c->V, t, buf, 0, &et);
    c->part[n] = log(et + rest) - ((double)x[t] - (double)m);
  }
}

static int64_t rows_grain(int64_t d) {
  int64_t g = MET_GRAIN / (d > 0 ? d : 1);
  return g < 1 ? 1 : g;
}

static double sum_ordered(const double *p, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += p[i];
  return s;
}

void gpa__cross_entropy_fwd_f32(const gpa__par *par, float *loss, const float *logits, const int32_t *targets,
                                int64_t N, int64_t V, int64_t ignore_index, double *scratch) {
  int64_t count = 0;
  for (int64_t n = 0; n < N; n++) count += targets[n] != ignore_index;
  if (count == 0 || V <= 0) { *loss = 0.0f; return; }
  met_ctx c = {.a = logits, .t = targets, .N = N, .V = V, .ignore = ignore_index, .part = scratch};
  gpa__pfor(par, N, rows_grain(V), ce_fwd_rows, &c);
  *loss = (float)(sum_ordered(scratch, N) / (double)count);
}

GPA__KCLONES static void softmax_fin(float *o, const float *e, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) o[i] = e[i] * s;
}

static void ce_bwd_rows(int64_t s, int64_t e, void *p) {
  const met_ctx *c = p;
  const int64_t V = c->V;
  for (int64_t n = s; n < e; n++) {
    float *o = c->out + n * V;
    int64_t t = c->t[n];
    if (t == c->ignore) { memset(o, 0, (size_t)V * sizeof *o); continue; }
    const float *x = c->a + n * V;
    float m = row_max(x, V);
    double k = c->scale / (double)c->N; /* N holds count here */
    double et = 0.0, rest = row_exp_rest(x, m, V, t, o, 1, &et), z = et + rest;
    softmax_fin(o, o, (float)(k / z), V);
    /* softmax - 1 = -(sum of the other terms) / z, exact when the target dominates */
    o[t] = (float)(-k * rest / z);
  }
}

void gpa__cross_entropy_bwd_f32(const gpa__par *par, float *dlogits, const float *logits,
                                const int32_t *targets, int64_t N, int64_t V, int64_t ignore_index,
                                int64_t count, double scale) {
  if (V <= 0) return;
  met_ctx c = {.out = dlogits, .a = logits, .t = targets, .N = count > 0 ? count : 1, .V = V,
               .ignore = ignore_index, .scale = scale};
  gpa__pfor(par, N, rows_grain(V), ce_bwd_rows, &c);
}

/* Double sums in 2 x 4 lanes: groups of 4 doubles map onto whole vectors. */
GPA__KCLONES static double row_sqdiff(const float *restrict y, const float *restrict t, int64_t D) {
  double a0[4] = {0}, a1[4] = {0};
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    for (int j = 0; j < 4; j++) {
      double d = (double)y[i + j] - (double)t[i + j];
      a0[j] += d * d;
    }
    for (int j = 0; j < 4; j++) {
      double d = (double)y[i + 4 + j] - (double)t[i + 4 + j];
      a1[j] += d * d;
    }
  }
  double s = 0.0;
  for (int j = 0; j < 4; j++) s += a0[j] + a1[j];
  for (; i < D; i++) s += ((double)y[i] - (double)t[i]) * ((double)y[i] - (double)t[i]);
  return s;
}

static void mse_rows(int64_t s, int64_t e, void *p) {
  const met_ctx *c = p;
  for (int64_t n = s; n < e; n++) c->part[n] = row_sqdiff(c->a + n * c->V, c->b + n * c->V, c->V);
}

void gpa__mse_f32(const gpa__par *par, float *out, const float *y, const float *t, int64_t N, int64_t D,
                  double *scratch) {
  if (N <= 0 || D <= 0) { *out = 0.0f; return; }
  met_ctx c = {.a = y, .b = t, .N = N, .V = D, .part = scratch};
  gpa__pfor(par, N, rows_grain(D), mse_rows, &c);
  *out = (float)(sum_ordered(scratch, N) / ((double)N * (double)D));
}

GPA__KCLONES static void row_dots(const float *restrict y, const float *restrict t, int64_t D, double *r) {
  double a[4] = {0}, b[4] = {0}, d[4] = {0};
  int64_t i = 0;
  for (; i + 4 <= D; i += 4)
    for (int j = 0; j < 4; j++) {
      double u = y[i + j], v = t[i + j];
      a[j] += u * v;
      b[j] += u * u;
      d[j] += v * v;
    }
  double sa = 0.0, sb = 0.0, sd = 0.0;
  for (int j = 0; j < 4; j++) sa += a[j], sb += b[j], sd += d[j];
  for (; i < D; i++) {
    double u = y[i], v = t[i];
    sa += u * v;
    sb += u * u;
    sd += v * v;
  }
  r[0] = sa;
  r[1] = sb;
  r[2] = sd;
}

static void cos_rows(int64_t s, int64_t e, void *p) {
  const met_ctx *c = p;
  for (int64_t n = s; n < e; n++) {
    double r[3];
    row_dots(c->a + n * c->V, c->b + n * c->V, c->V, r);
    double den = sqrt(r[1] * r[2]);
    c->part[n] = r[0] / (den > c->eps ? den : c->eps);
  }
}

void gpa__cosine_f32(const gpa__par *par, float *out, const float *y, const float *t, int64_t N, int64_t D,
                     double eps, double *scratch) {
  if (N <= 0) { *out = 0.0f; return; }
  met_ctx c = {.a = y, .b = t, .N = N, .V = D, .eps = eps, .part = scratch};
  gpa__pfor(par, N, rows_grain(D), cos_rows, &c);
  *out = (float)(sum_ordered(scratch, N) / (double)N);
}
