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
};
struct CUstream_st {
  CUctx_st *ctx;
  unsigned flags;
  std::thread th;
  std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::deque<gpa_sim_op> q;
  bool busy = false, stop = false;
  std::atomic<unsigned> delay_us{0};
};
CUresult gpa_sim__stream_create(CUctx_st *ctx, unsigned flags, CUstream_st **out);
void gpa_sim__stream_destroy(CUstream_st *s);
/* Resolves NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD and checks the handle. */
CUresult gpa_sim__stream_get(CUctx_st *ctx, CUstream h, CUstream_st **out);
void gpa_sim__stream_push(CUstream_st *s, std::function<CUresult()> fn, bool always = false, bool host_fn = false);
void gpa_sim__stream_wait_idle(CUstream_st *s);
void gpa_sim__ctx_sync_all(CUctx_st *ctx);
/* Waits for the NULL stream and every blocking stream (synchronous copies). */
void gpa_sim__ctx_sync_legacy(CUctx_st *ctx);

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
