/* gpa-sim driver: initialization, the simulated devices (H100-class parts),
 * the primary context and error strings.
 *
 * GPA_SIM_DEVICES devices (default 1, at most 8), ordinals 0..N-1, so that
 * one process can run an actor per device and NCCL ranks between them
 * (sim/nccl). They share one primary context: one memory space, one set of
 * streams and one sticky state (a fault on one device poisons all of them).
 * What a test of several devices needs is distinct ordinals and concurrent
 * streams, not isolation; separate contexts would need per-context memory,
 * event and module tables. The current context is per OS thread. A sticky error (a fault in a kernel) poisons the
 * context: every later call that needs a context returns it until the
 * primary context is reset or released to zero references, as on a GPU. */
#include <stdio.h>
#include <string.h>
#include "internal.h"

namespace {
std::atomic<bool> g_init{false};
CUctx_st g_primary;
std::mutex g_primary_mu;
std::atomic<size_t> g_resets{0}; /* cuDevicePrimaryCtxReset calls, for tests */
thread_local CUctx_st *tl_ctx __attribute__((tls_model("initial-exec")));

const size_t TOTAL_MEM = 80ull << 30;

CUresult check_dev(CUdevice d) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  return d >= 0 && d < gpa_sim__opts().devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Throws when the NULL stream's thread cannot start; the context is then
 * left as it was (not alive). */
void ctx_create(CUctx_st *c) {
  c->sticky = 0;
  gpa_sim__stream_create(c, CU_STREAM_NON_BLOCKING, &c->null_stream);
  c->alive = true;
}

/* Waits for and destroys every stream, frees every allocation. A stream that
 * another thread's context synchronization still holds is freed by that
 * thread, but its work has finished before the memory goes. */
void ctx_destroy(CUctx_st *c) {
  if (!c->alive) return;
  std::set<CUstream_st *> streams;
  {
    std::lock_guard<std::mutex> lk(c->mu);
    streams.swap(c->streams);
  }
  for (CUstream_st *s : streams) {
    gpa_sim__stream_wait(s);
    gpa_sim__stream_destroy(s);
  }
  c->null_stream = nullptr;
  gpa_sim__mem_release_all();
  gpa_sim__events_release_all();
  gpa_sim__modules_release_all();
  c->alive = false;
  c->sticky = 0;
}
} // namespace

CUresult gpa_sim__ctx_enter(CUctx_st **out) {
  if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st *c = tl_ctx;
  if (!c) return gpa_sim__fail(CUDA_ERROR_INVALID_CONTEXT, "call without a current context (cuCtxSetCurrent)");
  if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  int st = c->sticky.load();
  if (st) return (CUresult)st;
  *out = c;
  return CUDA_SUCCESS;
}

/* The message is stored before the error becomes visible: a caller that
 * sees the sticky error (a cuCtxSynchronize on another thread) must find
 * its text. Setting the two the other way round left a window in which the
 * message was still empty (sim_check_deadlock failed that way under TSan in
 * CI). The first error wins, as before. */
void gpa_sim__ctx_set_sticky(CUctx_st *ctx, CUresult r, const std::string &msg) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  if (ctx->sticky.load()) return;
  gpa_sim__fail(r, msg);
  ctx->sticky.store((int)r);
}

