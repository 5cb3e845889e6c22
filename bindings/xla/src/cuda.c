/* The CUDA side of the handlers: one actor per device, a queue per XLA
 * stream, the driver calls that order the actor's work with XLA's stream,
 * and the errors of ops that failed after their call had returned.
 *
 * Ordering (docs/xla.md, "CUDA"): a call records an event on XLA's stream
 * and submits the op "xla_stream_wait" to its queue, whose implementation
 * makes the queue's stream wait for that event (cuStreamWaitEvent on the
 * actor thread: no round trip); it submits the op, then has the actor
 * record an event after it (gpa_queue_record_event, the one round trip: the
 * record must exist before XLA's stream can wait for it) and makes XLA's
 * stream wait for that (cuStreamWaitEvent). Both waits are on the device:
 * no host thread waits for the GPU, and the handler returns once the work
 * is enqueued.
 *
 * Queues: each XLA stream of a device gets a queue of its own (created on
 * its first call), so that calls of unrelated XLA streams do not wait for
 * each other on the actor's side: a stalled stream holds up only its own
 * queue. The map is bounded (STREAM_QUEUES per device); streams past the
 * bound share the actor's default queue, which only orders them more than
 * needed. The queues live as long as the device's actor, i.e. the process
 * (actor.c says why it is never destroyed); a stream XLA destroyed and made
 * again at the same address finds its old queue, which is harmless.
 *
 * Implementation notes
 * - The library does not link the driver. It opens the one the actor opened
 *   (the simulator's under GPA_DEVICE=sim, else GPA_CUDA_DRIVER or
 *   libcuda.so.1, which XLA has loaded already) and resolves the few entry
 *   points it calls by their exported names. A CUstream is only meaningful
 *   to the driver that made it, so XLA and the actor must share one: on a
 *   GPU both use libcuda.
 * - Events are those of the device's primary context, the context XLA's
 *   streams and the actor's live in. Each call takes two from a pool and
 *   gives them back before it returns, after its round trip: by then the
 *   actor has issued the queue's wait for the first (it came before the
 *   record in the queue), so it cannot be recorded again too early. CUDA
 *   lets an event be recorded again as soon as a wait on it is enqueued
 *   (the wait keeps the record before it), but the simulator models an
 *   event as one counter, so that a newer record completing first would
 *   release an older wait: the pool is a FIFO and an event is taken again
 *   only once its last record has completed (one cuEventQuery per take; a
 *   new event when the oldest is still pending). On a GPU that costs a
 *   query and never orders less.
 * - GPA_XLA_WAIT_CALL=1 makes the queue wait by gpa_queue_wait_event, a
 *   second round trip per call, as before the wait op: for measuring
 *   (bindings/xla/bench_xla_cuda.c).
 * - The driver wants a current context for these calls; XLA's thread has
 *   one, but the handler sets the primary context for the calls and puts
 *   the caller's back, so it works from any thread. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/external.h"
#include "gpuactor/handle.h"
#include "gpuactor/op.h"
#include "xla_internal.h"

#define MAX_DEVICES 16
#define STREAM_QUEUES 16
#define EVENT_DISABLE_TIMING 0x2 /* CU_EVENT_DISABLE_TIMING */

typedef int cu_result; /* CUresult: 0 = CUDA_SUCCESS */
typedef struct drv {
  cu_result (*event_create)(void **ev, unsigned flags);
  cu_result (*event_record)(void *ev, void *stream);
  cu_result (*event_query)(void *ev);
  cu_result (*stream_wait_event)(void *stream, void *ev, unsigned flags);
  cu_result (*ctx_get)(void **ctx);
  cu_result (*ctx_set)(void *ctx);
  cu_result (*device_get)(int *dev, int ordinal);
  cu_result (*primary_retain)(void **ctx, int dev);
  cu_result (*error_name)(cu_result r, const char **name);
  cu_result (*memset32)(uintptr_t p, unsigned v, size_t n, void *stream);
} drv;

