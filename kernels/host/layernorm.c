/* LayerNorm kernels; see layernorm.h for the math and the determinism rule.
 * Row sums use eight double accumulators (a fixed order the compiler can
 * vectorize without reassociating). */
#include "kernels/host/layernorm.h"

#include <math.h>
#include <string.h>

#define LN_GRAIN 16384 /* elements per task */

typedef struct ln_ctx {
  float *y, *mean, *rstd, *dgamma, *dbeta;
  const float *x, *dy, *gamma, *beta, *mean_in, *rstd_in;
  int64_t N, D;
  double eps;
  double *part; /* [blocks][2][D]: dgamma, dbeta partials */
} ln_ctx;

GPA__KCLONES static double row_sum(const float *restrict x, int64_t D) {
  double a[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= D; i += 8)
    for (int j = 0; j < 8; j++) a[j] += (double)x[i + j];
  double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; i < D; i++) s += (double)x[i];
  return s;
}

GPA__KCLONES static double row_sqdev(const float *restrict x, double m, int64_t D) {
  double a[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= D; i += 8)
    for (int j = 0; j < 8; j++) {
      double d = (double)x[i + j] - m;
      a[j] += d * d;
    }
  double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  for (; i < D; i++) s += ((double)x[i] - m) * ((double)x[i] - m);
  return s;
}

GPA__KCLONES static void row_norm(float *restrict y, const float *restrict x, const float *restrict g,
                                  const float *restrict b, double m, double r, int64_t D) {
  for (int64_t i = 0; i < D; i++) y[i] = (float)(((double)x[i] - m) * r) * g[i] + b[i];
}

static void fwd_rows(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D;
  for (int64_t n = s; n < e; n++) {
    const float *x = c->x + n * D;
    double m = D ? row_sum(x, D) / (double)D : 0.0;
    double var = D ? row_sqdev(x, m, D) / (double)D : 0.0;
    double r = 1.0 / sqrt(var + c->eps);
    row_norm(c->y + n * D, x, c->gamma, c->beta, m, r, D);
    c->mean[n] = (float)m;
    c->rstd[n] = (float)r;
  }
}

void gpa__layernorm_fwd_f32(const gpa__par *par, float *y, float *mean, float *rstd, const float *x,
                            const float *gamma, const float *beta, int64_t N, int64_t D, double eps) {
  ln_ctx c = {.y = y, .mean = mean, .rstd = rstd, .x = x, .gamma = gamma, .beta = beta, .N = N, .D = D,
              .eps = eps};
  int64_t grain = LN_GRAIN / (D > 0 ? D : 1);
  gpa__pfor(par, N, grain < 1 ? 1 : grain, fwd_rows, &c);
}

/* One row of the backward: dx, and the row's share of the column partials. */
GPA__KCLONES static void bwd_row(float *restrict dx, double *restrict pg, double *restrict pb,
                                 const float *restrict x, const float *restrict dy,
                                 const float *restrict gamma, double m, double r, int64_t D) {
  double a[8] = {0}, b[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= D; i += 8)
    for (int j = 0; j < 8; j++) {
      double xh = ((double)x[i + j] - m) * r;
      double g = (double)dy[i + j] * (double)gamma[i + j];
      a[j] += g;
      b[j] += g * xh;
    }
  double sa = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  double sb = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
  for (; i < D; i++) {
    double xh = ((double)x[i] - m) * r;
    double g = (double)dy[i] * (double)gamma[i];
    sa += g;
    sb += g * xh;
  }
  const double ma = sa / (double)D, mb = sb / (double)D;
  for (i = 0; i < D; i++) {
    double xh = ((double)x[i] - m) * r;
    double g = (double)dy[i] * (double)gamma[i];
    dx[i] = (float)(r * (g - ma - xh * mb));
    pg[i] += (double)dy[i] * xh;
    pb[i] += (double)dy[i];
  }
}

static void bwd_blocks(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D;
  for (int64_t blk = s; blk < e; blk++) {
    double *pg = c->part + blk * 2 * D, *pb = pg + D;
    memset(pg, 0, (size_t)(2 * D) * sizeof *pg);
    int64_t r1 = (blk + 1) * GPA__LN_BLOCK_ROWS;
    if (r1 > c->N) r1 = c->N;
    for (int64_t n = blk * GPA__LN_BLOCK_ROWS; n < r1; n++)
      bwd_row(c->y + n * D, pg, pb, c->x + n * D, c->dy + n * D, c->gamma,
              (double)c->mean_in[n], (double)c->rstd_in[n], D);
  }
}

/* Column sums over the blocks, in block order. */
GPA__KCLONES static void bwd_cols(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D, nb = (c->N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  for (int64_t j = s; j < e; j++) {
    double g = 0.0, b = 0.0;
    for (int64_t blk = 0; blk < nb; blk++) {
      g += c->part[blk * 2 * D + j];
      b += c->part[blk * 2 * D + D + j];
    }
    c->dgamma[j] = (float)g;
    c->dbeta[j] = (float)b;
  }
}

size_t gpa__layernorm_bwd_scratch(int64_t N, int64_t D) {
  if (N <= 0 || D <= 0) return 0;
  int64_t nb = (N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  return (size_t)nb * 2 * (size_t)D * sizeof(double);
}

void gpa__layernorm_bwd_f32(const gpa__par *par, float *dx, float *dgamma, float *dbeta, const float *x,
                            const float *dy, const float *gamma, const float *mean, const float *rstd,
                            int64_t N, int64_t D, void *scratch) {
  if (D <= 0) return;
  if (N <= 0) {
    memset(dgamma, 0, (size_t)D * sizeof *dgamma);
    memset(dbeta, 0, (size_t)D * sizeof *dbeta);
    return;
  }
  ln_ctx c = {.y = dx, .dgamma = dgamma, .dbeta = dbeta, .x = x, .dy = dy, .gamma = gamma,
              .mean_in = mean, .rstd_in = rstd, .N = N, .D = D, .part = scratch};
  int64_t nb = (N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  int64_t grain = LN_GRAIN / (GPA__LN_BLOCK_ROWS * D);
  gpa__pfor(par, nb, grain < 1 ? 1 : grain, bwd_blocks, &c);
  int64_t cg = LN_GRAIN / nb;
  gpa__pfor(par, D, cg < 64 ? 64 : cg, bwd_cols, &c);
}
