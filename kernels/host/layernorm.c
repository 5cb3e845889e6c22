/* LayerNorm kernels; see layernorm.h for the math and the determinism rule.
 * Row sums use 32 float accumulators (a fixed order the compiler vectorizes
 * without reassociating); the statistics are finished in double. */
#include "kernels/host/layernorm.h"

#include <math.h>
#include <string.h>

#include "kernels/host/nt_store.h"
#include "kernels/host/simd_exp.h" /* GPA__AVX2_ATTR, gpa__cpu_avx2 */

#define LN_GRAIN 16384 /* elements per task */
#define NT_CH 1024     /* floats per streamed piece of y (on the stack) */
#define NT_BWD_MAX 4096 /* the backward streams rows of dx up to this length */

typedef struct ln_ctx {
  float *y, *mean, *rstd, *dgamma, *dbeta;
  const float *x, *dy, *gamma, *beta, *mean_in, *rstd_in;
  int64_t N, D;
  double eps;
  float *part; /* per group of blocks: dgamma, dbeta partials (part_g, group_g) */
  int64_t gb;  /* backward: blocks per group (group_blocks) */
  int nt;      /* stream y / dx (nt_store.h) */
  int avx2;    /* the AVX2+FMA row loops */
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

#ifdef GPA__HAVE_AVX2_PATH
/* The AVX2 path. Per row: (1) sum(x) in double, (2) the sum of squares of
 * d = x - m1 around m1 = the mean rounded to float, (3) y. Pass (1) is
 * exact enough to give the mean outright (the digits of a mean near 0
 * included), so pass (2) needs no correction sum, and (1) runs in the same
 * loop as the previous row's (3): memory then sees one read stream (the
 * next row) and one write stream (y) at once, as in a copy, instead of a
 * burst of reads and then a burst of writes per row with the other passes
 * in between. */
#define LN_PF_AHEAD 1024 /* floats: how far ahead pass (1) prefetches */
/* LN_ALIAS: rows of 1024 floats put x, the next row, y, dy, ... at the same
 * address modulo 4 KiB; a load issued after a store to such an address
 * waits for the store (the CPU compares only the low 12 bits at first), so
 * the fused loops issue each block's loads before its stores. */

/* Pass (1) on 32 floats at p into 4 double accumulators. The same lanes and
 * order wherever a row is summed (fused or not), so a row's statistics do
 * not depend on where a thread's rows begin. */
#define LN_SUM32(p, s0, s1, s2, s3)                                                  \
  do {                                                                               \
    __m256 u0_ = _mm256_loadu_ps(p), u1_ = _mm256_loadu_ps((p) + 8);                 \
    __m256 u2_ = _mm256_loadu_ps((p) + 16), u3_ = _mm256_loadu_ps((p) + 24);         \
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(u0_)));            \
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(u0_, 1)));          \
    s2 = _mm256_add_pd(s2, _mm256_cvtps_pd(_mm256_castps256_ps128(u1_)));            \
    s3 = _mm256_add_pd(s3, _mm256_cvtps_pd(_mm256_extractf128_ps(u1_, 1)));          \
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(u2_)));            \
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(u2_, 1)));          \
    s2 = _mm256_add_pd(s2, _mm256_cvtps_pd(_mm256_castps256_ps128(u3_)));            \
    s3 = _mm256_add_pd(s3, _mm256_cvtps_pd(_mm256_extractf128_ps(u3_, 1)));          \
  } while (0)

/* The row's tail from j, then the lanes in order. */
GPA__AVX2_ATTR static double sum_finish(const float *x, int64_t j, int64_t D, __m256d s0, __m256d s1, __m256d s2,
                                        __m256d s3) {
  double a[16], sum = 0.0;
  _mm256_storeu_pd(a, s0);
  _mm256_storeu_pd(a + 4, s1);
  _mm256_storeu_pd(a + 8, s2);
  _mm256_storeu_pd(a + 12, s3);
  for (; j < D; j++) sum += (double)x[j];
  for (int k = 0; k < 16; k++) sum += a[k];
  return sum;
}

