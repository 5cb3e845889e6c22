/* The completion thread: the handles of calls that returned before their op
 * had run.
 *
 * - XLA's asynchronous FFI on the host (GPA_XLA_ASYNC=1): the handler
 *   returns once the op is submitted, with frame->future set; XLA keeps the
 *   call's buffers alive and runs what depends on the results only once the
 *   future completes.
 * - The CUDA handlers (cuda.c): XLA's stream waits for the op by an event;
 *   the handle only tells whether it failed, which the device's next call
 *   reports, and when the wraps may be given back.
 * One thread awaits the handles in submission order (the op handlers share
 * each actor's default queue, which runs them in that order) and completes
 * each. Completing a future may run XLA's next work on that thread,
 * handlers included: they only ever enqueue here, so the thread never waits
 * on itself. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/handle.h"
#include "xla_internal.h"

typedef struct pending {
  struct pending *next;
  const XLA_FFI_Api *api;
  XLA_FFI_Future *future; /* NULL: a CUDA call */
  gpa_xla_dev *dev;       /* where a CUDA call's failure goes */
  gpa_actor *actor;
  gpa_handle *h;
  const char *target; /* a static string of the signature table */
  uint32_t n_wraps;
  gpa_xla_wrap wraps[];
} pending;

static pthread_once_t env_once = PTHREAD_ONCE_INIT, thread_once = PTHREAD_ONCE_INIT;
static int enabled, running;
static _Atomic uint64_t n_watched, n_done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pending *head, *tail;

static void complete(pending *p) {
  gpa_status st = gpa_xla_wait(p->h);
  char msg[512] = "";
  if (st != GPA_OK)
    snprintf(msg, sizeof msg, "%s: %s (%s)", p->target, gpa_handle_error_message(p->h), gpa_status_name(st));
  gpa_handle_release(p->h);
  for (uint32_t i = 0; i < p->n_wraps; i++) gpa_xla_wrap_put(p->actor, &p->wraps[i]);
  if (p->future && st != GPA_OK) {
    XLA_FFI_Future_SetError_Args a = {.struct_size = XLA_FFI_Future_SetError_Args_STRUCT_SIZE, .future = p->future,
                                      .error = gpa_xla_error_api(p->api, gpa_xla_code_of(st), "%s", msg)};
    p->api->XLA_FFI_Future_SetError(&a);
  } else if (p->future) {
    XLA_FFI_Future_SetAvailable_Args a = {.struct_size = XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE,
                                          .future = p->future};
    p->api->XLA_FFI_Future_SetAvailable(&a);
  } else if (st != GPA_OK && p->dev) {
    gpa_xla_cuda_defer_error(p->dev, gpa_xla_code_of(st), msg);
  }
  free(p);
  atomic_fetch_add(&n_done, 1);
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

static void start_thread(void) {
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  running = pthread_create(&t, &at, completer, NULL) == 0; /* lives as long as the process, like the actor */
  pthread_attr_destroy(&at);
}

static void read_env(void) {
  const char *v = getenv("GPA_XLA_ASYNC");
  enabled = v && !strcmp(v, "1");
}

void gpa_xla_watch_counts(uint64_t *watched, uint64_t *done) {
  *done = atomic_load(&n_done); /* first: never more done than watched */
  *watched = atomic_load(&n_watched);
}

int gpa_xla_watch(const XLA_FFI_Api *api, XLA_FFI_Future *future, gpa_xla_dev *dev, const char *target, gpa_actor *a,
                  gpa_handle *h, const gpa_xla_wrap *wraps, uint32_t n_wraps) {
  pthread_once(&thread_once, start_thread);
  pending *p = running ? malloc(sizeof *p + n_wraps * sizeof *wraps) : NULL;
  if (!p) return -1;
  *p = (pending){NULL, api, future, dev, a, h, target, n_wraps};
  memcpy(p->wraps, wraps, n_wraps * sizeof *wraps);
  atomic_fetch_add(&n_watched, 1);
  pthread_mutex_lock(&mu);
  if (tail) tail->next = p;
  else head = p;
  tail = p;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  return 0;
}

/* The call frame's `future` is not covered by its struct_size: XLA's header
 * still ends XLA_FFI_CallFrame_STRUCT_SIZE at `attrs` (jaxlib 0.10 passes
 * 168, the offset of `future`), though XLA reads the field back after
 * every call. An XLA whose API table has the future functions has the
 * field: that is the test. */
int gpa_xla_has_futures(const XLA_FFI_CallFrame *f) {
  const XLA_FFI_Api *api = f->api;
  return api && api->struct_size >= offsetof(XLA_FFI_Api, XLA_FFI_Future_SetError) + sizeof(void *) &&
         api->XLA_FFI_Future_Create && api->XLA_FFI_Future_SetAvailable && api->XLA_FFI_Future_SetError;
}

int gpa_xla_async_hand_over(XLA_FFI_CallFrame *f, const char *target, gpa_actor *a, gpa_handle *h,
                            const gpa_xla_wrap *wraps, uint32_t n_wraps) {
  pthread_once(&env_once, read_env);
  if (!enabled || !gpa_xla_has_futures(f)) return 0;
  XLA_FFI_Future_Create_Args c = {.struct_size = XLA_FFI_Future_Create_Args_STRUCT_SIZE};
  XLA_FFI_Error *e = f->api->XLA_FFI_Future_Create(&c);
  if (e || !c.future) {
    if (e) {
      XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, .error = e};
      f->api->XLA_FFI_Error_Destroy(&d);
    }
    return 0; /* no futures here: wait in the handler */
  }
  if (gpa_xla_watch(f->api, c.future, NULL, target, a, h, wraps, n_wraps) != 0) {
    /* A future XLA made must be completed: it is, at once, and the handler
     * waits for the op itself. */
    XLA_FFI_Future_SetAvailable_Args s = {.struct_size = XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE,
                                          .future = c.future};
    f->api->XLA_FFI_Future_SetAvailable(&s);
    return 0;
  }
  f->future = c.future;
  return 1;
}
