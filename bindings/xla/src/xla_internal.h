/* Shared by the handler files: the call signature tables and the one
 * function that runs a call (run.c). */
#ifndef GPA_XLA_INTERNAL_H
#define GPA_XLA_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#include "gpuactor/actor.h"
#include "ffi_version.h"
#include "gpuactor_xla.h"

/* An attribute a typed handler accepts. */
typedef struct gpa_xla_attr_spec {
  const char *name;
  int32_t type; /* GPA_ATTR_INT or GPA_ATTR_FLOAT */
  int32_t required;
} gpa_xla_attr_spec;

#define GPA_XLA_ANY_RANK (-1)

/* What a handler accepts. args/rets NULL: the generic handler (any count,
 * the op's name from the string attribute "op", every scalar attribute
 * passed on). */
typedef struct gpa_xla_sig {
  const char *target; /* custom call target name: the prefix of every message */
  const char *op;     /* gpuactor op; variants: pick_op */
  const char *const *args;
  const int8_t *arg_rank;
  uint32_t min_args, max_args;
  const char *const *rets;
  const int8_t *ret_rank;
  uint32_t min_rets, max_rets;
  const gpa_xla_attr_spec *attrs;
  uint32_t n_attrs;
  /* Chooses the op among variants by arity or attribute (linear with or
   * without bias or fused GELU), and may drop attributes the variant does
   * not take (*n_attrs); NULL: op. */
  const char *(*pick_op)(const struct gpa_xla_sig *sig, uint32_t n_args, uint32_t n_rets, const gpa_attr *attrs,
                         uint32_t *n_attrs);
} gpa_xla_sig;

/* Runs a call on the host actor (XLA's host buffers; waits for the op) or,
 * cuda = 1, on XLA's device's actor (XLA's device buffers, ordered with
 * XLA's stream by events; returns once the op is enqueued). */
XLA_FFI_Error *gpa_xla_run(XLA_FFI_CallFrame *frame, const gpa_xla_sig *sig, int cuda);

/* The XLA error for `code` with a printf message; NULL if XLA could not
 * make one (nothing better to return then). */
XLA_FFI_Error *gpa_xla_error(const XLA_FFI_CallFrame *frame, XLA_FFI_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Answers XLA's metadata query (registration asks each handler which FFI
 * version it was built against); 1 if the frame was that query. */
int gpa_xla_metadata(XLA_FFI_CallFrame *frame, XLA_FFI_Error **err);

/* The host actor, created once (pthread_once); NULL with *msg on failure. */
gpa_actor *gpa_xla_host_actor(const char **msg);

/* The wrap cache (wrap.c): XLA's memory as an external buffer id. get
 * takes a use of the id (a wrap on a miss); put gives the use back. */
typedef struct gpa_xla_wrap {
  gpa_buffer_id id;
  uint64_t offset; /* of the pointer from the aligned base that was wrapped */
  int32_t slot;    /* cache slot, or -1: wrapped for this call only */
} gpa_xla_wrap;
gpa_status gpa_xla_wrap_get(gpa_actor *a, void *ptr, uint64_t bytes, gpa_xla_wrap *out);
void gpa_xla_wrap_put(gpa_actor *a, const gpa_xla_wrap *w);

