/* The services of include/gpuactor/op.h that implementations reach through
 * gpa_op_exec.env, for every backend (struct gpa_exec_env: backend.h). A
 * NULL env runs inline, which is what kernel unit tests use. */
#include <stdlib.h>

#include "backends/backend.h"
#include "kernels/host/pool.h"

void gpa_exec_parallel_for(gpa_exec_env *env, int64_t n, int64_t grain, gpa_range_fn fn, void *ctx) {
  gpa__pool_for(env ? env->pool : NULL, n, grain, fn, ctx);
}

uint32_t gpa_exec_threads(const gpa_exec_env *env) { return env ? gpa__pool_threads(env->pool) : 1; }

void *gpa_exec_scratch(gpa_exec_env *env, uint64_t bytes) {
  static _Thread_local void *inline_scratch; /* env NULL: unit tests, one per thread */
  static _Thread_local uint64_t inline_size;
  if (env && env->scratch_fn) return env->scratch_fn(env, bytes); /* device scratch */
  void **p = env ? &env->scratch : &inline_scratch;
  uint64_t *sz = env ? &env->scratch_size : &inline_size;
  if (bytes <= *sz) return *p;
  free(*p);
  *p = aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
  *sz = *p ? bytes : 0;
  return *p;
}

void gpa__exec_env_fini(gpa_exec_env *env) {
  free(env->scratch);
  env->scratch = NULL;
  env->scratch_size = 0;
}
