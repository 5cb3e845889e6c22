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
/* 1 when GPA_BENCH_FULL is set to a non-empty value other than "0". */
int gpa_bench_full(void);

#endif
