/* Host conv1d. See conv1d.h. Two paths, chosen by the geometry alone:
 *
 * shift (stride 1, weights repacked into <= 8 MiB): with W_k = W[:, :, k]
 *   repacked as [K][Cout][Cin/groups], y[:, t] += W_k x[:, t + k*dilation -
 *   pad_left] is one GEMM per (batch, group, k) whose B operand is x itself
 *   (shifted, leading dimension L) over the range of t that stays inside x:
 *   no column matrix, no im2col pass. The backward is the same GEMMs
 *   transposed: dW_k += dy x_shift^T, dx_shift += W_k^T dy.
 * im2col (stride > 1): the column matrix of one (batch, group) in chunks of
 *   output positions (at most GPA__CONV1D_SCRATCH_CAP bytes), one GEMM per
 *   chunk; the backward forms dcol = W^T dy and adds it back (col2im).
 *
 * Sums run in an order fixed by the sizes (k, batch, chunk), never by the
 * thread count: the same bits every run. */
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

static uint64_t w_bytes(const gpa__conv1d_geom *g) {
  return (uint64_t)g->Cout * (uint64_t)(g->Cin / g->groups) * (uint64_t)g->K * sizeof(float);
}

static int use_shift(const gpa__conv1d_geom *g) {
  return g->stride == 1 && (g->K == 1 || w_bytes(g) <= GPA__CONV1D_SCRATCH_CAP / 2);
}

static int64_t chunk_len(const gpa__conv1d_geom *g) {
  int64_t rows = g->Cin / g->groups * g->K;
  int64_t lc = (int64_t)(GPA__CONV1D_SCRATCH_CAP / ((uint64_t)rows * sizeof(float)));
  if (lc < 1) lc = 1;
  return lc < g->Lout ? lc : g->Lout;
}

uint64_t gpa__conv1d_scratch_bytes(const gpa__conv1d_geom *g, int bwd) {
  if (use_shift(g)) return g->K == 1 ? 0 : (bwd ? 2 : 1) * w_bytes(g);
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

/* Row passes go parallel only in chunks of at least this many floats (1 MiB):
 * a smaller pass is faster on one thread than the pool's hand-off, and a
 * pool worker still spinning after the pass would take a core from the
 * OpenBLAS threads of the GEMM that follows. */
#define ROW_GRAIN_FLOATS (1 << 18)

static int64_t row_grain(int64_t row_len) { return ROW_GRAIN_FLOATS / (row_len > 0 ? row_len : 1) + 1; }

/* ---- shift path (stride 1) ---- */

/* Output positions t whose input t + off lies in [0, L): [*lo, *hi). */
static void shift_range(const gpa__conv1d_geom *g, int64_t off, int64_t *lo, int64_t *hi) {
  int64_t a = off < 0 ? -off : 0, b = g->L - off < g->Lout ? g->L - off : g->Lout;
  *lo = a;
  *hi = b > a ? b : a;
}

/* Wk[(k*Cout + co)*cin_g + ci] = W[(co*cin_g + ci)*K + k] (to = 1), or back. */
static void repack(const gpa__conv1d_geom *g, float *dst, const float *src, int to) {
  int64_t cin_g = g->Cin / g->groups, K = g->K;
  for (int64_t k = 0; k < K; k++) /* the packed side contiguous */
    for (int64_t co = 0; co < g->Cout; co++)
      for (int64_t ci = 0; ci < cin_g; ci++) {
        int64_t w = (co * cin_g + ci) * K + k, p = (k * g->Cout + co) * cin_g + ci;
        if (to) dst[p] = src[w];
        else dst[w] = src[p];
      }
}

static void shift_fwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *x, const float *Wk, float *y, int beta1) {
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, Lout = g->Lout;
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t gi = 0; gi < G; gi++)
      for (int64_t k = 0; k < g->K; k++) {
        int64_t off = k * g->dilation - g->pad_l, lo, hi;
        shift_range(g, off, &lo, &hi);
        if (hi <= lo) continue;
        gpa__sgemm(par, 0, 0, cout_g, hi - lo, cin_g, Wk + (k * g->Cout + gi * cout_g) * cin_g, cin_g,
                   x + (b * g->Cin + gi * cin_g) * g->L + lo + off, g->L, beta1 ? 1.0f : 0.0f,
                   y + (b * g->Cout + gi * cout_g) * Lout + lo, Lout);
      }
}

