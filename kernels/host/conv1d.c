/* Host conv1d: im2col + GEMM per (batch, group, chunk of output positions).
 * See conv1d.h. The chunk width is fixed by the sizes alone, so the
 * summation order (and so every bit of the result) never depends on the
 * thread count. */
#include "kernels/host/conv1d.h"

#include <string.h>

#include "kernels/host/blas.h"

int gpa__conv1d_geom_init(gpa__conv1d_geom *g) {
  g->Lout = 0;
  if (g->B < 0 || g->Cin < 1 || g->L < 0 || g->Cout < 1 || g->K < 1) return 0;
  if (g->stride < 1 || g->dilation < 1 || g->groups < 1 || g->pad_l < 0 || g->pad_r < 0) return 0;
  if (g->Cin % g->groups || g->Cout % g->groups) return 0;
  int64_t eff = g->L + g->pad_l + g->pad_r - g->dilation * (g->K - 1) - 1;
  if (eff < 0) return 0;
  g->Lout = eff / g->stride + 1;
  return 1;
}

static int is_direct(const gpa__conv1d_geom *g) {
  return g->K == 1 && g->stride == 1 && g->pad_l == 0 && g->pad_r == 0;
}

static int64_t chunk_len(const gpa__conv1d_geom *g) {
  int64_t rows = g->Cin / g->groups * g->K;
  int64_t lc = (int64_t)(GPA__CONV1D_SCRATCH_CAP / ((uint64_t)rows * sizeof(float)));
  if (lc < 1) lc = 1;
  return lc < g->Lout ? lc : g->Lout;
}

uint64_t gpa__conv1d_scratch_bytes(const gpa__conv1d_geom *g, int bwd) {
  if (is_direct(g)) return 0;
  uint64_t one = (uint64_t)(g->Cin / g->groups * g->K) * (uint64_t)chunk_len(g) * sizeof(float);
  return bwd ? 2 * one : one;
}

/* Output positions t in [0, lc) of chunk t0 whose input position
 * (t0 + t)*stride + off lies in [0, L): [*lo, *hi). */
static void valid_range(const gpa__conv1d_geom *g, int64_t t0, int64_t lc, int64_t off, int64_t *lo, int64_t *hi) {
  int64_t s = g->stride, base = t0 * s + off;
  int64_t a = base >= 0 ? 0 : (-base + s - 1) / s;
  int64_t b = g->L - base > 0 ? (g->L - base + s - 1) / s : 0;
  if (b > lc) b = lc;
  if (a > b) a = b;
  *lo = a;
  *hi = b;
}

typedef struct col_ctx {
  const gpa__conv1d_geom *g;
  const float *x; /* x[b, g*Cin_g, :] */
  float *dx;      /* dx[b, g*Cin_g, :] (col2im) */
  float *col;     /* [Cin_g*K, lc] */
  int64_t t0, lc;
} col_ctx;

static void im2col_rows(int64_t r0, int64_t r1, void *p) {
  const col_ctx *c = p;
  const gpa__conv1d_geom *g = c->g;
  for (int64_t r = r0; r < r1; r++) {
    int64_t ci = r / g->K, k = r % g->K;
    int64_t off = k * g->dilation - g->pad_l, lo, hi;
    valid_range(g, c->t0, c->lc, off, &lo, &hi);
    float *dst = c->col + r * c->lc;
    const float *src = c->x + ci * g->L;
    int64_t base = c->t0 * g->stride + off; /* input position of t = 0; may be < 0 */
    if (lo > 0) memset(dst, 0, (size_t)lo * sizeof(float));
    if (g->stride == 1) {
      if (hi > lo) memcpy(dst + lo, src + base + lo, (size_t)(hi - lo) * sizeof(float));
    } else {
      for (int64_t t = lo; t < hi; t++) dst[t] = src[base + t * g->stride];
    }
    if (hi < c->lc) memset(dst + hi, 0, (size_t)(c->lc - hi) * sizeof(float));
  }
}

/* dx rows of input channels [c0, c1): each adds its K column rows in order. */
static void col2im_chans(int64_t c0, int64_t c1, void *p) {
  const col_ctx *c = p;
  const gpa__conv1d_geom *g = c->g;
  for (int64_t ci = c0; ci < c1; ci++) {
    float *dst = c->dx + ci * g->L;
    for (int64_t k = 0; k < g->K; k++) {
      int64_t off = k * g->dilation - g->pad_l, lo, hi;
      valid_range(g, c->t0, c->lc, off, &lo, &hi);
      const float *src = c->col + (ci * g->K + k) * c->lc;
      int64_t base = c->t0 * g->stride + off;
      if (g->stride == 1)
        for (int64_t t = lo; t < hi; t++) dst[base + t] += src[t];
      else
        for (int64_t t = lo; t < hi; t++) dst[base + t * g->stride] += src[t];
    }
  }
}

typedef struct fill_ctx {
  float *y;
  const float *b;
  int64_t Cout, Lout;
} fill_ctx;

static void bias_fill_rows(int64_t r0, int64_t r1, void *p) {
  const fill_ctx *c = p;
  for (int64_t r = r0; r < r1; r++) {
    float v = c->b[r % c->Cout], *y = c->y + r * c->Lout;
    for (int64_t t = 0; t < c->Lout; t++) y[t] = v;
  }
}