/* Pass (1) alone: a thread's first row. */
GPA__AVX2_ATTR static double row_sum_avx2(const float *x, int64_t D) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  int64_t j = 0;
  for (; j + 32 <= D; j += 32) LN_SUM32(x + j, s0, s1, s2, s3);
  return sum_finish(x, j, D, s0, s1, s2, s3);
}

/* Pass (2): sum of (x - m)^2, d in float (exact, or rounded at x's own
 * precision), four squares added in float, then in double: the error
 * stays near float's epsilon whatever D (rstd's digits matter where
 * gamma * xhat and beta cancel in y). */
GPA__AVX2_ATTR static double row_sq_avx2(const float *x, float m, int64_t D) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256d q0 = _mm256_setzero_pd(), q1 = q0;
  int64_t i = 0;
  for (; i + 32 <= D; i += 32) {
    __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm), d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
    __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), vm), d3 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), vm);
    __m256 t = _mm256_add_ps(_mm256_fmadd_ps(d1, d1, _mm256_mul_ps(d0, d0)),
                             _mm256_fmadd_ps(d3, d3, _mm256_mul_ps(d2, d2)));
    q0 = _mm256_add_pd(q0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
    q1 = _mm256_add_pd(q1, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
  }
  double b[8], sq = 0.0;
  _mm256_storeu_pd(b, q0);
  _mm256_storeu_pd(b + 4, q1);
  for (; i < D; i++) {
    double d = (double)(x[i] - m);
    sq += d * d;
  }
  for (int k = 0; k < 8; k++) sq += b[k];
  return sq;
}

/* Pass (3) of one row, y = ((x - m) - c) * r * g + b, fused with pass (1)
 * of the next row xn (returns its sum; 0 when xn is NULL). y is streamed
 * (nt) from its first 32-byte boundary; the head and the tail are stored
 * by the same arithmetic. The loop prefetches xn's stream LN_PF_AHEAD
 * floats ahead (rows are contiguous: into the rows after xn): measured
 * faster than the hardware prefetcher alone and than whole rows prefetched
 * once per row (those stalled when the miss buffers filled). */
GPA__AVX2_ATTR static double norm_and_sum(float *y, const float *x, const float *g, const float *b, float m,
                                          float c, float r, int64_t D, int nt, const float *xn) {
  int64_t i = 0, h = 0;
  if (nt && !((uintptr_t)y & 3)) {
    h = (int64_t)((32 - ((uintptr_t)y & 31)) & 31) / 4;
    if (h > D) h = D;
  } else {
    nt = 0;
  }
  for (; i < h; i++) y[i] = fmaf(((x[i] - m) - c) * r, g[i], b[i]);
  const __m256 vm = _mm256_set1_ps(m), vc = _mm256_set1_ps(c), vr = _mm256_set1_ps(r);
#define LN_Y8(k, store)                                                                                 \
  do {                                                                                                  \
    __m256 t_ = _mm256_mul_ps(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + (k)), vm), vc), vr);     \
    store(y + (k), _mm256_fmadd_ps(t_, _mm256_loadu_ps(g + (k)), _mm256_loadu_ps(b + (k))));           \
  } while (0)
