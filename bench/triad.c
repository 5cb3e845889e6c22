/* The memory-bandwidth reference of the host benches: a STREAM triad
 * a[i] = b[i] + s * c[i] on all online CPUs, vectorized, in its two usual
 * builds: ordinary stores (what gcc makes of STREAM) and non-temporal stores
 * (what STREAM's published figures use: the stored line is not read first,
 * 12 bytes of traffic per element instead of 16). The reference is the
 * faster of the two, measured next to the op it is compared with; each
 * run is followed by a non-temporal copy over the same arrays, the pattern
 * of the ops with one input and one output (bench.h). Arrays:
 * 64-byte aligned, touched first by the threads that run the triad,
 * ordinary (4 KiB) pages like the backend's buffers.
 * Threads: the benches' host pool (bench_nn_host.h), in blocks of 64 KiB
 * per array, not OpenMP: libgomp's threads spin for milliseconds after a
 * parallel region and took a core from the actor's pool in the op run that
 * followed each triad run. See docs/benchmarks.md. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_nn_host.h"
#include "triad_loops.h"

#define MAX_PAIRS 1024

struct gpa_bench_triad {
  float *a, *b, *c;
  size_t n;
  double plain_ns, nt_ns; /* best so far */
  double last_ns;         /* the faster form of the latest run */
  double copy_ns, copy_last_ns; /* the non-temporal copy: best, latest */
  /* the last gpa_bench_vs_triad: triad (copy) time / op time per round, sorted */
  double pair[MAX_PAIRS], cpair[MAX_PAIRS];
  int pairs;
};

#define BLOCK 16384 /* floats per task: a multiple of 8, so vectors stay aligned */

static void plain_range(int64_t s, int64_t e, void *p) {
  gpa_bench_triad *t = p;
  gpa_triad_plain(t->a + s * BLOCK, t->b + s * BLOCK, t->c + s * BLOCK, (e - s) * BLOCK);
}

static void nt_range(int64_t s, int64_t e, void *p) {
  gpa_bench_triad *t = p;
  gpa_triad_nt(t->a + s * BLOCK, t->b + s * BLOCK, t->c + s * BLOCK, (e - s) * BLOCK);
}

static void copy_range(int64_t s, int64_t e, void *p) {
  gpa_bench_triad *t = p;
  gpa_copy_nt(t->a + s * BLOCK, t->b + s * BLOCK, (e - s) * BLOCK);
}

static void run_plain(gpa_bench_triad *t) { gpa__pfor(gpa_bench_host_par(), (int64_t)(t->n / BLOCK), 1, plain_range, t); }

static void run_nt(gpa_bench_triad *t) { gpa__pfor(gpa_bench_host_par(), (int64_t)(t->n / BLOCK), 1, nt_range, t); }

static void fill_range(int64_t s, int64_t e, void *p) {
  gpa_bench_triad *t = p;
  for (int64_t i = s * BLOCK; i < e * BLOCK; i++) t->a[i] = 0.0f, t->b[i] = 1.0f, t->c[i] = 2.0f;
}

gpa_bench_triad *gpa_bench_triad_open(size_t n) {
  n = (n + BLOCK - 1) / BLOCK * BLOCK;
  gpa_bench_triad *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->n = n;
  t->a = aligned_alloc(64, n * 4);
  t->b = aligned_alloc(64, n * 4);
  t->c = aligned_alloc(64, n * 4);
  if (!t->a || !t->b || !t->c) {
    gpa_bench_triad_close(t);
    return NULL;
  }
  gpa__pfor(gpa_bench_host_par(), (int64_t)(n / BLOCK), 1, fill_range, t);
  t->plain_ns = t->nt_ns = t->copy_ns = 1e300;
  return t;
}

void gpa_bench_triad_close(gpa_bench_triad *t) {
  if (!t) return;
  free(t->a);
  free(t->b);
  free(t->c);
  free(t);
}

void gpa_bench_triad_once(gpa_bench_triad *t) {
  double t0 = gpa_bench_now_ns();
  run_plain(t);
  double t1 = gpa_bench_now_ns();
  run_nt(t);
  double t2 = gpa_bench_now_ns();
  gpa__pfor(gpa_bench_host_par(), (int64_t)(t->n / BLOCK), 1, copy_range, t);
  double t3 = gpa_bench_now_ns();
  if (t1 - t0 < t->plain_ns) t->plain_ns = t1 - t0;
  if (t2 - t1 < t->nt_ns) t->nt_ns = t2 - t1;
  if (t3 - t2 < t->copy_ns) t->copy_ns = t3 - t2;
  t->last_ns = t1 - t0 < t2 - t1 ? t1 - t0 : t2 - t1;
  t->copy_last_ns = t3 - t2;
}

void gpa_bench_triad_reset(gpa_bench_triad *t) { t->plain_ns = t->nt_ns = t->copy_ns = 1e300; }

double gpa_bench_triad_best_ns(const gpa_bench_triad *t, double *plain_ns, double *nt_ns) {
  if (plain_ns) *plain_ns = t->plain_ns;
  if (nt_ns) *nt_ns = t->nt_ns;
  return t->plain_ns < t->nt_ns ? t->plain_ns : t->nt_ns;
}

size_t gpa_bench_triad_n(const gpa_bench_triad *t) { return t->n; }

double gpa_bench_vs_triad(gpa_bench_triad *t, int reps, void (*fn)(void *), void *ctx, double *ref_ns) {
  gpa_bench_triad_reset(t);
  fn(ctx);
  gpa_bench_triad_once(t);
  double best = 1e300;
  t->pairs = 0;
  for (int r = 0; r < reps; r++) {
    double t0 = gpa_bench_now_ns();
    fn(ctx);
    double d = gpa_bench_now_ns() - t0;
    if (d < best) best = d;
    gpa_bench_triad_once(t);
    if (t->pairs < MAX_PAIRS && d > 0) t->cpair[t->pairs] = t->copy_last_ns / d, t->pair[t->pairs++] = t->last_ns / d;
  }
  gpa_bench_sort(t->pair, (size_t)t->pairs);
  gpa_bench_sort(t->cpair, (size_t)t->pairs);
  *ref_ns = gpa_bench_triad_best_ns(t, NULL, NULL);
  return best;
}

static int quartiles(const double *v, int n, double *q1, double *med, double *q3) {
  if (!n) return 0;
  *q1 = v[n / 4], *med = v[n / 2], *q3 = v[3 * n / 4];
  return n;
}

int gpa_bench_triad_pairs(const gpa_bench_triad *t, double *q1, double *med, double *q3) {
  return quartiles(t->pair, t->pairs, q1, med, q3);
}

double gpa_bench_triad_copy_ns(const gpa_bench_triad *t) { return t->copy_ns; }

int gpa_bench_triad_copy_pairs(const gpa_bench_triad *t, double *q1, double *med, double *q3) {
  return quartiles(t->cpair, t->pairs, q1, med, q3);
}

double gpa_bench_triad_ns(size_t n, int reps) {
  gpa_bench_triad *t = gpa_bench_triad_open(n);
  if (!t) return 0;
  for (int r = 0; r < reps + 1; r++) gpa_bench_triad_once(t);
  double ns = gpa_bench_triad_best_ns(t, NULL, NULL);
  gpa_bench_triad_close(t);
  return ns;
}
