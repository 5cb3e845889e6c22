/* The host backend: "device" memory is host memory, ops run on the actor
 * thread with a worker pool for parallel loops, and everything completes
 * before the call returns. It is the numerical reference for every backend. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "kernels/host/copy.h"
#include "kernels/host/pool.h"

/* The cuda backend's env starts with the same four members (cuda_internal.h). */
struct gpa_exec_env {
  gpa__pool *pool;
  void *scratch;
  uint64_t scratch_size;
  void *(*scratch_fn)(gpa_exec_env *env, uint64_t bytes); /* NULL: host scratch (below) */
};

typedef struct host_ctx {
  gpa_exec_env env;
} host_ctx;

static gpa_status host_init(gpa_actor *a, void **bctx, char *msg, size_t cap) {
  (void)msg;
  (void)cap;
  host_ctx *h = calloc(1, sizeof *h);
  if (!h) return GPA_ENOMEM;
  h->env.pool = gpa__pool_create(a->opts.threads);
  *bctx = h;
  return GPA_OK;
}

static void host_fini(void *bctx) {
  host_ctx *h = bctx;
  gpa__pool_destroy(h->env.pool);
  free(h->env.scratch);
  free(h);
}

static gpa_status host_alloc(void *bctx, uint64_t size, void **ptr) {
  (void)bctx;
  *ptr = NULL;
  /* Overcommit would grant what the machine cannot back; refuse it here. */
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && size > (uint64_t)pages * (uint64_t)page) return GPA_ENOMEM;
  /* Sizes are size classes (multiples of 64 from 256 up). */
  *ptr = aligned_alloc(64, (size + 63) & ~(uint64_t)63);
  return *ptr ? GPA_OK : GPA_ENOMEM;
}

static void host_free(void *bctx, void *ptr) {
  (void)bctx;
  free(ptr);
}

static gpa_status host_upload(void *bctx, void *bq, gpa__msg *m, void *dst, const void *src, uint64_t n) {
  (void)bq;
  (void)m;
  gpa__host_copy(&((host_ctx *)bctx)->env, dst, src, n);
  return GPA_OK;
}

static gpa_status host_readback(void *bctx, void *bq, gpa__msg *m, void *dst, const void *src, uint64_t n) {
  (void)bq;
  (void)m;
  gpa__host_copy(&((host_ctx *)bctx)->env, dst, src, n);
  return GPA_OK;
}

static gpa_op_impl_fn host_impl_of(const gpa__op *op) { return op->d.host; }

static gpa_exec_env *host_env(void *bctx) { return &((host_ctx *)bctx)->env; }

const gpa__backend gpa__backend_host = {
    .name = "cpu",
    .init = host_init,
    .fini = host_fini,
    .mem_alloc = host_alloc,
    .mem_free = host_free,
    .upload = host_upload,
    .readback = host_readback,
    .impl_of = host_impl_of,
    .env = host_env,
    .synchronous = true,
};

/* Backend services for op implementations. A NULL env runs inline, which is
 * what kernel unit tests use. */
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
