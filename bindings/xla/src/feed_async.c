/* Feed calls that do not block XLA's thread (XLA's asynchronous FFI).
 *
 * Where the call frame can carry a future, a feed call begins a batch on a
 * queue of its session, submits the infeed or outfeed and returns with
 * frame->future set; the session's worker thread syncs the batch (an
 * infeed's item has been copied into XLA's buffers, an outfeed's tensors
 * out of them) and completes the future, or fails it with the same errors
 * as the blocking path. XLA keeps the call's buffers alive until then and
 * runs what depends on it after.
 *
 * Implementation notes
 * - Each call takes a queue of its own from the session's pool (a new one
 *   when all are in flight): a parked infeed holds up only its own batch,
 *   and no call ever waits for another call's turn. Calls that XLA orders
 *   (an infeed taking the ack of an outfeed) run one after the other anyway,
 *   since XLA starts the second only once the first's future completed.
 * - Completing a future may run XLA's next work on the worker thread,
 *   handlers included. A feed call there only enqueues; an op handler
 *   blocks the worker while its op runs, which delays only this session's
 *   completions.
 * - The worker outlives its session: closing marks it, and it gives its
 *   queues back and ends once the jobs handed to it are done (their parked
 *   infeeds fail with CANCELLED at the close). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/feed.h"
#include "gpuactor/handle.h"
#include "xla_internal.h"

#define IDLE_QUEUES 8

typedef struct job {
  struct job *next;
  const XLA_FFI_Api *api;
  XLA_FFI_Future *future;
  gpa_queue *q;
  const char *target;
  uint32_t n_wraps;
  gpa_xla_wrap wraps[GPA_FEED_MAX_TENSORS];
} job;

struct gpa_xla_feed_worker {
  gpa_actor *actor;
  char tag[GPA_FEED_TAG_MAX];
  uint32_t tag_len;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job *head, *tail;
  int closing;
  gpa_queue *idle[IDLE_QUEUES];
  int n_idle;
};

static void give_queue(gpa_xla_feed_worker *w, gpa_queue *q) {
  pthread_mutex_lock(&w->mu);
  if (w->n_idle < IDLE_QUEUES) w->idle[w->n_idle++] = q, q = NULL;
  pthread_mutex_unlock(&w->mu);
  if (q) gpa_queue_destroy(q); /* the object stays valid: nothing here names it again */
}

static void finish(gpa_xla_feed_worker *w, job *j) {
  gpa_batch_stats bs = {.size = sizeof bs};
  gpa_status st = gpa_sync_batch(j->q, &bs);
  for (uint32_t i = 0; i < j->n_wraps; i++) gpa_xla_wrap_put(w->actor, &j->wraps[i]);
  give_queue(w, j->q); /* the sync ended the batch, and a timeout's taint with it */
  if (st == GPA_OK) {
    XLA_FFI_Future_SetAvailable_Args a = {.struct_size = XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE,
                                          .future = j->future};
    j->api->XLA_FFI_Future_SetAvailable(&a);
  } else {
    XLA_FFI_Future_SetError_Args a = {
        .struct_size = XLA_FFI_Future_SetError_Args_STRUCT_SIZE, .future = j->future,
        .error = gpa_xla_feed_error(j->api, j->target, st, w->tag, (int)w->tag_len,
                                    st == GPA_ECANCELED ? "the session was closed" : bs.first_error_message)};
    j->api->XLA_FFI_Future_SetError(&a);
  }
  free(j);
}

static void *worker_main(void *arg) {
  gpa_xla_feed_worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->closing) pthread_cond_wait(&w->cv, &w->mu);
    job *j = w->head;
    if (!j) break; /* closing, and nothing left */
    if (!(w->head = j->next)) w->tail = NULL;
    pthread_mutex_unlock(&w->mu);
    finish(w, j);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < w->n_idle; i++) gpa_queue_destroy(w->idle[i]);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
  return NULL;
}

gpa_xla_feed_worker *gpa_xla_feed_worker_start(gpa_actor *a, const void *tag, uint32_t tag_len) {
  gpa_xla_feed_worker *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->actor = a;
  memcpy(w->tag, tag, tag_len);
  w->tag_len = tag_len;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &at, worker_main, w);
  pthread_attr_destroy(&at);
  if (rc != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return NULL; /* the session's calls then block, as without futures */
  }
  return w;
}

void gpa_xla_feed_worker_close(gpa_xla_feed_worker *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->closing = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Fails the call through its future: once XLA has a future it takes the
 * call's outcome from it. */
static void fail(const XLA_FFI_Api *api, XLA_FFI_Future *fut, XLA_FFI_Error *e) {
  XLA_FFI_Future_SetError_Args a = {.struct_size = XLA_FFI_Future_SetError_Args_STRUCT_SIZE, .future = fut, .error = e};
  api->XLA_FFI_Future_SetError(&a);
}

int gpa_xla_feed_async(XLA_FFI_CallFrame *f, const char *target, gpa_xla_feed_worker *w, gpa_feed *feed, int in,
                       const gpa_tensor *t, uint32_t n, int64_t timeout_ns, const gpa_xla_wrap *wraps,
                       uint32_t n_wraps) {
  XLA_FFI_Future_Create_Args c = {.struct_size = XLA_FFI_Future_Create_Args_STRUCT_SIZE};
  XLA_FFI_Error *e = f->api->XLA_FFI_Future_Create(&c);
  if (e || !c.future) {
    if (e) {
      XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, .error = e};
      f->api->XLA_FFI_Error_Destroy(&d);
    }
    return 0; /* no future: the blocking path */
  }
  f->future = c.future;
  job *j = malloc(sizeof *j);
  gpa_queue *q = NULL;
  pthread_mutex_lock(&w->mu);
  if (w->n_idle) q = w->idle[--w->n_idle];
  pthread_mutex_unlock(&w->mu);
  gpa_status st = !j ? GPA_ENOMEM : q ? GPA_OK : gpa_queue_create(w->actor, "xla feed", &q);
  int begun = 0;
  if (st == GPA_OK && (st = gpa_batch_begin(q, target)) == GPA_OK && (begun = 1))
    st = in ? gpa_infeed(q, feed, t, n, timeout_ns, NULL) : gpa_outfeed(q, feed, t, n, NULL);
  if (st != GPA_OK) {
    fail(f->api, c.future, gpa_xla_feed_error(f->api, target, st, w->tag, (int)w->tag_len,
                                              j ? gpa_last_error_message() : "out of memory"));
    if (begun) gpa_sync_batch(q, NULL); /* ends the empty batch */
    if (q) give_queue(w, q);
    free(j);
    return -1;
  }
  *j = (job){.api = f->api, .future = c.future, .q = q, .target = target, .n_wraps = n_wraps};
  memcpy(j->wraps, wraps, n_wraps * sizeof *wraps);
  pthread_mutex_lock(&w->mu);
  if (w->tail) w->tail->next = j;
  else w->head = j;
  w->tail = j;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return 1;
}