#define ROW_GRAIN_FLOATS 16384

static int64_t row_grain(int64_t row_len) { return ROW_GRAIN_FLOATS / (row_len > 0 ? row_len : 1) + 1; }

void gpa__conv1d_fwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *x, const float *W,
                     const float *b, float *y, float *scratch) {
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, rows = cin_g * g->K;
  int64_t Lout = g->Lout, lcmax = chunk_len(g);
  if (g->B <= 0 || Lout <= 0) return;
  if (b) {
    fill_ctx fc = {y, b, g->Cout, Lout};
    gpa__pfor(par, g->B * g->Cout, row_grain(Lout), bias_fill_rows, &fc);
  }
  int direct = is_direct(g);
  for (int64_t bi = 0; bi < g->B; bi++)
    for (int64_t gi = 0; gi < G; gi++) {
      const float *xg = x + (bi * g->Cin + gi * cin_g) * g->L;
      const float *Wg = W + gi * cout_g * rows;
      float *yg = y + (bi * g->Cout + gi * cout_g) * Lout;
      for (int64_t t0 = 0; t0 < Lout; t0 += lcmax) {
        int64_t lc = Lout - t0 < lcmax ? Lout - t0 : lcmax;
        const float *Bm = xg + t0;
        int64_t ldb = g->L;
        if (!direct) {
          col_ctx cc = {g, xg, NULL, scratch, t0, lc};
          gpa__pfor(par, rows, row_grain(lc), im2col_rows, &cc);
          Bm = scratch;
          ldb = lc;
        }
        gpa__sgemm(0, 0, cout_g, lc, rows, Wg, rows, Bm, ldb, b ? 1.0f : 0.0f, yg + t0, Lout);
      }
    }
}

typedef struct db_ctx {
  float *db;
  const float *dy;
  int64_t B, Cout, Lout;
} db_ctx;

static void db_chans(int64_t c0, int64_t c1, void *p) {
  const db_ctx *c = p;
  for (int64_t co = c0; co < c1; co++) {
    float s = 0.0f;
    for (int64_t bi = 0; bi < c->B; bi++) {
      const float *d = c->dy + (bi * c->Cout + co) * c->Lout;
      for (int64_t t = 0; t < c->Lout; t++) s += d[t];
    }
    c->db[co] = s;
  }
}

void gpa__conv1d_bwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *dy, const float *x,
                     const float *W, float *dx, float *dW, float *db, float *scratch) {
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, rows = cin_g * g->K;
  int64_t Lout = g->Lout, lcmax = chunk_len(g);
  if (db) {
    db_ctx dc = {db, dy, g->B, g->Cout, Lout};
    gpa__pfor(par, g->Cout, row_grain(g->B * Lout), db_chans, &dc);
  }
  if (g->B <= 0 || Lout <= 0) {
    memset(dW, 0, (size_t)(g->Cout * rows) * sizeof(float));
    if (dx) memset(dx, 0, (size_t)(g->B * g->Cin * g->L) * sizeof(float));
    return;
  }
  int direct = is_direct(g);
  if (dx && !direct) memset(dx, 0, (size_t)(g->B * g->Cin * g->L) * sizeof(float));
  float *col = scratch, *dcol = direct ? NULL : scratch + rows * lcmax;
  for (int64_t bi = 0; bi < g->B; bi++)
    for (int64_t gi = 0; gi < G; gi++) {
      const float *xg = x + (bi * g->Cin + gi * cin_g) * g->L;
      const float *Wg = W + gi * cout_g * rows;
      const float *dyg = dy + (bi * g->Cout + gi * cout_g) * Lout;
      float *dWg = dW + gi * cout_g * rows;
      float *dxg = dx ? dx + (bi * g->Cin + gi * cin_g) * g->L : NULL;
      for (int64_t t0 = 0; t0 < Lout; t0 += lcmax) {
        int64_t lc = Lout - t0 < lcmax ? Lout - t0 : lcmax;
        float beta = (bi == 0 && t0 == 0) ? 0.0f : 1.0f;
        if (direct) {
          gpa__sgemm(0, 1, cout_g, rows, lc, dyg + t0, Lout, xg + t0, g->L, beta, dWg, rows);
          if (dxg) gpa__sgemm(1, 0, rows, lc, cout_g, Wg, rows, dyg + t0, Lout, 0.0f, dxg + t0, g->L);
          continue;
        }
        col_ctx cc = {g, xg, dxg, col, t0, lc};
        gpa__pfor(par, rows, row_grain(lc), im2col_rows, &cc);
        gpa__sgemm(0, 1, cout_g, rows, lc, dyg + t0, Lout, col, lc, beta, dWg, rows);
        if (dxg) {
          gpa__sgemm(1, 0, rows, lc, cout_g, Wg, rows, dyg + t0, Lout, 0.0f, dcol, lc);
          cc.col = dcol;
          gpa__pfor(par, cin_g, row_grain(lc * g->K), col2im_chans, &cc);
        }
      }
    }
}
