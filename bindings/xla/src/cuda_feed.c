/* Feed calls of a CUDA XLA program: gpuactor_infeed and gpuactor_outfeed
 * on XLA's device buffers, with a session opened on that device
 * (gpa_xla_cuda_session_open).
 *
 * A call writes the outfeed's ack (0) on XLA's stream, takes a queue of
 * the device's feed pool, begins a batch on it
 * (which ends the taint a timed-out infeed left), makes it wait for XLA's
 * stream, submits the infeed or outfeed and has XLA's stream wait for it,
 * all by events as the op calls do (cuda.c). The round trip of that last
 * step returns once the actor has run the feed message: an infeed has taken
 * its item (its copy into XLA's buffer enqueued on the device) or failed,
 * an outfeed has enqueued its copy out (or parked for room and then done
 * so). So the call waits on the host for the session's producer (an item
 * to take; room in the outfeed), never for the GPU; a timeout, a closed
 * session or an item that does not match fail the call itself, naming the
 * session. The completion thread syncs the batch once its work has run on
 * the device (for an outfeed that is a noop after it: the outfeed's own
 * handle completes only when the host pops the item), gives the wraps and
 * the queue back, and keeps a later failure for the device's next call.
 *
 * Why a queue per call and not the stream's: a batch must be synced before
 * the next one begins on its queue, and the sync waits for the device; with
 * a queue per call in flight, the sync happens on the completion thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/feed.h"
#include "gpuactor/handle.h"
#include "gpuactor/op.h"
#include "xla_internal.h"

#define MAX_DEVICES 16
#define IDLE_QUEUES 8

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  gpa_queue *idle[IDLE_QUEUES];
  int n;
} pools[MAX_DEVICES];

static gpa_status take_queue(gpa_xla_dev *d, gpa_queue **q) {
  int o = gpa_xla_cuda_ordinal(d);
  *q = NULL;
  pthread_mutex_lock(&pool_mu);
  if (pools[o].n) *q = pools[o].idle[--pools[o].n];
  pthread_mutex_unlock(&pool_mu);
  return *q ? GPA_OK : gpa_queue_create(gpa_xla_cuda_actor(d), "xla cuda feed", q);
}

void gpa_xla_cuda_feed_queue_back(gpa_xla_dev *d, gpa_queue *q) {
  int o = gpa_xla_cuda_ordinal(d);
  pthread_mutex_lock(&pool_mu);
  if (pools[o].n < IDLE_QUEUES) pools[o].idle[pools[o].n++] = q, q = NULL;
  pthread_mutex_unlock(&pool_mu);
  if (q) gpa_queue_destroy(q); /* its batch was synced: nothing names it again */
}

static void drop(const XLA_FFI_Api *api, XLA_FFI_Error *e) {
  if (!e) return;
  XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, .error = e};
  api->XLA_FFI_Error_Destroy(&d);
}

