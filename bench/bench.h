/* gpa-bench: one executable, one JSON object per line.
 *
 * Each bench file defines functions of type gpa_bench_fn and lists them in
 * bench/main.c. A function measures our op and its reference in the same run
 * and reports both through gpa_bench_emit(); ratio = ref_ns / ns for equal
 * work, so > 1 means we are faster than the reference. */
#ifndef GPA_BENCH_H
#define GPA_BENCH_H
#include <stddef.h>
#include <stdint.h>

typedef struct gpa_bench_result {
  const char *name;    /* "layernorm_fwd" */
  const char *backend; /* "cpu", "sim", "cuda", or "none" for pure references */
  const char *shape;   /* "4096x1024" */
  const char *ref;     /* what ref_ns measured: "stream_triad", "cblas_sgemm", "ck_ring_pingpong" */
  double ns;           /* best time per run of ours */
  double ref_ns;       /* best time per run of the reference */
  double bytes;        /* bytes moved per run (0 if not memory-bound) -> gbps */
  double flops;        /* flops per run (0 if not compute-bound) -> gflops */
  double ref_bytes;    /* bytes/flops of the reference run, when its work differs; */
  double ref_flops;    /* 0 = same as ours */
  const char *extra;   /* optional extra JSON fields, already formatted: "\"p99_ns\":123" */
} gpa_bench_result;

typedef void (*gpa_bench_fn)(void);
typedef struct gpa_bench_entry {
  const char *name;
  gpa_bench_fn fn;
} gpa_bench_entry;

double gpa_bench_now_ns(void);
void gpa_bench_emit(const gpa_bench_result *r);
/* Best-of-`reps` wall time of fn(ctx), in ns, after one warm-up call. */
double gpa_bench_best_ns(int reps, void (*fn)(void *), void *ctx);
/* Repetitions from GPA_BENCH_REPS (default `dflt`); lets CI run a quick pass. */
int gpa_bench_reps(int dflt);
/* STREAM-style triad a[i] = b[i] + s*c[i] over n floats per array, best of reps:
 * the memory-bandwidth reference. Returns ns; bytes moved = 12*n. */
double gpa_bench_triad_ns(size_t n, int reps);

#endif
