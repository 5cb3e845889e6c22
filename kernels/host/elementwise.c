/* Elementwise host kernels. Streaming loops split into fixed chunks; the
 * sums over L accumulate in double, in order of l, per output element. */
#include "kernels/host/elementwise.h"

#include <string.h>

#include "kernels/host/nt_store.h"
#include "kernels/host/simd_exp.h" /* GPA__AVX2_ATTR, gpa__cpu_avx2 */

#define EW_GRAIN 16384 /* elements per task: ~64 KB of each operand */
#define NT_CH 1024     /* floats per streamed piece (on the stack) */

typedef struct ew_ctx {
  float *y;
  const float *a, *b;
  float alpha;
  const void *mask;
  int mask_type;
  int64_t B, L, D;
  int mean;
  int nt; /* stream y (nt_store.h) */
} ew_ctx;

static inline int mask_at(const void *mask, int type, int64_t i) {
  return type == GPA__MASK_I32 ? ((const int32_t *)mask)[i] != 0 : ((const uint8_t *)mask)[i] != 0;
}

GPA__KCLONES static void add_loop(float *y, const float *a, const float *b, float al, int64_t n) {
  (void)al;
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

GPA__KCLONES static void scale_loop(float *y, const float *x, const float *unused, float al, int64_t n) {
  (void)unused;
  for (int64_t i = 0; i < n; i++) y[i] = al * x[i];
}

GPA__KCLONES static void axpy_loop(float *y, const float *x, const float *y0, float al, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = al * x[i] + y0[i];
}

typedef void (*stream_loop)(float *y, const float *a, const float *b, float al, int64_t n);

#ifdef GPA__HAVE_AVX2_PATH
enum { EW_ADD, EW_SCALE, EW_AXPY };

GPA__AVX2_ATTR static inline __m256 ew8(int op, __m256 a, __m256 b, __m256 al) {
  /* axpy as a multiply and an add, not an FMA: the same bits as axpy_loop */
  return op == EW_ADD ? _mm256_add_ps(a, b) : op == EW_SCALE ? _mm256_mul_ps(al, a) : _mm256_add_ps(_mm256_mul_ps(al, a), b);
}

static inline float ew1(int op, float a, float b, float al) {
  return op == EW_ADD ? a + b : op == EW_SCALE ? al * a : al * a + b;
}

/* The streamed form with AVX2: y written from registers (no L1 buffer and
 * copy), from y's first 32-byte boundary on; head and tail by the same
 * arithmetic. Inlined per op (op is a constant at each call). */
GPA__AVX2_ATTR static inline void stream_avx2(int op, float *y, const float *a, const float *b, float al,
                                              int64_t n) {
  int64_t i = 0, h = (int64_t)((32 - ((uintptr_t)y & 31)) & 31) / 4;
  if (h > n) h = n;
  for (; i < h; i++) y[i] = ew1(op, a[i], b ? b[i] : 0.0f, al);
  const __m256 va = _mm256_set1_ps(al), z = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
    __m256 b0 = b ? _mm256_loadu_ps(b + i) : z, b1 = b ? _mm256_loadu_ps(b + i + 8) : z;
    _mm256_stream_ps(y + i, ew8(op, a0, b0, va));
    _mm256_stream_ps(y + i + 8, ew8(op, a1, b1, va));
  }
  for (; i < n; i++) y[i] = ew1(op, a[i], b ? b[i] : 0.0f, al);
  _mm_sfence();
}
GPA__AVX2_ATTR static void stream_add_avx2(float *y, const float *a, const float *b, float al, int64_t n) {
  stream_avx2(EW_ADD, y, a, b, al, n);
}
GPA__AVX2_ATTR static void stream_scale_avx2(float *y, const float *a, const float *b, float al, int64_t n) {
  (void)b;
  stream_avx2(EW_SCALE, y, a, NULL, al, n);
}
GPA__AVX2_ATTR static void stream_axpy_avx2(float *y, const float *a, const float *b, float al, int64_t n) {
  stream_avx2(EW_AXPY, y, a, b, al, n);
}
#endif

/* [s, e) of a streaming op: straight into y, or with non-temporal stores
 * (nt_store.h) when the op is larger than the cache: from registers with
 * AVX2 (nt_loop), else through an L1 buffer and gpa__nt_copy. */
static void stream_range(const ew_ctx *c, int64_t s, int64_t e, stream_loop loop, stream_loop nt_loop) {
  if (c->nt && nt_loop && !((uintptr_t)c->y & 3)) {
    nt_loop(c->y + s, c->a + s, c->b ? c->b + s : NULL, c->alpha, e - s);
    return;
  }
  if (!c->nt) {
    loop(c->y + s, c->a + s, c->b ? c->b + s : NULL, c->alpha, e - s);
    return;
  }
  float buf[NT_CH];
  for (int64_t i = s; i < e; i += NT_CH) {
    int64_t k = e - i < NT_CH ? e - i : NT_CH;
    loop(buf, c->a + i, c->b ? c->b + i : NULL, c->alpha, k);
    gpa__nt_copy(c->y + i, buf, k);
  }
  gpa__nt_fence();
}

