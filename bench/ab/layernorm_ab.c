/* Two builds of kernels/host/layernorm.c side by side (bench/layernorm_ab.sh
 * compiles them with their entry points renamed A_* and B_*; this file sits
 * below bench/, whose top-level C files make gpa-bench), on the host pool
 * (1 thread: inline) like gpa-bench's direct calls. Each round runs A, a
 * non-temporal STREAM triad (3 x 32 MiB, as bench/triad.c's), B and the
 * triad again, so all three see the same moments of a shared machine.
 * Printed per variant: the best GB/s (bytes as gpa-bench counts them: 8 per
 * element forward, 12 backward), TSC ticks per element at the best (the VM
 * has no cycle counter; its TSC runs at 2.45 GHz, its cores at ~3.25), the
 * best against the triad's best; then B's best / A's best, the median over
 * rounds of A's time / B's (the load-robust figure: > 1 means B is faster)
 * and whether B's outputs equal A's bitwise. A and B write their outputs
 * into two buffers and swap them every round: which buffer a kernel writes
 * alone moved its GB/s by 4-35% on the reference VM (the same build as A
 * and B measured B/A 1.04-1.15 while each kept its own buffer, 0.94-0.97
 * with the buffers swapped; session 8). `copy` times a plain
 * non-temporal copy of x into y instead of B: the forward's memory pattern
 * (one read and one write stream) with no arithmetic.
 * Usage: layernorm_ab fwd|bwd|copy threads N D [rounds] [calls per sample] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#include "bench/triad_loops.h"
#include "kernels/host/nt_store.h"
#include "kernels/host/pool.h"

void A_fwd(const gpa__par *, float *, float *, float *, const float *, const float *, const float *, int64_t,
           int64_t, double);
void A_bwd(const gpa__par *, float *, float *, float *, const float *, const float *, const float *,
           const float *, const float *, int64_t, int64_t, void *);
size_t A_scr(int64_t, int64_t);
void B_fwd(const gpa__par *, float *, float *, float *, const float *, const float *, const float *, int64_t,
           int64_t, double);
void B_bwd(const gpa__par *, float *, float *, float *, const float *, const float *, const float *,
           const float *, const float *, int64_t, int64_t, void *);
size_t B_scr(int64_t, int64_t);

#define TN (1 << 23) /* triad floats per array */
#define BLK 16384    /* floats per pool task */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static float *arr(int64_t n, float lo, float hi, uint32_t s) {
  float *p = aligned_alloc(64, ((size_t)(n > 0 ? n : 1) * 4 + 63) & ~(size_t)63);
  if (!p) exit(1);
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * (float)(s >> 8) / 16777216.0f;
  }
  return p;
}

static float *ta, *tb, *tc, *cx, *cy;

static void triad_r(int64_t s, int64_t e, void *p) {
  (void)p;
  gpa_triad_nt(ta + s * BLK, tb + s * BLK, tc + s * BLK, (e - s) * BLK);
}