/* one copy of the loops per kind of store (no test per vector) */
#define LN_LOOPS(store)                                                                                 \
  do {                                                                                                  \
    for (; i + 32 <= D; i += 32, j += 32) {                                                             \
      __builtin_prefetch(xs + j + LN_PF_AHEAD, 0, 3);                                                   \
      __builtin_prefetch(xs + j + LN_PF_AHEAD + 16, 0, 3);                                              \
      LN_SUM32(xs + j, s0, s1, s2, s3); /* loads before the stores: see LN_ALIAS */                     \
      LN_Y8(i, store);                                                                                  \
      LN_Y8(i + 8, store);                                                                              \
      LN_Y8(i + 16, store);                                                                             \
      LN_Y8(i + 24, store);                                                                             \
    }                                                                                                   \
    for (; i + 8 <= D; i += 8) LN_Y8(i, store);                                                         \
  } while (0)
  const float *xs = xn ? xn : x; /* no next row: sum this one (in L1) and drop it */
  __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
  int64_t j = 0; /* the sum's index; i = j + h in the fused loop */
  if (nt)
    LN_LOOPS(_mm256_stream_ps);
  else
    LN_LOOPS(_mm256_storeu_ps);
#undef LN_LOOPS
#undef LN_Y8
  for (; i < D; i++) y[i] = fmaf(((x[i] - m) - c) * r, g[i], b[i]);
  for (; j + 32 <= D; j += 32) LN_SUM32(xs + j, s0, s1, s2, s3);
  return xn ? sum_finish(xs, j, D, s0, s1, s2, s3) : 0.0;
}
#undef LN_SUM32

/* Rows [s, e) on the AVX2 path. */
static void fwd_rows_avx2(const ln_ctx *c, int64_t s, int64_t e) {
  const int64_t D = c->D;
  double sum = row_sum_avx2(c->x + s * D, D);
  for (int64_t n = s; n < e; n++) {
    const float *x = c->x + n * D;
    double mean = D ? sum / (double)D : 0.0;
    float m1 = (float)mean;
    double cor = mean - (double)m1; /* sum (x - m1)^2 = sum (x - mean)^2 + D cor^2 */
    double var = D ? row_sq_avx2(x, m1, D) / (double)D - cor * cor : 0.0;
    if (var < 0.0) var = 0.0;
    double r = 1.0 / sqrt(var + c->eps);
    c->mean[n] = (float)mean;
    c->rstd[n] = (float)r;
    sum = norm_and_sum(c->y + n * D, x, c->gamma, c->beta, m1, (float)cor, (float)r, D, c->nt,
                       n + 1 < e ? x + D : NULL);
  }
  if (c->nt) gpa__nt_fence();
}
#endif

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
 * The first and last passes run in float lanes, the second sums in double.
 * With AVX2: fwd_rows_avx2 (above). */
static void fwd_rows(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D;
#ifdef GPA__HAVE_AVX2_PATH
  if (c->avx2) {
    fwd_rows_avx2(c, s, e);
    return;
  }
#endif
  const int64_t pf = pf_rows(D);
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
              .eps = eps, .avx2 = gpa__cpu_avx2(), .nt = y != x && gpa__nt_worth(8 * (uint64_t)(N > 0 ? N : 0) * (uint64_t)(D > 0 ? D : 0))};
  int64_t grain = LN_GRAIN / (D > 0 ? D : 1);
  gpa__pfor(par, N, grain < 1 ? 1 : grain, fwd_rows, &c);
}

/* The column partials of a block of rows. Rows of 1024 floats put x, dy,
 * gamma and dx of every row at one address modulo 4 KiB, so the partials,
 * read and written at the same column as those, would be the 9th and 10th
 * lines of one 8-way L1 set: they start 1 KiB and 3 KiB past a 4 KiB
 * boundary of the scratch instead (PART_PAD floats of slack per block). */
#define PART_PAD 1024
static int64_t part_stride(int64_t D) { return (2 * D + PART_PAD + 1023) / 1024 * 1024; }

/* Blocks are taken in groups of gb (1 to LN_GROUP_MAX, a function of N alone,
 * so the bits do not depend on the threads; at least LN_MIN_GROUPS groups to
 * share out): each group keeps one float partial for the block it is in and
 * a double partial that the block's is added into when it ends, and the
 * column sums (bwd_cols) add the groups' in order. bwd_cols, a second
 * parallel loop after the rows, read every block's partials (at
 * [4096,1024]: 1 MiB, much of it evicted by the rows streaming past):
 * ~110-170 us, 5-10% of the op; a group's double partials are fewer and
 * recently written: 26-54 us (best of 40, 2 threads). Float partials still
 * span 32 rows (larger blocks in float missed the parity tolerance). The
 * bits are those of adding every block's partials in double in block order
 * wherever no double sum rounds (four floats add exactly in double unless
 * their magnitudes span more than 2^29): the same at [4096,1024]. */