#ifdef GPA__HAVE_AVX2_PATH
#define NT_LOOP(f) (gpa__cpu_avx2() ? f : NULL)
#else
#define NT_LOOP(f) NULL
#endif
static void add_range(int64_t s, int64_t e, void *p) { stream_range(p, s, e, add_loop, NT_LOOP(stream_add_avx2)); }
static void scale_range(int64_t s, int64_t e, void *p) {
  stream_range(p, s, e, scale_loop, NT_LOOP(stream_scale_avx2));
}
static void axpy_range(int64_t s, int64_t e, void *p) { stream_range(p, s, e, axpy_loop, NT_LOOP(stream_axpy_avx2)); }

/* Streaming pays when nothing is read back from y and the op exceeds the
 * cache (in place, the lines of y were read anyway). */
static int want_nt(const float *y, const float *a, const float *b, int64_t n, int operands) {
  return y != a && y != b && gpa__nt_worth(4 * (uint64_t)(n > 0 ? n : 0) * (uint64_t)operands);
}

void gpa__add_f32(const gpa__par *par, float *y, const float *a, const float *b, int64_t n) {
  ew_ctx c = {.y = y, .a = a, .b = b, .nt = want_nt(y, a, b, n, 3)};
  gpa__pfor(par, n, EW_GRAIN, add_range, &c);
}

void gpa__scale_f32(const gpa__par *par, float *y, const float *x, float alpha, int64_t n) {
  ew_ctx c = {.y = y, .a = x, .alpha = alpha, .nt = want_nt(y, x, NULL, n, 2)};
  gpa__pfor(par, n, EW_GRAIN, scale_range, &c);
}

void gpa__axpy_f32(const gpa__par *par, float *y, const float *x, const float *y0, float alpha, int64_t n) {
  ew_ctx c = {.y = y, .a = x, .b = y0, .alpha = alpha, .nt = want_nt(y, x, y0, n, 3)};
  gpa__pfor(par, n, EW_GRAIN, axpy_range, &c);
}

/* Rows [s, e) of a [rows, D] tensor. */
static void mask_zero_rows(int64_t s, int64_t e, void *p) {
  const ew_ctx *c = p;
  const int64_t d = c->D;
  for (int64_t r = s; r < e; r++) {
    float *y = c->y + r * d;
    const float *x = c->a + r * d;
    if (mask_at(c->mask, c->mask_type, r)) {
      if (y != x) memcpy(y, x, (size_t)d * sizeof *y);
    } else {
      memset(y, 0, (size_t)d * sizeof *y);
    }
  }
}

static int64_t rows_grain(int64_t d) {
  int64_t g = EW_GRAIN / (d > 0 ? d : 1);
  return g < 1 ? 1 : g;
}

void gpa__mask_zero_f32(const gpa__par *par, float *y, const float *x, const void *mask, int mask_type,
                        int64_t rows, int64_t d) {
  if (d <= 0) return;
  ew_ctx c = {.y = y, .a = x, .mask = mask, .mask_type = mask_type, .D = d};
  gpa__pfor(par, rows, rows_grain(d), mask_zero_rows, &c);
}

/* One task = one (b, column chunk) pair; the chunk's sums live on the stack. */
#define SUM_COLS 256

GPA__KCLONES static void sum_cols(float *restrict y, const float *restrict x, const void *mask, int mask_type,
                                  int64_t b, int64_t L, int64_t D, int64_t d0, int64_t nd, int mean) {
  double acc[SUM_COLS];
  for (int64_t j = 0; j < nd; j++) acc[j] = 0.0;
  int64_t count = 0;
  for (int64_t l = 0; l < L; l++) {
    if (mask && !mask_at(mask, mask_type, b * L + l)) continue;
    count++;
    const float *restrict row = x + (b * L + l) * D + d0;
    for (int64_t j = 0; j < nd; j++) acc[j] += (double)row[j];
  }
  float *restrict out = y + b * D + d0;
  if (mean) {
    if (count == 0) {
      for (int64_t j = 0; j < nd; j++) out[j] = 0.0f;
    } else {
      const double inv = 1.0 / (double)count;
      for (int64_t j = 0; j < nd; j++) out[j] = (float)(acc[j] * inv);
    }
  } else {
    for (int64_t j = 0; j < nd; j++) out[j] = (float)acc[j];
  }
}

static void sum_tasks(int64_t s, int64_t e, void *p) {
  const ew_ctx *c = p;
  const int64_t chunks = (c->D + SUM_COLS - 1) / SUM_COLS;
  for (int64_t t = s; t < e; t++) {
    int64_t b = t / chunks, d0 = (t % chunks) * SUM_COLS;
    int64_t nd = c->D - d0 < SUM_COLS ? c->D - d0 : SUM_COLS;
    sum_cols(c->y, c->a, c->mask, c->mask_type, b, c->L, c->D, d0, nd, c->mean);
  }
}

