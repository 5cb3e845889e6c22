/* gpa-sim driver: the memory API (allocation, pools, memset, copies).
 *
 * Stream-ordered allocation: cuMemAllocAsync allocates at once (its pointer
 * is valid for the calls that follow, as on a GPU) and cuMemFreeAsync frees
 * when its stream reaches it, into the quarantine (memory.cpp): memory is
 * never handed out again early, and work of another stream that still uses
 * a block freed that way reads 0xDD (copies report a use after free), where
 * a GPU's pool would give the block to the next allocation. The pool itself
 * only records its release threshold. gpa_sim_mempools(0) makes a device
 * without memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 0, the
 * pool calls CUDA_ERROR_NOT_SUPPORTED) for the backend's fallback.
 * cuMemFree and cuMemFreeHost synchronize the device, as on a GPU, and are
 * counted (gpa_sim_device_syncs).
 *
 * Synchronous calls first wait for the NULL stream and every blocking stream
 * (created without CU_STREAM_NON_BLOCKING), then act on the calling thread. Asynchronous calls check their arguments when called
 * (bad pointers: CUDA_ERROR_INVALID_VALUE, as the driver does) and check the
 * device range again when the stream runs them, where a failure (e.g. the
 * memory was freed in between) becomes a sticky CUDA_ERROR_ILLEGAL_ADDRESS.
 * An async copy whose host side is pageable memory is refused: the real
 * driver silently makes it synchronous, which hides missing pinned staging
 * (GPA_SIM_ALLOW_PAGEABLE_ASYNC=1 allows it). Async copies read host memory
 * when the stream runs them, not when queued: stricter than a GPU. */
#include <string.h>
#include "internal.h"

namespace {
int g_pool_dummy;
CUmemoryPool g_pool = (CUmemoryPool)&g_pool_dummy;
std::atomic<cuuint64_t> g_pool_threshold{0};
std::atomic<bool> g_pools_off{false};
std::atomic<size_t> g_device_syncs{0};

CUresult no_pools(const char *api) {
  return gpa_sim__failf(CUDA_ERROR_NOT_SUPPORTED, "%s: this device has no memory pools (gpa_sim_mempools(0))", api);
}

CUresult check_dev(const char *api, CUdeviceptr p, size_t n) {
  std::string why;
  if (n == 0) return CUDA_SUCCESS;
  if (gpa_sim__mem_check(p, n, &why) == CUDA_SUCCESS) return CUDA_SUCCESS;
  return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "%s: %s", api, why.c_str());
}

CUresult check_host(const char *api, const void *h, size_t n, bool async) {
  if (!h && n) return CUDA_ERROR_INVALID_VALUE;
  if (async && n && !gpa_sim__opts().pageable_async_ok && !gpa_sim__host_is_pinned(h, n))
    return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE,
                          "%s: host range [%p, +%zu) is pageable memory; async copies need pinned memory "
                          "(cuMemAllocHost/cuMemHostRegister)", api, h, n);
  return CUDA_SUCCESS;
}

