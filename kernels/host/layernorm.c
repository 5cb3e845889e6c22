/* LayerNorm kernels; see layernorm.h for the math and the determinism rule.
 * Row sums use 32 float accumulators (a fixed order the compiler vectorizes
 * without reassociating); the statistics are finished in double. */
#include "kernels/host/layernorm.h"

#include <math.h>
#include <string.h>

#include "kernels/host/nt_store.h"

#define LN_GRAIN 16384 /* elements per task */
#define NT_CH 1024     /* floats per streamed piece of y (on the stack) */
#define NT_BWD_MAX 4096 /* the backward streams rows of dx up to this length */

typedef struct ln_ctx {
  float *y, *mean, *rstd, *dgamma, *dbeta;
  const float *x, *dy, *gamma, *beta, *mean_in, *rstd_in;
  int64_t N, D;
  double eps;
  float *part; /* [blocks][2][D]: dgamma, dbeta partials */
  int nt;      /* stream y / dx (nt_store.h) */
} ln_ctx;

/* Sum of (x - p) over the row; 32 float lanes (four AVX2 vectors, two
 * AVX-512 ones) so the adds do not wait on each other. */
GPA__KCLONES static float row_sum_shift(const float *restrict x, float p, int64_t D) {
  float a[32] = {0};
  int64_t i = 0;
  for (; i + 32 <= D; i += 32)
    for (int j = 0; j < 32; j++) a[j] += x[i + j] - p;
  float s = 0.0f;
  for (; i < D; i++) s += x[i] - p;
  for (int j = 0; j < 32; j++) s += a[j];
  return s;
}

/* Sums of d = x - m and of d^2, in double (d too: x - m in float would round
 * every x of one binade the same way, a bias in the mean). */
GPA__KCLONES static void row_dev(const float *restrict x, float m, int64_t D, double *sum, double *sq) {
  /* 2 x 4 lanes of each sum: groups of 4 doubles map onto whole vectors */
  double a0[4] = {0}, a1[4] = {0}, b0[4] = {0}, b1[4] = {0};
  const double md = (double)m;
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    for (int j = 0; j < 4; j++) {
      double d = (double)x[i + j] - md;
      a0[j] += d;
      b0[j] += d * d;
    }
    for (int j = 0; j < 4; j++) {
      double d = (double)x[i + 4 + j] - md;
      a1[j] += d;
      b1[j] += d * d;
    }
  }
  double sa = 0.0, sb = 0.0;
  for (; i < D; i++) {
    double d = (double)x[i] - md;
    sa += d;
    sb += d * d;
  }
  for (int j = 0; j < 4; j++) sa += a0[j] + a1[j], sb += b0[j] + b1[j];
  *sum = sa;
  *sq = sb;
}

GPA__KCLONES static void row_norm(float *restrict y, const float *restrict x, const float *restrict g,
                                  const float *restrict b, float m, float c, float r, int64_t D) {
  for (int64_t i = 0; i < D; i++) y[i] = ((x[i] - m) - c) * r * g[i] + b[i];
}

/* Rows are read from memory by the first pass only; the second and third
 * run from L1 and leave the memory idle. Asking for a later row's lines
 * while they run keeps the loads going (the hardware prefetcher does not
 * cross into the next row early enough): about PF_BYTES ahead, for rows up
 * to PF_MAX_ROW bytes (past that a row is long enough for the prefetcher). */
#define PF_BYTES 8192
#define PF_MAX_ROW 16384

static inline int64_t pf_rows(int64_t D) {
  int64_t row = D * (int64_t)sizeof(float);
  if (row <= 0 || row > PF_MAX_ROW) return 0;
  return row >= PF_BYTES ? 1 : PF_BYTES / row;
}

static inline void prefetch_row(const float *p, int64_t D) {
  for (int64_t i = 0; i < D; i += 64 / (int64_t)sizeof(float)) __builtin_prefetch(p + i, 0, 3);
}

/* Corrected two-pass (Chan, Golub & LeVeque): m1 = a first estimate of the
 * mean (shifted by the row's first element, so a large mean costs nothing);
 * d = x - m1 is exact when x is near m1, and the second pass's sum of d
 * corrects m1: mean = m1 + c, var = (sum d^2 - D c^2) / D with c = sum d / D.
 * The first and last passes run in float lanes, the second sums in double. */
static void fwd_rows(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D, pf = pf_rows(D);
  for (int64_t n = s; n < s + pf && n < e; n++) prefetch_row(c->x + n * D, D);
  for (int64_t n = s; n < e; n++) {
    const float *x = c->x + n * D;
    if (pf && n + pf < e) prefetch_row(c->x + (n + pf) * D, D);
    float m1 = 0.0f;
    double sd = 0.0, sq = 0.0;
    if (D) {
      m1 = x[0] + row_sum_shift(x, x[0], D) / (float)D;
      row_dev(x, m1, D, &sd, &sq);
    }
    double cor = D ? sd / (double)D : 0.0;
    double var = D ? (sq - (double)D * cor * cor) / (double)D : 0.0;
    if (var < 0.0) var = 0.0;
    double r = 1.0 / sqrt(var + c->eps);
    if (c->nt) {
      float buf[NT_CH];
      for (int64_t i = 0; i < D; i += NT_CH) {
        int64_t k = D - i < NT_CH ? D - i : NT_CH;
        row_norm(buf, x + i, c->gamma + i, c->beta + i, m1, (float)cor, (float)r, k);
        gpa__nt_copy(c->y + n * D + i, buf, k);
      }
    } else {
      row_norm(c->y + n * D, x, c->gamma, c->beta, m1, (float)cor, (float)r, D);
    }
    c->mean[n] = (float)((double)m1 + cor);
    c->rstd[n] = (float)r;
  }
  if (c->nt) gpa__nt_fence();
}

