/* Host conv1d. See conv1d.h.
 *
 * The work is cut into units that each run whole on one thread, every GEMM
 * of a unit one single-threaded cblas_sgemm. Three ways to compute, chosen
 * by the geometry (and the CPU):
 * direct (stride 1, AVX2+FMA; conv1d_direct.c): the forward, and the
 *   backward's dx as the forward of the transposed problem (pads within
 *   (K-1)*dilation), on a kernel of our own; the backward's dW stays on
 *   the shift path's dW units, claimed by the same slots first.
 * shift (stride 1, W repacked into <= 8 MiB): with W_k = W[:, :, k] repacked
 *   as [K][Cout][Cin/groups], y[:, t] += W_k x[:, t + k*dilation - pad_l] is
 *   one GEMM per tap whose B operand is x itself (shifted, leading
 *   dimension L) over the positions that read inside x: no column matrix.
 *   This is the work of one K = Cin/groups*K GEMM on an im2col'd matrix
 *   without writing and re-reading that matrix (docs/ops.md). The units
 *   are claimed dynamically from the pool (a thread slowed by another
 *   process, e.g. PyTorch's OpenMP threads spinning after its call, leaves
 *   its share to the others):
 *   forward: (batch, group, chunk of about 1024 output positions), after one
 *     short parallel pass that repacks W;
 *   backward: dW units (group, tap, block of input channels): dW_k +=
 *     dy x_shift^T over every batch in order (all of the group's output
 *     channels in each GEMM); then dx units (batch, group, chunk of input
 *     positions): dx[:, s] = sum_k W_k^T dy[:, s - off_k], the transposed
 *     convolution, nothing reduced across units; a last short pass unpacks
 *     dW and sums db.
 * im2col (stride > 1, larger W, or geom.im2col): units dealt round-robin to
 *   at most `threads` slots, each slot with its own column buffer [rows,
 *   lc]: forward (batch, group, chunk of positions) builds the chunk and
 *   runs one GEMM y[:, chunk] (+)= W col with K = Cin/groups*K; backward
 *   (group, block of input channels) builds the unit's rows, adds dy col^T
 *   into its columns of dW, forms dcol = W[:, its rows]^T dy in the same
 *   buffer and adds it into its channels of dx (col2im). The buffers
 *   together stay within GPA__CONV1D_SCRATCH_CAP (chunks of positions
 *   shrink to fit), whatever B and L are.
 * Every output element is computed whole by one unit, in an order fixed by
 * the sizes (and, where the sizes give fewer than four units per thread or
 * on the im2col path, the thread count): the same bits on every run of one
 * configuration, whichever thread runs a unit.
 *
 * Channels last (geom.nlc): the same units, GEMMs and order of sums. An
 * activation is always seen as its [channels][positions] matrix (act());
 * under nlc that matrix is stored transposed, so a GEMM operand is passed
 * transposed and a GEMM output C as C^T = B^T A^T (mm()): cblas reads and
 * writes the activations in place either way. Two exceptions, both on the
 * backward's shift path: dW units with a small C run on gpa__tgemm, which
 * takes x's rows as they lie (DW_TGEMM_MAX), and db's lanes are added by a
 * dW unit while its batch's rows of dy are in cache (shift_dw_unit). db
 * sums each channel in the same lanes and order under both layouts (the
 * same bits). */
#include "kernels/host/conv1d.h"

#include <string.h>

#include "kernels/host/blas.h"
#include "kernels/host/conv1d_direct.h"
#include "kernels/host/tgemm.h"

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

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A GEMM operand: element (i, j) at p[i*ld + j], or at p[j*ld + i] when t. */
typedef struct mat {
  float *p;
  int64_t ld;
  int t;
} mat;

static int64_t at(mat m, int64_t i, int64_t j) { return m.t ? j * m.ld + i : i * m.ld + j; }
static mat sub(mat m, int64_t i, int64_t j) {
  m.p += at(m, i, j);
  return m;
}
static mat tr(mat m) {
  m.t = !m.t;
  return m;
}
static mat plain(const float *p, int64_t ld, int t) { return (mat){(float *)p, ld, t}; }

/* Batch b of an activation of C channels and len positions as its
 * [channels][positions] matrix, from channel c0, position t0. */
static mat act(const gpa__conv1d_geom *g, const float *base, int64_t b, int64_t C, int64_t len, int64_t c0,
               int64_t t0) {
  if (g->nlc) return plain(base + (b * len + t0) * C + c0, C, 1);
  return plain(base + (b * C + c0) * len + t0, len, 0);
}

/* C (+)= A B, M x N over K, one thread; a C stored transposed as C^T = B^T A^T. */
static void mm(int64_t M, int64_t N, int64_t K, mat A, mat B, float beta, mat C) {
  if (!C.t)
    gpa__sgemm(NULL, A.t, B.t, M, N, K, A.p, A.ld, B.p, B.ld, beta, C.p, C.ld);
  else
    gpa__sgemm(NULL, !B.t, !A.t, N, M, K, B.p, B.ld, A.p, A.ld, beta, C.p, C.ld);
}