/* Re-checks device ranges when the stream runs the operation. */
CUresult recheck(const char *api, CUdeviceptr p, size_t n, std::string *why) {
  if (n == 0 || gpa_sim__mem_check(p, n, why) == CUDA_SUCCESS) return CUDA_SUCCESS;
  *why = std::string(api) + ": " + *why;
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* Runs op now (sync: after the NULL stream drained) or queues it on h. */
CUresult submit(CUctx_st *ctx, CUstream h, bool async, std::function<CUresult(std::string *)> op) {
  CUstream_st *s;
  CUresult r = gpa_sim__stream_get(ctx, async ? h : nullptr, &s);
  if (r) return r;
  if (!async) {
    gpa_sim__ctx_sync(ctx, true); /* the NULL stream and every blocking stream, as the legacy stream would */
    std::string why;
    r = op(&why);
    if (r) gpa_sim__ctx_set_sticky(ctx, r, why);
    return r ? r : (CUresult)ctx->sticky.load();
  }
  gpa_sim__stream_push(s, [ctx, op] {
    std::string why;
    CUresult r2 = op(&why);
    if (r2) gpa_sim__ctx_set_sticky(ctx, r2, why);
    return r2;
  });
  return CUDA_SUCCESS;
}

CUresult copy(const char *api, CUdeviceptr dst, const void *hsrc, CUdeviceptr src, void *hdst, size_t n, CUstream h,
              bool async) {
  GPA_SIM_ENTER(ctx);
  CUresult r;
  if (hsrc) r = check_host(api, hsrc, n, async);
  else r = check_dev(api, src, n);
  if (r) return r;
  if (hdst) r = check_host(api, hdst, n, async);
  else r = check_dev(api, dst, n);
  if (r) return r;
  return submit(ctx, h, async, [=](std::string *why) {
    CUresult r2 = hsrc ? CUDA_SUCCESS : recheck(api, src, n, why);
    if (!r2 && !hdst) r2 = recheck(api, dst, n, why);
    if (r2) return r2;
    void *d = hdst ? hdst : (void *)dst;
    const void *s = hsrc ? hsrc : (const void *)src;
    if (n) memmove(d, s, n);
    return CUDA_SUCCESS;
  });
}

CUresult memset_n(const char *api, CUdeviceptr p, unsigned v, unsigned width, size_t count, CUstream h, bool async) {
  GPA_SIM_ENTER(ctx);
  size_t n = count * width;
  if (width > 1 && (p % width)) return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "%s: misaligned pointer", api);
  CUresult r = check_dev(api, p, n);
  if (r) return r;
  return submit(ctx, h, async, [=](std::string *why) {
    CUresult r2 = recheck(api, p, n, why);
    if (r2) return r2;
    if (width == 1) memset((void *)p, (int)(v & 0xff), count);
    else if (width == 2)
      for (size_t i = 0; i < count; i++) ((uint16_t *)p)[i] = (uint16_t)v;
    else
      for (size_t i = 0; i < count; i++) ((uint32_t *)p)[i] = v;
    return CUDA_SUCCESS;
  });
}
} // namespace

void gpa_sim__device_sync(CUctx_st *ctx) {
  g_device_syncs++;
  gpa_sim__ctx_sync(ctx, false);
}
bool gpa_sim__mempools_on(void) { return !g_pools_off.load(); }
GPA_SIM_API void gpa_sim_mempools(int on) { g_pools_off = !on; }
GPA_SIM_API size_t gpa_sim_device_syncs(void) { return g_device_syncs.load(); }

GPA_SIM_API CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  return gpa_sim__guard("cuMemAlloc", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    return gpa_sim__mem_alloc(p, n, "cuMemAlloc");
  });
}

GPA_SIM_API CUresult cuMemFree(CUdeviceptr p) {
  return gpa_sim__guard("cuMemFree", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (!p) return CUDA_SUCCESS;
    gpa_sim__device_sync(ctx); /* cuMemFree synchronizes, as on a GPU */
    CUresult r = gpa_sim__mem_free(p, "cuMemFree");
    if (r == CUDA_ERROR_ILLEGAL_ADDRESS) gpa_sim__ctx_set_sticky(ctx, r, "guard zone damaged (see above)");
    return r;
  });
}

GPA_SIM_API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream h) {
  return gpa_sim__guard("cuMemAllocAsync", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (g_pools_off) return no_pools("cuMemAllocAsync");
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    r = gpa_sim__mem_alloc(p, n, "cuMemAllocAsync");
    if (!r) gpa_sim__stream_mem_node(s); /* captured: an allocation node (allocated at once here) */
    return r;
  });
}

GPA_SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream h) {
  return gpa_sim__guard("cuMemAllocFromPoolAsync", [&]() -> CUresult {
    if (pool != g_pool) return CUDA_ERROR_INVALID_VALUE;
    return cuMemAllocAsync(p, n, h);
  });
}

GPA_SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream h) {
  return gpa_sim__guard("cuMemFreeAsync", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (g_pools_off) return no_pools("cuMemFreeAsync");
    std::string why;
    if (!p) return CUDA_SUCCESS;
    if (gpa_sim__mem_check(p, 1, &why) != CUDA_SUCCESS)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuMemFreeAsync: %s", why.c_str());
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    gpa_sim__stream_mem_node(s); /* captured: a free node */
    return submit(ctx, h, true, [p](std::string *w) {
      CUresult r = gpa_sim__mem_free(p, "cuMemFreeAsync");
      if (r) *w = "cuMemFreeAsync failed (see above)";
      return r;
    });
  });
}