void gpa__layernorm_fwd_f32(const gpa__par *par, float *y, float *mean, float *rstd, const float *x,
                            const float *gamma, const float *beta, int64_t N, int64_t D, double eps) {
  ln_ctx c = {.y = y, .mean = mean, .rstd = rstd, .x = x, .gamma = gamma, .beta = beta, .N = N, .D = D,
              .eps = eps, .nt = y != x && gpa__nt_worth(8 * (uint64_t)(N > 0 ? N : 0) * (uint64_t)(D > 0 ? D : 0))};
  int64_t grain = LN_GRAIN / (D > 0 ? D : 1);
  gpa__pfor(par, N, grain < 1 ? 1 : grain, fwd_rows, &c);
}

/* One row of the backward: dx, and the row's share of the column partials
 * (float partials of one block of rows; the blocks are added in double). */
GPA__KCLONES static void bwd_row(float *restrict dx, float *restrict pg, float *restrict pb,
                                 const float *restrict x, const float *restrict dy,
                                 const float *restrict gamma, float m, float r, int64_t D) {
  float a[32] = {0}, b[32] = {0};
  int64_t i = 0;
  for (; i + 32 <= D; i += 32)
    for (int j = 0; j < 32; j++) {
      float xh = (x[i + j] - m) * r;
      float g = dy[i + j] * gamma[i + j];
      a[j] += g;
      b[j] += g * xh;
    }
  float sa = 0.0f, sb = 0.0f;
  for (; i < D; i++) {
    float xh = (x[i] - m) * r;
    float g = dy[i] * gamma[i];
    sa += g;
    sb += g * xh;
  }
  for (int j = 0; j < 32; j++) sa += a[j], sb += b[j];
  const float ma = sa / (float)D, mb = sb / (float)D;
  for (i = 0; i < D; i++) {
    float xh = (x[i] - m) * r;
    dx[i] = r * ((dy[i] * gamma[i] - ma) - xh * mb);
    pg[i] += dy[i] * xh;
    pb[i] += dy[i];
  }
}

static void bwd_blocks(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D;
  for (int64_t blk = s; blk < e; blk++) {
    float *pg = c->part + blk * 2 * D, *pb = pg + D;
    memset(pg, 0, (size_t)(2 * D) * sizeof *pg);
    int64_t r1 = (blk + 1) * GPA__LN_BLOCK_ROWS;
    if (r1 > c->N) r1 = c->N;
    const int64_t pf = pf_rows(D);
    for (int64_t n = blk * GPA__LN_BLOCK_ROWS; n < r1; n++) {
      if (pf && n + pf < r1) {
        prefetch_row(c->x + (n + pf) * D, D);
        prefetch_row(c->dy + (n + pf) * D, D);
      }
      if (c->nt) {
        float buf[NT_BWD_MAX];
        bwd_row(buf, pg, pb, c->x + n * D, c->dy + n * D, c->gamma, c->mean_in[n], c->rstd_in[n], D);
        gpa__nt_copy(c->y + n * D, buf, D);
      } else {
        bwd_row(c->y + n * D, pg, pb, c->x + n * D, c->dy + n * D, c->gamma, c->mean_in[n], c->rstd_in[n], D);
      }
    }
  }
  if (c->nt) gpa__nt_fence();
}

/* Column sums over the blocks, in block order. */
GPA__KCLONES static void bwd_cols(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D, nb = (c->N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  for (int64_t j = s; j < e; j++) {
    double g = 0.0, b = 0.0;
    for (int64_t blk = 0; blk < nb; blk++) {
      g += (double)c->part[blk * 2 * D + j];
      b += (double)c->part[blk * 2 * D + D + j];
    }
    c->dgamma[j] = (float)g;
    c->dbeta[j] = (float)b;
  }
}

size_t gpa__layernorm_bwd_scratch(int64_t N, int64_t D) {
  if (N <= 0 || D <= 0) return 0;
  int64_t nb = (N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  return (size_t)nb * 2 * (size_t)D * sizeof(float);
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
              .mean_in = mean, .rstd_in = rstd, .N = N, .D = D, .part = scratch,
              .nt = D <= NT_BWD_MAX && dx != x && dx != dy && gpa__nt_worth(12 * (uint64_t)N * (uint64_t)D)};
  int64_t nb = (N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  int64_t grain = LN_GRAIN / (GPA__LN_BLOCK_ROWS * D);
  gpa__pfor(par, nb, grain < 1 ? 1 : grain, bwd_blocks, &c);
  int64_t cg = LN_GRAIN / nb;
  gpa__pfor(par, D, cg < 64 ? 64 : cg, bwd_cols, &c);
}
