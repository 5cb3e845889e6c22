#ifndef GPUACTOR_FEED_H
#define GPUACTOR_FEED_H
#include <stdint.h>

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

/* Feed sessions: tagged channels between host code and device queues.
 *
 * Host code pushes items (n host tensors each) into a session; an infeed op
 * in a queue takes the next item into device tensors. An outfeed op copies
 * device tensors out and delivers them, with the session's tag, to its sink:
 * a callback or an internal queue drained by gpa_outfeed_pop. Sessions are
 * independent: many share one actor, none sees another's data. */
typedef struct gpa_feed gpa_feed;

/* A host-side tensor: the bytes of a row-major contiguous array. */
typedef struct gpa_host_tensor {
  const void *data;
  uint64_t bytes; /* must equal numel * dtype size */
  int32_t dtype;
  uint32_t rank;
  int64_t shape[GPA_MAX_RANK];
} gpa_host_tensor;

/* Outfeed sink. Called on the session's delivery thread (one per session
 * with a sink; never the actor thread), one item at a time in submission
 * order. tensors and tag are valid during the call only. */
typedef void (*gpa_outfeed_fn)(gpa_feed *session, const void *tag, uint32_t tag_len, const gpa_host_tensor *tensors,
                               uint32_t n, void *user_data);

typedef enum gpa_outfeed_policy {
  GPA_OUTFEED_PARK = 0, /* a full outfeed parks the producing queue until there is room */
  GPA_OUTFEED_FAIL = 1  /* a full outfeed fails the outfeed op with GPA_EAGAIN */
} gpa_outfeed_policy;

typedef struct gpa_feed_options {
  uint32_t size;              /* sizeof(gpa_feed_options), or 0 */
  const void *tag;            /* opaque bytes (e.g. an encoded pid), copied */
  uint32_t tag_len;           /* <= 64 */
  gpa_outfeed_fn sink;        /* NULL: outfeed items wait for gpa_outfeed_pop */
  void *user_data;            /* passed to sink */
  uint32_t outfeed_capacity;  /* undelivered outfeed items; 0 = 64 */
  int32_t outfeed_policy;     /* gpa_outfeed_policy */
  uint32_t infeed_capacity;   /* pushed items not yet taken; 0 = 1024; more: EAGAIN */
} gpa_feed_options;

/* Opens a session. Any thread; does not wait for the actor. Errors: EINVAL
 * (tag past GPA_FEED_TAG_MAX, bad policy), ENOMEM, ESHUTDOWN. */
gpa_status gpa_feed_open(gpa_actor *actor, const gpa_feed_options *opts, gpa_feed **out);
/* Closes the session: infeed ops parked on it and outfeed items not yet
 * delivered complete with GPA_ECANCELED, pushed items not taken are freed,
 * later calls naming it answer ECLOSED (ops that were already submitted
 * complete with ECANCELED when their turn comes). Waits for the delivery
 * thread to finish its current callback. The session is freed once nothing
 * refers to it; the caller must not use it after this returns. Any thread
 * but the sink's own. Errors: EINVAL (NULL, the sink's own thread), ECLOSED
 * (closed already). */
gpa_status gpa_feed_close(gpa_feed *session);
/* A number unique within the actor. */
uint64_t gpa_feed_id(const gpa_feed *session);

/* Pushes one item of n tensors (copied before the call returns). Any thread.
 * Errors: EINVAL (also past GPA_FEED_MAX_TENSORS), EDTYPE, ESHAPE (bytes do
 * not match the shape), ECLOSED, EAGAIN (infeed_capacity items are waiting),
 * ESHUTDOWN, ENOMEM. */
gpa_status gpa_infeed_push(gpa_feed *session, const gpa_host_tensor *tensors, uint32_t n);

/* Queues an infeed op: when its turn comes it takes the session's next item
 * and copies tensor i into outputs[i]; dtypes and shapes must match exactly
 * (else the op fails with EDTYPE/ESHAPE naming the tensor). If no item is
 * there the queue parks — other queues keep running — until one is pushed or
 * timeout_ns passes (< 0: no limit). On a timeout the op fails with
 * GPA_ETIMEDOUT and so does every later message of the queue up to the end
 * of its batch (they depend on the missing data): they complete without
 * running. The next gpa_batch_begin or gpa_sync_batch ends that. Any thread.
 * Errors at the call: EINVAL (also past GPA_FEED_MAX_TENSORS), EDTYPE,
 * ERANGE, EOVERFLOW, ESTALE, ECLOSED (queue or session), ESHUTDOWN, EAGAIN,
 * ETIMEDOUT (mailbox full past full_timeout_ns), ENOMEM. */
gpa_status gpa_infeed(gpa_queue *q, gpa_feed *session, const gpa_tensor *outputs, uint32_t n, int64_t timeout_ns,
                      gpa_handle **out);

/* Queues an outfeed op: copies inputs[0..n) to host memory and, once they
 * have landed, delivers them to the session in submission order. The handle
 * completes when the item is delivered (the sink returned, or
 * gpa_outfeed_pop took it) or with ECANCELED if the session closes first; a
 * batch sync does not wait for delivery. A full outfeed parks the queue or
 * fails the op per outfeed_policy. Any thread. Errors at the call: EINVAL
 * (also past GPA_FEED_MAX_TENSORS), EDTYPE, ERANGE, EOVERFLOW, ESTALE,
 * ECLOSED (queue or session), ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_outfeed(gpa_queue *q, gpa_feed *session, const gpa_tensor *inputs, uint32_t n, gpa_handle **out);

/* Sessions without a sink: takes the next delivered item (waits up to
 * timeout_ns; < 0: no limit). The item is a handle: read it with
 * gpa_outfeed_item_tensor, release it with gpa_handle_release. Any thread.
 * Errors: EINVAL (NULL, or a session with a sink), ETIMEDOUT (none came),
 * ECLOSED (after close). */
gpa_status gpa_outfeed_pop(gpa_feed *session, int64_t timeout_ns, gpa_handle **item);
/* Tensors of a popped outfeed item. Valid while the handle is held.
 * gpa_outfeed_item_tensor errors: EINVAL (not an outfeed item), EPENDING
 * (not delivered yet), ERANGE (i past the count). */
uint32_t gpa_outfeed_item_count(const gpa_handle *item);
gpa_status gpa_outfeed_item_tensor(const gpa_handle *item, uint32_t i, gpa_host_tensor *out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
