/* Feed sessions as custom calls: gpuactor_infeed and gpuactor_outfeed name
 * their session by the string attribute "session" (its tag).
 *
 * Each session has a queue of its own, so that an infeed parked on an empty
 * session holds up neither the op handlers nor other sessions; each call is
 * one batch on it, so a timed-out infeed poisons nothing after it, and the
 * batch's sync is the point where XLA's buffers are done with (an outfeed's
 * copy has landed even when nobody has popped it yet). Where XLA's call
 * frame takes a future, the call does not wait for that sync: it hands it
 * to the session's worker (feed_async.c) and returns. GPA_XLA_FEED_ASYNC=0
 * keeps every call blocking (for measuring). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/feed.h"
#include "gpuactor/handle.h"
#include "xla_internal.h"

#define SESSIONS 64

typedef struct session {
  char tag[GPA_FEED_TAG_MAX];
  uint32_t tag_len;
  int device; /* -1: the host actor's; else the CUDA device's (cuda_feed.c), with no q or worker */
  gpa_feed *feed; /* NULL: free slot */
  gpa_queue *q;   /* the blocking calls' */
  gpa_xla_feed_worker *worker; /* the calls with futures; NULL: every call blocks */
} session;

/* Handlers hold `mu` for reading from the lookup until their ops are
 * submitted (the ops then hold the session); close takes it for writing, so
 * gpa_feed_close never runs while a handler is about to name the feed. The
 * slot's call lock orders the calls of a session (one batch at a time on its
 * queue) and is a static object: a handler may still hold it when the slot
 * is reused. */
static pthread_rwlock_t mu = PTHREAD_RWLOCK_INITIALIZER;
static session slots[SESSIONS];
static pthread_mutex_t call_mu[SESSIONS];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int no_async;

static void init_locks(void) {
  for (int i = 0; i < SESSIONS; i++) pthread_mutex_init(&call_mu[i], NULL);
  const char *v = getenv("GPA_XLA_FEED_ASYNC");
  no_async = v && !strcmp(v, "0");
}

/* Opens a session on actor a (device -1: the host's, with a queue and a
 * worker for the host calls). Tags are unique across host and devices. */
static int open_session(gpa_actor *a, int device, const gpa_feed_options *opts, gpa_feed **out, char *msg,
                        uint64_t msg_size) {
  *out = NULL;
  pthread_once(&once, init_locks);
  if (!opts || opts->tag_len == 0 || opts->tag_len > GPA_FEED_TAG_MAX)
    return snprintf(msg, msg_size, "a session needs a tag of 1 to %d bytes", GPA_FEED_TAG_MAX), -1;
  pthread_rwlock_wrlock(&mu);
  int free_slot = -1;
  for (int i = 0; i < SESSIONS; i++) {
    session *s = &slots[i];
    if (!s->feed) {
      if (free_slot < 0) free_slot = i;
    } else if (s->tag_len == opts->tag_len && !memcmp(s->tag, opts->tag, s->tag_len)) {
      pthread_rwlock_unlock(&mu);
      return snprintf(msg, msg_size, "session '%.*s' is open already", (int)s->tag_len, s->tag), -1;
    }
  }
  int rc = -1;
  gpa_feed *f = NULL;
  gpa_queue *q = NULL;
  if (free_slot < 0) {
    snprintf(msg, msg_size, "%d sessions are open already", SESSIONS);
  } else if (gpa_feed_open(a, opts, &f) != GPA_OK) {
    snprintf(msg, msg_size, "gpa_feed_open: %s", gpa_last_error_message());
  } else if (device < 0 && gpa_queue_create(a, "xla feed", &q) != GPA_OK) {
    snprintf(msg, msg_size, "gpa_queue_create: %s", gpa_last_error_message());
    gpa_feed_close(f);
  } else {
    session *s = &slots[free_slot];
    memcpy(s->tag, opts->tag, opts->tag_len);
    s->tag_len = opts->tag_len, s->feed = f, s->q = q, s->device = device;
    s->worker = no_async || device >= 0 ? NULL : gpa_xla_feed_worker_start(a, opts->tag, opts->tag_len);
    *out = f;
    rc = 0;
  }
  pthread_rwlock_unlock(&mu);
  return rc;
}

int gpa_xla_session_open(const gpa_feed_options *opts, gpa_feed **out, char *msg, uint64_t msg_size) {
  const char *why = "";
  gpa_actor *a = gpa_xla_host_actor(&why);
  if (!a) return *out = NULL, snprintf(msg, msg_size, "%s", why), -1;
  return open_session(a, -1, opts, out, msg, msg_size);
}

