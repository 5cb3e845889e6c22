/* Host flash attention: see attention.h.
 *
 * Forward, per (b, h, query tile of BR rows): the tile's queries are
 * transposed once (Qt); for each key tile of BC keys, S^T = K Qt (keys as
 * rows, queries as contiguous columns, so the softmax statistics of 8
 * queries sit in one vector), the running max m and sum l are updated
 * (online softmax, O rescaled by exp(m_old - m_new)), O += P V with P read
 * transposed out of S^T. At the end o = O / l and lse = m + log l.
 *
 * Backward, per (b, kv head): delta_i = dout_i . o_i; then for each key
 * tile j, for each query head of the group and each query tile i that can
 * see it: P = exp(scale S - lse), dP = dout V^T, dS = P (dP - delta),
 *   dq_i += dS K_j,  dV_j += P^T dout_i,  dK_j += dS^T q_i
 * with dq and dK scaled by `scale` at the end. One work item owns its dq
 * rows and its dk/dv rows, and walks tiles in a fixed order: no atomics, the
 * same bits every run. With fewer than 4 (b, kv head) pairs the work splits
 * into dk/dv items per key tile and dq items per query tile (see dkv_item),
 * with the same sums in the same order. */
#include "kernels/host/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/simd_exp.h"
#include "kernels/host/tgemm.h"

/* Tile sizes (FWD_BR a multiple of 8: one vector of queries in the
 * forward's softmax). Multiples of 6 (the tile GEMM's block rows) measured
 * no faster. */
#define FWD_BR 64
#define FWD_BC 128
#define BWD_BR 64
#define BWD_BC 64

/* Keys visible to query s: [0, lim). */
static inline int64_t key_limit(const gpa__attn_geom *g, int64_t kvlen, int64_t s) {
  int64_t lim = kvlen;
  if (g->causal && s + g->Sk - g->S + 1 < lim) lim = s + g->Sk - g->S + 1;
  return lim < 0 ? 0 : lim;
}

static inline int64_t kv_len(const gpa__attn_geom *g, const int32_t *lens, int64_t b) {
  if (!lens) return g->Sk;
  int64_t n = lens[b];
  return n < 0 ? 0 : (n > g->Sk ? g->Sk : n);
}

/* p[c] = exp(p[c] * scale - sub) for c < nv, 0 for nv <= c < n; returns the
 * sum of the first nv (lanes then a fixed tree: deterministic). */
static float exp_row_scalar(float *p, int64_t nv, int64_t n, float scale, float sub) {
  float s = 0.0f;
  for (int64_t c = 0; c < nv; c++) {
    p[c] = expf(p[c] * scale - sub);
    s += p[c];
  }
  for (int64_t c = nv; c < n; c++) p[c] = 0.0f;
  return s;
}

#ifdef GPA__HAVE_AVX2_PATH
GPA__AVX2_ATTR static float exp_row_avx2(float *p, int64_t nv, int64_t n, float scale, float sub) {
  const __m256 vs = _mm256_set1_ps(scale), vsub = _mm256_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= nv; c += 8) {
    __m256 e = gpa__exp8(_mm256_fmsub_ps(_mm256_loadu_ps(p + c), vs, vsub));
    _mm256_storeu_ps(p + c, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (c < nv) {
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nv - c)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 e = gpa__exp8(_mm256_fmsub_ps(_mm256_maskload_ps(p + c, m), vs, vsub));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(p + c, m, e);
    acc = _mm256_add_ps(acc, e);
  }
  for (int64_t z = nv; z < n; z++) p[z] = 0.0f;
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}
#endif

static float exp_row(float *p, int64_t nv, int64_t n, float scale, float sub) {
#ifdef GPA__HAVE_AVX2_PATH
  if (gpa__cpu_avx2()) return exp_row_avx2(p, nv, n, scale, sub);
#endif
  return exp_row_scalar(p, nv, n, scale, sub);
}

typedef struct attn_ctx {
  const gpa__attn_geom *g;
  const float *q, *k, *v, *o, *lse, *dout;
  const int32_t *lens;
  float *out_o, *out_lse, *dq, *dk, *dv;
  float *delta; /* split backward: [B,H,S] */
  int stage;    /* backward: BWD_FUSED, BWD_DKV or BWD_DQ */
  atomic_int failed;
} attn_ctx;

