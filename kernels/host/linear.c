/* Host linear layer: see linear.h.
 *
 * Forward: the bias is broadcast into the output rows first and the GEMM
 * accumulates onto it (beta = 1), so a bias costs one streaming write of
 * the output and no extra read pass. With GELU the GEMM writes into pre (or
 * y) and one pass of the GELU kernel (kernels/host/gelu.c, the same code as
 * the gelu_fwd op, so fused and unfused agree bitwise) writes y.
 * Backward: g (= dy, or dy * gelu'(pre)), then dx = g W and dW = g^T x as
 * two GEMMs, db as column sums in fixed row order. */
#include "kernels/host/linear.h"

#include <string.h>

#include "kernels/host/blas.h"
#include "kernels/host/gelu.h"

/* Row passes split in blocks of at least this many floats (1 MiB): smaller
 * passes run on one thread (a pool worker still spinning after a pass would
 * take a core from the OpenBLAS threads of the next GEMM). */
#define EW_GRAIN (1 << 18)

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
  float *acc = gelu && pre ? pre : y;
  if (b) {
    bias_ctx bc = {acc, b, out};
    gpa__pfor(par, N, EW_GRAIN / out + 1, bias_rows, &bc);
  }
  gpa__sgemm(par, 0, 1, N, out, in, x, in, W, in, b ? 1.0f : 0.0f, acc, out);
  if (gelu) gpa__gelu_fwd_f32(par, y, acc, N * out, GPA__GELU_TANH);
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
    gpa__gelu_bwd_f32(par, gscratch, pre, dy, N * out, GPA__GELU_TANH);
    g = gscratch;
  }
  if (dx) gpa__sgemm(par, 0, 0, N, in, out, g, out, W, in, 0.0f, dx, in);
  if (dW) gpa__sgemm(par, 1, 0, out, in, N, g, out, x, in, 0.0f, dW, in);
  if (db && out > 0) {
    colsum_ctx c = {db, g, N, out};
    gpa__pfor(par, (out + COLSUM_BLOCK - 1) / COLSUM_BLOCK, 1, colsum_range, &c);
  }
}