#define LN_GROUP_MAX 4
#define LN_MIN_GROUPS 32
static int64_t group_blocks(int64_t N) {
  int64_t g = 1;
  while (g < LN_GROUP_MAX && N / (2 * g * GPA__LN_BLOCK_ROWS) >= LN_MIN_GROUPS) g *= 2;
  return g;
}
static int64_t group_rows(const ln_ctx *c) { return c->gb * GPA__LN_BLOCK_ROWS; }
/* floats per group: the float partials, then 2 D doubles (4 KiB-aligned) */
static int64_t group_stride(int64_t D) { return part_stride(D) + (4 * D + 1023) / 1024 * 1024; }
static float *group_base(const ln_ctx *c, int64_t grp) {
  float *base = (float *)(((uintptr_t)c->part + 4095) & ~(uintptr_t)4095);
  return base + grp * group_stride(c->D);
}
static float *part_g(const ln_ctx *c, int64_t grp) { return group_base(c, grp) + 256; }
static float *part_b(const ln_ctx *c, int64_t grp) { return part_g(c, grp) + c->D + 512; }
static double *group_g(const ln_ctx *c, int64_t grp) { return (double *)(group_base(c, grp) + part_stride(c->D)); }
static double *group_b(const ln_ctx *c, int64_t grp) { return group_g(c, grp) + c->D; }

