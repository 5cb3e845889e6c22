/* Where the host GELU kernels' two-thread time goes (bench/gelu_ceiling.sh
 * compiles this with the working tree's kernels/host/gelu.c). For each
 * kernel, n elements (4M: gpa-bench's shape) on the project's host pool,
 * three ways, each followed by a STREAM triad on that pool (bench/ab/
 * ab_triad.h, as in gpa-bench), and each figure's GB/s (over the bytes the
 * op must move: 8 per element forward, 12 backward) divided by the triad's
 * in the same round:
 *   op       the kernel as gpa-bench calls it (inputs from DRAM, streaming
 *            stores): gpa-bench's own figure, up to scatter;
 *   compute  the same kernel and the same element count, run on pieces of
 *            PIECE elements whose inputs and output sit in a buffer of the
 *            running thread that stays in its L2 (no memory traffic): the
 *            ratio the arithmetic alone allows;
 *   memory   the same streams with no arithmetic (y = x forward, y = x + dy
 *            backward; the kernels' loop shape: four vectors a step,
 *            inputs prefetched a 4 KiB page ahead, streaming stores): the
 *            ratio the memory pattern alone allows.
 * Rounds interleave the three; printed per kernel: the median over rounds
 * and its quartiles, and the triad's best GB/s. huge = 1 asks for 2 MiB
 * pages (madvise) for the op's arrays, huge = 2 for the triad's too: how
 * much of the op's cost is address translation (THP must be "madvise" or
 * "always"; anon_huge_kb says what the process got).
 * Usage: gelu_ceiling [rounds] [threads] [n] [huge] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/ab/ab_triad.h"
#include "kernels/host/gelu.h"

#define PIECE 16384
#define MAX_THREADS 64

typedef struct ceil_ctx {
  const float *x, *dy;
  float *y;
  int kernel; /* 0 fwd erf, 1 fwd tanh, 2 bwd erf, 3 bwd tanh */
  /* per thread: x, dy, y of PIECE elements each, kept in that thread's L2 */
  float *priv[MAX_THREADS];
  _Atomic int next_slot;
} ceil_ctx;

static _Thread_local int slot = -1;

static void compute_range(int64_t s, int64_t e, void *p) {
  ceil_ctx *c = p;
  if (slot < 0) slot = __atomic_fetch_add(&c->next_slot, 1, __ATOMIC_RELAXED) % MAX_THREADS;
  float *b = c->priv[slot];
  for (int64_t i = s; i < e; i++) {
    if (c->kernel < 2)
      gpa__gelu_fwd_f32(NULL, b + 2 * PIECE, b, PIECE, c->kernel);
    else
      gpa__gelu_bwd_f32(NULL, b + 2 * PIECE, b, b + PIECE, PIECE, c->kernel - 2);
  }
}

/* Two loops, not one with a branch: gcc hoists the backward's dy prefetches
 * above such a branch, and the forward then reads a third stream. */
#if defined(__x86_64__) && defined(__GNUC__)
#define PF(p) _mm_prefetch((const char *)((uintptr_t)(p) + 4096), _MM_HINT_T1)
__attribute__((target("avx2,fma"))) static void memory_fwd(int64_t s, int64_t e, void *p) {
  ceil_ctx *c = p;
  const float *x = c->x;
  float *y = c->y;
  for (int64_t i = s * PIECE; i < e * PIECE; i += 32) {
    PF(x + i), PF(x + i + 16);
    for (int j = 0; j < 32; j += 8) _mm256_stream_ps(y + i + j, _mm256_load_ps(x + i + j));
  }
  _mm_sfence();
}
__attribute__((target("avx2,fma"))) static void memory_bwd(int64_t s, int64_t e, void *p) {
  ceil_ctx *c = p;
  const float *x = c->x, *dy = c->dy;
  float *y = c->y;
  for (int64_t i = s * PIECE; i < e * PIECE; i += 32) {
    PF(x + i), PF(x + i + 16), PF(dy + i), PF(dy + i + 16);
    for (int j = 0; j < 32; j += 8)
      _mm256_stream_ps(y + i + j, _mm256_add_ps(_mm256_load_ps(x + i + j), _mm256_load_ps(dy + i + j)));
  }
  _mm_sfence();
}
#else
static void memory_fwd(int64_t s, int64_t e, void *p) {
  ceil_ctx *c = p;
  for (int64_t i = s * PIECE; i < e * PIECE; i++) c->y[i] = c->x[i];
}
static void memory_bwd(int64_t s, int64_t e, void *p) {
  ceil_ctx *c = p;
  for (int64_t i = s * PIECE; i < e * PIECE; i++) c->y[i] = c->x[i] + c->dy[i];
}
#endif

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 30;
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  long n = argc > 3 ? atol(argv[3]) : 4L << 20;
  int huge = argc > 4 ? atoi(argv[4]) : 0;
  if (rounds < 4 || threads < 1 || threads > MAX_THREADS || n < PIECE || n % PIECE) return 2;
  gpa__pool *pool = threads > 1 ? gpa__pool_create((uint32_t)threads) : NULL;
  gpa__par par = gpa__pool_par(pool);
  const gpa__par *pp = pool ? &par : NULL;
  ab_triad tr;
  if (ab_triad_open_pages(&tr, huge == 2)) return 1;
  size_t al = huge ? (size_t)2 << 20 : 64, sz = ((size_t)n * 4 + al - 1) / al * al;
  float *x = aligned_alloc(al, sz), *dy = aligned_alloc(al, sz), *y = aligned_alloc(al, sz);
  double *q = malloc(3 * (size_t)rounds * sizeof *q);
  static ceil_ctx c;
  if (!x || !dy || !y || !q) return 1;
