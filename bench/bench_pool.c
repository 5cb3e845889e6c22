/* pool_wake: one parallel loop of 16 MiB of streaming work on the host pool,
 * started after the workers went to sleep (100 us idle, as between ops of a
 * training step), mean over the runs, against the same work on the calling
 * thread alone (ratio > 1: the pool pays for its wake-up). Means, not
 * bests: what the pool costs under load is in the slow runs (a caller left
 * waiting for a worker that has not been scheduled yet). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "bench_list.h"
#include "bench_nn_host.h"

enum { POOL_N = 1 << 22 };

static void work(int64_t b, int64_t e, void *ctx) {
  float *a = ctx;
  for (int64_t i = b; i < e; i++) a[i] = a[i] * 0.999f + 1.0f;
}

void gpa_bench_pool_wake(void) {
  float *a = calloc(POOL_N, sizeof *a);
  if (!a) return;
  const gpa__par *par = gpa_bench_host_par();
  int reps = gpa_bench_reps(100);
  double pool = 0, serial = 0;
  for (int r = 0; r < reps; r++) {
    struct timespec idle = {0, 100000};
    nanosleep(&idle, NULL);
    double t0 = gpa_bench_now_ns();
    gpa__pfor(par, POOL_N, 4096, work, a);
    double t1 = gpa_bench_now_ns();
    nanosleep(&idle, NULL);
    double t2 = gpa_bench_now_ns();
    gpa__pfor(NULL, POOL_N, 4096, work, a);
    double t3 = gpa_bench_now_ns();
    pool += t1 - t0;
    serial += t3 - t2;
  }
  char extra[64];
  snprintf(extra, sizeof extra, "\"threads\":%d,\"stat\":\"mean\"", gpa_bench_host_threads());
  gpa_bench_result res = {.name = "pool_wake", .backend = "cpu", .shape = "16MiB", .ref = "same_work_one_thread",
                          .ns = pool / reps, .ref_ns = serial / reps, .extra = extra};
  gpa_bench_emit(&res);
  free(a);
}