static XLA_FFI_Error *cuda_feed_call(XLA_FFI_CallFrame *f, int in) {
  const char *target;
  XLA_FFI_ByteSpan tag;
  int64_t timeout_ns, n;
  const XLA_FFI_Buffer *ack;
  XLA_FFI_Error *e;
  if (gpa_xla_feed_start(f, in, &target, &tag, &timeout_ns, &n, &ack, &e)) return e;
  void *stream;
  int ordinal;
  const char *why = "";
  if ((e = gpa_xla_cuda_stream(f, target, &stream, &ordinal))) return e;
  gpa_xla_dev *d = gpa_xla_cuda_device(ordinal, &why);
  if (!d) return gpa_xla_error(f, XLA_FFI_Error_Code_UNAVAILABLE, "%s: %s", target, why);
  if ((e = gpa_xla_cuda_take_deferred(f, target, d))) return e;
  gpa_actor *a = gpa_xla_cuda_actor(d);

  gpa_tensor t[GPA_FEED_MAX_TENSORS];
  gpa_xla_wrap w[GPA_FEED_MAX_TENSORS];
  uint32_t n_wrapped = 0;
  gpa_queue *q = NULL;
  gpa_xla_order o = {0};
  gpa_handle *h = NULL, *done = NULL;
  int begun = 0, ordered = 0;
  gpa_status st = GPA_OK;
  char why_submit[256] = "";
  e = gpa_xla_feed_wrap(f, target, a, in, 0, n, t, w, &n_wrapped);
  if (!e) {
    /* Held until the feed message is submitted: the session cannot close
     * in between (the submitted message then holds it). */
    gpa_xla_sessions_lock();
    int dev = -1;
    gpa_feed *feed = gpa_xla_session_find(tag.ptr, (uint32_t)tag.len, &dev);
    if (!feed) {
      e = gpa_xla_error(f, XLA_FFI_Error_Code_NOT_FOUND, "%s: attribute 'session': no open session '%.*s'", target,
                        (int)tag.len, tag.ptr);
    } else if (dev != ordinal) {
      char where[32] = "the host";
      if (dev >= 0) snprintf(where, sizeof where, "CUDA device %d", dev);
      e = gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "%s: attribute 'session': session '%.*s' is on %s, and this call runs on CUDA device %d",
                        target, (int)tag.len, tag.ptr, where, ordinal);
    } else if (ack && (why = gpa_xla_cuda_zero32(d, ack->data, stream))) {
      e = gpa_xla_error(f, XLA_FFI_Error_Code_INTERNAL, "%s: cuMemsetD32Async of the ack: %s", target, why);
    } else if ((st = take_queue(d, &q)) != GPA_OK) {
      snprintf(why_submit, sizeof why_submit, "%s", gpa_last_error_message());
    } else {
      gpa_batch_options bo = {.size = sizeof bo, .graph = GPA_GRAPH_OFF};
      if ((st = gpa_batch_begin_opts(q, target, &bo)) != GPA_OK)
        snprintf(why_submit, sizeof why_submit, "%s", gpa_last_error_message());
      else if ((begun = 1) && !(e = gpa_xla_cuda_begin(f, target, d, stream, q, &o)) && (ordered = 1)) {
        st = in ? gpa_infeed(q, feed, t, (uint32_t)n, timeout_ns, &h)
                : gpa_outfeed(q, feed, t, (uint32_t)n, &h);
        if (st != GPA_OK) snprintf(why_submit, sizeof why_submit, "%s", gpa_last_error_message());
      }
    }
    gpa_xla_sessions_unlock();
    if (!e && st != GPA_OK) e = gpa_xla_feed_error(f->api, target, st, tag.ptr, (int)tag.len, why_submit);
  }
  if (ordered) {
    if (!e && !in) {
      /* The outfeed's handle completes when the host pops the item: the
       * noop after it completes once its copy has landed. */
      gpa_op_call nop = {"noop", NULL, 0, NULL, 0, NULL, 0};
      if ((st = gpa_submit(q, &nop, &done)) != GPA_OK)
        e = gpa_xla_feed_error(f->api, target, st, tag.ptr, (int)tag.len, gpa_last_error_message());
    }
    XLA_FFI_Error *e_end = gpa_xla_cuda_end(f, target, d, stream, q, &o);
    if (e) drop(f->api, e_end);
    else e = e_end;
  }
  if (!e && h) {
    /* After the round trip the feed message has run or failed: a failure
     * (timeout, closed session, an item that does not match) has completed
     * its handle already. */
    st = gpa_handle_status(h);
    if (st != GPA_OK && st != GPA_EPENDING)
      e = gpa_xla_feed_error(f->api, target, st, tag.ptr, (int)tag.len,
                             st == GPA_ECANCELED ? "the session was closed" : gpa_handle_error_message(h));
  }
  if (!in) {
    gpa_handle_release(h); /* the message completes at delivery all the same */
    h = done, done = NULL;
  }
  if (!e) gpa_xla_count_call();
  if (!begun) {
    if (q) gpa_xla_cuda_feed_queue_back(d, q);
    for (uint32_t i = 0; i < n_wrapped; i++) gpa_xla_wrap_put(a, &w[i]);
    return e;
  }
  /* The batch's work may still be on the device (the queue waits for XLA's
   * stream): the completion thread syncs it and gives everything back. */
  if (gpa_xla_watch_feed(d, target, a, o.pre, h, q, e != NULL, w, n_wrapped) == 0) return e;
  gpa_batch_stats bs = {.size = sizeof bs};
  st = gpa_sync_batch(q, &bs); /* no completion thread: wait here */
  if (!e && st != GPA_OK)
    e = gpa_xla_feed_error(f->api, target, st, tag.ptr, (int)tag.len, bs.first_error_message);
  gpa_handle_release(o.pre);
  gpa_handle_release(h);
  gpa_xla_cuda_feed_queue_back(d, q);
  for (uint32_t i = 0; i < n_wrapped; i++) gpa_xla_wrap_put(a, &w[i]);
  return e;
}

XLA_FFI_Error *gpa_xla_cuda_infeed(XLA_FFI_CallFrame *f) { return cuda_feed_call(f, 1); }
XLA_FFI_Error *gpa_xla_cuda_outfeed(XLA_FFI_CallFrame *f) { return cuda_feed_call(f, 0); }
