/* A small thread pool for host parallel loops.
 *
 * The calling thread (the actor) takes part in every loop. Workers spin
 * briefly after a loop, then sleep on a futex, so an idle actor burns no CPU;
 * the caller, once its own chunks are done, spins briefly for the workers'
 * and then sleeps until the last one ends (a worker descheduled from a
 * shared core then gets the caller's idle core).
 * Chunks are handed out dynamically (the caller waits for the chunks, not
 * for a worker that has not woken yet); which thread runs a chunk may vary, so
 * an op that reduces must combine per-chunk partials in chunk order to stay
 * deterministic. A loop started from inside a loop runs inline. */
#ifndef GPA_KERNELS_HOST_POOL_H
#define GPA_KERNELS_HOST_POOL_H
#include <stdint.h>

#include "gpuactor/op.h"
#include "kernels/host/host_par.h"

typedef struct gpa__pool gpa__pool;

gpa__pool *gpa__pool_create(uint32_t threads); /* threads includes the caller */
void gpa__pool_destroy(gpa__pool *p);
/* NULL pool: runs inline. */
void gpa__pool_for(gpa__pool *p, int64_t n, int64_t grain, gpa_range_fn fn, void *ctx);
uint32_t gpa__pool_threads(const gpa__pool *p);
/* The pool as the host kernels' parallel-loop hook (benches, kernel tests). */
gpa__par gpa__pool_par(gpa__pool *p);

#endif
