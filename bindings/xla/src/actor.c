/* The process's host actor, XLA errors, the metadata query and the stats. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "gpuactor/actor.h"
#include "gpuactor/op.h"
#include "xla_internal.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static gpa_actor *host_actor;
static char host_error[256];
static _Atomic uint64_t n_calls;
static _Atomic int host_made; /* host_actor is set */

/* xla_probe: the addresses its implementation sees, for the no-copy test.
 * A registered op rather than a debug hook in the handler: what it reports
 * is what every op's implementation gets on the actor thread. */
static gpa_status probe_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  (void)msg, (void)ms;
  e[0].dtype = GPA_I32;
  e[0].rank = 2;
  e[0].shape[0] = (int64_t)s->n_inputs + 1;
  e[0].shape[1] = 2;
  return GPA_OK;
}

static gpa_status probe_host(const gpa_op_exec *x) {
  int32_t *o = x->out[0];
  for (uint32_t i = 0; i <= x->n_inputs; i++) {
    uint64_t p = (uint64_t)(uintptr_t)(i < x->n_inputs ? x->in[i] : x->out[0]);
    o[2 * i] = (int32_t)(uint32_t)p;
    o[2 * i + 1] = (int32_t)(uint32_t)(p >> 32);
  }
  return GPA_OK;
}

static void create_host_actor(void) {
  gpa_actor_options o = {.size = sizeof o, .device = "cpu"};
  gpa_actor *a = NULL;
  gpa_status st = gpa_actor_create(&o, &a);
  if (st != GPA_OK) {
    snprintf(host_error, sizeof host_error, "cannot create the actor: %s (%s)", gpa_strerror(st),
             gpa_last_error_message());
    return;
  }
  /* The environment overrides the program's options: GPA_DEVICE=cuda would
   * give a device actor, which cannot use XLA's host buffers. */
  if (strcmp(gpa_actor_backend(a), "cpu") != 0) {
    snprintf(host_error, sizeof host_error,
             "the host handlers need a cpu actor, but GPA_DEVICE chose the %s backend", gpa_actor_backend(a));
    gpa_actor_destroy(a);
    return;
  }
  gpa_op_desc probe = {.size = sizeof probe, .name = "xla_probe", .min_inputs = 1, .max_inputs = GPA_MAX_INPUTS - 1,
                       .n_outputs = 1, .shape = probe_shape, .host = probe_host};
  st = gpa_op_register(gpa_actor_registry(a), &probe);
  if (st != GPA_OK) {
    snprintf(host_error, sizeof host_error, "cannot register xla_probe: %s", gpa_last_error_message());
    gpa_actor_destroy(a);
    return;
  }
  /* Never destroyed: XLA may call a handler from any of its threads until
   * the process ends, and nothing tells the library when the last one is. */
  host_actor = a;
  atomic_store(&host_made, 1);
}

gpa_actor *gpa_xla_host_actor(const char **msg) {
  pthread_once(&once, create_host_actor);
  if (!host_actor && msg) *msg = host_error;
  return host_actor;
}

gpa_actor *gpa_xla_actor(char *msg, uint64_t msg_size) {
  const char *why = "";
  gpa_actor *a = gpa_xla_host_actor(&why);
  if (!a && msg && msg_size) snprintf(msg, msg_size, "%s", why);
  return a;
}

gpa_actor *gpa_xla_cuda_actor_get(int device, char *msg, uint64_t msg_size) {
  const char *why = "";
  gpa_xla_dev *d = gpa_xla_cuda_device(device, &why);
  if (!d && msg && msg_size) snprintf(msg, msg_size, "%s", why);
  return d ? gpa_xla_cuda_actor(d) : NULL;
}

void gpa_xla_count_call(void) { atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed); }

void gpa_xla_wrap_counts(uint64_t *wraps, uint64_t *hits);

int gpa_xla_stats_get(gpa_xla_stats *out, char *msg, uint64_t msg_size) {
  if (!out) {
    if (msg && msg_size) snprintf(msg, msg_size, "gpa_xla_stats_get: out is NULL");
    return -1;
  }
  memset(out, 0, sizeof *out);
  out->calls = atomic_load(&n_calls);
  gpa_xla_wrap_counts(&out->wraps, &out->wrap_hits);
  gpa_xla_watch_counts(&out->watched, &out->watched_done);
  out->deferred_errors = gpa_xla_cuda_deferred_count();
  /* The host actor's copy counters, if a call made it: asking must not
   * make one (a process that runs only the CUDA handlers may have none). */
  gpa_actor *a = atomic_load(&host_made) ? host_actor : NULL;
  gpa_actor_stats s = {.size = sizeof s};
  if (a && gpa_actor_stats_get(a, &s) != GPA_OK) {
    if (msg && msg_size) snprintf(msg, msg_size, "gpa_actor_stats_get: %s", gpa_last_error_message());
    return -1;
  }
  out->bytes_uploaded = s.bytes_uploaded;
  out->bytes_read_back = s.bytes_read_back;
  return 0;
}

static XLA_FFI_Error *verror(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, va_list ap) {
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  XLA_FFI_Error_Create_Args e = {.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE, .message = buf, .errc = code};
  return api->XLA_FFI_Error_Create(&e); /* XLA copies the message */
}

XLA_FFI_Error *gpa_xla_error(const XLA_FFI_CallFrame *frame, XLA_FFI_Error_Code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  XLA_FFI_Error *e = verror(frame->api, code, fmt, ap);
  va_end(ap);
  return e;
}

XLA_FFI_Error *gpa_xla_error_api(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  XLA_FFI_Error *e = verror(api, code, fmt, ap);
  va_end(ap);
  return e;
}

void gpa_xla_ffi_version(int32_t *major, int32_t *minor) {
  if (major) *major = XLA_FFI_API_MAJOR;
  if (minor) *minor = XLA_FFI_API_MINOR;
}

int gpa_xla_metadata(XLA_FFI_CallFrame *frame, XLA_FFI_Error **err) {
  *err = NULL;
  /* XLA puts the query first; the chain is walked in case a later XLA
   * puts something before it. An execution call has no metadata link. */
  gpa_ffi_extension *ext = frame->extension_start;
  while (ext && ext->type != XLA_FFI_Extension_Metadata) ext = ext->next;
  if (!ext) return 0;
  XLA_FFI_Metadata_Extension *m = (XLA_FFI_Metadata_Extension *)ext;
  if (ext->struct_size < XLA_FFI_Metadata_Extension_STRUCT_SIZE || !m->metadata ||
      m->metadata->struct_size < XLA_FFI_Metadata_STRUCT_SIZE) {
    *err = gpa_xla_error(frame, XLA_FFI_Error_Code_INVALID_ARGUMENT, "gpuactor: XLA's metadata query is too old");
    return 1;
  }
  /* The version of the header this library was built against: what XLA
   * checks against its own (ffi_version.h). */
  m->metadata->api_version = (XLA_FFI_Api_Version){XLA_FFI_Api_Version_STRUCT_SIZE, NULL, XLA_FFI_API_MAJOR,
                                                   XLA_FFI_API_MINOR};
  m->metadata->traits = 0; /* not safe to capture into a command buffer: the actor runs the work */
  if (m->metadata->struct_size >= offsetof(XLA_FFI_Metadata, state_type_id) + sizeof(XLA_FFI_TypeId))
    m->metadata->state_type_id = (XLA_FFI_TypeId){0};
  return 1;
}