int gpa_xla_cuda_session_open(int device, const gpa_feed_options *opts, gpa_feed **out, char *msg,
                              uint64_t msg_size) {
  const char *why = "";
  gpa_xla_dev *d = gpa_xla_cuda_device(device, &why);
  if (!d) return *out = NULL, snprintf(msg, msg_size, "%s", why), -1;
  return open_session(gpa_xla_cuda_actor(d), device, opts, out, msg, msg_size);
}

void gpa_xla_sessions_lock(void) {
  pthread_once(&once, init_locks);
  pthread_rwlock_rdlock(&mu);
}
void gpa_xla_sessions_unlock(void) { pthread_rwlock_unlock(&mu); }

gpa_feed *gpa_xla_session_find(const void *tag, uint32_t tag_len, int *device) {
  for (int i = 0; i < SESSIONS; i++)
    if (slots[i].feed && slots[i].tag_len == tag_len && !memcmp(slots[i].tag, tag, tag_len)) {
      *device = slots[i].device;
      return slots[i].feed;
    }
  return NULL;
}

int gpa_xla_session_close(gpa_feed *f) {
  gpa_queue *q = NULL;
  int found = 0;
  pthread_once(&once, init_locks);
  pthread_rwlock_wrlock(&mu);
  for (int i = 0; i < SESSIONS; i++)
    if (f && slots[i].feed == f) {
      q = slots[i].q, found = 1;
      gpa_feed_close(f); /* parked infeeds and undelivered outfeeds complete ECANCELED */
      gpa_xla_feed_worker_close(slots[i].worker); /* ends once its calls are done */
      memset(&slots[i], 0, sizeof slots[i]);
    }
  pthread_rwlock_unlock(&mu);
  if (!found) return -1;
  if (q) gpa_queue_destroy(q); /* the object stays valid: handlers may still sync it */
  return 0;
}

XLA_FFI_Error *gpa_xla_feed_error(const XLA_FFI_Api *api, const char *target, gpa_status st, const char *tag,
                                  int tag_len, const char *what) {
  XLA_FFI_Error_Code code = st == GPA_ETIMEDOUT   ? XLA_FFI_Error_Code_DEADLINE_EXCEEDED
                            : st == GPA_ECANCELED || st == GPA_ECLOSED ? XLA_FFI_Error_Code_CANCELLED
                            : st == GPA_EAGAIN    ? XLA_FFI_Error_Code_RESOURCE_EXHAUSTED
                                                  : XLA_FFI_Error_Code_INVALID_ARGUMENT;
  return gpa_xla_error_api(api, code, "%s: session '%.*s': %s (%s)", target, tag_len, tag, what, gpa_status_name(st));
}

/* The attributes of a feed call: the session's tag and the infeed timeout. */
static XLA_FFI_Error *feed_attrs(XLA_FFI_CallFrame *f, const char *target, XLA_FFI_ByteSpan *tag,
                                 int64_t *timeout_ms) {
  tag->ptr = NULL, tag->len = 0;
  for (int64_t i = 0; i < f->attrs.size; i++) {
    const XLA_FFI_ByteSpan *nm = f->attrs.names[i];
    if (nm->len == 7 && !memcmp(nm->ptr, "session", 7) && f->attrs.types[i] == XLA_FFI_AttrType_STRING) {
      *tag = *(const XLA_FFI_ByteSpan *)f->attrs.attrs[i];
    } else if (timeout_ms && nm->len == 10 && !memcmp(nm->ptr, "timeout_ms", 10) &&
               f->attrs.types[i] == XLA_FFI_AttrType_SCALAR) {
      const XLA_FFI_Scalar *v = f->attrs.attrs[i];
      if (v->dtype == XLA_FFI_DataType_S64) *timeout_ms = *(const int64_t *)v->value;
      else if (v->dtype == XLA_FFI_DataType_S32) *timeout_ms = *(const int32_t *)v->value;
      else
        return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: attribute 'timeout_ms' must be an integer",
                             target);
    } else {
      return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: unknown attribute '%.*s'", target,
                           (int)nm->len, nm->ptr);
    }
  }
  if (!tag->ptr || tag->len == 0)
    return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: missing attribute 'session' (the tag)", target);
  return NULL;
}

