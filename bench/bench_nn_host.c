/* See bench_nn_host.h. */
#include "bench_nn_host.h"

#include "bench.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kernels/host/pool.h"

static gpa__pool *pool;
static gpa__par par;
static int threads;

const gpa__par *gpa_bench_host_par(void) {
  if (!threads) {
    /* GPA_BENCH_THREADS=n: n threads for ours and for the OpenBLAS
     * references that follow gpa_bench_host_threads (default: the CPUs). */
    const char *env = getenv("GPA_BENCH_THREADS");
    long n = env && atoi(env) > 0 ? atoi(env) : sysconf(_SC_NPROCESSORS_ONLN);
    threads = n > 0 ? (int)n : 1;
    pool = gpa__pool_create((uint32_t)threads); /* NULL for one thread: inline */
    par = gpa__pool_par(pool);
    /* GPA_BENCH_BLAS_OWN=1: GEMMs not split (threads unknown to gpa__sgemm),
     * so they run on OpenBLAS's own threads: the layout before blas.h's
     * split, for comparison. */
    const char *own = getenv("GPA_BENCH_BLAS_OWN");
    par.threads = own && own[0] == '1' ? 1 : threads;
  }
  return pool ? &par : NULL;
}

int gpa_bench_host_threads(void) {
  gpa_bench_host_par();
  return threads;
}

void gpa_bench_fill(float *p, int64_t n, float lo, float hi, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = lo + (hi - lo) * (float)((double)(seed >> 11) / 9007199254740992.0);
  }
}

int gpa_bench_full(void) {
  const char *s = getenv("GPA_BENCH_FULL");
  return s && s[0] && !(s[0] == '0' && !s[1]);
}

/* Best of rounds*reps alternated runs of fa and fb, after one warm-up run
 * of each. */
void gpa_bench_pair(int rounds, int reps, void (*fa)(void *), void *ca, void (*fb)(void *), void *cb, double *a_ns,
                    double *b_ns) {
  double a = 1e300, b = 1e300;
  fa(ca);
  fb(cb);
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < reps; i++) {
      double t0 = gpa_bench_now_ns();
      fa(ca);
      double t1 = gpa_bench_now_ns();
      fb(cb);
      double t2 = gpa_bench_now_ns();
      if (t1 - t0 < a) a = t1 - t0;
      if (t2 - t1 < b) b = t2 - t1;
    }
  *a_ns = a;
  *b_ns = b;
}

/* Runs fn twice back to back after a pause: the first run's time into
 * *cold, the second's into *warm (each the best so far). */
static void settled_twice(void (*fn)(void *), void *ctx, double *cold, double *warm) {
  const struct timespec settle = {0, 200L * 1000 * 1000};
  nanosleep(&settle, NULL);
  double t0 = gpa_bench_now_ns();
  fn(ctx);
  double t1 = gpa_bench_now_ns();
  fn(ctx);
  double t2 = gpa_bench_now_ns();
  if (t1 - t0 < *cold) *cold = t1 - t0;
  if (t2 - t1 < *warm) *warm = t2 - t1;
}

void gpa_bench_pair_settled(int reps, void (*fa)(void *), void *ca, void (*fb)(void *), void *cb, double *a_ns,
                            double *b_ns, double *a_cold_ns, double *b_cold_ns) {
  double a = 1e300, b = 1e300, ac = 1e300, bc = 1e300;
  fa(ca);
  fb(cb);
  for (int i = 0; i < reps; i++) {
    settled_twice(fa, ca, &ac, &a);
    settled_twice(fb, cb, &bc, &b);
  }
  *a_ns = a;
  *b_ns = b;
  if (a_cold_ns) *a_cold_ns = ac;
  if (b_cold_ns) *b_cold_ns = bc;
}
