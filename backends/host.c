/* The host backend: "device" memory is host memory, ops run on the actor
 * thread with a worker pool for parallel loops, and everything completes
 * before the call returns. It is the numerical reference for every backend. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "kernels/host/copy.h"
#include "kernels/host/pool.h"

typedef struct host_ctx {
  gpa_exec_env env;
} host_ctx;

static gpa_status host_init(const gpa__be_host *host, void **bctx, char *msg, size_t cap) {
  (void)msg;
  (void)cap;
  host_ctx *h = calloc(1, sizeof *h);
  if (!h) return GPA_ENOMEM;
  h->env.pool = gpa__pool_create(host->threads);
  *bctx = h;
  return GPA_OK;
}

static void host_fini(void *bctx) {
  host_ctx *h = bctx;
  gpa__pool_destroy(h->env.pool);
  gpa__exec_env_fini(&h->env);
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

static gpa_status host_upload(void *bctx, void *bq, const gpa__work *w, void *dst, const void *src, uint64_t n) {
  (void)bq;
  (void)w;
  gpa__host_copy(&((host_ctx *)bctx)->env, dst, src, n);
  return GPA_OK;
}

static gpa_status host_readback(void *bctx, void *bq, const gpa__work *w, void *dst, const void *src, uint64_t n) {
  (void)bq;
  (void)w;
  gpa__host_copy(&((host_ctx *)bctx)->env, dst, src, n);
  return GPA_OK;
}

static gpa_op_impl_fn host_impl_of(const gpa_op_desc *d) { return d->host; }

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