static XLA_FFI_Error *feed_check(XLA_FFI_CallFrame *f, int in, const char *target, XLA_FFI_ByteSpan *tag,
                                 int64_t *timeout_ns, int64_t *n, const XLA_FFI_Buffer **ack) {
  int64_t timeout_ms = 10000;
  XLA_FFI_Error *e = feed_attrs(f, target, tag, in ? &timeout_ms : NULL);
  if (e) return e;
  *timeout_ns = timeout_ms < 0 ? -1 : timeout_ms * 1000000;
  *n = in ? f->rets.size : f->args.size;
  if (*n < 1 || *n > GPA_FEED_MAX_TENSORS)
    return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %lld tensors; a feed call moves 1 to %d",
                         target, (long long)*n, GPA_FEED_MAX_TENSORS);
  *ack = !in && f->rets.size == 1 ? f->rets.rets[0] : NULL;
  if (!in && (!*ack || (*ack)->dtype != XLA_FFI_DataType_S32 || (*ack)->rank != 0))
    return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: the one result must be an s32 scalar", target);
  return NULL;
}

int gpa_xla_feed_start(XLA_FFI_CallFrame *f, int in, const char **target, XLA_FFI_ByteSpan *tag,
                       int64_t *timeout_ns, int64_t *n, const XLA_FFI_Buffer **ack, XLA_FFI_Error **err) {
  *target = in ? "gpuactor_infeed" : "gpuactor_outfeed";
  if (gpa_xla_metadata(f, err)) return 1; /* else *err is NULL */
  if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return 1;
  return (*err = feed_check(f, in, *target, tag, timeout_ns, n, ack)) != NULL;
}

/* Wraps XLA's buffers [first, first + n) of args (is_ret 0) or results. */
XLA_FFI_Error *gpa_xla_feed_wrap(XLA_FFI_CallFrame *f, const char *target, gpa_actor *a, int is_ret, int64_t first,
                                 int64_t n, gpa_tensor *t, gpa_xla_wrap *w, uint32_t *n_wrapped) {
  for (int64_t i = 0; i < n; i++) {
    const XLA_FFI_Buffer *b = is_ret ? f->rets.rets[first + i] : f->args.args[first + i];
    gpa_tensor *x = &t[i];
    memset(x, 0, sizeof *x);
    switch (b->dtype) {
    case XLA_FFI_DataType_F32: x->dtype = GPA_F32; break;
    case XLA_FFI_DataType_F16: x->dtype = GPA_F16; break;
    case XLA_FFI_DataType_BF16: x->dtype = GPA_BF16; break;
    case XLA_FFI_DataType_S32: x->dtype = GPA_I32; break;
    case XLA_FFI_DataType_U8: x->dtype = GPA_U8; break;
    case XLA_FFI_DataType_S64: x->dtype = GPA_I64; break;
    default:
      return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s %lld has a dtype gpuactor lacks", target,
                           is_ret ? "result" : "operand", (long long)(first + i));
    }
    if (b->rank > GPA_MAX_RANK)
      return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s %lld has rank %lld, more than %d", target,
                           is_ret ? "result" : "operand", (long long)(first + i), (long long)b->rank, GPA_MAX_RANK);
    x->rank = (uint32_t)b->rank;
    uint64_t elems = 1;
    for (int64_t d = 0; d < b->rank; d++) elems *= (uint64_t)(x->shape[d] = b->dims[d]);
    if (elems == 0)
      return gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s %lld has no elements", target,
                           is_ret ? "result" : "operand", (long long)(first + i));
    gpa_status st = gpa_xla_wrap_get(a, b->data, elems * gpa_dtype_size(x->dtype), &w[*n_wrapped]);
    if (st != GPA_OK)
      return gpa_xla_error(f, XLA_FFI_Error_Code_INTERNAL, "%s: cannot use a buffer in place: %s", target,
                           gpa_last_error_message());
    x->buffer = w[*n_wrapped].id;
    x->offset = w[*n_wrapped].offset;
    ++*n_wrapped;
  }
  return NULL;
}

/* infeed: results <- the session's next item; operands only order the call
 * (e.g. after the step's outfeed). outfeed: operands -> the session; its
 * one result, an s32 scalar, carries that order to later calls. */