void gpa_xla_count_call(void);
/* Waits for an op's handle (run.c says how); its status. */
gpa_status gpa_xla_wait(struct gpa_handle *h);
XLA_FFI_Error_Code gpa_xla_code_of(gpa_status st);
XLA_FFI_Error *gpa_xla_error_api(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* XLA's asynchronous FFI (GPA_XLA_ASYNC=1, async.c): instead of waiting,
 * the handler sets frame->future and a completion thread awaits h, gives
 * the wraps back and completes the future. 1 if handed over (h and the wraps
 * are then the async path's), 0 to wait in the handler. */
int gpa_xla_async_hand_over(XLA_FFI_CallFrame *frame, const char *target, gpa_actor *a, struct gpa_handle *h,
                            const gpa_xla_wrap *wraps, uint32_t n_wraps);

/* The CUDA side (cuda.c): one actor per XLA device. */
typedef struct gpa_xla_dev gpa_xla_dev;
/* XLA's stream (a CUstream) and device ordinal of a call frame. */
XLA_FFI_Error *gpa_xla_cuda_stream(XLA_FFI_CallFrame *f, const char *target, void **stream, int *ordinal);
/* The device's actor and driver state, made on first use; NULL with *why. */
gpa_xla_dev *gpa_xla_cuda_device(int ordinal, const char **why);
gpa_actor *gpa_xla_cuda_actor(gpa_xla_dev *d);
/* The queue of XLA's stream on d (made on its first call; the default
 * queue past the map's bound). */
gpa_queue *gpa_xla_cuda_queue(gpa_xla_dev *d, void *stream);
/* One call's ordering with XLA's stream, by events on the device (the call
 * waits for neither): begin makes q's next messages wait for XLA's work so
 * far on stream (an op on q, no round trip; pre: its handle, NULL with
 * GPA_XLA_WAIT_CALL=1); end makes stream's next work wait for q's messages
 * so far (one round trip) and gives the events back. After a begin that
 * succeeded, end must follow, also when nothing was submitted between. */
typedef struct gpa_xla_order {
  void *ev_in, *ev_out;
  struct gpa_handle *pre;
} gpa_xla_order;
XLA_FFI_Error *gpa_xla_cuda_begin(XLA_FFI_CallFrame *f, const char *target, gpa_xla_dev *d, void *stream,
                                  gpa_queue *q, gpa_xla_order *o);
XLA_FFI_Error *gpa_xla_cuda_end(XLA_FFI_CallFrame *f, const char *target, gpa_xla_dev *d, void *stream,
                                gpa_queue *q, gpa_xla_order *o);
/* An op that failed after its call returned: kept (the first one) until the
 * device's next call, which returns it (take). */
void gpa_xla_cuda_defer_error(gpa_xla_dev *d, XLA_FFI_Error_Code code, const char *msg);
XLA_FFI_Error *gpa_xla_cuda_take_deferred(XLA_FFI_CallFrame *f, const char *target, gpa_xla_dev *d);
uint64_t gpa_xla_cuda_deferred_count(void);

/* The completion thread (async.c): awaits pre (NULL: none) and h, gives
 * the wraps back, then
 * completes `future` (when not NULL) with the op's status, or keeps a
 * failure for dev's next call (when dev is not NULL). 0 if taken (h and the
 * wraps are then its), -1 if it cannot (no thread or memory: wait in the
 * handler). */
int gpa_xla_watch(const XLA_FFI_Api *api, XLA_FFI_Future *future, gpa_xla_dev *dev, const char *target,
                  gpa_actor *a, struct gpa_handle *pre, struct gpa_handle *h, const gpa_xla_wrap *wraps,
                  uint32_t n_wraps);
void gpa_xla_watch_counts(uint64_t *watched, uint64_t *done);
/* A CUDA feed call (cuda_feed.c): as gpa_xla_watch with dev, h may be
 * NULL, and then syncs q's batch and gives q back
 * (gpa_xla_cuda_feed_queue_back). quiet: the call failed already (nothing
 * more is reported, and it is not counted in the stats). */
int gpa_xla_watch_feed(gpa_xla_dev *dev, const char *target, gpa_actor *a, struct gpa_handle *pre,
                       struct gpa_handle *h, gpa_queue *q, int quiet, const gpa_xla_wrap *wraps, uint32_t n_wraps);
void gpa_xla_cuda_feed_queue_back(gpa_xla_dev *d, gpa_queue *q);
/* cuda.c: the ordinal; an s32 0 written to device memory on stream (the
 * outfeed's ack); 0 or a message. */
int gpa_xla_cuda_ordinal(const gpa_xla_dev *d);
const char *gpa_xla_cuda_zero32(gpa_xla_dev *d, void *ptr, void *stream);
/* feed.c: the session table, shared with cuda_feed.c. find: under the
 * lock, the session of a tag (NULL: none) and its device (-1: the host). */
void gpa_xla_sessions_lock(void);
void gpa_xla_sessions_unlock(void);
struct gpa_feed *gpa_xla_session_find(const void *tag, uint32_t tag_len, int *device);
/* The start of a feed call (infeed when in, else outfeed), host or CUDA:
 * its *target name; the metadata query and the stages before EXECUTE end
 * the call (1, *err its result), as does a failed check of the attributes
 * (the session *tag; timeout_ms for an infeed, as *timeout_ns, -1 for
 * none), of 1 to GPA_FEED_MAX_TENSORS tensors (*n) and of an outfeed's one
 * s32 scalar result (*ack; NULL for an infeed). 0: the call goes on. */
int gpa_xla_feed_start(XLA_FFI_CallFrame *f, int in, const char **target, XLA_FFI_ByteSpan *tag,
                       int64_t *timeout_ns, int64_t *n, const XLA_FFI_Buffer **ack, XLA_FFI_Error **err);
XLA_FFI_Error *gpa_xla_feed_wrap(XLA_FFI_CallFrame *f, const char *target, gpa_actor *a, int is_ret, int64_t first,
                                 int64_t n, gpa_tensor *t, gpa_xla_wrap *w, uint32_t *n_wrapped);

/* Feed calls (feed.c) and their asynchronous path (feed_async.c). */
struct gpa_feed;
XLA_FFI_Error *gpa_xla_feed_error(const XLA_FFI_Api *api, const char *target, gpa_status st, const char *tag,
                                  int tag_len, const char *what);
typedef struct gpa_xla_feed_worker gpa_xla_feed_worker;
/* A session's worker thread; NULL if none could start (its calls block). */
gpa_xla_feed_worker *gpa_xla_feed_worker_start(gpa_actor *a, const void *tag, uint32_t tag_len);
/* After gpa_feed_close: the worker ends once the calls handed to it are. */
void gpa_xla_feed_worker_close(gpa_xla_feed_worker *w);
/* 1 if the frame can carry a future (async.c says how that is told). */
int gpa_xla_has_futures(const XLA_FFI_CallFrame *f);
/* Submits the call on a queue of the session and hands its end to the
 * worker: 1 (frame->future set; the wraps are the worker's), -1 (failed
 * through the future; the wraps stay the caller's), 0 (XLA made no future:
 * block instead). */
int gpa_xla_feed_async(XLA_FFI_CallFrame *f, const char *target, gpa_xla_feed_worker *w, struct gpa_feed *feed,
                       int in, const gpa_tensor *t, uint32_t n, int64_t timeout_ns, const gpa_xla_wrap *wraps,
                       uint32_t n_wraps);
#endif
