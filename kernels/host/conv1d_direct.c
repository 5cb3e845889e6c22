/* Direct conv1d forward (AVX2+FMA or AVX-512F), and the backward's dx as
 * the forward of the transposed problem. See conv1d_direct.h. */
#include "kernels/host/conv1d_direct.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/simd_exp.h" /* GPA__AVX2_ATTR, gpa__cpu_avx2 */

#define MR 6
#define NR_MAX 32 /* 16 (AVX2, 2 x 8 lanes) or 32 (AVX-512F, 2 x 16 lanes) positions per block */
/* Output positions per unit: the unit's panel holds Cin_g rows of
 * DIRECT_NC positions plus (K-1)*dilation (about 136 KiB at
 * Cin_g = 256, K = 3, dilation 4), in L2 while its 6-row tiles of W
 * stream past them; 64 to 256 ran alike on one thread. */
#define DIRECT_NC 128

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static uint64_t wp_floats(const gpa__conv1d_geom *g) {
  int64_t G = g->groups, R = g->K * (g->Cin / G);
  return (uint64_t)G * (uint64_t)cdiv(g->Cout / G, MR) * (uint64_t)R * MR;
}
/* A unit's panel: each input channel's row of its DIRECT_NC positions plus
 * (K-1)*dilation (every block of nr positions and every tap reads its
 * window of it). */
static int64_t panel_row(const gpa__conv1d_geom *g) { return DIRECT_NC + (g->K - 1) * g->dilation; }
/* Under nlc each slot also holds its unit's y block [cout_g][DIRECT_NC],
 * transposed into y's rows at the end of the unit. */
static uint64_t panel_floats(const gpa__conv1d_geom *g) {
  return (uint64_t)(g->Cin / g->groups) * (uint64_t)panel_row(g) +
         (g->nlc ? (uint64_t)(g->Cout / g->groups) * DIRECT_NC : 0);
}

/* 1: the AVX-512F kernel (on Intel cores with two 512-bit FMA units it does
 * twice the AVX2 kernel's work per cycle; on AMD Zen 4 the two run alike). */
static int avx2_only; /* gpa__conv1d_direct_avx2_only */

void gpa__conv1d_direct_avx2_only(int on) { __atomic_store_n(&avx2_only, on != 0, __ATOMIC_RELAXED); }

static int use_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  static int cached = -1;
  if (__atomic_load_n(&avx2_only, __ATOMIC_RELAXED)) return 0;
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx512f") != 0; /* GPA_CONV1D_AVX512=0: avx2_only (options table) */
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
#else
  return 0;
#endif
}

uint64_t gpa__conv1d_direct_floats(const gpa__conv1d_geom *g, int64_t threads) {
  return wp_floats(g) + (uint64_t)(threads < 1 ? 1 : threads) * panel_floats(g);
}

int gpa__conv1d_direct_ok(const gpa__conv1d_geom *g, int64_t threads) {
#ifdef GPA__HAVE_AVX2_PATH
  if (g->stride != 1 || g->im2col || g->no_direct || !gpa__cpu_avx2()) return 0;
  return gpa__conv1d_direct_floats(g, threads) * sizeof(float) <= GPA__CONV1D_SCRATCH_CAP;
#else
  (void)g, (void)threads;
  return 0;
#endif
}