/* ---- forward --------------------------------------------------------- */

/* One key tile of the online softmax, in the transposed layout: St[j*lds + i]
 * holds the raw score of key j and query i (ld = padded query count, a
 * multiple of 8; lds >= ld). Keys j >= nv[i] are masked. Updates the running max m and
 * sum l of each query, writes corr = exp(m_old - m_new) and overwrites St
 * with P^T = exp(scale*St - m_new) (0 where masked). */
static void softmax_tile_scalar(float *St, int64_t nc, int64_t ld, int64_t lds, const int32_t *nv, float scale, float *m,
                                float *l, float *corr) {
  for (int64_t i = 0; i < ld; i++) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < nc && j < nv[i]; j++) mx = St[j * lds + i] > mx ? St[j * lds + i] : mx;
    float mnew = mx * scale > m[i] ? mx * scale : m[i];
    float c = mnew == -INFINITY ? 1.0f : expf(m[i] - mnew), sum = 0.0f;
    for (int64_t j = 0; j < nc; j++) {
      float *p = &St[j * lds + i];
      *p = j < nv[i] ? expf(*p * scale - mnew) : 0.0f;
      sum += *p;
    }
    l[i] = l[i] * c + sum;
    m[i] = mnew;
    corr[i] = c;
  }
}

#ifdef GPA__HAVE_AVX2_PATH
GPA__AVX2_ATTR static void softmax_tile_avx2(float *St, int64_t nc, int64_t ld, int64_t lds, const int32_t *nv, float scale,
                                             float *m, float *l, float *corr) {
  const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < ld; i += 8) {
    __m256i n = _mm256_loadu_si256((const __m256i *)(nv + i));
    __m256 mx = ninf;
    for (int64_t j = 0; j < nc; j++) {
      __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_set1_epi32((int)j)));
      __m256 row = _mm256_loadu_ps(St + j * lds + i);
      mx = _mm256_blendv_ps(mx, _mm256_max_ps(mx, row), vis);
    }
    __m256 mold = _mm256_loadu_ps(m + i);
    __m256 mnew = _mm256_max_ps(mold, _mm256_mul_ps(mx, vs));
    /* no visible key yet: keep corr = 1 (m stays -inf, l and O stay 0) */
    __m256 none = _mm256_cmp_ps(mnew, ninf, _CMP_EQ_OQ);
    __m256 c = _mm256_blendv_ps(gpa__exp8(_mm256_sub_ps(mold, mnew)), _mm256_set1_ps(1.0f), none);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < nc; j++) {
      __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_set1_epi32((int)j)));
      float *p = St + j * lds + i;
      __m256 e = _mm256_and_ps(gpa__exp8(_mm256_fmsub_ps(_mm256_loadu_ps(p), vs, mnew)), vis);
      _mm256_storeu_ps(p, e);
      sum = _mm256_add_ps(sum, e);
    }
    _mm256_storeu_ps(l + i, _mm256_fmadd_ps(_mm256_loadu_ps(l + i), c, sum));
    _mm256_storeu_ps(m + i, mnew);
    _mm256_storeu_ps(corr + i, c);
  }
}
#endif

static void softmax_tile(float *St, int64_t nc, int64_t ld, int64_t lds, const int32_t *nv, float scale, float *m, float *l,
                         float *corr) {
#ifdef GPA__HAVE_AVX2_PATH
  if (gpa__cpu_avx2()) { softmax_tile_avx2(St, nc, ld, lds, nv, scale, m, l, corr); return; }
#endif
  softmax_tile_scalar(St, nc, ld, lds, nv, scale, m, l, corr);
}

typedef struct fwd_ws {
  float *Qt, *St, *O, *Vp, *m, *l, *corr;
  int32_t *nv, *lim;
} fwd_ws;

