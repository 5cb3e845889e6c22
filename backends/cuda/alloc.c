/* Device memory of the CUDA backend: the buffer cache's blocks and the
 * queues' scratch, stream ordered.
 *
 * cuMemFree synchronizes the whole device, every stream of the process: one
 * actor's eviction waited for every other actor's work, and the actor
 * thread with it. So where the device has memory pools, memory comes from
 * the device's default pool through cuMemAllocAsync / cuMemFreeAsync, which
 * never synchronize. The pool's release threshold is raised to the maximum
 * so that freed memory stays in the pool: at the default (0) the driver
 * takes it back at every synchronization and the next allocation maps it
 * again. Other users of the default pool in the process see the raised
 * threshold too; the buffer cache's budget and the trim below bound what
 * stays.
 *
 * Buffers: any queue may use one, and the buffer cache allocates when a
 * buffer is acquired, with no queue in sight. They are allocated on the
 * actor's allocation stream, which is then synchronized (it holds only
 * allocations and frees: the wait is for nothing else), so the memory is
 * ready for every stream. A buffer is freed only once no message names it
 * (pins): the work of every stream that used it has completed, so its free
 * needs no event from those streams, and goes on the allocation stream.
 * Scratch: each queue's own block, used only by ops of its stream: freed and
 * allocated on that stream, in its order, without waiting for the ops that
 * may still read the old block (the pool reuses it only after them).
 *
 * Out of memory: the allocation stream's frees are waited for and the pool's
 * unused memory goes back to the driver (cuMemPoolTrimTo) before the caller
 * evicts its cached buffers and retries once (bufcache.c, scratch_get).
 *
 * Without pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 0, a driver
 * without the entry points, or a pool call failing at init): cuMemAlloc and
 * cuMemFree, correct, and each free synchronizes the device.
 *
 * The pool calls are optional driver entry points, so they are resolved
 * here rather than in cu.h's table, whose every name is required. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "backends/cuda/alloc.h"

struct gpa__cu_mem {
  CUmemoryPool pool;
  CUstream s; /* the allocation stream */
  __typeof__(cuMemAllocAsync) *alloc_async;
  __typeof__(cuMemFreeAsync) *free_async;
  __typeof__(cuDeviceGetDefaultMemPool) *default_pool;
  __typeof__(cuMemPoolSetAttribute) *set_attr;
  __typeof__(cuMemPoolTrimTo) *trim_to;
  __typeof__(cuStreamIsCapturing) *is_capturing;
};

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static bool resolve(gpa__cu_ctx *C, struct gpa__cu_mem *M) {
  get_proc_fn gp = (get_proc_fn)dlsym(C->cu.lib, "cuGetProcAddress_v2");
  if (!gp) return false;
  CUdriverProcAddressQueryResult q;
  if (gp("cuStreamIsCapturing", (void **)&M->is_capturing, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q))
    M->is_capturing = NULL; /* optional: graphs are the driver's newer half */
#define GPA__MEM_FN(field, name) \
  (gp(#name, (void **)&M->field, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS && M->field)
  return GPA__MEM_FN(alloc_async, cuMemAllocAsync) && GPA__MEM_FN(free_async, cuMemFreeAsync) &&
         GPA__MEM_FN(default_pool, cuDeviceGetDefaultMemPool) && GPA__MEM_FN(set_attr, cuMemPoolSetAttribute) &&
         GPA__MEM_FN(trim_to, cuMemPoolTrimTo);
#undef GPA__MEM_FN
}

void gpa__cu_mem_init(gpa__cu_ctx *C) {
  int pools = 0;
  C->cu.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, C->dev);
  struct gpa__cu_mem *M = pools ? calloc(1, sizeof *M) : NULL;
  cuuint64_t keep = UINT64_MAX;
  const char *why = !pools ? "the device has no memory pools" : !M ? "out of host memory" : NULL;
  if (!why && !resolve(C, M)) why = "the driver lacks the pool entry points";
  if (!why && M->default_pool(&M->pool, C->dev) != CUDA_SUCCESS) why = "no default memory pool";
  if (!why && M->set_attr(M->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) != CUDA_SUCCESS)
    why = "the pool's release threshold cannot be set";
  if (!why && C->cu.cuStreamCreate(&M->s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) why = "no allocation stream";
  if (why) {
    gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: cuMemAlloc/cuMemFree for device memory: %s", why);
    free(M);
    M = NULL;
  }
  C->mem = M;
}

void gpa__cu_mem_fini(gpa__cu_ctx *C, bool reset) {
  struct gpa__cu_mem *M = C->mem;
  if (!M) return;
  if (!reset) {
    C->cu.cuStreamSynchronize(M->s); /* the buffers' frees */
    C->cu.cuStreamDestroy(M->s);
    M->trim_to(M->pool, 0);
  }
  free(M);
  C->mem = NULL;
}

bool gpa__cu_mem_capturing(gpa__cu_ctx *C, CUstream s) {
  struct gpa__cu_mem *M = C->mem;
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  return M && M->is_capturing && M->is_capturing(s, &cs) == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

void gpa__cu_mem_trim(gpa__cu_ctx *C) {
  struct gpa__cu_mem *M = C->mem;
  if (!M) return;
  C->cu.cuStreamSynchronize(M->s); /* TrimTo gives back only memory whose free has run */
  M->trim_to(M->pool, 0);
}

CUresult gpa__cu_mem_alloc(gpa__cu_ctx *C, CUstream s, uint64_t size, CUdeviceptr *p) {
  struct gpa__cu_mem *M = C->mem;
  *p = 0;
  if (!M) return C->cu.cuMemAlloc(p, size);
  CUresult r = M->alloc_async(p, size, s ? s : M->s);
  if (r == CUDA_SUCCESS && !s) r = C->cu.cuStreamSynchronize(M->s);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) gpa__cu_mem_trim(C);
  if (r != CUDA_SUCCESS && *p) { /* the stream failed after the allocation */
    M->free_async(*p, M->s);
    *p = 0;
  }
  return r;
}

void gpa__cu_mem_free(gpa__cu_ctx *C, CUstream s, CUdeviceptr p) {
  struct gpa__cu_mem *M = C->mem;
  if (!p) return;
  if (!M) C->cu.cuMemFree(p); /* synchronizes the device: s's work included */
  else M->free_async(p, s ? s : M->s);
}