#ifdef GPA__HAVE_AVX2_PATH
/* C[6][16] (ldc) = bias + sum_r A[r][0..5] * B[r][0..15]. */
GPA__AVX2_ATTR static void micro(int64_t cin, int64_t K, int64_t dil, int64_t rl, const float *A, const float *Bp,
                                 float *C, int64_t ldc, const float *bias) {
  __m256 c00 = _mm256_set1_ps(bias[0]), c01 = c00, c10 = _mm256_set1_ps(bias[1]), c11 = c10;
  __m256 c20 = _mm256_set1_ps(bias[2]), c21 = c20, c30 = _mm256_set1_ps(bias[3]), c31 = c30;
  __m256 c40 = _mm256_set1_ps(bias[4]), c41 = c40, c50 = _mm256_set1_ps(bias[5]), c51 = c50;
  for (int64_t ci = 0; ci < cin; ci++, Bp += rl)
    for (int64_t k = 0; k < K; k++) {
    const float *B = Bp + k * dil;
    __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8), a;
    a = _mm256_broadcast_ss(A + 0);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(A + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(A + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(A + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(A + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(A + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    A += MR;
  }
  _mm256_storeu_ps(C, c00), _mm256_storeu_ps(C + 8, c01), C += ldc;
  _mm256_storeu_ps(C, c10), _mm256_storeu_ps(C + 8, c11), C += ldc;
  _mm256_storeu_ps(C, c20), _mm256_storeu_ps(C + 8, c21), C += ldc;
  _mm256_storeu_ps(C, c30), _mm256_storeu_ps(C + 8, c31), C += ldc;
  _mm256_storeu_ps(C, c40), _mm256_storeu_ps(C + 8, c41), C += ldc;
  _mm256_storeu_ps(C, c50), _mm256_storeu_ps(C + 8, c51);
}

/* The same with 32 positions: C[6][32] in 12 zmm. */
__attribute__((target("avx512f"))) static void micro512(int64_t cin, int64_t K, int64_t dil, int64_t rl,
                                                        const float *A, const float *Bp, float *C, int64_t ldc,
                                                        const float *bias) {
  __m512 c00 = _mm512_set1_ps(bias[0]), c01 = c00, c10 = _mm512_set1_ps(bias[1]), c11 = c10;
  __m512 c20 = _mm512_set1_ps(bias[2]), c21 = c20, c30 = _mm512_set1_ps(bias[3]), c31 = c30;
  __m512 c40 = _mm512_set1_ps(bias[4]), c41 = c40, c50 = _mm512_set1_ps(bias[5]), c51 = c50;
  for (int64_t ci = 0; ci < cin; ci++, Bp += rl)
    for (int64_t k = 0; k < K; k++) {
    const float *B = Bp + k * dil;
    __m512 b0 = _mm512_loadu_ps(B), b1 = _mm512_loadu_ps(B + 16), a;
    a = _mm512_set1_ps(A[0]);
    c00 = _mm512_fmadd_ps(a, b0, c00);
    c01 = _mm512_fmadd_ps(a, b1, c01);
    a = _mm512_set1_ps(A[1]);
    c10 = _mm512_fmadd_ps(a, b0, c10);
    c11 = _mm512_fmadd_ps(a, b1, c11);
    a = _mm512_set1_ps(A[2]);
    c20 = _mm512_fmadd_ps(a, b0, c20);
    c21 = _mm512_fmadd_ps(a, b1, c21);
    a = _mm512_set1_ps(A[3]);
    c30 = _mm512_fmadd_ps(a, b0, c30);
    c31 = _mm512_fmadd_ps(a, b1, c31);
    a = _mm512_set1_ps(A[4]);
    c40 = _mm512_fmadd_ps(a, b0, c40);
    c41 = _mm512_fmadd_ps(a, b1, c41);
    a = _mm512_set1_ps(A[5]);
    c50 = _mm512_fmadd_ps(a, b0, c50);
    c51 = _mm512_fmadd_ps(a, b1, c51);
    A += MR;
  }
  _mm512_storeu_ps(C, c00), _mm512_storeu_ps(C + 16, c01), C += ldc;
  _mm512_storeu_ps(C, c10), _mm512_storeu_ps(C + 16, c11), C += ldc;
  _mm512_storeu_ps(C, c20), _mm512_storeu_ps(C + 16, c21), C += ldc;
  _mm512_storeu_ps(C, c30), _mm512_storeu_ps(C + 16, c31), C += ldc;
  _mm512_storeu_ps(C, c40), _mm512_storeu_ps(C + 16, c41), C += ldc;
  _mm512_storeu_ps(C, c50), _mm512_storeu_ps(C + 16, c51);
}

typedef struct dctx {
  const gpa__conv1d_geom *g;
  const float *x, *W, *b;
  float *y, *wp, *panels;
  int64_t slots, nt, units; /* nt: chunks per (batch, group) */
  int64_t nr;               /* positions per block: 16 or 32 */
  int64_t wt_cout_g;        /* 0: W as [Cout][Cin_g][K]; else the transposed problem's (dx) weights
                             * from the forward's W with that many output channels per group */
  _Atomic int64_t next;
  gpa__range_fn extra; /* other units claimed first, by the same slots (the backward's dW) */
  void *extra_ctx;
  int64_t n_extra;
} dctx;

/* Wp[g][tile][ci][k][i] = W[g*cout_g + tile*6 + i][ci][k] (0 past cout_g). */
static void pack_w_slots(int64_t s0, int64_t s1, void *vp) {
  dctx *c = vp;
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, K = g->K, R = K * cin_g;
  int64_t nct = cdiv(cout_g, MR), tiles = G * nct;
  for (int64_t s = s0; s < s1; s++)
    for (int64_t t = tiles * s / c->slots; t < tiles * (s + 1) / c->slots; t++) {
      int64_t gi = t / nct, ct = t % nct;
      float *d = c->wp + t * R * MR;
      int64_t m = cout_g - ct * MR < MR ? cout_g - ct * MR : MR;
      if (!c->wt_cout_g) {
        const float *w = c->W + (gi * cout_g + ct * MR) * cin_g * K;
        for (int64_t ci = 0; ci < cin_g; ci++)
          for (int64_t k = 0; k < K; k++, d += MR)
            for (int64_t i = 0; i < MR; i++) d[i] = i < m ? w[(i * cin_g + ci) * K + k] : 0.0f;
      } else { /* W'[o][j][k] = W[g*cin_g + j][o][K-1-k]: here cin_g is the forward's Cout/G, cout_g its Cin/G */
        const float *w = c->W + gi * cin_g * cout_g * K;
        for (int64_t j = 0; j < cin_g; j++)
          for (int64_t k = 0; k < K; k++, d += MR)
            for (int64_t i = 0; i < MR; i++)
              d[i] = i < m ? w[(j * cout_g + ct * MR + i) * K + (K - 1 - k)] : 0.0f;
      }
    }
}

/* d[c][r] = s[r][c] for an 8 x 8 block (rows ls and ld floats apart): the
 * usual unpack / shuffle / 128-bit permute transpose in 8 ymm. */
GPA__AVX2_ATTR static void tr8x8(const float *s, int64_t ls, float *d, int64_t ld) {
  __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls), r2 = _mm256_loadu_ps(s + 2 * ls);
  __m256 r3 = _mm256_loadu_ps(s + 3 * ls), r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls);
  __m256 r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3);
  __m256 t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* The unit's panel: P[ci][j] = x[ci, t0 + j - pad_l] for j < the unit's
 * blocks' nr-multiple of positions + (K-1)*dil (0 outside [0, L)), rows
 * panel_row apart; block tt's tap k reads j = tt*nr + k*dil on. One row
 * per channel, not one per block of nr: 4-8x fewer copies of 15% fewer
 * floats (the copies were 5% of the kernel's time at B8 C256 L1024, one
 * thread; rows 544 bytes apart at dilation 4, no L1 set conflicts). */
static void pack_x(const gpa__conv1d_geom *g, const float *x, int64_t bi, int64_t gi, int64_t t0, int64_t nc,
                   int64_t nr, float *P) {
  int64_t cin_g = g->Cin / g->groups, L = g->L, ld = panel_row(g);
  int64_t w = cdiv(nc, nr) * nr + (g->K - 1) * g->dilation, base = t0 - g->pad_l;
  int64_t lo = base < 0 ? -base : 0, hi = L - base < w ? L - base : w;
  if (lo > w) lo = w;
  if (hi < lo) hi = lo;
  if (g->nlc) { /* x [B,L,Cin]: a transposing gather, blocks of 8 positions (8 rows of x) by 8 channels */
    const float *xb = x + bi * L * g->Cin + gi * cin_g; /* position p's channels at xb + p Cin */
    for (int64_t ci = 0; ci < cin_g; ci++) {
      float *d = P + ci * ld;
      if (lo > 0) memset(d, 0, (size_t)lo * sizeof(float));
      if (hi < w) memset(d + hi, 0, (size_t)(w - hi) * sizeof(float));
    }
    int64_t j = lo, c8 = cin_g / 8 * 8;
    for (; j + 8 <= hi; j += 8) {
      const float *r = xb + (base + j) * g->Cin;
      for (int64_t ci = 0; ci < c8; ci += 8) tr8x8(r + ci, g->Cin, P + ci * ld + j, ld);
      for (int64_t ci = c8; ci < cin_g; ci++)
        for (int jj = 0; jj < 8; jj++) P[ci * ld + j + jj] = r[jj * g->Cin + ci];
    }
    for (; j < hi; j++)
      for (int64_t ci = 0; ci < cin_g; ci++) P[ci * ld + j] = xb[(base + j) * g->Cin + ci];
    return;
  }
  const float *xg = x + (bi * g->Cin + gi * cin_g) * L;
  for (int64_t ci = 0; ci < cin_g; ci++) {
    const float *src = xg + ci * L + base;
    float *d = P + ci * ld;
    if (lo > 0) memset(d, 0, (size_t)lo * sizeof(float));
    if (hi > lo) memcpy(d + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
    if (hi < w) memset(d + hi, 0, (size_t)(w - hi) * sizeof(float));
  }
}

static void unit(dctx *c, int64_t u, float *P) {
  const gpa__conv1d_geom *g = c->g;
  int64_t G = g->groups, cin_g = g->Cin / G, cout_g = g->Cout / G, R = g->K * cin_g, Lout = g->Lout, nr = c->nr;
  int64_t rl = panel_row(g);
  int64_t bg = u / c->nt, bi = bg / G, gi = bg % G, t0 = u % c->nt * DIRECT_NC;
  int64_t nc = Lout - t0 < DIRECT_NC ? Lout - t0 : DIRECT_NC, nct = cdiv(cout_g, MR);
  pack_x(g, c->x, bi, gi, t0, nc, nr, P);
  /* y [B,Lout,Cout] (nlc): the unit's block [cout_g][DIRECT_NC] after the
   * panel, transposed into y's rows once every tile is done (a scatter of
   * each 6 x nr tile instead cost the forward 20% at B32 C96 L128) */
  float *yg = g->nlc ? P + cin_g * rl : c->y + (bi * g->Cout + gi * cout_g) * Lout + t0;
  const int64_t ly = g->nlc ? DIRECT_NC : Lout;
  float tmp[MR * NR_MAX], bias[MR];
  for (int64_t ct = 0; ct < nct; ct++) {
    int64_t m = cout_g - ct * MR < MR ? cout_g - ct * MR : MR;
    for (int64_t i = 0; i < MR; i++) bias[i] = c->b && i < m ? c->b[gi * cout_g + ct * MR + i] : 0.0f;
    const float *A = c->wp + (gi * nct + ct) * R * MR;
    for (int64_t tt = 0; tt * nr < nc; tt++) {
      int64_t n = nc - tt * nr < nr ? nc - tt * nr : nr;
      float *C = yg + ct * MR * ly + tt * nr, *out = m == MR && n == nr ? C : tmp;
      int64_t ldo = out == C ? ly : nr;
      const float *Bt = P + tt * nr;
      if (nr == 32)
        micro512(cin_g, g->K, g->dilation, rl, A, Bt, out, ldo, bias);
      else
        micro(cin_g, g->K, g->dilation, rl, A, Bt, out, ldo, bias);
      if (out == tmp)
        for (int64_t i = 0; i < m; i++) memcpy(C + i * ly, tmp + i * nr, (size_t)n * sizeof(float));
    }
  }
  if (g->nlc) { /* yg [cout_g][nc] -> y [t0 + j][gi cout_g + co], 8 x 8 blocks, the edges one by one */
    float *yr = c->y + (bi * Lout + t0) * g->Cout + gi * cout_g;
    int64_t c8 = cout_g / 8 * 8, n8 = nc / 8 * 8;
    for (int64_t co = 0; co < c8; co += 8)
      for (int64_t j = 0; j < n8; j += 8) tr8x8(yg + co * ly + j, ly, yr + j * g->Cout + co, g->Cout);
    for (int64_t j = 0; j < nc; j++)
      for (int64_t co = j < n8 ? c8 : 0; co < cout_g; co++) yr[j * g->Cout + co] = yg[co * ly + j];
  }
}

/* Each slot claims units until none is left; its panel buffer is its own. */
static void run_slots(int64_t s0, int64_t s1, void *vp) {
  dctx *c = vp;
  for (int64_t s = s0; s < s1; s++) {
    float *P = c->panels + (uint64_t)s * panel_floats(c->g);
    for (int64_t u; (u = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed)) < c->n_extra + c->units;)
      if (u < c->n_extra)
        c->extra(u, u + 1, c->extra_ctx);
      else
        unit(c, u - c->n_extra, P);
  }
}
#endif

static void direct_run(const gpa__par *par, int64_t slots, const gpa__conv1d_geom *g, const float *x,
                       const float *W, const float *b, float *y, float *scratch, int64_t wt_cout_g,
                       gpa__range_fn extra, void *extra_ctx, int64_t n_extra) {
#ifdef GPA__HAVE_AVX2_PATH
  if (slots < 1) slots = 1;
  dctx c = {g, x, W, b, y, scratch, scratch + wp_floats(g), slots, cdiv(g->Lout, DIRECT_NC), 0, use_avx512() ? 32 : 16,
            wt_cout_g, 0, extra, extra_ctx, extra ? n_extra : 0};
  c.units = g->B * g->groups * c.nt;
  atomic_init(&c.next, 0);
  const gpa__par *pp = slots > 1 ? par : NULL;
  gpa__pfor(pp, slots, 1, pack_w_slots, &c);
  gpa__pfor(pp, slots, 1, run_slots, &c);
#else
  (void)par, (void)slots, (void)g, (void)x, (void)W, (void)b, (void)y, (void)scratch, (void)wt_cout_g;
  (void)extra, (void)extra_ctx, (void)n_extra;
#endif
}

void gpa__conv1d_direct_fwd(const gpa__par *par, int64_t slots, const gpa__conv1d_geom *g, const float *x,
                            const float *W, const float *b, float *y, float *scratch) {
  direct_run(par, slots, g, x, W, b, y, scratch, 0, NULL, NULL, 0);
}

int gpa__conv1d_direct_dx_geom(const gpa__conv1d_geom *g, gpa__conv1d_geom *t) {
  int64_t span = (g->K - 1) * g->dilation;
  if (g->stride != 1 || g->pad_l > span || g->pad_r > span) return 0;
  *t = *g;
  t->Cin = g->Cout, t->Cout = g->Cin, t->L = g->Lout;
  t->pad_l = span - g->pad_l, t->pad_r = span - g->pad_r;
  t->im2col = 0, t->no_direct = 0;
  return gpa__conv1d_geom_init(t) && t->Lout == g->L;
}

void gpa__conv1d_direct_dx(const gpa__par *par, int64_t slots, const gpa__conv1d_geom *t, const float *dy,
                           const float *W, float *dx, float *scratch, gpa__range_fn extra, void *extra_ctx,
                           int64_t n_extra) {
  direct_run(par, slots, t, dy, W, NULL, dx, scratch, t->Cin / t->groups, extra, extra_ctx, n_extra);
}