#define FWD_LD FWD_BR /* padded query count of a tile (a multiple of 8) */
/* Row strides of the forward's Qt, St and Vp tiles are padded by FWD_PAD
 * floats: at 64 or 128 floats (256 or 512 bytes) the column strip that a
 * tile GEMM walks down (128 rows, one cache line each) maps to 16 or 8 of
 * L1's 64 sets, more lines than their ways, and evicts itself while in use
 * (cachegrind: docs/benchmarks.md). */
#define FWD_PAD 8

static void fwd_item(const attn_ctx *c, int64_t it, const fwd_ws *w) {
  const gpa__attn_geom *g = c->g;
  int64_t nq = (g->S + FWD_BR - 1) / FWD_BR, D = g->D, grp = g->H / g->Hkv;
  int64_t b = it / (g->H * nq), h = (it / nq) % g->H, s0 = (it % nq) * FWD_BR, kh = h / grp;
  int64_t mr = g->S - s0 < FWD_BR ? g->S - s0 : FWD_BR, ld = (mr + 7) / 8 * 8;
  int64_t ldq = g->H * D, ldk = g->Hkv * D, kvlen = kv_len(g, c->lens, b);
  const float *Q = c->q + ((b * g->S + s0) * g->H + h) * D;
  const float *K = c->k + (b * g->Sk * g->Hkv + kh) * D;
  const float *V = c->v + (b * g->Sk * g->Hkv + kh) * D;
  int64_t jmax = 0;
  for (int64_t r = 0; r < ld; r++) {
    w->lim[r] = r < mr ? (int32_t)key_limit(g, kvlen, s0 + r) : 0;
    if (w->lim[r] > jmax) jmax = w->lim[r];
    w->m[r] = -INFINITY;
    w->l[r] = 0.0f;
  }
  /* Qt [D, ld] (rows lp apart): the tile's queries as columns, zero padded */
  const int64_t lp = ld + FWD_PAD, ldv = D + FWD_PAD;
  gpa__transpose(mr, D, Q, ldq, w->Qt, lp);
  if (ld > mr)
    for (int64_t d = 0; d < D; d++) memset(w->Qt + d * lp + mr, 0, (size_t)(ld - mr) * sizeof(float));
  memset(w->O, 0, (size_t)(mr * D) * sizeof(float));
  for (int64_t j0 = 0; j0 < jmax; j0 += FWD_BC) {
    int64_t nc = jmax - j0 < FWD_BC ? jmax - j0 : FWD_BC;
    for (int64_t r = 0; r < ld; r++) {
      int64_t v = w->lim[r] - j0;
      w->nv[r] = (int32_t)(v < 0 ? 0 : (v > nc ? nc : v));
    }
    /* St [nc, ld] (rows lp apart) = K_j Q^T */
    gpa__tgemm(nc, ld, D, K + j0 * ldk, ldk, 1, w->Qt, lp, w->St, lp, 0);
    softmax_tile(w->St, nc, ld, lp, w->nv, g->scale, w->m, w->l, w->corr);
    for (int64_t r = 0; r < mr; r++)
      if (w->corr[r] != 1.0f) {
        float *orow = w->O + r * D, cr = w->corr[r];
        for (int64_t d = 0; d < D; d++) orow[d] *= cr;
      }
    /* O += P V_j, P read transposed out of St; V_j packed contiguous first
     * (its rows lie Hkv*D floats apart, often a multiple of 4 KiB: strided,
     * they would all fall into one L1 set) */
    for (int64_t j = 0; j < nc; j++) memcpy(w->Vp + j * ldv, V + (j0 + j) * ldk, (size_t)D * sizeof(float));
    gpa__tgemm(mr, D, nc, w->St, 1, lp, w->Vp, ldv, w->O, D, 1);
  }
  for (int64_t r = 0; r < mr; r++) {
    float *dst = c->out_o + ((b * g->S + s0 + r) * g->H + h) * D;
    float *L = c->out_lse + (b * g->H + h) * g->S + s0 + r;
    if (w->l[r] > 0.0f) {
      float inv = 1.0f / w->l[r];
      for (int64_t d = 0; d < D; d++) dst[d] = w->O[r * D + d] * inv;
      *L = w->m[r] + logf(w->l[r]);
    } else {
      memset(dst, 0, (size_t)D * sizeof(float));
      *L = -INFINITY;
    }
  }
}

