/* gpa-sim driver internals shared by the files of libgpa_sim_cuda.so.
 * Everything here is hidden; the exports are the cu* entry points (with the
 * versioned names cuda.h maps them to), the gpa_sim_* control API and the
 * gpa_sim__* hooks the cuBLAS subset uses (internal.h is C++ only). */
#ifndef GPA_SIM_DRIVER_INTERNAL_H
#define GPA_SIM_DRIVER_INTERNAL_H
#include <cuda.h>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include "../include/gpa_sim.h"
#include "../runtime/simt.h"

#define GPA_SIM_API extern "C" __attribute__((visibility("default")))

/* ---- options (options.cpp): read once from the environment */
struct gpa_sim_options {
  unsigned workers;        /* GPA_SIM_WORKERS: extra block workers (default: CPUs - 1) */
  size_t stack_bytes;      /* GPA_SIM_STACK_KB: per emulated thread (64 KiB, 256 under ASan) */
  std::string module_path; /* GPA_SIM_MODULE_PATH: ':'-separated directories of emulated modules */
  bool verbose;            /* GPA_SIM_VERBOSE (default 1): print failed checks to stderr */
  bool pageable_async_ok;  /* GPA_SIM_ALLOW_PAGEABLE_ASYNC=1: allow async copies with pageable memory */
  int devices;             /* GPA_SIM_DEVICES: simulated devices, 1..8 (default 1; device.cpp) */
  FILE *launch_log;        /* GPA_SIM_LAUNCH_LOG=path: a line per kernel launch (launch.cpp), or NULL */
};
const gpa_sim_options &gpa_sim__opts(void);

/* ---- faults (options.cpp) */
bool gpa_sim__fault_take_alloc(void);
bool gpa_sim__fault_take_launch(void);
bool gpa_sim__fault_take_host_fn(void);
bool gpa_sim__fault_take_sticky(void);
unsigned gpa_sim__fault_delay_all(void);
unsigned gpa_sim__fault_host_fn_delay(void);
/* true: after a sticky error host functions are not called (a real driver's
 * behaviour, gpa_sim_fault_host_fns_after_sticky(0)); false: they still run. */
bool gpa_sim__fault_skip_host_fns(void);