/* m[i][t] = v[i] (0 when v is NULL) for i < rows, t in [t0, t1). */
static void fill(mat m, int64_t rows, int64_t t0, int64_t t1, const float *v) {
  if (!m.t)
    for (int64_t i = 0; i < rows; i++) {
      float x = v ? v[i] : 0.0f, *r = m.p + i * m.ld;
      for (int64_t t = t0; t < t1; t++) r[t] = x;
    }
  else
    for (int64_t t = t0; t < t1; t++) {
      float *r = m.p + t * m.ld;
      if (v)
        memcpy(r, v, (size_t)rows * sizeof(float));
      else
        memset(r, 0, (size_t)rows * sizeof(float));
    }
}

/* Below this many flops per thread an op runs on one thread (as a GEMM
 * below blas.c's grain is not split): the hand-off would cost more. */
#define SPLIT_FLOPS 2097152.0
/* Chunks of positions are multiples of this when that does not change
 * their number (OpenBLAS's AVX2 kernels work in 16-wide tiles). */
#define POS_ALIGN 16
/* Shift path, units claimed dynamically: chunks of about POS_CHUNK output
 * positions per forward unit and DX_CHUNK input positions per dx unit, at
 * least FWD_MIN / DX_MIN where the sizes give fewer than four units per
 * thread, and at most DW_COLS input channels per dW unit (smaller blocks
 * only for one dW unit per thread). Each GEMM packs its W_k again, so
 * shorter rows of positions cost more: on two threads the forward ran
 * 7-18% slower with chunks of 256 or 512 than with rows of 1024, and the
 * backward 3-7% slower with dx chunks of 128 or dW blocks of 128 than
 * with 256 (docs/benchmarks.md); the dx GEMMs did as well at 256 as at
 * 1024. */
#ifndef POS_CHUNK
#define POS_CHUNK 1024
#endif
#ifndef FWD_MIN
#define FWD_MIN 512
#endif
#ifndef DX_CHUNK
#define DX_CHUNK 256
#endif
#ifndef DX_MIN
#define DX_MIN 256
#endif
#ifndef DW_COLS
#define DW_COLS 256
#endif
/* dW units under nlc, where x's rows are the GEMM's B rows as they lie (and
 * dy's rows A's columns): a C (output channels x the unit's input channels)
 * of at most DW_TGEMM_MAX floats runs on gpa__tgemm's AVX-512F kernel, in
 * steps of DW_KC positions (its B panel, DW_KC x 32 floats, stays in L1;
 * the chain of FMAs of each element runs on in order from step to step:
 * the same bits as one call). Against OpenBLAS's transposed-operand call
 * (which packs both operands at every call) in the backward on two threads
 * (Zen 4): 1.04-1.07x at C96 L128 (the main job), 1.15x at C64, 1.00 at
 * C128, but 0.97 at C256 L1024 and 0.95 at C512, where its unpacked A
 * (dy's rows read 6 channels at a time) comes from L2 again for every 32
 * columns; with the AVX2 kernel 0.9-1.04 (docs/benchmarks.md). */
#ifndef DW_TGEMM_MAX
#define DW_TGEMM_MAX (128 * 128)
#endif
#ifndef DW_KC
#define DW_KC 128
#endif
/* db: partial sums per channel (db_chans) */
#define DB_LANES 16

typedef struct plan {
  int64_t slots;       /* parallel slots, each with its own column buffer */
  int64_t units;       /* slot s runs units s, s + slots, ... */
  int64_t lc;          /* output positions per column chunk */
  int64_t nt;          /* forward: chunks per (batch, group) */
  int64_t cb;          /* backward: input channels per unit */
  int64_t slot_floats; /* one slot's column buffer (0 on the direct and shift paths) */
  int64_t w_floats;    /* shift path: repacked W (and dW) ahead of the slots */
  int shift;           /* the shift path (see the top of this file) */
  /* shift path: units claimed dynamically (not dealt to slots) */
  int64_t nci;         /* backward: input channels per dW unit */
  int64_t ndw;         /* backward: dW units per group and tap */
  int64_t lx, ntx;     /* backward: input positions per dx unit, dx units per (batch, group) */
  int direct;          /* forward: the direct kernel (conv1d_direct.h), P slots of scratch */
  int dx_direct;       /* backward: dx by the direct kernel (the transposed problem), after w_floats */
  int64_t dx_floats;   /* its scratch */
  int64_t db_floats;   /* backward, nlc: db's lanes [DB_LANES][Cout], after dx_floats (see shift_dw_unit) */
} plan;

static uint64_t w_bytes(const gpa__conv1d_geom *g) {
  return (uint64_t)g->Cout * (uint64_t)(g->Cin / g->groups) * (uint64_t)g->K * sizeof(float);
}

static int64_t par_threads(const gpa__par *par) {
  return par && par->pfor && par->threads > 1 ? par->threads : 1;
}

/* The smallest n in [n0, n0 + P) with n <= nmax and (m * n) % P == 0 (units
 * a multiple of the slots: no slot runs one more unit than the others), or
 * n0 when there is none. */
