/* Loading cuDNN at run time (design in cudnn.h).
 *
 * Loaded by the first attention or conv1d op, not at actor creation: libcudnn pulls
 * in its engine libraries (hundreds of MB) and most actors never need it.
 * Each way of being unavailable is told apart in the one info line:
 * the library does not open, lacks an entry point, is older than
 * GPA__CUDNN_MIN_VERSION, or cudnnCreate fails (no usable GPU for it). */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cudnn.h"

#ifndef GPA_SIM_CUDNN_DEFAULT
#define GPA_SIM_CUDNN_DEFAULT "libgpa_sim_cudnn.so"
#endif

/* GPA_CUDNN (the options table), else the simulator's subset or the
 * library's soname. */
const char *gpa__cudnn_path(const gpa__cu_ctx *C) {
  if (C->host.cudnn) return C->host.cudnn;
  return C->sim ? GPA_SIM_CUDNN_DEFAULT : "libcudnn.so.9";
}

static int dnn_open(gpa__dnn *d, const char *path, char *why, size_t n) {
  gpa__cudnn_api *api = &d->api;
  api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char *e = dlerror();
    snprintf(why, n, "cannot open %s (%s)", path, e ? e : "dlopen failed");
    return 0;
  }
  void *fn;
#define GPA__CUDNN_RESOLVE(name)                     \
  fn = dlsym(api->lib, #name);                       \
  if (!fn) {                                         \
    snprintf(why, n, "%s lacks %s", path, #name);    \
    return 0;                                        \
  }                                                  \
  memcpy(&api->name, &fn, sizeof fn);
  GPA__CUDNN_API(GPA__CUDNN_RESOLVE)
#undef GPA__CUDNN_RESOLVE
  d->version = api->cudnnGetVersion();
  if (d->version < GPA__CUDNN_MIN_VERSION) {
    snprintf(why, n, "%s is cuDNN %zu, older than %d", path, d->version, GPA__CUDNN_MIN_VERSION);
    return 0;
  }
  cudnnStatus_t s = api->cudnnCreate(&d->h);
  if (s != CUDNN_STATUS_SUCCESS) {
    d->h = NULL;
    snprintf(why, n, "cudnnCreate: %s", api->cudnnGetErrorString(s));
    return 0;
  }
  return 1;
}

/* GPA_CUDNN_GRAPHS=1 needs to know whether the op's stream is being
 * captured (a graph batch): the driver's cuStreamIsCapturing, which the
 * backend's table lacks. Without it the knob does nothing. */
static void resolve_capturing(gpa__cu_ctx *C, gpa__dnn *d) {
  typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  void *sym = dlsym(C->cu.lib, "cuGetProcAddress_v2");
  get_proc_fn gp;
  memcpy(&gp, &sym, sizeof gp);
  CUdriverProcAddressQueryResult q;
  void *fn = NULL;
  if (!gp || gp("cuStreamIsCapturing", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || !fn) {
    gpa__log(GPA_LOG_INFO, C->host.log_level, "cuda: GPA_CUDNN_GRAPHS=1: no cuStreamIsCapturing: plain executes");
    return;
  }
  memcpy(&d->is_capturing, &fn, sizeof fn);
}

/* The actor's state, library not loaded yet (state 0): made by the first
 * call of the path, which may decline before it needs the library. */
static gpa__dnn *dnn_new(gpa__cu_ctx *C) {
  gpa__dnn *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->C = C;
  d->bound = GPA__CUDNN_PLANS;
  C->dnn = d;
  return d;
}

static void dnn_load(gpa__cu_ctx *C, gpa__dnn *d) {
  gpa__dnn_tune_read(&d->tune);
  const char *path = gpa__cudnn_path(C);
  char why[200];
  if (dnn_open(d, path, why, sizeof why)) {
    d->state = 1;
    if (d->tune.graphs) resolve_capturing(C, d);
    gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: cuDNN %zu from %s: fused attention, convolutions", d->version,
             path);
  } else {
    d->state = -1;
    if (d->api.lib) dlclose(d->api.lib);
    memset(&d->api, 0, sizeof d->api);
    snprintf(d->load_why, sizeof d->load_why, "%s", why);
    gpa__log(GPA_LOG_INFO, C->host.log_level, "cuda: no cuDNN (%s): attention and conv1d run our own kernels", why);
  }
}

gpa__dnn *gpa__cudnn_get(const gpa_op_exec *x, const char **why) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__dnn *d = C->dnn ? C->dnn : dnn_new(C);
  if (d && !d->state) dnn_load(C, d);
  *why = d ? d->load_why : "no host memory";
  if (!d || d->state < 0) return NULL;
  /* The handle follows the op's stream: each queue is its own stream. Set
   * only when it changes: cudnnSetStream is a library call with its own
   * checks, and an actor with one queue would pay it on every op. Only
   * this code sets the handle's stream, and every queue's stream is made
   * alike (non-blocking, default priority), so a new stream at a freed
   * one's address needs nothing cuDNN did not already do for it. */
  if (!d->stream_set || d->stream != x->stream) {
    if (d->api.cudnnSetStream(d->h, (cudaStream_t)x->stream) != CUDNN_STATUS_SUCCESS) {
      d->stream_set = 0;
      *why = "cudnnSetStream failed";
      return NULL;
    }
    d->stream = x->stream, d->stream_set = 1;
    d->st.set_streams++;
  }
  return d;
}

const gpa__cudnn_api *gpa__dnn_api(const gpa__dnn *d) { return &d->api; }
cudnnHandle_t gpa__dnn_handle(const gpa__dnn *d) { return d->h; }

gpa_status gpa__dnn_decline(const gpa_op_exec *x, const char *fmt, ...) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: cuDNN declines: %s", buf);
  if (C->dnn) {
    snprintf(C->dnn->why, sizeof C->dnn->why, "%s", buf);
    C->dnn->why_const = NULL;
    C->dnn->st.declines++;
  }
  return GPA_SKIP;
}

gpa_status gpa__dnn_decline_const(const gpa_op_exec *x, const char *why) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: cuDNN declines: %s", why);
  if (C->dnn || dnn_new(C)) { /* kept for gpa__cudnn_last_decline without loading the library */
    C->dnn->why_const = why;
    C->dnn->st.declines++;
  }
  return GPA_SKIP;
}

void gpa__cudnn_get_stats(gpa__cu_ctx *C, gpa__cudnn_stats *s) {
  memset(s, 0, sizeof *s);
  if (C->dnn) {
    *s = C->dnn->st;
    s->plans = C->dnn->n_plans;
  }
}

const char *gpa__cudnn_last_decline(gpa__cu_ctx *C) {
  return !C->dnn ? "" : C->dnn->why_const ? C->dnn->why_const : C->dnn->why;
}

void gpa__cudnn_set_timing(gpa__cu_ctx *C, int on) {
  if (C->dnn) C->dnn->timing = on;
}

void gpa__cudnn_release(gpa__cu_ctx *C) {
  gpa__dnn *d = C->dnn;
  if (!d) return;
  if (d->state > 0) {
    gpa__dnn_plans_release(d);
    d->api.cudnnDestroy(d->h);
    dlclose(d->api.lib);
  }
  free(d);
  C->dnn = NULL;
}