/* A block ends: its float partials into the group's double ones. */
GPA__KCLONES static void fold_sums(double *restrict g, double *restrict b, const float *restrict pg,
                                   const float *restrict pb, int64_t D, int first) {
  if (first)
    for (int64_t j = 0; j < D; j++) g[j] = (double)pg[j], b[j] = (double)pb[j];
  else
    for (int64_t j = 0; j < D; j++) g[j] += (double)pg[j], b[j] += (double)pb[j];
}
static void block_end(const ln_ctx *c, int64_t grp, int64_t blk) {
  fold_sums(group_g(c, grp), group_b(c, grp), part_g(c, grp), part_b(c, grp), c->D, blk % c->gb == 0);
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

#ifdef GPA__HAVE_AVX2_PATH
/* The backward's AVX2 path, fused the same way as the forward's: a row's
 * second pass (dx and its column partials, from L1) runs in one loop with
 * the next row's first pass (sum g and g * xhat, from memory; g = dy *
 * gamma, xhat = (x - m) r), dx streamed from registers. */

/* LNB_PF_AHEAD: how far ahead (floats) the fused loop prefetches the next
 * row's x and dy. Not a row ahead as in the forward: one L1 set (8 ways)
 * already holds a line of each of the loop's seven streams (this row's x
 * and dy, gamma, the two partials, the next row's x and dy; every row
 * covers all 64 sets at D >= 1024), and the lines of the row after next
 * were the 8th and 9th: at D = 1024 everything then came from L2 again
 * (single thread, rows in L2: 1.02 -> 0.79 TSC cycles per element with
 * 256; streaming, 2 threads: ~5% faster, median of 40 alternated runs). */
#define LNB_PF_AHEAD 256

/* The first pass on 32 columns at k (x, dy, gamma indexed from 0): sums of
 * g and of g (x - m) in 16 float lanes (two vectors each: with the second
 * pass's constants that is what the 16 registers hold without spilling),
 * the same wherever a row is summed (see LN_SUM32). r is applied after. */
#define LNB_SUM32(x, dy, k, vm, a, b)                                                                 \
  do {                                                                                                \
    for (int q_ = 0; q_ < 4; q_++) {                                                                  \
      __m256 g_ = _mm256_mul_ps(_mm256_loadu_ps((dy) + (k) + 8 * q_), _mm256_loadu_ps(gm + (k) + 8 * q_)); \
      a[q_ & 1] = _mm256_add_ps(a[q_ & 1], g_);                                                      \
      b[q_ & 1] = _mm256_fmadd_ps(g_, _mm256_sub_ps(_mm256_loadu_ps((x) + (k) + 8 * q_), vm), b[q_ & 1]); \
    }                                                                                                 \
  } while (0)

/* The row's tail from j, then the lanes in order: *ma, *mb = the means of
 * g and g * xhat. Inlined: a call takes the accumulators' address, and gcc
 * then kept them in memory, storing all four to the stack on every 32
 * columns of the fused loop (11% of its cycles from L2). */
GPA__AVX2_ATTR static inline __attribute__((always_inline)) void
bsum_finish(const float *x, const float *dy, const float *gm, float m, float r, int64_t j, int64_t D, const __m256 *a,
            const __m256 *b, float *ma, float *mb) {
  float la[16], lb[16], sa = 0.0f, sb = 0.0f;
  for (int q = 0; q < 2; q++) {
    _mm256_storeu_ps(la + 8 * q, a[q]);
    _mm256_storeu_ps(lb + 8 * q, b[q]);
  }
  for (; j < D; j++) {
    float g = dy[j] * gm[j];
    sa += g;
    sb = fmaf(g, x[j] - m, sb);
  }
  for (int k = 0; k < 16; k++) sa += la[k], sb += lb[k];
  *ma = sa / (float)D;
  *mb = r * sb / (float)D;
}

/* The first pass alone: a thread's first row. */
GPA__AVX2_ATTR static void bwd_sum_avx2(const float *x, const float *dy, const float *gm, float m, float r,
                                        int64_t D, float *ma, float *mb) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 a[2], b[2];
  for (int q = 0; q < 2; q++) a[q] = b[q] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= D; j += 32) LNB_SUM32(x, dy, j, vm, a, b);
  bsum_finish(x, dy, gm, m, r, j, D, a, b, ma, mb);
}

typedef struct lnb_row {
  const float *x, *dy;
  float m, r;
} lnb_row;

/* Row `cur`'s dx = r ((g - ma) - xhat mb) (g - ma first: exact where they
 * nearly cancel, as at D = 1),
 * pg += dy xhat, pb += dy, fused with the first pass of row `nx` (nx.x
 * NULL: none), whose means go to *nma, *nmb. dx is streamed (nt) from its
 * first 32-byte boundary. */
GPA__AVX2_ATTR static void bwd_fused(float *dx, float *pg, float *pb, const float *gm, lnb_row cur, float ma,
                                     float mb, int64_t D, int nt, lnb_row nx, float *nma, float *nmb) {
  int64_t i = 0, h = 0;
  if (nt && !((uintptr_t)dx & 3)) {
    h = (int64_t)((32 - ((uintptr_t)dx & 31)) & 31) / 4;
    if (h > D) h = D;
  } else {
    nt = 0;
  }
  const float *x = cur.x, *dy = cur.dy;
  const float m = cur.m, r = cur.r;
#define LNB_S1(k)                                                                \
  do {                                                                           \
    float xh_ = (x[k] - m) * r;                                                  \
    dx[k] = r * fmaf(-xh_, mb, dy[k] * gm[k] - ma);                              \
    pg[k] = fmaf(dy[k], xh_, pg[k]);                                             \
    pb[k] += dy[k];                                                              \
  } while (0)
  for (; i < h; i++) LNB_S1(i);
  const __m256 vm = _mm256_set1_ps(m), vr = _mm256_set1_ps(r), vma = _mm256_set1_ps(ma), vmb = _mm256_set1_ps(mb);
#define LNB_DX8(k, store)                                                                               \
  do {                                                                                                  \
    __m256 dy_ = _mm256_loadu_ps(dy + (k));                                                             \
    __m256 xh_ = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + (k)), vm), vr);                       \
    __m256 g_ = _mm256_mul_ps(dy_, _mm256_loadu_ps(gm + (k)));                                          \
    __m256 d_ = _mm256_mul_ps(vr, _mm256_fnmadd_ps(xh_, vmb, _mm256_sub_ps(g_, vma)));                  \
    __m256 pg_ = _mm256_loadu_ps(pg + (k)), pb_ = _mm256_loadu_ps(pb + (k));                           \
    _mm256_storeu_ps(pg + (k), _mm256_fmadd_ps(dy_, xh_, pg_));                                        \
    _mm256_storeu_ps(pb + (k), _mm256_add_ps(pb_, dy_));                                               \
    store(dx + (k), d_);                                                                                \
  } while (0)
