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
/* Like gpa_bench_pair (one round), with a 200 ms pause after each run of
 * fb, the reference: OpenBLAS's idle threads keep spinning for a while (up
 * to ~0.1 s) after a multi-threaded call, and in the run right after they
 * took a core from ours (linear_fwd measured at 0.49 that way on a quiet
 * machine). Inside the library no OpenBLAS thread runs (kernels/host/blas.h),
 * so ours must not pay for the reference's. */
void gpa_bench_pair_settled(int reps, void (*fa)(void *), void *ca, void (*fb)(void *), void *cb, double *a_ns,
                            double *b_ns);
/* 1 when GPA_BENCH_FULL is set to a non-empty value other than "0". */
int gpa_bench_full(void);

#endif