GPA_SIM_API CUresult cuMemGetInfo(size_t *free_b, size_t *total) {
  return gpa_sim__guard("cuMemGetInfo", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!free_b || !total) return CUDA_ERROR_INVALID_VALUE;
    *total = 80ull << 30;
    *free_b = *total; /* host memory backs the device: not accounted per byte */
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
  return gpa_sim__guard("cuDeviceGetDefaultMemPool", [&]() -> CUresult {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= gpa_sim__opts().devices) return CUDA_ERROR_INVALID_DEVICE; /* one pool for all: one memory space */
    if (g_pools_off) return no_pools("cuDeviceGetDefaultMemPool");
    *pool = g_pool;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) { return cuDeviceGetDefaultMemPool(pool, d); }

GPA_SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int a = (int)attr;
  return gpa_sim__guard("cuMemPoolSetAttribute", [&]() -> CUresult {
    if (pool != g_pool || !v) return CUDA_ERROR_INVALID_VALUE;
    if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) g_pool_threshold = *(cuuint64_t *)v;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *v) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int a = (int)attr;
  return gpa_sim__guard("cuMemPoolGetAttribute", [&]() -> CUresult {
    if (pool != g_pool || !v) return CUDA_ERROR_INVALID_VALUE;
    if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) *(cuuint64_t *)v = g_pool_threshold;
    else if (a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
             a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
      *(int *)v = 1;
    else *(cuuint64_t *)v = 0;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  return gpa_sim__guard("cuMemPoolTrimTo", [&]() -> CUresult {
    (void)keep;
    return pool == g_pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

GPA_SIM_API CUresult cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n) {
  return gpa_sim__guard("cuMemcpyHtoD", [&]() -> CUresult {
    return copy("cuMemcpyHtoD", d, h, 0, nullptr, n, nullptr, false);
  });
}
GPA_SIM_API CUresult cuMemcpyDtoH(void *h, CUdeviceptr s, size_t n) {
  return gpa_sim__guard("cuMemcpyDtoH", [&]() -> CUresult {
    return copy("cuMemcpyDtoH", 0, nullptr, s, h, n, nullptr, false);
  });
}
GPA_SIM_API CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  return gpa_sim__guard("cuMemcpyDtoD", [&]() -> CUresult {
    return copy("cuMemcpyDtoD", d, nullptr, s, nullptr, n, nullptr, false);
  });
}
GPA_SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream st) {
  return gpa_sim__guard("cuMemcpyHtoDAsync", [&]() -> CUresult {
    return copy("cuMemcpyHtoDAsync", d, h, 0, nullptr, n, st, true);
  });
}
GPA_SIM_API CUresult cuMemcpyDtoHAsync(void *h, CUdeviceptr s, size_t n, CUstream st) {
  return gpa_sim__guard("cuMemcpyDtoHAsync", [&]() -> CUresult {
    return copy("cuMemcpyDtoHAsync", 0, nullptr, s, h, n, st, true);
  });
}
GPA_SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  return gpa_sim__guard("cuMemcpyDtoDAsync", [&]() -> CUresult {
    return copy("cuMemcpyDtoDAsync", d, nullptr, s, nullptr, n, st, true);
  });
}
GPA_SIM_API CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
  return gpa_sim__guard("cuMemsetD8", [&]() -> CUresult {
    return memset_n("cuMemsetD8", p, v, 1, n, nullptr, false);
  });
}
GPA_SIM_API CUresult cuMemsetD16(CUdeviceptr p, unsigned short v, size_t n) {
  return gpa_sim__guard("cuMemsetD16", [&]() -> CUresult {
    return memset_n("cuMemsetD16", p, v, 2, n, nullptr, false);
  });
}
GPA_SIM_API CUresult cuMemsetD32(CUdeviceptr p, unsigned int v, size_t n) {
  return gpa_sim__guard("cuMemsetD32", [&]() -> CUresult {
    return memset_n("cuMemsetD32", p, v, 4, n, nullptr, false);
  });
}
GPA_SIM_API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  return gpa_sim__guard("cuMemsetD8Async", [&]() -> CUresult {
    return memset_n("cuMemsetD8Async", p, v, 1, n, s, true);
  });
}
GPA_SIM_API CUresult cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t n, CUstream s) {
  return gpa_sim__guard("cuMemsetD16Async", [&]() -> CUresult {
    return memset_n("cuMemsetD16Async", p, v, 2, n, s, true);
  });
}
GPA_SIM_API CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n, CUstream s) {
  return gpa_sim__guard("cuMemsetD32Async", [&]() -> CUresult {
    return memset_n("cuMemsetD32Async", p, v, 4, n, s, true);
  });
}
