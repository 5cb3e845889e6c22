/* XLA's asynchronous FFI on the host (GPA_XLA_ASYNC=1): the handler returns
 * once the op is submitted, with frame->future set; XLA keeps the call's
 * buffers alive and runs what depends on the results only once the future
 * completes. One completion thread awaits the handles in submission order
 * (the op handlers share the actor's default queue, which runs them in that
 * order) and completes each future. Completing a future may run XLA's next
 * work on that thread, handlers included: they only ever enqueue here, so
 * the thread never waits on itself. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/handle.h"
#include "xla_internal.h"

typedef struct pending {
  struct pending *next;
  const XLA_FFI_Api *api;
  XLA_FFI_Future *future;
  gpa_actor *actor;
  gpa_handle *h;
  const char *target; /* a static string of the signature table */
  uint32_t n_wraps;
  gpa_xla_wrap wraps[];
} pending;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int enabled;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pending *head, *tail;

static void complete(pending *p) {
  gpa_status st = gpa_xla_wait(p->h);
  XLA_FFI_Error *e = NULL;
  if (st != GPA_OK)
    e = gpa_xla_error_api(p->api, gpa_xla_code_of(st), "%s: %s (%s)", p->target, gpa_handle_error_message(p->h),
                          gpa_status_name(st));
  gpa_handle_release(p->h);
  for (uint32_t i = 0; i < p->n_wraps; i++) gpa_xla_wrap_put(p->actor, &p->wraps[i]);
  if (e) {
    XLA_FFI_Future_SetError_Args a = {.struct_size = XLA_FFI_Future_SetError_Args_STRUCT_SIZE, .future = p->future,
                                      .error = e};
    p->api->XLA_FFI_Future_SetError(&a);
  } else {
    XLA_FFI_Future_SetAvailable_Args a = {.struct_size = XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE,
                                          .future = p->future};
    p->api->XLA_FFI_Future_SetAvailable(&a);
  }
  free(p);
}

static void *completer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!head) pthread_cond_wait(&cv, &mu);
    pending *p = head;
    head = p->next;
    if (!head) tail = NULL;
    pthread_mutex_unlock(&mu);
    complete(p);
  }
  return NULL;
}

static void start(void) {
  const char *v = getenv("GPA_XLA_ASYNC");
  if (!v || strcmp(v, "1")) return;
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  enabled = pthread_create(&t, &at, completer, NULL) == 0; /* lives as long as the process, like the actor */
  pthread_attr_destroy(&at);
}

int gpa_xla_async_hand_over(XLA_FFI_CallFrame *f, const char *target, gpa_actor *a, gpa_handle *h,
                            const gpa_xla_wrap *wraps, uint32_t n_wraps) {
  pthread_once(&once, start);
  if (!enabled || f->struct_size < offsetof(XLA_FFI_CallFrame, future) + sizeof f->future) return 0;
  pending *p = malloc(sizeof *p + n_wraps * sizeof *wraps);
  if (!p) return 0;
  XLA_FFI_Future_Create_Args c = {.struct_size = XLA_FFI_Future_Create_Args_STRUCT_SIZE};
  XLA_FFI_Error *e = f->api->XLA_FFI_Future_Create(&c);
  if (e || !c.future) {
    if (e) {
      XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, .error = e};
      f->api->XLA_FFI_Error_Destroy(&d);
    }
    free(p);
    return 0; /* no futures here: wait in the handler */
  }
  *p = (pending){NULL, f->api, c.future, a, h, target, n_wraps};
  memcpy(p->wraps, wraps, n_wraps * sizeof *wraps);
  f->future = c.future;
  pthread_mutex_lock(&mu);
  if (tail) tail->next = p;
  else head = p;
  tail = p;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  return 1;
}
