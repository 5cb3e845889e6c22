/* Host-kernel bench helpers (linear, conv1d, attention benches): the host
 * backend's thread pool behind a gpa__par, so kernels run with the same
 * threads as inside the actor, and deterministic fills. */
#ifndef GPA_BENCH_NN_HOST_H
#define GPA_BENCH_NN_HOST_H
#include <stdint.h>

#include "kernels/host/host_par.h"

/* A pool of all online CPUs (the actor's default), created once. */
const gpa__par *gpa_bench_host_par(void);
/* Threads of that pool. */
int gpa_bench_host_threads(void);
/* Uniform values in [lo, hi). */
void gpa_bench_fill(float *p, int64_t n, float lo, float hi, uint64_t seed);
/* Best times of fa(ca) and fb(cb) over `rounds` rounds of `reps` runs each,
 * alternating the two (so load from other processes hits both alike),
 * after one warm-up run of each. */
void gpa_bench_pair(int rounds, int reps, void (*fa)(void *), void *ca, void (*fb)(void *), void *cb, double *a_ns,
                    double *b_ns);
/* Best times of fa (ours) and fb (the reference) where each rep is: pause
 * 200 ms, fa, fa, pause 200 ms, fb, fb. *a_ns / *b_ns: the best second run
 * of each pair (warm: the threads the first run woke are still awake, as
 * between the ops of a training step); *a_cold_ns / *b_cold_ns (nullable):
 * the best first run (every helper thread asleep, idle vCPUs halted).
 * The pauses: OpenBLAS's idle threads keep spinning for a while (up to
 * ~0.1 s) after a multi-threaded call, and in the run right after they took
 * a core from ours (linear_fwd measured at 0.49 that way on a quiet
 * machine). Inside the library no OpenBLAS thread runs (kernels/host/blas.h),
 * so ours must not pay for the reference's. Both sides get the same pause
 * and the same two runs: with one pause before ours only (fa, fb, pause),
 * ours always started with its worker asleep on a halted vCPU and the
 * reference right after ours, with both vCPUs awake; on a quiet VM that
 * start alone took conv1d_fwd from parity to 0.46-0.89 (docs/benchmarks.md,
 * "GEMM-bound host ops: cold and warm starts"). */
void gpa_bench_pair_settled(int reps, void (*fa)(void *), void *ca, void (*fb)(void *), void *cb, double *a_ns,
                            double *b_ns, double *a_cold_ns, double *b_cold_ns);
/* 1 when GPA_BENCH_FULL is set to a non-empty value other than "0". */
int gpa_bench_full(void);

#endif
