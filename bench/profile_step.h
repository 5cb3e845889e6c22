/* A realistic training step (a two-layer MLP block with layernorm, forward,
 * backward and AdamW) used to measure what profiling costs. Shared by
 * gpa-bench and gpa-bench-noprof, a copy built with profiling compiled out. */
#ifndef GPA_BENCH_PROFILE_STEP_H
#define GPA_BENCH_PROFILE_STEP_H
#include <gpuactor.h>

typedef struct gpa_pstep gpa_pstep;
gpa_pstep *gpa_pstep_new(gpa_actor *a);
/* Best wall time of one step over `reps` runs of `steps` steps, in ns; each
 * run ends with gpa_actor_profile_flush, inside the timed span. */
double gpa_pstep_best_ns(gpa_pstep *p, int steps, int reps);
void gpa_pstep_free(gpa_pstep *p);

#endif
