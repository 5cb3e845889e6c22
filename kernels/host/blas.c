/* gpa__sgemm: cblas_sgemm with the edge cases handled, split across the
 * backend's pool. See blas.h. */
#include "kernels/host/blas.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Blocks of C are multiples of this many rows/columns (OpenBLAS's AVX2
 * kernels work in 16 x 4 and 8 x 8 tiles), and a GEMM below GRAIN_FLOPS is
 * not split (a block's packing and hand-off would cost more than it saves). */
#define ALIGN 16
#define GRAIN_FLOPS (1 << 21)

static _Atomic int single; /* 1: OpenBLAS set to one thread by us */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void make_single(void) {
  void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  if (!set) return; /* another CBLAS: its threading is its own */
  set(1);
  atomic_store(&single, 1);
}

int gpa__blas_single_threaded(void) { return atomic_load(&single); }

void gpa__sgemm_own_split(const gpa__par *par) {
  if (par && par->pfor && par->threads > 1) pthread_once(&once, make_single);
}

typedef struct gemm_ctx {
  int ta, tb;
  int64_t M, N, K, lda, ldb, ldc, step; /* step: rows (by_rows) or columns per block */
  const float *A, *B;
  float *C;
  float beta;
  int by_rows;
} gemm_ctx;

static void one(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
              (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

static void gemm_blocks(int64_t b0, int64_t b1, void *p) {
  const gemm_ctx *c = p;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t lo = blk * c->step, dim = c->by_rows ? c->M : c->N;
    int64_t hi = lo + c->step < dim ? lo + c->step : dim;
    if (hi <= lo) continue;
    if (c->by_rows) /* rows lo..hi of A' (A^T: columns of A) and of C */
      one(c->ta, c->tb, hi - lo, c->N, c->K, c->ta ? c->A + lo : c->A + lo * c->lda, c->lda, c->B, c->ldb, c->beta,
          c->C + lo * c->ldc, c->ldc);
    else /* columns lo..hi of B' (B^T: rows of B) and of C */
      one(c->ta, c->tb, c->M, hi - lo, c->K, c->A, c->lda, c->tb ? c->B + lo * c->ldb : c->B + lo, c->ldb, c->beta,
          c->C + lo, c->ldc);
  }
}

/* K = 0: C = beta * C (BLAS may reject K = 0 leading dimensions). */
static void scale_only(int64_t M, int64_t N, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * ldc;
    if (beta == 0.0f)
      memset(c, 0, (size_t)N * sizeof(float));
    else if (beta != 1.0f)
      for (int64_t j = 0; j < N; j++) c[j] *= beta;
  }
}

/* How a GEMM is cut for `threads` threads: into *blocks of rows or columns
 * (the larger of M and N: the other operand is packed once per block, so
 * the duplicated packing is the smaller one). */
static gemm_ctx cut(int threads, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int64_t *blocks) {
  int by_rows = M >= N;
  int64_t dim = by_rows ? M : N;
  int64_t parts = threads;
  if (parts > dim / ALIGN) parts = dim / ALIGN;
  if (2.0 * (double)M * (double)N * (double)K < (double)GRAIN_FLOPS * (double)threads) parts = 1;
  if (parts < 1) parts = 1;
  int64_t step = (dim + parts - 1) / parts;
  if (parts > 1) step = (step + ALIGN - 1) / ALIGN * ALIGN;
  *blocks = (dim + step - 1) / step;
  return (gemm_ctx){ta, tb, M, N, K, lda, ldb, ldc, step, A, B, C, beta, by_rows};
}

void gpa__sgemm(const gpa__par *par, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    scale_only(M, N, beta, C, ldc);
    return;
  }
  int threads = par && par->pfor ? par->threads : 1;
  if (threads > 1) pthread_once(&once, make_single);
  int64_t blocks;
  gemm_ctx c = cut(threads, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, &blocks);
  if (blocks <= 1) {
    one(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  gpa__pfor(par, blocks, 1, gemm_blocks, &c);
}

/* gpa__sgemm_many: unit u < first[n] is block u - first[i] of GEMM i; the
 * rest are the tail's. */
#define MANY_MAX 8

typedef struct many_ctx {
  int n;
  gemm_ctx g[MANY_MAX];
  int64_t first[MANY_MAX + 1];
  gpa__range_fn tail;
  void *tail_ctx;
} many_ctx;

static void many_units(int64_t u0, int64_t u1, void *p) {
  many_ctx *c = p;
  for (int64_t u = u0; u < u1; u++) {
    if (u >= c->first[c->n]) {
      c->tail(u - c->first[c->n], u - c->first[c->n] + 1, c->tail_ctx);
      continue;
    }
    int i = 0;
    while (u >= c->first[i + 1]) i++;
    gemm_blocks(u - c->first[i], u - c->first[i] + 1, &c->g[i]);
  }
}

void gpa__sgemm_many(const gpa__par *par, int n, const gpa__gemm *g, int64_t tail_n, gpa__range_fn tail,
                     void *tail_ctx) {
  if (!tail) tail_n = 0;
  int threads = par && par->pfor ? par->threads : 1;
  double flops = 0;
  for (int i = 0; i < n; i++)
    if (g[i].M > 0 && g[i].N > 0 && g[i].K > 0) flops += 2.0 * (double)g[i].M * (double)g[i].N * (double)g[i].K;
  /* Too many, one thread, or too little work to hand out: one after another
   * (each split as gpa__sgemm splits it). */
  if (n > MANY_MAX || threads <= 1 || flops < (double)GRAIN_FLOPS * (double)threads) {
    for (int i = 0; i < n; i++)
      gpa__sgemm(par, g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, g[i].A, g[i].lda, g[i].B, g[i].ldb, g[i].beta,
                 g[i].C, g[i].ldc);
    gpa__pfor(par, tail_n, 1, tail, tail_ctx);
    return;
  }
  pthread_once(&once, make_single);
  /* Threads per GEMM: threads/n when that is whole, so every thread gets
   * the same work; else all of them (each GEMM cut in `threads` blocks). */
  int per = threads % n == 0 ? threads / n : threads;
  many_ctx c = {.n = 0, .tail = tail, .tail_ctx = tail_ctx};
  for (int i = 0; i < n; i++) {
    if (g[i].M <= 0 || g[i].N <= 0) continue;
    if (g[i].K <= 0) {
      scale_only(g[i].M, g[i].N, g[i].beta, g[i].C, g[i].ldc);
      continue;
    }
    int64_t blocks;
    c.g[c.n] = cut(per, g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, g[i].A, g[i].lda, g[i].B, g[i].ldb, g[i].beta,
                   g[i].C, g[i].ldc, &blocks);
    c.first[c.n + 1] = c.first[c.n] + blocks;
    c.n++;
  }
  gpa__pfor(par, c.first[c.n] + tail_n, 1, many_units, &c);
}