/* ---- diagnostics: records the detail text, prints it when verbose, returns r */
CUresult gpa_sim__fail(CUresult r, const std::string &msg);
CUresult gpa_sim__failf(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- no C++ exception crosses the C API
 * Callers are C (the CUDA backend, the cuBLAS subset): an exception that
 * reached them would terminate the process, as std::system_error from a
 * stream thread that could not start once did. Every exported entry point
 * runs its body through gpa_sim__guard, which turns what the body throws
 * into a CUresult with a message: out of host memory or of threads and
 * mappings -> CUDA_ERROR_OUT_OF_MEMORY, another system error ->
 * CUDA_ERROR_OPERATING_SYSTEM, anything else -> CUDA_ERROR_UNKNOWN. */
CUresult gpa_sim__caught(const char *api) noexcept; /* call inside a catch block only */
template <class F>
CUresult gpa_sim__guard(const char *api, F &&body) noexcept {
  try {
    return body();
  } catch (...) {
    return gpa_sim__caught(api);
  }
}

/* ---- contexts (device.cpp) */
struct CUstream_st;
struct CUctx_st {
  std::atomic<int> refs{0};
  bool alive = false;
  std::atomic<int> sticky{0}; /* CUresult of a sticky failure, 0 if none */
  std::mutex mu;
  CUstream_st *null_stream = nullptr;
  std::set<CUstream_st *> streams; /* under mu; includes null_stream */
};
/* Checks initialization and the calling thread's current context. */
CUresult gpa_sim__ctx_enter(CUctx_st **out);
#define GPA_SIM_ENTER(ctx)                           \
  CUctx_st *ctx;                                     \
  do {                                               \
    CUresult r_ = gpa_sim__ctx_enter(&ctx);          \
    if (r_ != CUDA_SUCCESS) return r_;               \
  } while (0)
void gpa_sim__ctx_set_sticky(CUctx_st *ctx, CUresult r, const std::string &msg);

/* ---- streams (stream.cpp) */
struct gpa_sim_op {
  std::function<CUresult()> fn;
  bool always;  /* runs even after a sticky error (event records, waits, host functions) */
  bool host_fn; /* a cuLaunchHostFunc: its own delay, and skipped after a sticky error on request */
  bool mem_node = false; /* captured stream-ordered allocation or free: a graph memory node */
};
/* A stream is shared by its creator and whoever waits on it: a context-wide
 * synchronization (cuCtxSynchronize, cuMemFree, synchronous copies) of one
 * actor takes a reference on every stream of the context, another actor's
 * included, so a cuStreamDestroy meanwhile cannot free a stream under it.
 * The last reference joins the thread and frees the stream. Waits count
 * operations: a wait covers what was queued before it, so a stream that
 * never runs dry (another actor streaming work) cannot starve it. */
struct CUstream_st {
  CUctx_st *ctx;
  unsigned flags;
  std::atomic<int> refs{1}; /* the creator's, plus one per waiter from outside */
  std::thread th;
  std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::deque<gpa_sim_op> q;
  uint64_t pushed = 0, done = 0; /* operations queued / finished, under mu */
  unsigned waiters = 0;          /* threads in gpa_sim__stream_wait, under mu */
  bool stop = false;
  std::atomic<unsigned> delay_us{0};
  /* Stream capture (graph.cpp), under mu: while cap is set, work pushed on
   * the stream is recorded into it instead of queued; a synchronizing call
   * meanwhile invalidates the capture, as on a GPU. */
  std::vector<gpa_sim_op> *cap = nullptr;
  bool cap_invalid = false;
};
/* Throws (std::system_error, std::bad_alloc) when no thread can be started:
 * callers are inside gpa_sim__guard. */
CUresult gpa_sim__stream_create(CUctx_st *ctx, unsigned flags, CUstream_st **out);
/* Drops the creator's reference: the handle is dead from now on; queued work
 * still runs, and the last reference frees the stream. */
void gpa_sim__stream_destroy(CUstream_st *s);
/* Resolves NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD and checks the handle. */
CUresult gpa_sim__stream_get(CUctx_st *ctx, CUstream h, CUstream_st **out);
void gpa_sim__stream_push(CUstream_st *s, std::function<CUresult()> fn, bool always = false, bool host_fn = false,
                          bool mem_node = false);
/* Whether s is capturing; if so, the capture is invalidated (a synchronizing
 * call on a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). */
bool gpa_sim__stream_capture_violated(CUstream_st *s);
/* Whether s is capturing; if so, a memory (allocation or free) node joins
 * the capture: graph.cpp refuses such a graph as a child, as the driver
 * does (CUDA_ERROR_NOT_SUPPORTED). */
bool gpa_sim__stream_mem_node(CUstream_st *s);
/* Graph faults (graph.cpp), armed by GPA_SIM_FAULT and the control API:
 * which = 0 capture refused, 1 instantiate failing, 2 graph launch failing. */
void gpa_sim__graph_fault_set(int which, unsigned n);
/* Waits until every operation queued on s before the call has finished. */
void gpa_sim__stream_wait(CUstream_st *s);
/* The same for every stream of the context (legacy: only the NULL stream and
 * the blocking streams, what a synchronous copy waits for). */
void gpa_sim__ctx_sync(CUctx_st *ctx, bool legacy);
/* A call that synchronizes the whole device (cuCtxSynchronize, cuMemFree,
 * cuMemFreeHost): counted (gpa_sim_device_syncs), then every stream waited
 * for (memops.cpp). */
void gpa_sim__device_sync(CUctx_st *ctx);
/* Whether the device has memory pools (gpa_sim_mempools; memops.cpp). */
bool gpa_sim__mempools_on(void);
/* ---- memory (memory.cpp) */
enum { GPA_SIM_HOST_PAGEABLE, GPA_SIM_HOST_PINNED };
CUresult gpa_sim__mem_alloc(CUdeviceptr *out, size_t n, const char *api);
CUresult gpa_sim__mem_free(CUdeviceptr p, const char *api);
/* [p, p+n) inside one live allocation; else the reason in *why. */
CUresult gpa_sim__mem_check(CUdeviceptr p, size_t n, std::string *why);
/* p is 0, inside (or one past the end of) a live allocation, or pinned host memory. */
CUresult gpa_sim__mem_check_param(CUdeviceptr p, std::string *why);
/* Guard zones of the allocation containing p are intact (no-op under ASan). */
CUresult gpa_sim__mem_guards(CUdeviceptr p, std::string *why);
bool gpa_sim__host_is_pinned(const void *p, size_t n);
void gpa_sim__mem_release_all(void);
void gpa_sim__events_release_all(void);
/* ---- modules (module.cpp) */
void gpa_sim__modules_release_all(void);
#endif