static int64_t even_units(int64_t n0, int64_t m, int64_t P, int64_t nmax) {
  for (int64_t n = n0; n < n0 + P && n <= nmax; n++)
    if ((m * n) % P == 0) return n;
  return n0;
}

/* Shift path: positions per unit. Chunks of about `chunk` positions
 * (multiples of POS_ALIGN), from the sizes alone, so the units and hence
 * the bits do not depend on the thread count, unless m (batches x groups)
 * times the chunks would give fewer than four units per thread: then
 * smaller chunks, down to POS_MIN positions for four units per thread and
 * to POS_ALIGN for two. */
static void pos_chunks(int64_t n, int64_t m, int64_t P, int64_t chunk, int64_t cmin, int64_t *lc, int64_t *nt) {
  int64_t k = (n + chunk / 2) / chunk, k4 = min64(cdiv(4 * P, m), n / cmin);
  if (k < 1) k = 1;
  if (m * k < 4 * P && k4 > k) k = k4;
  if (m * k < P) k = min64(cdiv(P, m), cdiv(n, POS_ALIGN));
  if (k < 1) k = 1;
  int64_t c = cdiv(n, k), a = cdiv(c, POS_ALIGN) * POS_ALIGN;
  if (cdiv(n, a) == k) c = a;
  *lc = c;
  *nt = cdiv(n, c);
}

static plan make_plan(const gpa__conv1d_geom *g, int bwd, int64_t threads) {
  plan p = {0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0};
  int64_t G = g->groups, cin_g = g->Cin / G, BG = g->B * G, direct = is_direct(g);
  p.shift = !direct && !g->im2col && g->stride == 1 && w_bytes(g) <= GPA__CONV1D_SCRATCH_CAP / 2;
  if (p.shift && g->K > 1) p.w_floats = (bwd ? 2 : 1) * (int64_t)(w_bytes(g) / sizeof(float));
  double flops = (bwd ? 4.0 : 2.0) * (double)g->B * (double)g->Cout * (double)(cin_g * g->K) * (double)g->Lout;
  int64_t P = flops < SPLIT_FLOPS * (double)threads ? 1 : threads;
  if (g->B <= 0 || g->Lout <= 0) return p;
  if (!bwd && !direct && gpa__conv1d_direct_ok(g, P)) {
    p.direct = 1;
    p.shift = 0;
    p.slots = P;
    p.w_floats = (int64_t)gpa__conv1d_direct_floats(g, P);
    return p;
  }
  if (p.shift) {
    p.slots = P;
    if (!bwd) {
      pos_chunks(g->Lout, BG, P, POS_CHUNK, FWD_MIN, &p.lc, &p.nt);
      p.units = BG * p.nt;
    } else {
      int64_t nb = cdiv(cin_g, DW_COLS); /* dW units: (group, tap, block of input channels) */
      if (G * g->K * nb < P) nb = min64(cdiv(P, G * g->K), cdiv(cin_g, POS_ALIGN));
      p.nci = cdiv(cdiv(cin_g, nb), POS_ALIGN) * POS_ALIGN;
      if (p.nci > cin_g) p.nci = cin_g;
      p.ndw = cdiv(cin_g, p.nci);
      pos_chunks(g->L, BG, P, DX_CHUNK, DX_MIN, &p.lx, &p.ntx);
      gpa__conv1d_geom t;
      if (!g->no_direct && gpa__conv1d_direct_dx_geom(g, &t) && gpa__conv1d_direct_ok(&t, P)) {
        p.dx_direct = 1;
        p.dx_floats = (int64_t)gpa__conv1d_direct_floats(&t, P);
      }
      p.units = G * g->K * p.ndw + (p.dx_direct ? 0 : BG * p.ntx);
      if (g->nlc) p.db_floats = DB_LANES * g->Cout;
    }
    return p;
  }
  if (!bwd) {
    int64_t rows = cin_g * g->K;
    int64_t cap = (int64_t)(GPA__CONV1D_SCRATCH_CAP / ((uint64_t)P * (uint64_t)rows * sizeof(float)));
    if (cap < 1) cap = 1; /* one column past the cap: it cannot be split */
    if (direct || p.shift) cap = g->Lout; /* no column buffer */
    int64_t nt = cdiv(g->Lout, cap);
    if (BG < P) nt = nt > cdiv(P, BG) ? nt : cdiv(P, BG); /* every thread gets positions */
    nt = even_units(min64(nt, g->Lout), BG, P, g->Lout);
    int64_t lc = cdiv(g->Lout, nt), la = cdiv(lc, POS_ALIGN) * POS_ALIGN;
    if (la <= cap && cdiv(g->Lout, la) == nt) lc = la;
    p.lc = lc;
    p.nt = cdiv(g->Lout, lc);
    p.units = BG * p.nt;
    p.slot_floats = direct || p.shift ? 0 : rows * lc;
  } else {
    int64_t nb = G < P ? cdiv(P, G) : 1; /* every thread gets channels */
    nb = even_units(min64(nb, cin_g), G, P, cin_g);
    p.cb = cdiv(cin_g, nb);
    nb = cdiv(cin_g, p.cb);
    int64_t cap = (int64_t)(GPA__CONV1D_SCRATCH_CAP / ((uint64_t)P * (uint64_t)(p.cb * g->K) * sizeof(float)));
    p.lc = direct || p.shift ? g->Lout : min64(g->Lout, cap < 1 ? 1 : cap);
    p.units = G * nb;
    p.slot_floats = direct || p.shift ? 0 : p.cb * g->K * p.lc;
  }
  p.slots = min64(P, p.units);
  return p;
}