struct gpa_xla_dev {
  int state; /* 0 not tried, 1 ready, -1 failed (why in error) */
  int ordinal;
  gpa_actor *actor;
  drv cu;
  void *ctx; /* the device's primary context */
  pthread_mutex_t mu;
  struct {
    void *stream;
    gpa_queue *q;
  } queues[STREAM_QUEUES]; /* XLA stream -> its queue; appended under mu, never removed */
  int n_queues;
  void **pool; /* FIFO of idle events: head is the oldest given back */
  size_t head, n_pool, cap;
  /* The first op that failed after its call returned: the next call of
   * this device returns it (XLA has no later place to take it). */
  int has_deferred;
  XLA_FFI_Error_Code deferred_code;
  char error[512];
};

static pthread_mutex_t devs_mu = PTHREAD_MUTEX_INITIALIZER;
static gpa_xla_dev devs[MAX_DEVICES];
static _Atomic uint64_t n_deferred;

uint64_t gpa_xla_cuda_deferred_count(void) { return atomic_load(&n_deferred); }

static const char *cu_err(const gpa_xla_dev *d, cu_result r) {
  const char *name = NULL;
  if (d->cu.error_name) d->cu.error_name(r, &name);
  return name ? name : "an unknown CUDA error";
}

/* The driver library the actor uses; NULL with why. */
static void *open_driver(const char *backend, char *why, size_t cap) {
  const char *path = "libcuda.so.1";
  int flags = RTLD_NOW | RTLD_LOCAL;
  if (!strcmp(backend, "sim")) {
    path = "libgpa_sim_cuda.so"; /* loaded by the actor: its soname finds it */
    flags |= RTLD_NOLOAD;
  } else if (getenv("GPA_CUDA_DRIVER") && getenv("GPA_CUDA_DRIVER")[0]) {
    path = getenv("GPA_CUDA_DRIVER");
  }
  void *lib = dlopen(path, flags);
  if (!lib) snprintf(why, cap, "cannot open the CUDA driver %s: %s", path, dlerror());
  return lib;
}