/* one copy of the loops per kind of store (no test per vector) */
#define LNB_LOOPS(store)                                                                                \
  do {                                                                                                  \
    for (; i + 32 <= D; i += 32, j += 32) {                                                             \
      __builtin_prefetch(nxx + j + LNB_PF_AHEAD, 0, 3);                                                 \
      __builtin_prefetch(nxx + j + LNB_PF_AHEAD + 16, 0, 3);                                            \
      __builtin_prefetch(ndy + j + LNB_PF_AHEAD, 0, 3);                                                 \
      __builtin_prefetch(ndy + j + LNB_PF_AHEAD + 16, 0, 3);                                            \
      LNB_SUM32(nxx, ndy, j, nvm, a, b); /* loads before the stores: see LN_ALIAS */                    \
      LNB_DX8(i, store);                                                                                \
      LNB_DX8(i + 8, store);                                                                            \
      LNB_DX8(i + 16, store);                                                                           \
      LNB_DX8(i + 24, store);                                                                           \
    }                                                                                                   \
    for (; i + 8 <= D; i += 8) LNB_DX8(i, store);                                                       \
  } while (0)
  const int has_next = nx.x != NULL;
  const float *nxx = has_next ? nx.x : x, *ndy = has_next ? nx.dy : dy; /* none: sum this row, drop it */
  const __m256 nvm = _mm256_set1_ps(has_next ? nx.m : m);
  __m256 a[2], b[2];
  for (int q = 0; q < 2; q++) a[q] = b[q] = _mm256_setzero_ps();
  int64_t j = 0; /* the next row's index; i = j + h in the fused loop */
  if (nt)
    LNB_LOOPS(_mm256_stream_ps);
  else
    LNB_LOOPS(_mm256_storeu_ps);
  for (; i < D; i++) LNB_S1(i);
#undef LNB_LOOPS
#undef LNB_DX8
#undef LNB_S1
  for (; j + 32 <= D; j += 32) LNB_SUM32(nxx, ndy, j, nvm, a, b);
  if (has_next) bsum_finish(nxx, ndy, gm, nx.m, nx.r, j, D, a, b, nma, nmb);
}
#undef LNB_SUM32