#ifdef MADV_HUGEPAGE
  if (huge) madvise(x, sz, MADV_HUGEPAGE), madvise(dy, sz, MADV_HUGEPAGE), madvise(y, sz, MADV_HUGEPAGE);
#endif
  uint64_t s = 1;
  for (long i = 0; i < n; i++) { /* x in [-4, 4) as in gpa-bench, dy in [-1, 1) */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 40) / (double)(1 << 24) * 8.0 - 4.0);
    dy[i] = (float)((double)((s >> 20) & 0xfffff) / (double)(1 << 20) * 2.0 - 1.0);
    y[i] = 0.0f;
  }
  for (int t = 0; t < MAX_THREADS; t++) {
    c.priv[t] = aligned_alloc(64, 3 * PIECE * 4);
    if (!c.priv[t]) return 1;
    for (int i = 0; i < PIECE; i++) c.priv[t][i] = x[i], c.priv[t][PIECE + i] = dy[i], c.priv[t][2 * PIECE + i] = 0;
  }
  c.x = x, c.dy = dy, c.y = y;
  long huge_kb = 0; /* what the process got: AnonHugePages of /proc/self/smaps_rollup */
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "AnonHugePages: %ld", &huge_kb) == 1) break;
  if (f) fclose(f);
  const char *name[4] = {"fwd_erf", "fwd_tanh", "bwd_erf", "bwd_tanh"};
  const char *way[3] = {"op", "compute", "memory"};
  for (int k = 0; k < 4; k++) {
    double bytes = (k < 2 ? 8.0 : 12.0) * (double)n, tbest = 1e30;
    c.kernel = k;
    for (int r = 0; r < rounds; r++) {
      double d[3], tt = 1e30;
      for (int w = 0; w < 3; w++) {
        double t0 = ab_now();
        if (w == 0 && k < 2) gpa__gelu_fwd_f32(pp, y, x, n, k);
        if (w == 0 && k >= 2) gpa__gelu_bwd_f32(pp, y, x, dy, n, k - 2);
        if (w == 1) gpa__pool_for(pool, n / PIECE, 1, compute_range, &c);
        if (w == 2) gpa__pool_for(pool, n / PIECE, 1, k < 2 ? memory_fwd : memory_bwd, &c);
        d[w] = ab_now() - t0;
        double t = ab_triad_once(pool, &tr);
        if (t < tt) tt = t;
      }
      if (tt < tbest) tbest = tt;
      for (int w = 0; w < 3; w++) q[w * rounds + r] = bytes / d[w] / (12.0 * TRIAD_N / tt);
    }
    printf("{\"name\":\"gelu_ceiling_%s\",\"threads\":%d,\"n\":%ld,\"huge\":%d,\"anon_huge_kb\":%ld,\"triad_best_gbps\":%.1f",
           name[k], threads, n, huge, huge_kb, 12.0 * TRIAD_N / tbest * 1e-9);
    for (int w = 0; w < 3; w++) {
      double *v = q + w * rounds;
      qsort(v, (size_t)rounds, sizeof *v, ab_cmp);
      printf(",\"%s_median\":%.3f,\"%s_q1\":%.3f,\"%s_q3\":%.3f", way[w], v[rounds / 2], way[w], v[rounds / 4], way[w],
             v[3 * rounds / 4]);
    }
    printf("}\n");
  }
  for (int t = 0; t < MAX_THREADS; t++) free(c.priv[t]);
  free(x), free(dy), free(y), free(q);
  ab_triad_close(&tr);
  gpa__pool_destroy(pool);
  return 0;
}