GPA_SIM_API CUresult cuInit(unsigned int flags) {
  return gpa_sim__guard("cuInit", [&]() -> CUresult {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    gpa_sim__opts();
    g_init = true;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDriverGetVersion(int *v) {
  return gpa_sim__guard("cuDriverGetVersion", [&]() -> CUresult {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGetCount(int *n) {
  return gpa_sim__guard("cuDeviceGetCount", [&]() -> CUresult {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = gpa_sim__opts().devices;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  return gpa_sim__guard("cuDeviceGet", [&]() -> CUresult {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= gpa_sim__opts().devices) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  return gpa_sim__guard("cuDeviceGetName", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", "NVIDIA H100 80GB HBM3 (gpa-sim)");
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
  return gpa_sim__guard("cuDeviceTotalMem", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = TOTAL_MEM;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice d) {
  return gpa_sim__guard("cuDeviceGetUuid", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, "gpa-sim-device-0", 16);
    uuid->bytes[15] = (char)('0' + d);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute attr, CUdevice d) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int a = (int)attr;
  return gpa_sim__guard("cuDeviceGetAttribute", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    if (!v || (int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
      case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 * 1024; break;
      case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 228 * 1024; break;
      case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = 1024; break;
      case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 64 * 1024; break;
      case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
      case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *v = 2147483647; break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
      case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
      case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1755000; break;
      case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
      case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
      case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 * 1024 * 1024; break;
      case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *v = 512; break;
      case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
      case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
      case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
      case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
      case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = 3; break;
      case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
      case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *v = 1; break;
      case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = gpa_sim__mempools_on(); break;
      default: *v = 0; break; /* known to the header, not modelled: reported as absent */
    }
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
  return gpa_sim__guard("cuDevicePrimaryCtxRetain", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lk(g_primary_mu);
    if (g_primary.refs == 0 || !g_primary.alive) ctx_create(&g_primary);
    g_primary.refs++;
    *pctx = &g_primary;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  return gpa_sim__guard("cuDevicePrimaryCtxRelease", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    std::lock_guard<std::mutex> lk(g_primary_mu);
    if (g_primary.refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--g_primary.refs == 0) ctx_destroy(&g_primary);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice d) {
  return gpa_sim__guard("cuDevicePrimaryCtxReset", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    std::lock_guard<std::mutex> lk(g_primary_mu);
    ctx_destroy(&g_primary);
    if (g_primary.refs > 0) ctx_create(&g_primary);
    g_resets.fetch_add(1);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API size_t gpa_sim_primary_resets(void) { return g_resets.load(); }

GPA_SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
  return gpa_sim__guard("cuDevicePrimaryCtxGetState", [&]() -> CUresult {
    CUresult r = check_dev(d);
    if (r) return r;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    *active = g_primary.alive ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice d, unsigned int flags) {
  return gpa_sim__guard("cuDevicePrimaryCtxSetFlags", [&]() -> CUresult {
    (void)flags;
    return check_dev(d);
  });
}

GPA_SIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  return gpa_sim__guard("cuCtxSetCurrent", [&]() -> CUresult {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && ctx != &g_primary) return CUDA_ERROR_INVALID_CONTEXT;
    tl_ctx = ctx;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx) {
  return gpa_sim__guard("cuCtxGetCurrent", [&]() -> CUresult {
    if (!g_init) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = tl_ctx;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuCtxGetDevice(CUdevice *d) {
  return gpa_sim__guard("cuCtxGetDevice", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuCtxSynchronize(void) {
  return gpa_sim__guard("cuCtxSynchronize", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    gpa_sim__device_sync(ctx);
    return (CUresult)ctx->sticky.load();
  });
}

/* From CUDA 13.0, what cuGetProcAddress gives for the name cuCtxSynchronize
 * (procaddress.cpp): the context is an argument. A caller that resolves the
 * name at 13.0 and calls the (void) form passes whatever its argument
 * register holds; a real driver answered CUDA_ERROR_CONTEXT_IS_DESTROYED to
 * that, and so does this one for anything but the live primary context. */
GPA_SIM_API CUresult cuCtxSynchronize_v2(CUcontext c) {
  return gpa_sim__guard("cuCtxSynchronize_v2", [&]() -> CUresult {
    {
      std::lock_guard<std::mutex> lk(g_primary_mu);
      if (c != &g_primary || !g_primary.alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    GPA_SIM_ENTER(ctx);
    gpa_sim__device_sync(c);
    (void)ctx;
    return (CUresult)c->sticky.load();
  });
}

GPA_SIM_API CUresult cuCtxGetLimit(size_t *v, CUlimit which) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int limit = (int)which;
  return gpa_sim__guard("cuCtxGetLimit", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = limit == CU_LIMIT_STACK_SIZE ? gpa_sim__opts().stack_bytes : 0;
    return CUDA_SUCCESS;
  });
}

/* ---- error names and strings */
#define GPA_SIM_ERRORS(X)                                                                 \
  X(CUDA_SUCCESS, "no error")                                                             \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                         \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                            \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                   \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                     \
  X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                             \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                           \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                  \
  X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                           \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                 \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                        \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device") \
  X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                               \
  X(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")                          \
  X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                          \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                 \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                       \
  X(CUDA_ERROR_NOT_READY, "device not ready")                                             \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")               \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")        \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")                 \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped") \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
  X(CUDA_ERROR_ASSERT, "device-side assert triggered")                                    \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                              \
  X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                               \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                  \
  X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                  \
  X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")  \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

GPA_SIM_API CUresult cuGetErrorName(CUresult err, const char **s) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int e = (int)err;
  return gpa_sim__guard("cuGetErrorName", [&]() -> CUresult {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    switch (e) {
  #define X(code, text) \
    case code: *s = #code; return CUDA_SUCCESS;
      GPA_SIM_ERRORS(X)
  #undef X
      default: *s = nullptr; return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

GPA_SIM_API CUresult cuGetErrorString(CUresult err, const char **s) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int e = (int)err;
  return gpa_sim__guard("cuGetErrorString", [&]() -> CUresult {
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    switch (e) {
  #define X(code, text) \
    case code: *s = text; return CUDA_SUCCESS;
      GPA_SIM_ERRORS(X)
  #undef X
      default: *s = nullptr; return CUDA_ERROR_INVALID_VALUE;
    }
  });
}