uint64_t gpa__conv1d_scratch_bytes(const gpa__conv1d_geom *g, int bwd, const gpa__par *par) {
  plan p = make_plan(g, bwd, par_threads(par));
  return ((uint64_t)p.slots * (uint64_t)p.slot_floats + (uint64_t)p.w_floats + (uint64_t)p.dx_floats +
          (uint64_t)p.db_floats) *
         sizeof(float);
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
  mat x;      /* x[b, the unit's first channel, 0] on */
  mat dx;     /* dx likewise (col2im) */
  float *col; /* [Cin_g*K, lc] */
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
    const mat src = sub(c->x, ci, 0);
    int64_t base = c->t0 * g->stride + off; /* input position of t = 0; may be < 0 */
    if (lo > 0) memset(dst, 0, (size_t)lo * sizeof(float));
    if (!src.t && g->stride == 1) {
      if (hi > lo) memcpy(dst + lo, src.p + base + lo, (size_t)(hi - lo) * sizeof(float));
    } else {
      const int64_t ps = src.t ? src.ld : 1; /* positions apart */
      for (int64_t t = lo; t < hi; t++) dst[t] = src.p[(base + t * g->stride) * ps];
    }
    if (hi < c->lc) memset(dst + hi, 0, (size_t)(c->lc - hi) * sizeof(float));
  }
}

/* dx rows of input channels [c0, c1): each adds its K column rows in order. */
static void col2im_chans(int64_t c0, int64_t c1, void *p) {
  const col_ctx *c = p;
  const gpa__conv1d_geom *g = c->g;
  for (int64_t ci = c0; ci < c1; ci++) {
    const mat d = sub(c->dx, ci, 0);
    float *dst = d.p;
    const int64_t ps = d.t ? d.ld : 1; /* positions apart */
    for (int64_t k = 0; k < g->K; k++) {
      int64_t off = k * g->dilation - g->pad_l, lo, hi;
      valid_range(g, c->t0, c->lc, off, &lo, &hi);
      const float *src = c->col + (ci * g->K + k) * c->lc;
      int64_t base = c->t0 * g->stride + off;
      if (g->stride == 1 && ps == 1)
        for (int64_t t = lo; t < hi; t++) dst[base + t] += src[t];
      else
        for (int64_t t = lo; t < hi; t++) dst[(base + t * g->stride) * ps] += src[t];
    }
  }
}

typedef struct run_ctx {
  const gpa__conv1d_geom *g;
  const plan *p;
  const float *x, *W, *b, *dy;
  float *y, *dx, *dW, *db, *scratch;
  /* shift path: W, dW as [K][Cout][Cin/groups] (W, dW themselves when K =
   * 1); when K > 1, wk is the start of scratch, where the repack writes */
  const float *wk;
  float *dwk;
  float *dbl;     /* nlc: db's lanes [DB_LANES][Cout], added by the dW units of tap db_tap (NULL: db_chans) */
  int64_t db_tap;
} run_ctx;

/* ---- shift path (stride 1) ---- */

/* Output positions t in [t0, t1) whose input t + off lies in [0, L): [*lo, *hi). */
static void shift_range(const gpa__conv1d_geom *g, int64_t off, int64_t t0, int64_t t1, int64_t *lo, int64_t *hi) {
  int64_t a = off < 0 ? -off : 0, b = g->L - off;
  if (a < t0) a = t0;
  if (b > t1) b = t1;
  *lo = a;
  *hi = b > a ? b : a;
}

/* Wk[(k*Cout + co)*cin_g + ci] = W[(co*cin_g + ci)*K + k] (to = 1), or back,
 * for co in [co0, co1) and ci in [ci0, ci1). */
static void repack(const gpa__conv1d_geom *g, float *dst, const float *src, int to, int64_t co0, int64_t co1,
                   int64_t ci0, int64_t ci1) {
  int64_t cin_g = g->Cin / g->groups, K = g->K;
  if (K == 3) { /* the common kernel: one pass over each row, which the compiler vectorizes */
    int64_t plane = g->Cout * cin_g;
    for (int64_t co = co0; co < co1; co++) {
      int64_t w = co * cin_g * 3, p = co * cin_g;
      if (to)
        for (int64_t ci = ci0; ci < ci1; ci++) {
          dst[p + ci] = src[w + 3 * ci];
          dst[p + plane + ci] = src[w + 3 * ci + 1];
          dst[p + 2 * plane + ci] = src[w + 3 * ci + 2];
        }
      else
        for (int64_t ci = ci0; ci < ci1; ci++) {
          dst[w + 3 * ci] = src[p + ci];
          dst[w + 3 * ci + 1] = src[p + plane + ci];
          dst[w + 3 * ci + 2] = src[p + 2 * plane + ci];
        }
    }
    return;
  }
  /* One row of W (cin_g*K floats) at a time, so that its K strided passes
   * hit L1; the packed side is written (or read) contiguously. */
  for (int64_t co = co0; co < co1; co++)
    for (int64_t k = 0; k < K; k++) {
      float *d = to ? dst + (k * g->Cout + co) * cin_g : dst + co * cin_g * K + k;
      const float *r = to ? src + co * cin_g * K + k : src + (k * g->Cout + co) * cin_g;
      if (to)
        for (int64_t ci = ci0; ci < ci1; ci++) d[ci] = r[ci * K];
      else
        for (int64_t ci = ci0; ci < ci1; ci++) d[ci * K] = r[ci];
    }
}