static XLA_FFI_Error *feed_call(XLA_FFI_CallFrame *f, int in) {
  const char *target;
  XLA_FFI_ByteSpan tag;
  int64_t timeout_ns, n;
  const XLA_FFI_Buffer *ack;
  XLA_FFI_Error *e;
  if (gpa_xla_feed_start(f, in, &target, &tag, &timeout_ns, &n, &ack, &e)) return e;
  if (ack) *(int32_t *)ack->data = 0;
  const char *why = "";
  gpa_actor *a = gpa_xla_host_actor(&why);
  if (!a) return gpa_xla_error(f, XLA_FFI_Error_Code_UNAVAILABLE, "%s: %s", target, why);
  pthread_once(&once, init_locks);

  gpa_tensor t[GPA_FEED_MAX_TENSORS];
  gpa_xla_wrap w[GPA_FEED_MAX_TENSORS];
  uint32_t n_wrapped = 0;
  e = gpa_xla_feed_wrap(f, target, a, in, 0, n, t, w, &n_wrapped);
  int slot = -1;
  gpa_status st = GPA_OK;
  if (!e) {
    pthread_rwlock_rdlock(&mu);
    for (int i = 0; i < SESSIONS && slot < 0; i++)
      if (slots[i].feed && slots[i].tag_len == tag.len && !memcmp(slots[i].tag, tag.ptr, tag.len)) slot = i;
    if (slot < 0) {
      pthread_rwlock_unlock(&mu);
      e = gpa_xla_error(f, XLA_FFI_Error_Code_NOT_FOUND, "%s: no open session '%.*s'", target, (int)tag.len,
                        tag.ptr);
    } else if (slots[slot].device >= 0) {
      int dev = slots[slot].device;
      pthread_rwlock_unlock(&mu);
      e = gpa_xla_error(f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                        "%s: attribute 'session': session '%.*s' is on CUDA device %d, and this call runs on the host",
                        target, (int)tag.len, tag.ptr, dev);
    }
  }
  if (!e && slots[slot].worker && gpa_xla_has_futures(f)) {
    /* Under mu: the session stays open until the op is submitted. */
    int r = gpa_xla_feed_async(f, target, slots[slot].worker, slots[slot].feed, in, t, (uint32_t)n, timeout_ns, w,
                               n_wrapped);
    if (r != 0) {
      pthread_rwlock_unlock(&mu);
      if (r == 1) gpa_xla_count_call();
      for (uint32_t i = 0; i < n_wrapped && r < 0; i++) gpa_xla_wrap_put(a, &w[i]);
      return NULL; /* the future says how it ends */
    }
  }
  if (!e) {
    /* Lock order: call_mu, then mu again; mu is dropped first so that a
     * close is not held up behind a parked call. */
    pthread_rwlock_unlock(&mu);
    pthread_mutex_lock(&call_mu[slot]);
    pthread_rwlock_rdlock(&mu);
    session s = slots[slot];
    int same = s.feed && s.device < 0 && s.tag_len == tag.len && !memcmp(s.tag, tag.ptr, tag.len);
    int begun = 0;
    if (!same) st = GPA_ECLOSED;
    else if ((st = gpa_batch_begin(s.q, target)) == GPA_OK && (begun = 1))
      st = in ? gpa_infeed(s.q, s.feed, t, (uint32_t)n, timeout_ns, NULL)
              : gpa_outfeed(s.q, s.feed, t, (uint32_t)n, NULL);
    char why_submit[256];
    snprintf(why_submit, sizeof why_submit, "%s", st == GPA_ECLOSED ? "closed" : gpa_last_error_message());
    pthread_rwlock_unlock(&mu);
    gpa_batch_stats bs = {.size = sizeof bs};
    if (same && st == GPA_OK) {
      gpa_xla_count_call();
      st = gpa_sync_batch(s.q, &bs);
      if (st != GPA_OK)
        e = gpa_xla_feed_error(f->api, target, st, tag.ptr, (int)tag.len,
                       st == GPA_ECANCELED ? "the session was closed" : bs.first_error_message);
    } else {
      if (begun) gpa_sync_batch(s.q, NULL); /* closes the batch begun */
      e = gpa_xla_feed_error(f->api, target, st, tag.ptr, (int)tag.len, why_submit);
    }
    pthread_mutex_unlock(&call_mu[slot]);
  }
  for (uint32_t i = 0; i < n_wrapped; i++) gpa_xla_wrap_put(a, &w[i]);
  return e;
}

XLA_FFI_Error *gpa_xla_infeed(XLA_FFI_CallFrame *f) { return feed_call(f, 1); }
XLA_FFI_Error *gpa_xla_outfeed(XLA_FFI_CallFrame *f) { return feed_call(f, 0); }
