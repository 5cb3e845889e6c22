/* The STREAM triad of the bench/ab tools (gelu_ab.c, gelu_ceiling.c): a =
 * b + 3 c over TRIAD_N floats per array on the project's host pool, in
 * blocks of TRIAD_B, with ordinary and with streaming stores; the faster
 * counts, as in bench/triad.c (gpa-bench's reference), whose loops these are
 * (bench/triad_loops.h). It also evicts the
 * caches between two timed calls, as in gpa-bench. Header-only: each tool is
 * one translation unit (see bench/gelu_ab.sh). */
#ifndef GPA_BENCH_AB_TRIAD_H
#define GPA_BENCH_AB_TRIAD_H
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/triad_loops.h"
#include "kernels/host/pool.h"

#define TRIAD_N (1 << 23)
#define TRIAD_B 16384

typedef struct ab_triad {
  float *a, *b, *c;
} ab_triad;

static double ab_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void ab_triad_plain(int64_t s, int64_t e, void *p) {
  ab_triad *t = p;
  gpa_triad_plain(t->a + s * TRIAD_B, t->b + s * TRIAD_B, t->c + s * TRIAD_B, (e - s) * TRIAD_B);
}

static void ab_triad_nt(int64_t s, int64_t e, void *p) {
  ab_triad *t = p;
  gpa_triad_nt(t->a + s * TRIAD_B, t->b + s * TRIAD_B, t->c + s * TRIAD_B, (e - s) * TRIAD_B);
}

/* 0 on success; huge: ask for 2 MiB pages (madvise), for measurements of
 * address translation (gpa-bench's triad uses ordinary pages) */
static int ab_triad_open_pages(ab_triad *t, int huge) {
  size_t al = huge ? (size_t)2 << 20 : 64;
  t->a = aligned_alloc(al, TRIAD_N * 4), t->b = aligned_alloc(al, TRIAD_N * 4), t->c = aligned_alloc(al, TRIAD_N * 4);
  if (!t->a || !t->b || !t->c) return 1;
#ifdef MADV_HUGEPAGE
  if (huge) madvise(t->a, TRIAD_N * 4, MADV_HUGEPAGE), madvise(t->b, TRIAD_N * 4, MADV_HUGEPAGE),
      madvise(t->c, TRIAD_N * 4, MADV_HUGEPAGE);
#endif
  for (int64_t i = 0; i < TRIAD_N; i++) t->a[i] = 0.0f, t->b[i] = 1.0f, t->c[i] = 2.0f;
  return 0;
}

static int ab_triad_open(ab_triad *t) { return ab_triad_open_pages(t, 0); }

static void ab_triad_close(ab_triad *t) { free(t->a), free(t->b), free(t->c); }

/* seconds of the faster of the two triads, run once each */
static double ab_triad_once(gpa__pool *pool, ab_triad *t) {
  double t0 = ab_now();
  gpa__pool_for(pool, TRIAD_N / TRIAD_B, 1, ab_triad_plain, t);
  double t1 = ab_now();
  gpa__pool_for(pool, TRIAD_N / TRIAD_B, 1, ab_triad_nt, t);
  double t2 = ab_now();
  return t1 - t0 < t2 - t1 ? t1 - t0 : t2 - t1;
}

static int ab_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
