/* Two builds of kernels/host/gelu.c side by side (bench/gelu_ab.sh compiles
 * them with their entry points renamed A_* and B_*; this file sits below
 * bench/, whose top-level C files make gpa-bench): single thread, one
 * call per sample, data in L1 (n = 4096 by default) or anywhere else (n
 * given). Rounds alternate A and B (10 calls each), so both see the same
 * moments of a shared machine; printed: the best time per element of each,
 * and the median over rounds of B's best / A's best in the round (the
 * load-robust figure; its quartiles show the spread). Cycles assume the
 * clock given as GHz (3.24 on the development VM, measured with a chain of
 * dependent integer adds; the VM has no cycle counter).
 * With threads > 1 both run on the project's host pool (kernels/host/pool.c,
 * as gpa-bench's direct calls do), one call per side per round, each
 * followed by a STREAM triad on that pool (8M floats per array, ordinary
 * and streaming stores, the faster counts, as bench/triad.c), which also
 * evicts the inputs as in gpa-bench (ten calls in a row kept part of x in
 * the L3 and overstated the ratio): printed besides, each side's median
 * over rounds of its GB/s over the round's triad GB/s, and gpa-bench's own
 * figure (best over best) for each, measured with A and B in the same
 * minutes.
 * Usage: gelu_ab [n] [rounds] [GHz] [threads] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/ab/ab_triad.h"

void A_fwd(const gpa__par *, float *, const float *, int64_t, int);
void A_bwd(const gpa__par *, float *, const float *, const float *, int64_t, int);
void B_fwd(const gpa__par *, float *, const float *, int64_t, int);
void B_bwd(const gpa__par *, float *, const float *, const float *, int64_t, int);

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 4096;
  int rounds = argc > 2 ? atoi(argv[2]) : 300;
  double ghz = argc > 3 ? atof(argv[3]) : 3.24;
  int threads = argc > 4 ? atoi(argv[4]) : 1;
  if (n < 8 || rounds < 4 || threads < 1) return 2;
  gpa__pool *pool = threads > 1 ? gpa__pool_create((uint32_t)threads) : NULL;
  gpa__par par = gpa__pool_par(pool);
  const gpa__par *pp = pool ? &par : NULL;
  ab_triad tr = {0};
  double *qa = malloc((size_t)rounds * sizeof *qa), *qb = malloc((size_t)rounds * sizeof *qb);
  if (pool) {
    if (ab_triad_open(&tr)) return 1;
  }
  if (!qa || !qb) return 1;
  float *x = aligned_alloc(64, (size_t)n * 4), *dy = aligned_alloc(64, (size_t)n * 4);
  float *y = aligned_alloc(64, (size_t)n * 4);
  double *rat = malloc((size_t)rounds * sizeof *rat);
  if (!x || !dy || !y || !rat) return 1;
  uint64_t s = 1;
  for (long i = 0; i < n; i++) { /* x in [-4, 4) as in gpa-bench, dy in [-1, 1) */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 40) / (double)(1 << 24) * 8.0 - 4.0);
    dy[i] = (float)((double)((s >> 20) & 0xfffff) / (double)(1 << 20) * 2.0 - 1.0);
  }
  const char *name[4] = {"fwd_erf", "fwd_tanh", "bwd_erf", "bwd_tanh"};
  for (int k = 0; k < 4; k++) {
    double best[2] = {1e30, 1e30}, tbest = 1e30;
    for (int r = 0; r < rounds; r++) {
      double rb[2] = {1e30, 1e30}, tt = 1e30;
      for (int v = 0; v < 2; v++)
        for (int i = 0; i < (pool ? 1 : 10); i++) {
          double t0 = ab_now();
          if (k < 2)
            (v ? B_fwd : A_fwd)(pp, y, x, n, k);
          else
            (v ? B_bwd : A_bwd)(pp, y, x, dy, n, k - 2);
          double d = ab_now() - t0;
          if (d < rb[v]) rb[v] = d;
          if (pool) { /* as gpa-bench: a triad after each call, so the next starts from DRAM */
            double t = ab_triad_once(pool, &tr);
            if (t < tt) tt = t;
          }
        }
      for (int v = 0; v < 2; v++)
        if (rb[v] < best[v]) best[v] = rb[v];
      rat[r] = rb[1] / rb[0];
      if (pool) { /* ours' GB/s over the triad's: (bytes / ours) / (12 TRIAD_N / triad) */
        double bytes = (k < 2 ? 8.0 : 12.0) * (double)n;
        if (tt < tbest) tbest = tt;
        qa[r] = bytes / rb[0] / (12.0 * TRIAD_N / tt);
        qb[r] = bytes / rb[1] / (12.0 * TRIAD_N / tt);
      }
    }
    qsort(rat, (size_t)rounds, sizeof *rat, ab_cmp);
    printf("{\"name\":\"gelu_ab_%s\",\"n\":%ld,\"a_ns_per_elem\":%.4f,\"b_ns_per_elem\":%.4f,"
           "\"a_cycles_per_8\":%.2f,\"b_cycles_per_8\":%.2f,\"b_over_a_median\":%.3f,\"q1\":%.3f,\"q3\":%.3f}\n",
           name[k], n, best[0] * 1e9 / (double)n, best[1] * 1e9 / (double)n, best[0] * 1e9 / (double)n * 8 * ghz,
           best[1] * 1e9 / (double)n * 8 * ghz, rat[rounds / 2], rat[rounds / 4], rat[3 * rounds / 4]);
    if (pool) {
      qsort(qa, (size_t)rounds, sizeof *qa, ab_cmp);
      qsort(qb, (size_t)rounds, sizeof *qb, ab_cmp);
      double bytes = (k < 2 ? 8.0 : 12.0) * (double)n, tgb = 12.0 * TRIAD_N / tbest;
      printf("{\"name\":\"gelu_ab_%s_vs_triad\",\"threads\":%d,\"a_ratio_median\":%.3f,\"b_ratio_median\":%.3f,"
             "\"a_q1\":%.3f,\"a_q3\":%.3f,\"b_q1\":%.3f,\"b_q3\":%.3f,\"triad_best_gbps\":%.1f,"
             "\"a_best_ratio\":%.3f,\"b_best_ratio\":%.3f}\n",
             name[k], threads, qa[rounds / 2], qb[rounds / 2], qa[rounds / 4], qa[3 * rounds / 4], qb[rounds / 4],
             qb[3 * rounds / 4], tgb * 1e-9, bytes / best[0] / tgb, bytes / best[1] / tgb);
    }
  }
  free(x), free(dy), free(y), free(rat), free(qa), free(qb);
  if (pool) ab_triad_close(&tr);
  gpa__pool_destroy(pool);
  return 0;
}