static void shift_bwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *dy, const float *x, const float *Wk, float *dx,
                      float *dWk, int dx_beta1) {
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, Lout = g->Lout;
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t gi = 0; gi < G; gi++)
      for (int64_t k = 0; k < g->K; k++) {
        int64_t off = k * g->dilation - g->pad_l, lo, hi;
        shift_range(g, off, &lo, &hi);
        float *dwk = dWk + (k * g->Cout + gi * cout_g) * cin_g;
        if (hi <= lo) { /* this tap never touches x: its gradient is 0 */
          if (b == 0) memset(dwk, 0, (size_t)(cout_g * cin_g) * sizeof(float));
          continue;
        }
        const float *dyg = dy + (b * g->Cout + gi * cout_g) * Lout + lo;
        int64_t xo = (b * g->Cin + gi * cin_g) * g->L + lo + off;
        gpa__sgemm(par, 0, 1, cout_g, cin_g, hi - lo, dyg, Lout, x + xo, g->L, b ? 1.0f : 0.0f, dwk, cin_g);
        if (dx)
          gpa__sgemm(par, 1, 0, cin_g, hi - lo, cout_g, Wk + (k * g->Cout + gi * cout_g) * cin_g, cin_g, dyg, Lout,
                     dx_beta1 ? 1.0f : 0.0f, dx + xo, g->L);
      }
}

void gpa__conv1d_fwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *x, const float *W,
                     const float *b, float *y, float *scratch) {
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, rows = cin_g * g->K;
  int64_t Lout = g->Lout, lcmax = chunk_len(g);
  if (g->B <= 0 || Lout <= 0) return;
  int direct = is_direct(g), shift = use_shift(g);
  if (b) {
    fill_ctx fc = {y, b, g->Cout, Lout};
    gpa__pfor(par, g->B * g->Cout, row_grain(Lout), bias_fill_rows, &fc);
  } else if (shift && !direct) {
    memset(y, 0, (size_t)(g->B * g->Cout * Lout) * sizeof(float)); /* taps add into y */
  }
  if (shift) {
    const float *Wk = W;
    if (g->K > 1) {
      repack(g, scratch, W, 1);
      Wk = scratch;
    }
    shift_fwd(par, g, x, Wk, y, b || !direct);
    return;
  }
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
        gpa__sgemm(par, 0, 0, cout_g, lc, rows, Wg, rows, Bm, ldb, b ? 1.0f : 0.0f, yg + t0, Lout);
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
  if (use_shift(g)) {
    if (g->K == 1) {
      shift_bwd(par, g, dy, x, W, dx, dW, !direct);
      return;
    }
    float *Wk = scratch, *dWk = scratch + g->Cout * rows;
    repack(g, Wk, W, 1);
    shift_bwd(par, g, dy, x, Wk, dx, dWk, 1);
    repack(g, dW, dWk, 0);
    return;
  }
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
          gpa__sgemm(par, 0, 1, cout_g, rows, lc, dyg + t0, Lout, xg + t0, g->L, beta, dWg, rows);
          if (dxg) gpa__sgemm(par, 1, 0, rows, lc, cout_g, Wg, rows, dyg + t0, Lout, 0.0f, dxg + t0, g->L);
          continue;
        }
        col_ctx cc = {g, xg, dxg, col, t0, lc};
        gpa__pfor(par, rows, row_grain(lc), im2col_rows, &cc);
        gpa__sgemm(par, 0, 1, cout_g, rows, lc, dyg + t0, Lout, col, lc, beta, dWg, rows);
        if (dxg) {
          gpa__sgemm(par, 1, 0, rows, lc, cout_g, Wg, rows, dyg + t0, Lout, 0.0f, dcol, lc);
          cc.col = dcol;
          gpa__pfor(par, cin_g, row_grain(lc * g->K), col2im_chans, &cc);
        }
      }
    }
}