static int resolve(gpa_xla_dev *d, void *lib, char *why, size_t cap) {
  struct {
    void **slot;
    const char *name;
  } fns[] = {
      {(void **)&d->cu.event_create, "cuEventCreate"},
      {(void **)&d->cu.event_record, "cuEventRecord"},
      {(void **)&d->cu.event_query, "cuEventQuery"},
      {(void **)&d->cu.stream_wait_event, "cuStreamWaitEvent"},
      {(void **)&d->cu.ctx_get, "cuCtxGetCurrent"},
      {(void **)&d->cu.ctx_set, "cuCtxSetCurrent"},
      {(void **)&d->cu.device_get, "cuDeviceGet"},
      {(void **)&d->cu.primary_retain, "cuDevicePrimaryCtxRetain"},
      {(void **)&d->cu.error_name, "cuGetErrorName"},
      {(void **)&d->cu.memset32, "cuMemsetD32Async"},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (!(*fns[i].slot = dlsym(lib, fns[i].name))) {
      snprintf(why, cap, "the CUDA driver lacks %s", fns[i].name);
      return -1;
    }
  return 0;
}

/* The queue's side of "the queue waits for XLA's stream": on the actor
 * thread, in the queue's order, so the handler does not wait for it. */
static gpa_status stream_wait_cuda(const gpa_op_exec *x) {
  gpa_xla_dev *d = x->user_data;
  void *ev = (void *)(intptr_t)*(const int64_t *)x->params;
  cu_result r = d->cu.stream_wait_event(x->stream, ev, 0);
  if (!r) return GPA_OK;
  snprintf(x->msg, x->msg_size, "xla_stream_wait: cuStreamWaitEvent: %s", cu_err(d, r));
  return GPA_EDEVICE;
}
static const gpa_attr_spec wait_attrs[] = {{"event", GPA_ATTR_INT, 1, 0, 0, 0, 1, 0}};

static void open_device(gpa_xla_dev *d, int ordinal) {
  d->ordinal = ordinal;
  d->state = -1;
  pthread_mutex_init(&d->mu, NULL);
  char dev_name[32];
  snprintf(dev_name, sizeof dev_name, "cuda:%d", ordinal);
  gpa_actor_options o = {.size = sizeof o, .device = dev_name};
  gpa_actor *a = NULL;
  gpa_status st = gpa_actor_create(&o, &a);
  if (st != GPA_OK) {
    snprintf(d->error, sizeof d->error, "cannot create the actor of device %d: %s (%s)", ordinal, gpa_strerror(st),
             gpa_last_error_message());
    return;
  }
  /* The environment overrides the program's options (GPA_DEVICE=sim runs
   * these handlers on the simulated device; cpu cannot reach XLA's device
   * memory). */
  const char *be = gpa_actor_backend(a);
  void *lib = NULL, *cur = NULL;
  int dev = 0, is_cuda = !strcmp(be, "cuda") || !strcmp(be, "sim");
  cu_result r = 0;
  if (is_cuda && (lib = open_driver(be, d->error, sizeof d->error)) &&
      resolve(d, lib, d->error, sizeof d->error) == 0) {
    d->cu.ctx_get(&cur);
    if (!strcmp(be, "sim") && ordinal != 0)
      snprintf(d->error, sizeof d->error, "XLA's device %d: the simulated device is device 0 only", ordinal);
    else if ((r = d->cu.device_get(&dev, ordinal)) || (r = d->cu.primary_retain(&d->ctx, dev)))
      snprintf(d->error, sizeof d->error, "device %d: no primary context (%s)", ordinal, cu_err(d, r));
    else
      d->state = 1;
  } else if (!is_cuda) {
    snprintf(d->error, sizeof d->error, "the CUDA handlers need a cuda actor, but GPA_DEVICE chose the %s backend", be);
  }
  if (d->state != 1) {
    /* An actor's teardown leaves no context current on the thread that
     * runs it: this is XLA's thread, whose context is put back. */
    gpa_actor_destroy(a);
    if (d->cu.ctx_set) d->cu.ctx_set(cur);
    return;
  }
  gpa_op_desc wait = {.size = sizeof wait, .name = "xla_stream_wait", .attrs = wait_attrs, .n_attrs = 1,
                      .params_size = sizeof(int64_t), .cuda = stream_wait_cuda, .user_data = d};
  if ((st = gpa_op_register(gpa_actor_registry(a), &wait)) != GPA_OK) {
    snprintf(d->error, sizeof d->error, "cannot register xla_stream_wait: %s", gpa_last_error_message());
    d->state = -1;
    gpa_actor_destroy(a);
    d->cu.ctx_set(cur);
    return;
  }
  /* Never destroyed, for the host actor's reason (actor.c); the driver
   * handle and the context's reference stay with it. */
  d->actor = a;
}

gpa_xla_dev *gpa_xla_cuda_device(int ordinal, const char **why) {
  static _Thread_local char bad[64];
  if (ordinal < 0 || ordinal >= MAX_DEVICES) {
    snprintf(bad, sizeof bad, "device ordinal %d is past the %d devices served", ordinal, MAX_DEVICES);
    *why = bad;
    return NULL;
  }
  gpa_xla_dev *d = &devs[ordinal];
  pthread_mutex_lock(&devs_mu);
  if (!d->state) open_device(d, ordinal);
  pthread_mutex_unlock(&devs_mu);
  if (d->state != 1) {
    *why = d->error;
    return NULL;
  }
  return d;
}

gpa_actor *gpa_xla_cuda_actor(gpa_xla_dev *d) { return d->actor; }

/* The driver's calls below run with the device's primary context current;
 * the caller's context is put back after. */
static void *enter(gpa_xla_dev *d) {
  void *cur = NULL;
  d->cu.ctx_get(&cur);
  if (cur != d->ctx) d->cu.ctx_set(d->ctx);
  return cur;
}
static void leave(gpa_xla_dev *d, void *cur) {
  if (cur != d->ctx) d->cu.ctx_set(cur);
}

static cu_result take_event(gpa_xla_dev *d, void **ev) {
  pthread_mutex_lock(&d->mu);
  *ev = NULL;
  if (d->n_pool && d->cu.event_query(d->pool[d->head]) == 0) {
    *ev = d->pool[d->head];
    d->head = (d->head + 1) % d->cap, d->n_pool--;
  }
  pthread_mutex_unlock(&d->mu);
  return *ev ? 0 : d->cu.event_create(ev, EVENT_DISABLE_TIMING);
}

/* Events are never destroyed (a destroy could wait for a pending record on
 * the simulator); the pool holds as many as calls were ever in flight. */
static void give_event(gpa_xla_dev *d, void *ev) {
  pthread_mutex_lock(&d->mu);
  if (d->n_pool == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 16;
    void **p = malloc(cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&d->mu);
      return; /* leaks one event rather than wait */
    }
    for (size_t i = 0; i < d->n_pool; i++) p[i] = d->pool[(d->head + i) % d->cap];
    free(d->pool);
    d->pool = p, d->head = 0, d->cap = cap;
  }
  d->pool[(d->head + d->n_pool++) % d->cap] = ev;
  pthread_mutex_unlock(&d->mu);
}