static void repack_slots(int64_t s0, int64_t s1, void *vp) {
  const run_ctx *c = vp;
  int64_t S = c->p->slots, Cout = c->g->Cout;
  for (int64_t s = s0; s < s1; s++)
    repack(c->g, c->scratch, c->W, 1, Cout * s / S, Cout * (s + 1) / S, 0, c->g->Cin / c->g->groups);
}

/* The tap to run first with beta = 0: one whose outputs cover all of
 * [t0, t1) (the centre tap first: it does with symmetric padding), or -1
 * (the outputs are zeroed first). */
static int64_t full_tap(const gpa__conv1d_geom *g, int64_t t0, int64_t t1) {
  for (int64_t i = 0; i < g->K; i++) {
    int64_t k = (g->K / 2 + i) % g->K, lo, hi;
    shift_range(g, k * g->dilation - g->pad_l, t0, t1, &lo, &hi);
    if (lo == t0 && hi == t1) return k;
  }
  return -1;
}

/* Forward unit u: (batch, group, chunk of positions), one GEMM per tap on x
 * shifted: y[:, t] += W_k x[:, t + k*dilation - pad_l]. */
static void shift_fwd_unit(const run_ctx *c, int64_t u) {
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, Lout = g->Lout;
  int64_t bg = u / c->p->nt, bi = bg / G, gi = bg % G;
  int64_t t0 = u % c->p->nt * c->p->lc, t1 = min64(t0 + c->p->lc, Lout);
  const mat xg = act(g, c->x, bi, g->Cin, g->L, gi * cin_g, 0), yg = act(g, c->y, bi, g->Cout, Lout, gi * cout_g, 0);
  int64_t first = c->b ? -1 : full_tap(g, t0, t1);
  if (first < 0) fill(yg, cout_g, t0, t1, c->b ? c->b + gi * cout_g : NULL); /* taps add onto the bias (or 0) */
  for (int64_t i = 0; i < g->K; i++) {
    int64_t k = first < 0 ? i : (first + i) % g->K, off = k * g->dilation - g->pad_l, lo, hi;
    shift_range(g, off, t0, t1, &lo, &hi);
    if (hi <= lo) continue;
    mm(cout_g, hi - lo, cin_g, plain(c->wk + (k * g->Cout + gi * cout_g) * cin_g, cin_g, 0), sub(xg, 0, lo + off),
       first >= 0 && i == 0 ? 0.0f : 1.0f, sub(yg, 0, lo));
  }
}

/* nlc: acc[t % DB_LANES][e] += dy[bi, t, c0 + e] over the positions t in
 * order, for e < ne (rows of acc ld floats apart). The lanes are acc's rows
 * and the channels its columns, so that a row of dy adds into one row of
 * acc in runs of V adjacent floats (a fixed count: vectorized at -O2); with
 * the lanes innermost, the adds were scalar and 16 channels a pass over dy
 * (docs/benchmarks.md). */
static void db_rows(const run_ctx *c, int64_t bi, int64_t c0, int64_t ne, float *acc, int64_t ld) {
  enum { V = 16 };
  const gpa__conv1d_geom *g = c->g;
  for (int64_t t = 0; t < g->Lout; t++) {
    const float *d = c->dy + (bi * g->Lout + t) * g->Cout + c0;
    float *a = acc + t % DB_LANES * ld;
    int64_t e = 0;
    for (; e + V <= ne; e += V)
      for (int j = 0; j < V; j++) a[e + j] += d[e + j];
    for (; e < ne; e++) a[e] += d[e];
  }
}

/* db[e] = the DB_LANES lanes acc[.][e] combined pairwise, as in ncl's db_chans. */
static void db_lanes_out(float *acc, int64_t ld, int64_t ne, float *db) {
  for (int w = DB_LANES / 2; w > 0; w /= 2)
    for (int j = 0; j < w; j++)
      for (int64_t e = 0; e < ne; e++) acc[j * ld + e] += acc[(j + w) * ld + e];
  memcpy(db, acc, (size_t)ne * sizeof(float));
}

/* db[co] for co in [c0, c1): dy summed over batch, then positions, in
 * DB_LANES interleaved partial sums (one running sum is a chain of
 * dependent adds the compiler may not reorder: several times slower)
 * combined pairwise at the end; the order depends on the sizes only, and
 * is the same under nlc (a block of channels at a time along each
 * position's row: the same bits). */