static void *ws_alloc(size_t floats) {
  size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
  return aligned_alloc(64, bytes ? bytes : 64);
}

static void fwd_range(int64_t i0, int64_t i1, void *p) {
  attn_ctx *c = p;
  size_t D = (size_t)c->g->D, lp = FWD_LD + FWD_PAD;
  size_t nQt = D * lp, nSt = (size_t)FWD_BC * lp, nO = FWD_BR * D, nV = FWD_BC * (D + FWD_PAD);
  float *ws = ws_alloc(nQt + nSt + nO + nV + 6 * FWD_LD);
  if (!ws) {
    atomic_store_explicit(&c->failed, 1, memory_order_relaxed);
    return;
  }
  fwd_ws w;
  w.Qt = ws;
  w.St = w.Qt + nQt;
  w.O = w.St + nSt;
  w.Vp = w.O + nO;
  w.m = w.Vp + nV;
  w.l = w.m + FWD_LD;
  w.corr = w.l + FWD_LD;
  w.nv = (int32_t *)(w.corr + FWD_LD);
  w.lim = w.nv + FWD_LD;
  for (int64_t it = i0; it < i1; it++) fwd_item(c, it, &w);
  free(ws);
}

gpa_status gpa__attention_fwd(const gpa__par *par, const gpa__attn_geom *g, const float *q, const float *k,
                              const float *v, const int32_t *lens, float *o, float *lse) {
  attn_ctx c = {.g = g, .q = q, .k = k, .v = v, .lens = lens, .out_o = o, .out_lse = lse};
  atomic_init(&c.failed, 0);
  int64_t nq = (g->S + FWD_BR - 1) / FWD_BR;
  gpa__pfor(par, g->B * g->H * nq, 1, fwd_range, &c);
  return atomic_load(&c.failed) ? GPA_ENOMEM : GPA_OK;
}

/* ---- backward -------------------------------------------------------- */

typedef struct bwd_ws {
  float *Kt, *Vt, *Kp, *Qp, *dOp, *P, *dS, *dKa, *dVa, *delta;
} bwd_ws;

/* Row strides of the backward's tiles: BWD_LDT for the [., BWD_BC] ones
 * (Kt, Vt, P, dS), bwd_ldr(D) for the [., D] packed rows (Qp, dOp, Kp);
 * padded as the forward's (FWD_PAD). */
#define BWD_LDT (BWD_BC + FWD_PAD)
static inline int64_t bwd_ldr(int64_t D) { return D + FWD_PAD; }

/* rows [r0, r0+n) of a [.., ld] tensor into dst [n, D] with rows ldd apart
 * (packed: strided rows Hkv*D or H*D floats apart often share one L1 set) */
static void pack_rows(float *dst, int64_t ldd, const float *src, int64_t n, int64_t D, int64_t ld) {
  for (int64_t r = 0; r < n; r++) memcpy(dst + r * ldd, src + r * ld, (size_t)D * sizeof(float));
}

/* First query that can see key j0 (causal), else 0. */
static int64_t first_query(const gpa__attn_geom *g, int64_t j0) {
  int64_t q0 = g->causal ? j0 - (g->Sk - g->S) : 0;
  return q0 < 0 ? 0 : q0;
}

/* One (query tile, key tile) pair of head h: P and dS from the transposed
 * K and V tile in w, then dq += dS K_j (with_dq) and dVa += P^T dO,
 * dKa += dS^T Q (with_dkv). delta: the head's rows. */