static void copy_r(int64_t s, int64_t e, void *p) {
  (void)p;
  gpa_copy_nt(cy + s * BLK, cx + s * BLK, (e - s) * BLK);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: layernorm_ab fwd|bwd|copy threads N D [rounds] [calls per sample]\n");
    return 2;
  }
  /* The library reads GPA_HOST_NT through its options table; this tool
   * links the kernels alone. */
  const char *nt = getenv("GPA_HOST_NT");
  if (nt && (!strcmp(nt, "0") || !strcmp(nt, "1"))) gpa__nt_force(nt[0] == '1');
  const char *op = argv[1];
  const int th = atoi(argv[2]), bwd = !strcmp(op, "bwd"), copy = !strcmp(op, "copy");
  const int64_t N = atoll(argv[3]), D = atoll(argv[4]), nd = N * D;
  const int rounds = argc > 5 ? atoi(argv[5]) : 40, calls = argc > 6 ? atoi(argv[6]) : 1;
  if (rounds < 1 || rounds > 10000 || calls < 1 || nd <= 0 || (copy && nd % BLK)) return 2;
  gpa__pool *pool = th > 1 ? gpa__pool_create((uint32_t)th) : NULL;
  gpa__par par = gpa__pool_par(pool);
  const gpa__par *P = pool ? &par : NULL;
  float *x = arr(nd, -2, 2, 1), *g = arr(D, .5f, 1.5f, 2), *b = arr(D, -1, 1, 3), *m = arr(N, 0, 0, 5);
  float *r = arr(N, 0, 0, 6), *dy = arr(nd, -1, 1, 7), *y[2] = {arr(nd, 0, 0, 4), arr(nd, 0, 0, 4)};
  float *dg[2] = {arr(D, 0, 0, 8), arr(D, 0, 0, 8)}, *db[2] = {arr(D, 0, 0, 9), arr(D, 0, 0, 9)};
  size_t sa = A_scr(N, D), sb = B_scr(N, D);
  void *scr = malloc(sa > sb ? sa : sb);
  ta = arr(TN, 0, 0, 1), tb = arr(TN, 1, 1, 1), tc = arr(TN, 2, 2, 1), cx = x;
  if (!scr) return 1;
  A_fwd(P, y[0], m, r, x, g, b, N, D, 1e-5);
  double best[2] = {1e300, 1e300}, tbest = 1e300, *ratio = malloc(sizeof(double) * (size_t)rounds);
  uint64_t tsc[2] = {UINT64_MAX, UINT64_MAX};
  for (int k = 0; k < rounds; k++) {
    double t[2];
    for (int v = 0; v < 2; v++) {
      const int o = (v + k) & 1; /* outputs swap each round: see the head comment */
      uint64_t c0 = __rdtsc();
      double t0 = now();
      for (int i = 0; i < calls; i++) {
        if (copy && v)
          cy = y[o], gpa__pfor(P, nd / BLK, 1, copy_r, NULL);
        else if (bwd)
          (v ? B_bwd : A_bwd)(P, y[o], dg[o], db[o], x, dy, g, m, r, N, D, scr);
        else
          (v ? B_fwd : A_fwd)(P, y[o], m, r, x, g, b, N, D, 1e-5);
      }
      t[v] = (now() - t0) / calls;
      uint64_t c = (__rdtsc() - c0) / (uint64_t)calls;
      if (t[v] < best[v]) best[v] = t[v], tsc[v] = c;
      double t1 = now();
      gpa__pfor(P, TN / BLK, 1, triad_r, NULL);
      if (now() - t1 < tbest) tbest = now() - t1;
    }
    ratio[k] = t[0] / t[1];
  }
  qsort(ratio, (size_t)rounds, sizeof *ratio, cmp);
  const double bytes = (bwd ? 12.0 : 8.0) * (double)nd, tg = 12.0 * TN / tbest;
  int same = !copy && !memcmp(y[0], y[1], (size_t)nd * 4) &&
             (!bwd || (!memcmp(dg[0], dg[1], (size_t)D * 4) && !memcmp(db[0], db[1], (size_t)D * 4)));
  printf("%s %d thread(s) %lldx%lld | A %.1f GB/s %.3f tsc/elt %.3f of triad | %s %.1f GB/s %.3f tsc/elt %.3f of "
         "triad | triad %.1f GB/s | best B/A %.3f, median %.3f (quartiles %.3f-%.3f) | same bits %s\n",
         op, th, (long long)N, (long long)D, bytes / best[0], (double)tsc[0] / (double)nd, bytes / best[0] / tg,
         copy ? "copy" : "B", bytes / best[1], (double)tsc[1] / (double)nd, bytes / best[1] / tg, tg,
         best[0] / best[1], ratio[rounds / 2], ratio[rounds / 4], ratio[3 * rounds / 4],
         copy ? "-" : same ? "yes" : "no");
  gpa__pool_destroy(pool);
  return 0;
}