static void db_chans(const run_ctx *c, int64_t c0, int64_t c1) {
  const gpa__conv1d_geom *g = c->g;
  int64_t Lout = g->Lout, body = Lout / DB_LANES * DB_LANES;
  if (g->nlc) {
    enum { CB = 64 };
    for (int64_t cb = c0; cb < c1; cb += CB) {
      int64_t ne = min64(CB, c1 - cb);
      float acc[DB_LANES * CB] = {0};
      for (int64_t bi = 0; bi < g->B; bi++) db_rows(c, bi, cb, ne, acc, CB);
      db_lanes_out(acc, CB, ne, c->db + cb);
    }
    return;
  }
  for (int64_t co = c0; co < c1; co++) {
    float acc[DB_LANES] = {0};
    for (int64_t bi = 0; bi < g->B; bi++) {
      const float *d = c->dy + (bi * g->Cout + co) * Lout;
      for (int64_t t = 0; t < body; t += DB_LANES)
        for (int j = 0; j < DB_LANES; j++) acc[j] += d[t + j];
      for (int64_t t = body; t < Lout; t++) acc[t - body] += d[t];
    }
    db_lanes_out(acc, 1, 1, c->db + co);
  }
}

/* Backward dW unit (group gi, tap k, input channels [c0, c0 + nc)):
 * dW_k[:, c] = sum over batches of dy[b] x[b, c, t + off_k]^T over the t that
 * read inside x, one GEMM per batch, into the repacked dW (unpacked by
 * bwd_finish). All the group's output channels in one GEMM: cut into
 * smaller blocks of rows, the GEMM ran 25% slower (M = 64 against 256).
 * Under nlc the unit of tap db_tap and the first block of channels also
 * adds each batch's rows of dy into db's lanes just before its GEMM reads
 * them (in L2 then): a pass of its own after the units read each row of
 * dy again from memory, and took 2.3 ms of the two threads' 70 at B8 C256
 * L1024 (ncl's db, contiguous rows: 0.5). */
static void shift_dw_unit(const run_ctx *c, int64_t gi, int64_t k, int64_t c0, int64_t nc) {
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, Lout = g->Lout, co0 = gi * cout_g;
  int64_t off = k * g->dilation - g->pad_l, lo, hi;
  float *dwk = c->dwk + (k * g->Cout + co0) * cin_g + c0;
  shift_range(g, off, 0, Lout, &lo, &hi);
  if (hi <= lo) { /* this tap never reads x: its gradient is 0 */
    for (int64_t co = 0; co < cout_g; co++) memset(dwk + co * cin_g, 0, (size_t)nc * sizeof(float));
    return;
  }
  float *dbl = c->dbl && k == c->db_tap && c0 == 0 ? c->dbl + co0 : NULL;
  for (int64_t j = 0; dbl && j < DB_LANES; j++) memset(dbl + j * g->Cout, 0, (size_t)cout_g * sizeof(float));
  for (int64_t bi = 0; bi < g->B; bi++) {
    if (dbl) db_rows(c, bi, co0, cout_g, dbl, g->Cout);
    const mat A = act(g, c->dy, bi, g->Cout, Lout, co0, lo);
    const mat X = tr(act(g, c->x, bi, g->Cin, g->L, gi * cin_g + c0, lo + off));
    if (!X.t && cout_g * nc <= DW_TGEMM_MAX && gpa__tgemm_kernel() == 2) { /* nlc, a small C: see DW_TGEMM_MAX */
      for (int64_t k0 = 0; k0 < hi - lo; k0 += DW_KC)
        gpa__tgemm(cout_g, nc, min64(DW_KC, hi - lo - k0), A.p + at(A, 0, k0), A.t ? 1 : A.ld, A.t ? A.ld : 1,
                   X.p + at(X, k0, 0), X.ld, dwk, cin_g, bi || k0);
      continue;
    }
    mm(cout_g, nc, hi - lo, A, X, bi ? 1.0f : 0.0f, plain(dwk, cin_g, 0));
  }
}

/* After the units: dW unpacked from [K][Cout][Cin/groups] and db, output
 * channels cut into one range per slot. */
static void bwd_finish(int64_t s0, int64_t s1, void *vp) {
  const run_ctx *c = vp;
  int64_t S = c->p->slots, Cout = c->g->Cout;
  for (int64_t s = s0; s < s1; s++) {
    int64_t a = Cout * s / S, b = Cout * (s + 1) / S;
    if (c->g->K > 1) repack(c->g, c->dW, c->dwk, 0, a, b, 0, c->g->Cin / c->g->groups);
    if (c->dbl) db_lanes_out(c->dbl + a, Cout, b - a, c->db + a);
    else if (c->db) db_chans(c, a, b);
  }
}

/* Backward dx unit (batch bi, group gi, input positions [s0, s1)): dx[:, s]
 * = sum_k W_k^T dy[:, s - off_k] over the s - off_k inside [0, Lout), one
 * GEMM per tap; a tap that covers every position of the chunk runs first
 * with beta 0, else the chunk is zeroed first. */