static void bwd_tile(const attn_ctx *c, const bwd_ws *w, int64_t b, int64_t h, const float *delta, int64_t s0,
                     int64_t mr, int64_t j0, int64_t nc, int64_t kvlen, int with_dq, int with_dkv) {
  const gpa__attn_geom *g = c->g;
  int64_t D = g->D, ldq = g->H * D;
  const float *lse = c->lse + (b * g->H + h) * g->S;
  const int64_t lr = bwd_ldr(D), lt = BWD_LDT;
  pack_rows(w->Qp, lr, c->q + ((b * g->S + s0) * g->H + h) * D, mr, D, ldq);
  pack_rows(w->dOp, lr, c->dout + ((b * g->S + s0) * g->H + h) * D, mr, D, ldq);
  gpa__tgemm(mr, nc, D, w->Qp, lr, 1, w->Kt, lt, w->P, lt, 0);
  gpa__tgemm(mr, nc, D, w->dOp, lr, 1, w->Vt, lt, w->dS, lt, 0);
  for (int64_t r = 0; r < mr; r++) {
    float *p = w->P + r * lt, *ds = w->dS + r * lt;
    int64_t nv = key_limit(g, kvlen, s0 + r) - j0;
    nv = nv < 0 ? 0 : (nv > nc ? nc : nv);
    float L = lse[s0 + r];
    if (nv == 0 || L == -INFINITY) nv = 0;
    exp_row(p, nv, nc, g->scale, nv ? L : 0.0f);
    float dl = delta[s0 + r];
    for (int64_t cc = 0; cc < nc; cc++) ds[cc] = p[cc] * (ds[cc] - dl);
  }
  if (with_dq) gpa__tgemm(mr, D, nc, w->dS, lt, 1, w->Kp, lr, c->dq + ((b * g->S + s0) * g->H + h) * D, ldq, 1);
  if (with_dkv) { /* P^T and dS^T read transposed in place */
    gpa__tgemm(nc, D, mr, w->P, 1, lt, w->dOp, lr, w->dVa, D, 1);
    gpa__tgemm(nc, D, mr, w->dS, 1, lt, w->Qp, lr, w->dKa, D, 1);
  }
}

/* K and V rows [j0, j0+nc) of (b, kh), transposed into w. */
static void load_kv(const attn_ctx *c, const bwd_ws *w, int64_t b, int64_t kh, int64_t j0, int64_t nc) {
  const gpa__attn_geom *g = c->g;
  int64_t D = g->D, ldk = g->Hkv * D, off = ((b * g->Sk + j0) * g->Hkv + kh) * D;
  gpa__transpose(nc, D, c->k + off, ldk, w->Kt, BWD_LDT);
  gpa__transpose(nc, D, c->v + off, ldk, w->Vt, BWD_LDT);
  pack_rows(w->Kp, bwd_ldr(D), c->k + off, nc, D, ldk);
}

/* dk, dv rows of key tile j0 of (b, kh) from the accumulators. */
static void store_dkv(const attn_ctx *c, const bwd_ws *w, int64_t b, int64_t kh, int64_t j0, int64_t nc) {
  const gpa__attn_geom *g = c->g;
  int64_t D = g->D;
  for (int64_t cc = 0; cc < nc; cc++) {
    int64_t off = ((b * g->Sk + j0 + cc) * g->Hkv + kh) * D;
    for (int64_t d = 0; d < D; d++) {
      c->dk[off + d] = w->dKa[cc * D + d] * g->scale;
      c->dv[off + d] = w->dVa[cc * D + d];
    }
  }
}

/* delta[s] = dout[b,s,h] . o[b,s,h] for the S rows of one head. */
static void head_delta(const attn_ctx *c, int64_t b, int64_t h, float *delta) {
  const gpa__attn_geom *g = c->g;
  for (int64_t s = 0; s < g->S; s++) {
    const float *a = c->dout + ((b * g->S + s) * g->H + h) * g->D, *o = c->o + ((b * g->S + s) * g->H + h) * g->D;
    float acc = 0.0f;
    for (int64_t d = 0; d < g->D; d++) acc += a[d] * o[d];
    delta[s] = acc;
  }
}

/* The group's dq rows (adjacent heads h0..h0+grp) of batch b: zero or scale. */
static void group_dq(const attn_ctx *c, int64_t b, int64_t h0, int64_t grp, int64_t s0, int64_t s1, int zero) {
  const gpa__attn_geom *g = c->g;
  for (int64_t s = s0; s < s1; s++) {
    float *dq = c->dq + ((b * g->S + s) * g->H + h0) * g->D;
    if (zero)
      memset(dq, 0, (size_t)(grp * g->D) * sizeof(float));
    else
      for (int64_t d = 0; d < grp * g->D; d++) dq[d] *= g->scale;
  }
}

