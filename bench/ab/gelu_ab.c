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
 * Usage: gelu_ab [n] [rounds] [GHz] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct gpa__par gpa__par;
void A_fwd(const gpa__par *, float *, const float *, int64_t, int);
void A_bwd(const gpa__par *, float *, const float *, const float *, int64_t, int);
void B_fwd(const gpa__par *, float *, const float *, int64_t, int);
void B_bwd(const gpa__par *, float *, const float *, const float *, int64_t, int);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 4096;
  int rounds = argc > 2 ? atoi(argv[2]) : 300;
  double ghz = argc > 3 ? atof(argv[3]) : 3.24;
  if (n < 8 || rounds < 4) return 2;
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
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < rounds; r++) {
      double rb[2] = {1e30, 1e30};
      for (int v = 0; v < 2; v++)
        for (int i = 0; i < 10; i++) {
          double t0 = now();
          if (k < 2)
            (v ? B_fwd : A_fwd)(NULL, y, x, n, k);
          else
            (v ? B_bwd : A_bwd)(NULL, y, x, dy, n, k - 2);
          double d = now() - t0;
          if (d < rb[v]) rb[v] = d;
        }
      for (int v = 0; v < 2; v++)
        if (rb[v] < best[v]) best[v] = rb[v];
      rat[r] = rb[1] / rb[0];
    }
    qsort(rat, (size_t)rounds, sizeof *rat, cmp);
    printf("{\"name\":\"gelu_ab_%s\",\"n\":%ld,\"a_ns_per_elem\":%.4f,\"b_ns_per_elem\":%.4f,"
           "\"a_cycles_per_8\":%.2f,\"b_cycles_per_8\":%.2f,\"b_over_a_median\":%.3f,\"q1\":%.3f,\"q3\":%.3f}\n",
           name[k], n, best[0] * 1e9 / (double)n, best[1] * 1e9 / (double)n, best[0] * 1e9 / (double)n * 8 * ghz,
           best[1] * 1e9 / (double)n * 8 * ghz, rat[rounds / 2], rat[rounds / 4], rat[3 * rounds / 4]);
  }
  free(x), free(dy), free(y), free(rat);
  return 0;
}