gpa_queue *gpa_xla_cuda_queue(gpa_xla_dev *d, void *stream) {
  gpa_queue *q = NULL;
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < d->n_queues && !q; i++)
    if (d->queues[i].stream == stream) q = d->queues[i].q;
  /* Made under mu, once per stream: two threads of one new stream must not
   * both make one. A failure leaves the default queue (ordering more). */
  if (!q && d->n_queues < STREAM_QUEUES && gpa_queue_create(d->actor, "xla stream", &q) == GPA_OK)
    d->queues[d->n_queues].stream = stream, d->queues[d->n_queues++].q = q;
  pthread_mutex_unlock(&d->mu);
  return q ? q : gpa_actor_default_queue(d->actor);
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int by_call;
static void read_env(void) {
  const char *e = getenv("GPA_XLA_WAIT_CALL");
  by_call = e && !strcmp(e, "1");
}
static int wait_by_call(void) {
  pthread_once(&env_once, read_env);
  return by_call;
}

XLA_FFI_Error *gpa_xla_cuda_begin(XLA_FFI_CallFrame *f, const char *target, gpa_xla_dev *d, void *stream,
                                  gpa_queue *q, gpa_xla_order *o) {
  o->ev_in = o->ev_out = NULL, o->pre = NULL;
  void *cur = enter(d);
  XLA_FFI_Error *e = NULL;
  gpa_status st = GPA_OK;
  cu_result r = take_event(d, &o->ev_in);
  if (!r) r = take_event(d, &o->ev_out);
  if (r) {
    e = gpa_xla_error(f, XLA_FFI_Error_Code_INTERNAL, "%s: cuEventCreate: %s", target, cu_err(d, r));
  } else if ((r = d->cu.event_record(o->ev_in, stream))) {
    /* XLA's earlier work on its stream, then the queue's next messages. */
    e = gpa_xla_error(f, XLA_FFI_Error_Code_INTERNAL, "%s: cuEventRecord on XLA's stream: %s", target, cu_err(d, r));
  } else if (wait_by_call()) {
    if ((st = gpa_queue_wait_event(q, o->ev_in)) != GPA_OK)
      e = gpa_xla_error(f, gpa_xla_code_of(st), "%s: the queue cannot wait for XLA's stream: %s", target,
                        gpa_last_error_message());
  } else {
    gpa_attr at = {.name = "event", .type = GPA_ATTR_INT, .i = (int64_t)(intptr_t)o->ev_in};
    gpa_op_call oc = {"xla_stream_wait", NULL, 0, NULL, 0, &at, 1};
    if ((st = gpa_submit(q, &oc, &o->pre)) != GPA_OK)
      e = gpa_xla_error(f, gpa_xla_code_of(st), "%s: the queue cannot wait for XLA's stream: %s (%s)", target,
                        gpa_last_error_message(), gpa_status_name(st));
  }
  leave(d, cur);
  if (e) {
    /* Nothing of the call is enqueued (or a wait that orders nothing): the
     * events were never waited on by the actor. */
    if (o->ev_in) give_event(d, o->ev_in);
    if (o->ev_out) give_event(d, o->ev_out);
    o->ev_in = o->ev_out = NULL;
  }
  return e;
}