static void shift_dx_unit(const run_ctx *c, int64_t bi, int64_t gi, int64_t s0, int64_t s1) {
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, Lout = g->Lout, K = g->K, first = -1;
  const mat dxg = act(g, c->dx, bi, g->Cin, g->L, gi * cin_g, 0), dyg = act(g, c->dy, bi, g->Cout, Lout, gi * cout_g, 0);
  for (int64_t i = 0; i < K && first < 0; i++) {
    int64_t k = (K / 2 + i) % K, off = k * g->dilation - g->pad_l;
    if (s0 - off >= 0 && s1 - off <= Lout) first = k;
  }
  if (first < 0) fill(dxg, cin_g, s0, s1, NULL);
  for (int64_t i = 0; i < K; i++) {
    int64_t k = first < 0 ? i : (first + i) % K, off = k * g->dilation - g->pad_l;
    int64_t lo = s0 - off > 0 ? s0 - off : 0, hi = s1 - off < Lout ? s1 - off : Lout; /* output positions */
    if (hi <= lo) continue;
    mm(cin_g, hi - lo, cout_g, plain(c->wk + (k * g->Cout + gi * cout_g) * cin_g, cin_g, 1), sub(dyg, 0, lo),
       first >= 0 && i == 0 ? 0.0f : 1.0f, sub(dxg, 0, lo + off));
  }
}

/* The backward's units, claimed dynamically: first the G * K * ndw dW units
 * (the larger ones), then the B * G * ntx dx units. */
static void shift_bwd_units(int64_t u0, int64_t u1, void *vp) {
  const run_ctx *c = vp;
  const plan *p = c->p;
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, ndw = G * g->K * p->ndw;
  for (int64_t u = u0; u < u1; u++) {
    if (u < ndw) {
      int64_t gk = u / p->ndw, c0 = u % p->ndw * p->nci;
      shift_dw_unit(c, gk / g->K, gk % g->K, c0, min64(p->nci, cin_g - c0));
    } else if (c->dx) {
      int64_t v = u - ndw, bg = v / p->ntx, s0 = v % p->ntx * p->lx;
      shift_dx_unit(c, bg / G, bg % G, s0, min64(s0 + p->lx, g->L));
    }
  }
}

/* ---- im2col path (and the direct 1x1 path) ---- */

/* Forward unit u: (batch, group, chunk of positions). */
static void fwd_unit(const run_ctx *c, int64_t u, float *col) {
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, rows = cin_g * g->K, Lout = g->Lout;
  int64_t bg = u / c->p->nt, bi = bg / G, gi = bg % G;
  int64_t t0 = u % c->p->nt * c->p->lc, n = min64(c->p->lc, Lout - t0);
  const mat xg = act(g, c->x, bi, g->Cin, g->L, gi * cin_g, 0), yg = act(g, c->y, bi, g->Cout, Lout, gi * cout_g, t0);
  if (c->b) fill(yg, cout_g, 0, n, c->b + gi * cout_g); /* the GEMM accumulates onto the bias (beta = 1) */
  mat Bm = sub(xg, 0, t0);
  if (!is_direct(g)) {
    col_ctx cc = {g, xg, xg, col, t0, n};
    im2col_rows(0, rows, &cc);
    Bm = plain(col, n, 0);
  }
  mm(cout_g, n, rows, plain(c->W + gi * cout_g * rows, rows, 0), Bm, c->b ? 1.0f : 0.0f, yg);
}

static void shift_fwd_units(int64_t u0, int64_t u1, void *vp) {
  for (int64_t u = u0; u < u1; u++) shift_fwd_unit(vp, u);
}

static void fwd_slots(int64_t s0, int64_t s1, void *vp) {
  const run_ctx *c = vp;
  for (int64_t s = s0; s < s1; s++)
    for (int64_t u = s; u < c->p->units; u += c->p->slots)
      if (c->p->shift) shift_fwd_unit(c, u);
      else fwd_unit(c, u, c->scratch + c->p->w_floats + s * c->p->slot_floats);
}

void gpa__conv1d_fwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *x, const float *W,
                     const float *b, float *y, float *scratch) {
  if (g->B <= 0 || g->Lout <= 0) return;
  plan p = make_plan(g, 0, par_threads(par));
  if (p.direct) {
    gpa__conv1d_direct_fwd(par, p.slots, g, x, W, b, y, scratch);
    return;
  }
  run_ctx c = {g, &p, x, W, b, NULL, y, NULL, NULL, NULL, scratch, W, NULL, NULL, -1};
  const gpa__par *pp = p.slots > 1 ? par : NULL;
  gpa__sgemm_own_split(par);
  if (p.shift && g->K > 1) { /* every unit reads all of W_k: repacked first */
    c.wk = scratch;
    gpa__pfor(pp, p.slots, 1, repack_slots, &c);
  }
  if (p.shift) /* units claimed dynamically: a thread slowed by another process leaves its share to the others */
    gpa__pfor(pp, p.units, 1, shift_fwd_units, &c);
  else
    gpa__pfor(pp, p.slots, 1, fwd_slots, &c);
}