/* Fused path: one item per (b, kv head) does everything. */
static void bwd_item(const attn_ctx *c, int64_t it, const bwd_ws *w) {
  const gpa__attn_geom *g = c->g;
  int64_t grp = g->H / g->Hkv, b = it / g->Hkv, kh = it % g->Hkv, h0 = kh * grp;
  int64_t kvlen = kv_len(g, c->lens, b);
  group_dq(c, b, h0, grp, 0, g->S, 1);
  for (int64_t gi = 0; gi < grp; gi++) head_delta(c, b, h0 + gi, w->delta + gi * g->S);
  for (int64_t j0 = 0; j0 < g->Sk; j0 += BWD_BC) {
    int64_t nc = g->Sk - j0 < BWD_BC ? g->Sk - j0 : BWD_BC, qstart = first_query(g, j0);
    memset(w->dKa, 0, (size_t)(nc * g->D) * sizeof(float));
    memset(w->dVa, 0, (size_t)(nc * g->D) * sizeof(float));
    if (j0 < kvlen && qstart < g->S) {
      load_kv(c, w, b, kh, j0, nc);
      for (int64_t gi = 0; gi < grp; gi++)
        for (int64_t s0 = qstart / BWD_BR * BWD_BR; s0 < g->S; s0 += BWD_BR)
          bwd_tile(c, w, b, h0 + gi, w->delta + gi * g->S, s0, g->S - s0 < BWD_BR ? g->S - s0 : BWD_BR, j0, nc,
                   kvlen, 1, 1);
    }
    store_dkv(c, w, b, kh, j0, nc);
  }
  group_dq(c, b, h0, grp, 0, g->S, 0);
}

/* Split path, for few (b, kv head) pairs: dk/dv per (b, kv head, key tile),
 * then dq per (b, head, query tile). It recomputes S and dP once more (7
 * tile GEMMs per pair instead of 5) but keeps every core busy. Each sum runs
 * in the fused path's order (key tiles ascending for dq; heads, then query
 * tiles for dk/dv), so both paths give the same bits. */
static void dkv_item(const attn_ctx *c, int64_t it, const bwd_ws *w) {
  const gpa__attn_geom *g = c->g;
  int64_t nkt = (g->Sk + BWD_BC - 1) / BWD_BC, grp = g->H / g->Hkv;
  int64_t b = it / (g->Hkv * nkt), kh = (it / nkt) % g->Hkv, j0 = (it % nkt) * BWD_BC;
  int64_t nc = g->Sk - j0 < BWD_BC ? g->Sk - j0 : BWD_BC, qstart = first_query(g, j0), kvlen = kv_len(g, c->lens, b);
  memset(w->dKa, 0, (size_t)(nc * g->D) * sizeof(float));
  memset(w->dVa, 0, (size_t)(nc * g->D) * sizeof(float));
  if (j0 < kvlen && qstart < g->S) {
    load_kv(c, w, b, kh, j0, nc);
    for (int64_t gi = 0; gi < grp; gi++) {
      int64_t h = kh * grp + gi;
      for (int64_t s0 = qstart / BWD_BR * BWD_BR; s0 < g->S; s0 += BWD_BR)
        bwd_tile(c, w, b, h, c->delta + (b * g->H + h) * g->S, s0, g->S - s0 < BWD_BR ? g->S - s0 : BWD_BR, j0, nc,
                 kvlen, 0, 1);
    }
  }
  store_dkv(c, w, b, kh, j0, nc);
}

static void dq_item(const attn_ctx *c, int64_t it, const bwd_ws *w) {
  const gpa__attn_geom *g = c->g;
  int64_t nqt = (g->S + BWD_BR - 1) / BWD_BR, grp = g->H / g->Hkv;
  int64_t b = it / (g->H * nqt), h = (it / nqt) % g->H, s0 = (it % nqt) * BWD_BR, kh = h / grp;
  int64_t mr = g->S - s0 < BWD_BR ? g->S - s0 : BWD_BR, kvlen = kv_len(g, c->lens, b);
  group_dq(c, b, h, 1, s0, s0 + mr, 1);
  for (int64_t j0 = 0; j0 < g->Sk && j0 < kvlen; j0 += BWD_BC) {
    if (first_query(g, j0) >= s0 + mr) break; /* later key tiles are later still */
    int64_t nc = g->Sk - j0 < BWD_BC ? g->Sk - j0 : BWD_BC;
    load_kv(c, w, b, kh, j0, nc);
    bwd_tile(c, w, b, h, c->delta + (b * g->H + h) * g->S, s0, mr, j0, nc, kvlen, 1, 0);
  }
  group_dq(c, b, h, 1, s0, s0 + mr, 0);
}