/* Groups [s, e) on the AVX2 path. */
static void bwd_blocks_avx2(const ln_ctx *c, int64_t s, int64_t e) {
  const int64_t D = c->D, gr = group_rows(c);
  int64_t n = s * gr, end = e * gr < c->N ? e * gr : c->N;
  lnb_row cur = {c->x + n * D, c->dy + n * D, c->mean_in[n], c->rstd_in[n]};
  float ma, mb;
  bwd_sum_avx2(cur.x, cur.dy, c->gamma, cur.m, cur.r, D, &ma, &mb);
  for (; n < end; n++) {
    float *pg = part_g(c, n / gr), *pb = part_b(c, n / gr);
    if (n % GPA__LN_BLOCK_ROWS == 0) {
      memset(pg, 0, (size_t)D * sizeof *pg);
      memset(pb, 0, (size_t)D * sizeof *pb);
    }
    lnb_row nx = {NULL, NULL, 0.0f, 0.0f};
    if (n + 1 < end) nx = (lnb_row){cur.x + D, cur.dy + D, c->mean_in[n + 1], c->rstd_in[n + 1]};
    float nma = 0.0f, nmb = 0.0f;
    bwd_fused(c->y + n * D, pg, pb, c->gamma, cur, ma, mb, D, c->nt, nx, &nma, &nmb);
    if ((n + 1) % GPA__LN_BLOCK_ROWS == 0 || n + 1 == end) block_end(c, n / gr, n / GPA__LN_BLOCK_ROWS);
    cur = nx;
    ma = nma;
    mb = nmb;
  }
  if (c->nt) gpa__nt_fence();
}
#endif

static void bwd_blocks(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t D = c->D;
#ifdef GPA__HAVE_AVX2_PATH
  if (c->avx2) {
    bwd_blocks_avx2(c, s, e);
    return;
  }
#endif
  const int64_t nb = (c->N + GPA__LN_BLOCK_ROWS - 1) / GPA__LN_BLOCK_ROWS;
  for (int64_t blk = s * c->gb; blk < e * c->gb && blk < nb; blk++) {
    float *pg = part_g(c, blk / c->gb), *pb = part_b(c, blk / c->gb);
    memset(pg, 0, (size_t)D * sizeof *pg);
    memset(pb, 0, (size_t)D * sizeof *pb);
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
    block_end(c, blk / c->gb, blk);
  }
  if (c->nt) gpa__nt_fence();
}

/* Column sums over the groups, in group order, COLS columns at a time (the
 * loads run along the partials' rows, the adds across columns vectorize). */
#define COLS 128
GPA__KCLONES static void col_sums(double *restrict g, double *restrict b, const double *restrict pg,
                                  const double *restrict pb, int64_t n) {
  for (int64_t j = 0; j < n; j++) g[j] += pg[j], b[j] += pb[j];
}

static void bwd_cols(int64_t s, int64_t e, void *p) {
  const ln_ctx *c = p;
  const int64_t ng = (c->N + group_rows(c) - 1) / group_rows(c);
  for (int64_t j0 = s; j0 < e; j0 += COLS) {
    const int64_t n = e - j0 < COLS ? e - j0 : COLS;
    double g[COLS] = {0}, b[COLS] = {0};
    for (int64_t grp = 0; grp < ng; grp++) col_sums(g, b, group_g(c, grp) + j0, group_b(c, grp) + j0, n);
    for (int64_t j = 0; j < n; j++) {
      c->dgamma[j0 + j] = (float)g[j];
      c->dbeta[j0 + j] = (float)b[j];
    }
  }
}

size_t gpa__layernorm_bwd_scratch(int64_t N, int64_t D) {
  if (N <= 0 || D <= 0) return 0;
  int64_t gr = group_blocks(N) * GPA__LN_BLOCK_ROWS, ng = (N + gr - 1) / gr;
  return (size_t)ng * (size_t)group_stride(D) * sizeof(float) + 4096;
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
              .mean_in = mean, .rstd_in = rstd, .N = N, .D = D, .part = scratch, .avx2 = gpa__cpu_avx2(),
              .nt = (D <= NT_BWD_MAX || gpa__cpu_avx2()) && dx != x && dx != dy && gpa__nt_worth(12 * (uint64_t)N * (uint64_t)D)};
  c.gb = group_blocks(N);
  int64_t gr = group_rows(&c), ng = (N + gr - 1) / gr;
  int64_t grain = LN_GRAIN / (gr * D);
  gpa__pfor(par, ng, grain < 1 ? 1 : grain, bwd_blocks, &c);
  int64_t cg = LN_GRAIN / ng;
  gpa__pfor(par, D, cg < 64 ? 64 : cg, bwd_cols, &c);
}