/* Backward unit u: (group, block of input channels), over every batch and
 * chunk of positions in order. */
static void bwd_unit(const run_ctx *c, int64_t u, float *col) {
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, rows = cin_g * g->K, Lout = g->Lout;
  int64_t nb = cdiv(cin_g, c->p->cb), gi = u / nb, c0 = u % nb * c->p->cb, nc = min64(c->p->cb, cin_g - c0);
  int64_t r = nc * g->K, lc = c->p->lc, direct = is_direct(g);
  const float *Wu = c->W + gi * cout_g * rows + c0 * g->K;
  float *dWu = c->dW + gi * cout_g * rows + c0 * g->K;
  const mat Wm = plain(Wu, rows, 1), dWm = plain(dWu, rows, 0);
  for (int64_t bi = 0; bi < g->B; bi++) {
    const mat xg = act(g, c->x, bi, g->Cin, g->L, gi * cin_g + c0, 0);
    const mat dyb = act(g, c->dy, bi, g->Cout, Lout, gi * cout_g, 0);
    const mat dxg = c->dx ? act(g, c->dx, bi, g->Cin, g->L, gi * cin_g + c0, 0) : plain(NULL, 0, 0);
    if (dxg.p && !direct) fill(dxg, nc, 0, g->L, NULL); /* col2im adds */
    for (int64_t t0 = 0; t0 < Lout; t0 += lc) {
      int64_t n = min64(lc, Lout - t0);
      float beta = bi == 0 && t0 == 0 ? 0.0f : 1.0f;
      if (direct) { /* x is the column matrix; dx = W^T dy in place */
        mm(cout_g, r, n, sub(dyb, 0, t0), tr(sub(xg, 0, t0)), beta, dWm);
        if (dxg.p) mm(r, n, cout_g, Wm, sub(dyb, 0, t0), 0.0f, sub(dxg, 0, t0));
        continue;
      }
      col_ctx cc = {g, xg, dxg, col, t0, n};
      im2col_rows(0, r, &cc);
      mm(cout_g, r, n, sub(dyb, 0, t0), plain(col, n, 1), beta, dWm);
      if (dxg.p) { /* dcol over col: its rows are no longer needed */
        mm(r, n, cout_g, Wm, sub(dyb, 0, t0), 0.0f, plain(col, n, 0));
        col2im_chans(0, nc, &cc);
      }
    }
  }
}

static void bwd_slots(int64_t s0, int64_t s1, void *vp) {
  const run_ctx *c = vp;
  int64_t S = c->p->slots;
  for (int64_t s = s0; s < s1; s++) {
    if (c->db) db_chans(c, c->g->Cout * s / S, c->g->Cout * (s + 1) / S);
    for (int64_t u = s; u < c->p->units; u += S) bwd_unit(c, u, c->scratch + c->p->w_floats + s * c->p->slot_floats);
  }
}

void gpa__conv1d_bwd(const gpa__par *par, const gpa__conv1d_geom *g, const float *dy, const float *x,
                     const float *W, float *dx, float *dW, float *db, float *scratch) {
  if (g->B <= 0 || g->Lout <= 0) {
    memset(dW, 0, (size_t)(g->Cout * (g->Cin / g->groups) * g->K) * sizeof(float));
    if (db) memset(db, 0, (size_t)g->Cout * sizeof(float));
    if (dx) memset(dx, 0, (size_t)(g->B * g->Cin * g->L) * sizeof(float)); /* either layout */
    return;
  }
  plan p = make_plan(g, 1, par_threads(par));
  run_ctx c = {g, &p, x, W, NULL, dy, NULL, dx, dW, db, scratch, W, dW, NULL, -1};
  const gpa__par *pp = p.slots > 1 ? par : NULL;
  gpa__sgemm_own_split(par);
  if (!p.shift) {
    gpa__pfor(pp, p.slots, 1, bwd_slots, &c);
    return;
  }
  c.db_tap = full_tap(g, 0, g->Lout); /* its dW units read every row of dy */
  if (db && p.db_floats && c.db_tap >= 0) c.dbl = scratch + p.w_floats + p.dx_floats;
  if (g->K > 1) {
    c.wk = scratch;
    c.dwk = scratch + p.w_floats / 2;
    if (dx && !p.dx_direct) gpa__pfor(pp, p.slots, 1, repack_slots, &c); /* every dx unit reads all of W_k */
  }
  if (dx && p.dx_direct) { /* dx by the direct kernel; its slots claim the dW units first */
    gpa__conv1d_geom t;
    gpa__conv1d_direct_dx_geom(g, &t);
    c.dx = NULL;
    gpa__conv1d_direct_dx(par, p.slots, &t, dy, W, dx, scratch + p.w_floats, shift_bwd_units, &c, p.units);
  } else {
    gpa__pfor(pp, p.units, 1, shift_bwd_units, &c);
  }
  if (g->K > 1 || db) gpa__pfor(pp, p.slots, 1, bwd_finish, &c);
}