static void delta_range(int64_t i0, int64_t i1, void *p) {
  attn_ctx *c = p;
  for (int64_t it = i0; it < i1; it++) head_delta(c, it / c->g->H, it % c->g->H, c->delta + it * c->g->S);
}

enum { BWD_FUSED = 0, BWD_DKV = 1, BWD_DQ = 2 };

static void bwd_range(int64_t i0, int64_t i1, void *p) {
  attn_ctx *c = p;
  const gpa__attn_geom *g = c->g;
  size_t D = (size_t)g->D, grp = (size_t)(g->H / g->Hkv);
  size_t lr = (size_t)bwd_ldr(g->D), nt = D * BWD_LDT, nkp = BWD_BC * lr, np = BWD_BR * BWD_LDT, nacc = BWD_BC * D;
  size_t nq = BWD_BR * lr;
  size_t nd = c->stage == BWD_FUSED ? grp * (size_t)g->S : 0;
  float *ws = ws_alloc(2 * nt + nkp + 2 * nq + 2 * np + 2 * nacc + nd);
  if (!ws) {
    atomic_store_explicit(&c->failed, 1, memory_order_relaxed);
    return;
  }
  bwd_ws w;
  w.Kt = ws;
  w.Vt = w.Kt + nt;
  w.Kp = w.Vt + nt;
  w.Qp = w.Kp + nkp;
  w.dOp = w.Qp + nq;
  w.P = w.dOp + nq;
  w.dS = w.P + np;
  w.dKa = w.dS + np;
  w.dVa = w.dKa + nacc;
  w.delta = w.dVa + nacc;
  for (int64_t it = i0; it < i1; it++) {
    if (c->stage == BWD_FUSED) bwd_item(c, it, &w);
    else if (c->stage == BWD_DKV) dkv_item(c, it, &w);
    else dq_item(c, it, &w);
  }
  free(ws);
}

/* Fewer (b, kv head) pairs than this take the split path. A rule on the
 * shape only; both paths give the same bits anyway. */
#define BWD_SPLIT_BELOW 4

gpa_status gpa__attention_bwd(const gpa__par *par, const gpa__attn_geom *g, const float *dout, const float *q,
                              const float *k, const float *v, const float *o, const float *lse,
                              const int32_t *lens, float *dq, float *dk, float *dv) {
  attn_ctx c = {.g = g, .q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .lens = lens,
                .dq = dq, .dk = dk, .dv = dv};
  atomic_init(&c.failed, 0);
  int split = g->bwd_path ? g->bwd_path == 2 : g->B * g->Hkv < BWD_SPLIT_BELOW;
  if (!split) {
    c.stage = BWD_FUSED;
    gpa__pfor(par, g->B * g->Hkv, 1, bwd_range, &c);
    return atomic_load(&c.failed) ? GPA_ENOMEM : GPA_OK;
  }
  c.delta = ws_alloc((size_t)(g->B * g->H * g->S));
  if (!c.delta) return GPA_ENOMEM;
  gpa__pfor(par, g->B * g->H, 1, delta_range, &c);
  c.stage = BWD_DKV;
  gpa__pfor(par, g->B * g->Hkv * ((g->Sk + BWD_BC - 1) / BWD_BC), 1, bwd_range, &c);
  c.stage = BWD_DQ;
  gpa__pfor(par, g->B * g->H * ((g->S + BWD_BR - 1) / BWD_BR), 1, bwd_range, &c);
  free(c.delta);
  return atomic_load(&c.failed) ? GPA_ENOMEM : GPA_OK;
}