XLA_FFI_Error *gpa_xla_cuda_end(XLA_FFI_CallFrame *f, const char *target, gpa_xla_dev *d, void *stream,
                                gpa_queue *q, gpa_xla_order *o) {
  void *cur = enter(d);
  XLA_FFI_Error *e = NULL;
  cu_result r = 0;
  /* The queue's work so far (the op), then XLA's later work. The round trip
   * also means the actor has issued the queue's wait for ev_in. */
  gpa_status st = gpa_queue_record_event(q, o->ev_out);
  if (st != GPA_OK)
    e = gpa_xla_error(f, gpa_xla_code_of(st), "%s: cannot record the op's event: %s", target,
                      gpa_last_error_message());
  else if ((r = d->cu.stream_wait_event(stream, o->ev_out, 0)))
    e = gpa_xla_error(f, XLA_FFI_Error_Code_INTERNAL, "%s: cuStreamWaitEvent on XLA's stream: %s", target,
                      cu_err(d, r));
  leave(d, cur);
  /* A failed record leaves it unknown whether the actor is past ev_in's
   * wait: that event is dropped rather than recorded again too early. */
  if (st == GPA_OK) give_event(d, o->ev_in);
  give_event(d, o->ev_out);
  o->ev_in = o->ev_out = NULL;
  return e;
}

int gpa_xla_cuda_ordinal(const gpa_xla_dev *d) { return d->ordinal; }

const char *gpa_xla_cuda_zero32(gpa_xla_dev *d, void *ptr, void *stream) {
  void *cur = enter(d);
  cu_result r = d->cu.memset32((uintptr_t)ptr, 0, 1, stream);
  leave(d, cur);
  return r ? cu_err(d, r) : NULL;
}

void gpa_xla_cuda_defer_error(gpa_xla_dev *d, XLA_FFI_Error_Code code, const char *msg) {
  atomic_fetch_add(&n_deferred, 1);
  pthread_mutex_lock(&d->mu);
  if (!d->has_deferred) {
    d->has_deferred = 1, d->deferred_code = code;
    snprintf(d->error, sizeof d->error, "%s", msg);
  }
  pthread_mutex_unlock(&d->mu);
}

XLA_FFI_Error *gpa_xla_cuda_take_deferred(XLA_FFI_CallFrame *f, const char *target, gpa_xla_dev *d) {
  XLA_FFI_Error *e = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->has_deferred) {
    e = gpa_xla_error(f, d->deferred_code, "%s: an earlier gpuactor call on device %d failed on the device: %s",
                      target, d->ordinal, d->error);
    d->has_deferred = 0;
  }
  pthread_mutex_unlock(&d->mu);
  return e;
}

/* XLA's stream and device for a call frame of the CUDA platform. */
XLA_FFI_Error *gpa_xla_cuda_stream(XLA_FFI_CallFrame *f, const char *target, void **stream, int *ordinal) {
  const XLA_FFI_Api *api = f->api;
  *stream = NULL, *ordinal = 0;
  XLA_FFI_Stream_Get_Args s = {.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE, .ctx = f->ctx};
  XLA_FFI_Error *e = api->XLA_FFI_Stream_Get ? api->XLA_FFI_Stream_Get(&s) : NULL;
  if (e) return e; /* XLA's own message */
  if (!s.stream)
    return gpa_xla_error(f, XLA_FFI_Error_Code_FAILED_PRECONDITION,
                         "%s: XLA gave no stream (a CUDA handler called on another platform?)", target);
  *stream = s.stream;
  /* Older XLAs lack the ordinal query: device 0, as a one-GPU process. */
  if (api->struct_size >= offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get) + sizeof(void *) &&
      api->XLA_FFI_DeviceOrdinal_Get) {
    XLA_FFI_DeviceOrdinal_Get_Args o = {.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE, .ctx = f->ctx};
    if ((e = api->XLA_FFI_DeviceOrdinal_Get(&o))) return e;
    *ordinal = o.device_ordinal;
  }
  return NULL;
}