void gpa__sum_over_l_f32(const gpa__par *par, float *y, const float *x, const void *mask, int mask_type,
                         int64_t B, int64_t L, int64_t D, int mean) {
  if (B <= 0 || D <= 0) return;
  ew_ctx c = {.y = y, .a = x, .mask = mask, .mask_type = mask_type, .B = B, .L = L, .D = D, .mean = mean};
  const int64_t chunks = (D + SUM_COLS - 1) / SUM_COLS;
  int64_t per = L * SUM_COLS; /* elements read per task */
  int64_t grain = EW_GRAIN / (per > 0 ? per : 1);
  gpa__pfor(par, B * chunks, grain < 1 ? 1 : grain, sum_tasks, &c);
}

GPA__KCLONES static void mm_bwd_rows(int64_t s, int64_t e, void *p) {
  const ew_ctx *c = p;
  const int64_t L = c->L, D = c->D;
  for (int64_t b = s; b < e; b++) {
    int64_t count = 0;
    for (int64_t l = 0; l < L; l++) count += mask_at(c->mask, c->mask_type, b * L + l);
    const float inv = count ? (float)(1.0 / (double)count) : 0.0f;
    const float *restrict dy = c->b + b * D;
    for (int64_t l = 0; l < L; l++) {
      float *restrict dx = c->y + (b * L + l) * D;
      if (count && mask_at(c->mask, c->mask_type, b * L + l))
        for (int64_t d = 0; d < D; d++) dx[d] = dy[d] * inv;
      else
        memset(dx, 0, (size_t)D * sizeof *dx);
    }
  }
}

void gpa__masked_mean_bwd_f32(const gpa__par *par, float *dx, const float *dy, const void *mask,
                              int mask_type, int64_t B, int64_t L, int64_t D) {
  if (L <= 0 || D <= 0) return;
  ew_ctx c = {.y = dx, .b = dy, .mask = mask, .mask_type = mask_type, .B = B, .L = L, .D = D};
  gpa__pfor(par, B, rows_grain(L * D), mm_bwd_rows, &c);
}

GPA__KCLONES static void bcast_rows(int64_t s, int64_t e, void *p) {
  const ew_ctx *c = p;
  const int64_t L = c->L, D = c->D;
  for (int64_t r = s; r < e; r++) {
    const float *restrict v = c->b + (r / L) * D;
    const float *restrict x = c->a + r * D;
    float *y = c->y + r * D;
    for (int64_t d = 0; d < D; d++) y[d] = x[d] + v[d];
  }
}

void gpa__add_broadcast_fwd_f32(const gpa__par *par, float *y, const float *x, const float *v, int64_t B,
                                int64_t L, int64_t D) {
  if (L <= 0 || D <= 0) return;
  ew_ctx c = {.y = y, .a = x, .b = v, .B = B, .L = L, .D = D};
  gpa__pfor(par, B * L, rows_grain(D), bcast_rows, &c);
}

/* ---- transpose ------------------------------------------------------------ */

/* 32 x 32 tiles: a tile's rows are read and its columns written while both
 * stay in L1, instead of a stride of n elements on every write. */
enum { TR_TILE = 32 };

typedef struct tr_job {
  unsigned char *y;
  const unsigned char *x;
  int64_t m, n, tm, tn;
  uint32_t es;
} tr_job;

#define TR_TILE_LOOP(T)                                                   \
  do {                                                                    \
    const T *xs = (const T *)j->x + b * j->m * j->n;                      \
    T *ys = (T *)j->y + b * j->m * j->n;                                  \
    for (int64_t i = i0; i < i1; i++)                                     \
      for (int64_t c = c0; c < c1; c++) ys[c * j->m + i] = xs[i * j->n + c]; \
  } while (0)

static void tr_range(int64_t t0, int64_t t1, void *ctx) {
  const tr_job *j = ctx;
  for (int64_t t = t0; t < t1; t++) {
    int64_t b = t / (j->tm * j->tn), r = t % (j->tm * j->tn);
    int64_t i0 = r / j->tn * TR_TILE, c0 = r % j->tn * TR_TILE;
    int64_t i1 = i0 + TR_TILE < j->m ? i0 + TR_TILE : j->m, c1 = c0 + TR_TILE < j->n ? c0 + TR_TILE : j->n;
    switch (j->es) {
      case 1: TR_TILE_LOOP(uint8_t); break;
      case 2: TR_TILE_LOOP(uint16_t); break;
      case 4: TR_TILE_LOOP(uint32_t); break;
      default: TR_TILE_LOOP(uint64_t); break;
    }
  }
}

void gpa__transpose_batched(const gpa__par *par, void *y, const void *x, int64_t batches, int64_t m, int64_t n,
                    uint32_t es) {
  if (batches <= 0 || m <= 0 || n <= 0) return;
  tr_job j = {y, x, m, n, (m + TR_TILE - 1) / TR_TILE, (n + TR_TILE - 1) / TR_TILE, es};
  gpa__pfor(par, batches * j.tm * j.tn, 16, tr_range, &j);
}
