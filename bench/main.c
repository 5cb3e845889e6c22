#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_list.h"
#include "actor/internal.h"

double gpa_bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

void gpa_bench_sort(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

int gpa_bench_reps(int dflt) {
  const char *s = getenv("GPA_BENCH_REPS");
  int v = s ? atoi(s) : 0;
  return v > 0 ? v : dflt;
}

gpa_actor *gpa_bench_cuda_actor(const char *bench, int *sim) {
  gpa_actor *a;
  if (gpa_actor_create(NULL, &a) != GPA_OK) return NULL;
  const char *be = gpa_actor_backend(a);
  *sim = !strcmp(be, "sim");
  if (*sim || !strcmp(be, "cuda")) return a;
  fprintf(stderr, "gpa-bench %s: skipped on backend %s (GPA_DEVICE=cuda or sim)\n", bench, be);
  gpa_actor_destroy(a);
  return NULL;
}

double gpa_bench_best_ns(int reps, void (*fn)(void *), void *ctx) {
  fn(ctx);
  double best = 1e300;
  for (int i = 0; i < reps; i++) {
    double t0 = gpa_bench_now_ns();
    fn(ctx);
    double t = gpa_bench_now_ns() - t0;
    if (t < best) best = t;
  }
  return best;
}

void gpa_bench_emit(const gpa_bench_result *r) {
  double rb = r->ref_bytes > 0 ? r->ref_bytes : r->bytes;
  double rf = r->ref_flops > 0 ? r->ref_flops : r->flops;
  double ratio = 0;
  printf("{\"name\":\"%s\",\"backend\":\"%s\",\"shape\":\"%s\",\"ns\":%.1f", r->name,
         r->backend ? r->backend : "none", r->shape ? r->shape : "", r->ns);
  if (r->bytes > 0) {
    printf(",\"gbps\":%.3f", r->bytes / r->ns);
    if (r->ref_ns > 0) ratio = (r->bytes / r->ns) / (rb / r->ref_ns);
  }
  if (r->flops > 0) {
    printf(",\"gflops\":%.3f", r->flops / r->ns);
    if (r->ref_ns > 0) ratio = (r->flops / r->ns) / (rf / r->ref_ns);
  }
  if (r->bytes <= 0 && r->flops <= 0 && r->ref_ns > 0 && r->ns > 0) ratio = r->ref_ns / r->ns;
  printf(",\"ref\":\"%s\",\"ref_ns\":%.1f,\"ratio\":%.4f", r->ref ? r->ref : "", r->ref_ns, ratio);
  if (r->extra && r->extra[0]) printf(",%s", r->extra);
  printf("}\n");
  fflush(stdout);
}

int main(int argc, char **argv) {
  const char *filter = argc > 1 ? argv[1] : NULL;
  if (filter && (!strcmp(filter, "-h") || !strcmp(filter, "--help"))) {
    printf("usage: gpa-bench [name-filter...] (a benchmark runs when its name contains one of them)\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof gpa_benches / sizeof gpa_benches[0]; i++)
      printf("  %s\n", gpa_benches[i].name);
    return 0;
  }
  /* The process-wide options (GPA_BLAS_CORETYPE, GPA_HOST_NT, ...) apply to
   * the kernels the benches call directly, as they do in an actor. */
  gpa__options_process();
  int ran = 0;
  for (size_t i = 0; i < sizeof gpa_benches / sizeof gpa_benches[0]; i++) {
    int hit = !filter;
    for (int k = 1; k < argc && !hit; k++) hit = strstr(gpa_benches[i].name, argv[k]) != NULL;
    if (!hit) continue;
    gpa_benches[i].fn();
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "gpa-bench: no benchmark matches '%s' (try --help)\n", filter ? filter : "");
    return 1;
  }
  return 0;
}
