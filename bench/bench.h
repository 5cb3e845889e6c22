/* gpa-bench: one executable, one JSON object per line.
 *
 * Each bench file defines functions of type gpa_bench_fn and lists them in
 * bench/main.c. A function measures our op and its reference in the same run
 * and reports both through gpa_bench_emit(); ratio = ref_ns / ns for equal
 * work, so > 1 means we are faster than the reference. */
#ifndef GPA_BENCH_H
#define GPA_BENCH_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "gpuactor.h"

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
/* Sorts v[0..n) ascending (for medians and quartiles). */
void gpa_bench_sort(double *v, size_t n);
void gpa_bench_emit(const gpa_bench_result *r);
/* Best-of-`reps` wall time of fn(ctx), in ns, after one warm-up call. */
double gpa_bench_best_ns(int reps, void (*fn)(void *), void *ctx);
/* Repetitions from GPA_BENCH_REPS (default `dflt`); lets CI run a quick pass. */
int gpa_bench_reps(int dflt);
/* An actor on a CUDA device (cuda or sim, *sim says which) for the cuda_*
 * benches; NULL (after a "skipped" line on stderr naming bench) on any
 * other backend. */
gpa_actor *gpa_bench_cuda_actor(const char *bench, int *sim);
/* bench_device.c, for the cuda_* benches: */
/* A device tensor of random, never-zero values (|x| in [0.25, 1)), uploaded
 * and synced; exits on a failed acquire. */
gpa_tensor gpa_bench_device_tensor(gpa_actor *a, gpa_queue *q, int dt, int rank, const int64_t *shape,
                                   uint64_t *seed);
/* The best device time of one call in batches of k, over reps batches after
 * a warm-up batch (then warmed(), if given); 0 and err on a failed batch. */
double gpa_bench_batch_ns(gpa_queue *q, const gpa_op_call *call, int k, int reps, void (*warmed)(void), char *err,
                          size_t n);
/* `python3 <the script named by env var env> args` (stderr dropped): its
 * stdout to read, then pclose; NULL when env is unset or popen fails. The
 * PyTorch references of the cuda_* benches run this way (bench/NAME_torch.py). */
FILE *gpa_bench_script(const char *env, const char *args);
/* PyTorch SDPA's TFLOP/s per backend for a shape: from the file named by
 * GPA_BENCH_SDPA_TORCH_CACHE when it has the shape, else from the script named
 * by GPA_BENCH_SDPA_TORCH (bench/sdpa_torch.py); 0 rows without either. */
typedef struct gpa_bench_torch_row {
  char backend[16];
  double fwd, bwd;
} gpa_bench_torch_row;
int gpa_bench_torch_sdpa(const char *shape_args, gpa_bench_torch_row *rows, int max);
/* The memory-bandwidth reference (bench/triad.c): a STREAM triad
 * a[i] = b[i] + s*c[i] on all online CPUs over n floats per array (bytes
 * moved = 12*n), with ordinary and with non-temporal stores; its time is the
 * faster form's. */
typedef struct gpa_bench_triad gpa_bench_triad;
gpa_bench_triad *gpa_bench_triad_open(size_t n); /* n rounded up to a multiple of 16384 */
void gpa_bench_triad_close(gpa_bench_triad *t);
size_t gpa_bench_triad_n(const gpa_bench_triad *t);
/* One run of each form; the best times are kept until the next reset. */
void gpa_bench_triad_once(gpa_bench_triad *t);
void gpa_bench_triad_reset(gpa_bench_triad *t);
/* Best time of the faster form; each form's best in *plain_ns / *nt_ns (nullable). */
double gpa_bench_triad_best_ns(const gpa_bench_triad *t, double *plain_ns, double *nt_ns);
/* Best time of fn(ctx) over reps runs, each followed by one triad run of
 * each form and one copy (so load from other processes hits ours and the reference
 * alike), after one warm-up of both; *ref_ns = the triad's best. */
double gpa_bench_vs_triad(gpa_bench_triad *t, int reps, void (*fn)(void *), void *ctx, double *ref_ns);
/* The last gpa_bench_vs_triad's rounds, paired: each round's triad time
 * (the faster form) over the op's time in that round, its quartiles and
 * median (*q1 <= *med <= *q3). Pairs are robust where bests are not: a
 * shared machine's bandwidth drifts by 10-20% within seconds, and a best
 * of either side may come from a window the other never saw. Returns the
 * number of rounds, 0 if none. */
int gpa_bench_triad_pairs(const gpa_bench_triad *t, double *q1, double *med, double *q3);
/* Each triad run is followed by a non-temporal copy a[i] = b[i] over the
 * same arrays (8 bytes per element): the memory pattern of an op with one
 * input and one output (gelu_fwd, layernorm_fwd), whose GB/s the triad's
 * two reads per write do not bound on every machine (on the reference VM
 * the copy ran at 0.78-0.99 of the triad). Its best time since the reset,
 * and its paired quartiles as gpa_bench_triad_pairs's (copy time over the
 * op's per round). */
double gpa_bench_triad_copy_ns(const gpa_bench_triad *t);
int gpa_bench_triad_copy_pairs(const gpa_bench_triad *t, double *q1, double *med, double *q3);
/* Best-of-reps triad time on fresh arrays (open, run, close). */
double gpa_bench_triad_ns(size_t n, int reps);

#endif
