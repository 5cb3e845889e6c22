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
 * One thread completes each call once its handles have: the oldest first
 * among those that are, without waiting for an older one still running on
 * another queue (a stalled XLA stream). Completing a future may run XLA's next work on that thread,
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
  gpa_handle *pre; /* the queue's wait for XLA's stream (CUDA), or NULL */
  gpa_handle *h;
  gpa_queue *batch_q; /* a CUDA feed call's queue: synced, then given back (cuda_feed.c) */
  int quiet;          /* the call has failed already: nothing more to report, not counted */
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
  gpa_status st = p->pre ? gpa_xla_wait(p->pre) : GPA_OK;
  gpa_handle *first = p->pre;
  if (st == GPA_OK) st = gpa_xla_wait(p->h), first = p->h;
  char msg[512] = "";
  if (st != GPA_OK)
    snprintf(msg, sizeof msg, "%s: %s (%s)", p->target, gpa_handle_error_message(first), gpa_status_name(st));
  if (p->pre && first == p->pre) gpa_xla_wait(p->h); /* the op's wraps are in use until it is done */
  if (p->batch_q) {
    /* Everything of the batch has run (its last message was p->h): the
     * sync does not wait for the device, and collects a failure no handle
     * showed (an outfeed's copy). */
    gpa_batch_stats bs = {.size = sizeof bs};
    gpa_status bst = gpa_sync_batch(p->batch_q, &bs);
    if (st == GPA_OK && bst != GPA_OK)
      st = bst, snprintf(msg, sizeof msg, "%s: %s (%s)", p->target, bs.first_error_message, gpa_status_name(bst));
    gpa_xla_cuda_feed_queue_back(p->dev, p->batch_q);
  }
  gpa_handle_release(p->pre);
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
  } else if (st != GPA_OK && p->dev && !p->quiet) {
    gpa_xla_cuda_defer_error(p->dev, gpa_xla_code_of(st), msg);
  }
  if (!p->quiet) atomic_fetch_add(&n_done, 1);
  free(p);
}

static int settled(const pending *p) {
  return (!p->pre || gpa_handle_status(p->pre) != GPA_EPENDING) && (!p->h || gpa_handle_status(p->h) != GPA_EPENDING);
}

/* Completes whatever has settled, oldest first, and otherwise waits a
 * little on the oldest: the CUDA calls come from several queues (one per
 * XLA stream, cuda.c), and a stalled stream's op must not hold up the
 * completion of another stream's, nor a host call's future. Only this
 * thread removes entries, so `oldest` stays valid outside the lock. */
static void *completer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!head) pthread_cond_wait(&cv, &mu);
    pending *done = NULL, **done_tail = &done, *oldest = head;
    tail = NULL;
    for (pending **pp = &head; *pp;) {
      pending *p = *pp;
      if (settled(p)) {
        *pp = p->next;
        p->next = NULL;
        *done_tail = p, done_tail = &p->next;
      } else {
        tail = p, pp = &p->next;
      }
    }
    pthread_mutex_unlock(&mu);
    if (!done) {
      gpa_await(oldest->pre && gpa_handle_status(oldest->pre) == GPA_EPENDING ? oldest->pre : oldest->h, 1000000);
      continue;
    }
    for (pending *p = done, *next; p; p = next) {
      next = p->next;
      complete(p);
    }
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

static int enqueue(const pending *tmpl, const gpa_xla_wrap *wraps, uint32_t n_wraps) {
  pthread_once(&thread_once, start_thread);
  pending *p = running ? malloc(sizeof *p + n_wraps * sizeof *wraps) : NULL;
  if (!p) return -1;
  *p = *tmpl;
  p->next = NULL, p->n_wraps = n_wraps;
  memcpy(p->wraps, wraps, n_wraps * sizeof *wraps);
  if (!p->quiet) atomic_fetch_add(&n_watched, 1);
  pthread_mutex_lock(&mu);
  if (tail) tail->next = p;
  else head = p;
  tail = p;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  return 0;
}

int gpa_xla_watch(const XLA_FFI_Api *api, XLA_FFI_Future *future, gpa_xla_dev *dev, const char *target, gpa_actor *a,
                  gpa_handle *pre, gpa_handle *h, const gpa_xla_wrap *wraps, uint32_t n_wraps) {
  pending t = {.api = api, .future = future, .dev = dev, .actor = a, .pre = pre, .h = h, .target = target};
  return enqueue(&t, wraps, n_wraps);
}

int gpa_xla_watch_feed(gpa_xla_dev *dev, const char *target, gpa_actor *a, gpa_handle *pre, gpa_handle *h,
                       gpa_queue *q, int quiet, const gpa_xla_wrap *wraps, uint32_t n_wraps) {
  pending t = {.dev = dev, .actor = a, .pre = pre, .h = h, .batch_q = q, .quiet = quiet, .target = target};
  return enqueue(&t, wraps, n_wraps);
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
  if (gpa_xla_watch(f->api, c.future, NULL, target, a, NULL, h, wraps, n_wraps) != 0) {
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
