/* Public buffer calls: control messages to the actor's buffer cache. */
#include <stdio.h>
#include <string.h>

#include "actor/bufcache.h"
#include "backends/backend.h"

typedef struct buf_args {
  char label[GPA_LABEL_MAX];
  bool has_label;
  uint64_t size;
  gpa_buffer_id id;
  union {
    gpa_buffer_info info;
    gpa_actor_stats stats;
    gpa_external_desc ext;
    gpa_buffer_loan loan;
    struct {
      void *event;
      bool wait;
      bool posted; /* gpa_queue_wait_event_async: nobody waits for the outcome */
    } ev;
  };
} buf_args;
_Static_assert(sizeof(buf_args) <= GPA_OP_PARAMS_MAX, "buffer call args fit the params block");

static gpa_status acquire_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  return gpa__bufcache_acquire(a, b->has_label ? b->label : NULL, b->size, &b->id, m->err, sizeof m->err);
}

static gpa_status release_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  return gpa__bufcache_release(a, b->id, m->err, sizeof m->err);
}

static gpa_status query_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  gpa__slot *s = gpa__bufcache_live(a->cache, b->id);
  if (!s) {
    snprintf(m->err, sizeof m->err, "gpa_buffer_query: buffer 0x%llx is stale", (unsigned long long)b->id);
    return GPA_ESTALE;
  }
  memset(&b->info, 0, sizeof b->info);
  b->info.size_of = sizeof b->info;
  b->info.size = atomic_load_explicit(&s->size, memory_order_relaxed);
  b->info.capacity = s->capacity;
  b->info.version = s->version;
  b->info.refs = s->refs;
  snprintf(b->info.label, sizeof b->info.label, "%s", s->label ? s->label : "");
  return GPA_OK;
}

static gpa_status stats_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  gpa__bufcache *c = a->cache;
  gpa_actor_stats *s = &b->stats;
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  s->messages = a->messages;
  s->cache_hits = c->hits;
  s->cache_misses = c->misses;
  s->evictions = c->evictions;
  s->bytes_allocated = c->bytes_allocated;
  s->bytes_cached = c->bytes_cached;
  s->live_buffers = c->live;
  s->uploads_skipped = a->uploads_skipped;
  s->bytes_uploaded = a->bytes_uploaded;
  s->bytes_read_back = a->bytes_read_back;
  s->producers = atomic_load(&a->producers);
  return GPA_OK;
}

static gpa_status buf_call(gpa_actor *a, gpa__call_fn fn, gpa__msg **out) {
  gpa__msg *m = gpa__msg_new(a, GPA__MSG_CALL);
  if (!m) return GPA_ENOMEM;
  m->fn = fn;
  *out = m;
  return GPA_OK;
}

gpa_status gpa_buffer_acquire(gpa_actor *a, const char *label, uint64_t size, gpa_buffer_id *out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_buffer_acquire: NULL argument");
  *out = 0;
  if (!size) return gpa__fail(GPA_EINVAL, "gpa_buffer_acquire: size is 0");
  if (!gpa__size_class(size))
    return gpa__fail(GPA_EOVERFLOW, "gpa_buffer_acquire: size %llu is beyond any device (max 2^48 bytes)",
                     (unsigned long long)size);
  if (label && (!label[0] || strlen(label) >= GPA_LABEL_MAX))
    return gpa__fail(GPA_EINVAL, "gpa_buffer_acquire: label must be 1 to %d bytes (GPA_LABEL_MAX)", GPA_LABEL_MAX - 1);
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m;
  gpa_status st = buf_call(a, acquire_fn, &m);
  if (st != GPA_OK) return st;
  buf_args *b = (buf_args *)m->params;
  b->has_label = label != NULL;
  if (label) snprintf(b->label, sizeof b->label, "%s", label);
  b->size = size;
  st = gpa__call(a, m);
  if (st == GPA_OK) *out = b->id;
  gpa__msg_unref(m);
  return st;
}

gpa_status gpa_buffer_release(gpa_actor *a, gpa_buffer_id id) {
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_buffer_release: actor is NULL");
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  if (!gpa__bufcache_peek(a->cache, id))
    return gpa__fail(GPA_ESTALE, "gpa_buffer_release: buffer 0x%llx is stale or was never acquired",
                     (unsigned long long)id);
  gpa__msg *m;
  gpa_status st = buf_call(a, release_fn, &m);
  if (st != GPA_OK) return st;
  ((buf_args *)m->params)->id = id;
  /* A round trip, so a double release is reported to the caller. It is
   * ordered after this thread's earlier messages by the ring, and those have
   * pinned the buffer by then. */
  st = gpa__call(a, m);
  gpa__msg_unref(m);
  return st;
}

gpa_status gpa_buffer_query(gpa_actor *a, gpa_buffer_id id, gpa_buffer_info *out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_buffer_query: NULL argument");
  if (out->size_of && out->size_of < sizeof *out)
    return gpa__fail(GPA_EINVAL, "gpa_buffer_query: info.size_of %u too small", out->size_of);
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m;
  gpa_status st = buf_call(a, query_fn, &m);
  if (st != GPA_OK) return st;
  buf_args *b = (buf_args *)m->params;
  b->id = id;
  st = gpa__call(a, m);
  if (st == GPA_OK) *out = b->info;
  gpa__msg_unref(m);
  return st;
}

gpa_status gpa_actor_stats_get(gpa_actor *a, gpa_actor_stats *out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_actor_stats_get: NULL argument");
  if (out->size && out->size < sizeof *out)
    return gpa__fail(GPA_EINVAL, "gpa_actor_stats_get: stats.size %u too small", out->size);
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m;
  gpa_status st = buf_call(a, stats_fn, &m);
  if (st != GPA_OK) return st;
  st = gpa__call(a, m);
  if (st == GPA_OK) *out = ((buf_args *)m->params)->stats;
  gpa__msg_unref(m);
  return st;
}

/* ---- external buffers (include/gpuactor/external.h) ---------------------------------------------- */

static const char *kind_name(int kind) {
  switch (kind) {
    case GPA_MEM_HOST: return "host";
    case GPA_MEM_DEVICE: return "device";
    case GPA_MEM_HOST_PINNED: return "pinned host";
    default: return "unknown";
  }
}

static gpa_status wrap_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  const gpa_external_desc *d = &b->ext;
  gpa_status st;
  if (a->be->external_check) {
    st = a->be->external_check(a->bctx, d->kind, d->ptr, d->bytes, m->err, sizeof m->err);
    if (st != GPA_OK) return st;
  } else if (d->kind == GPA_MEM_DEVICE) {
    /* A backend without the hook computes on the host. */
    snprintf(m->err, sizeof m->err,
             "gpa_buffer_wrap: backend %s runs ops on the host and cannot use device memory (%p)", a->be->name,
             d->ptr);
    return GPA_EUNSUPPORTED;
  }
  if (d->ready_event) {
    if (!a->be->external_event) {
      snprintf(m->err, sizeof m->err, "gpa_buffer_wrap: backend %s has no streams to order with ready_event",
               a->be->name);
      return GPA_EUNSUPPORTED;
    }
    /* Before the id exists: no work that names it can be ahead of the wait. */
    for (gpa_queue *q = a->queues; q; q = q->next_all) {
      if (!q->s || !q->s->bq) continue; /* destroyed, or no stream */
      st = a->be->external_event(a->bctx, q->s->bq, d->ready_event, true, m->err, sizeof m->err);
      if (st != GPA_OK) return st;
    }
  }
  return gpa__bufcache_wrap(a, d->ptr, d->bytes, d->release, d->user_data, &b->id, m->err, sizeof m->err);
}

gpa_status gpa_buffer_wrap(gpa_actor *a, const gpa_external_desc *d, gpa_buffer_id *out) {
  if (!a || !d || !out) return gpa__fail(GPA_EINVAL, "gpa_buffer_wrap: NULL argument");
  *out = 0;
  if (d->size_of && d->size_of < sizeof *d)
    return gpa__fail(GPA_EINVAL, "gpa_buffer_wrap: desc.size_of %u too small", d->size_of);
  if (d->kind != GPA_MEM_HOST && d->kind != GPA_MEM_DEVICE && d->kind != GPA_MEM_HOST_PINNED)
    return gpa__fail(GPA_EINVAL, "gpa_buffer_wrap: memory kind %d is not a gpa_mem_kind", d->kind);
  if (!d->ptr) return gpa__fail(GPA_EINVAL, "gpa_buffer_wrap: ptr is NULL");
  if (!d->bytes) return gpa__fail(GPA_EINVAL, "gpa_buffer_wrap: size is 0");
  if (!gpa__size_class(d->bytes) || (uintptr_t)d->ptr + d->bytes < (uintptr_t)d->ptr)
    return gpa__fail(GPA_EOVERFLOW, "gpa_buffer_wrap: %llu bytes at %p exceed any device (max 2^48 bytes)",
                     (unsigned long long)d->bytes, d->ptr);
  if ((uintptr_t)d->ptr % GPA_EXTERNAL_ALIGN)
    return gpa__fail(GPA_EINVAL,
                     "gpa_buffer_wrap: %s memory at %p is not %d-byte aligned (wrap the aligned base and use the "
                     "tensor offset)",
                     kind_name(d->kind), d->ptr, GPA_EXTERNAL_ALIGN);
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m;
  gpa_status st = buf_call(a, wrap_fn, &m);
  if (st != GPA_OK) return st;
  buf_args *b = (buf_args *)m->params;
  b->ext = *d; /* a larger (newer) desc: its first fields are these */
  st = gpa__call(a, m);
  if (st == GPA_OK) *out = b->id;
  gpa__msg_unref(m);
  return st;
}

static gpa_status event_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  gpa_status st;
  if (!a->be->external_event) {
    snprintf(m->err, sizeof m->err, "%s: backend %s has no streams: its ops complete in order on the host",
             b->ev.wait ? "gpa_queue_wait_event" : "gpa_queue_record_event", a->be->name);
    st = GPA_EUNSUPPORTED;
  } else {
    st = a->be->external_event(a->bctx, m->q->s->bq, b->ev.event, b->ev.wait, m->err, sizeof m->err);
  }
  /* Posted: the queue's batch reports it, as it does a released handle's. */
  if (st != GPA_OK && b->ev.posted) gpa__batch_fail(&m->q->s->batch, st, m->err);
  return st;
}

static gpa_status queue_event(gpa_queue *q, void *event, bool wait, bool posted) {
  const char *what = posted ? "gpa_queue_wait_event_async" : wait ? "gpa_queue_wait_event" : "gpa_queue_record_event";
  if (!q || !event) return gpa__fail(GPA_EINVAL, "%s: NULL argument", what);
  gpa_status st = gpa__check_queue(q);
  if (st != GPA_OK) return st;
  gpa__msg *m;
  st = buf_call(q->actor, event_fn, &m);
  if (st != GPA_OK) return st;
  buf_args *b = (buf_args *)m->params;
  b->ev.event = event;
  b->ev.wait = wait;
  b->ev.posted = posted;
  m->q = q; /* in the queue's order: after its earlier messages are on the stream */
  st = posted ? gpa__send(q->actor, m) : gpa__call(q->actor, m);
  gpa__msg_unref(m);
  return st;
}

gpa_status gpa_queue_wait_event(gpa_queue *q, void *event) { return queue_event(q, event, true, false); }
gpa_status gpa_queue_wait_event_async(gpa_queue *q, void *event) { return queue_event(q, event, true, true); }
gpa_status gpa_queue_record_event(gpa_queue *q, void *event) { return queue_event(q, event, false, false); }

static gpa_status lend_fn(gpa_actor *a, gpa__msg *m) {
  buf_args *b = (buf_args *)m->params;
  gpa__slot *s = gpa__bufcache_live(a->cache, b->id);
  if (!s) {
    snprintf(m->err, sizeof m->err, "gpa_buffer_lend: buffer 0x%llx is stale", (unsigned long long)b->id);
    return GPA_ESTALE;
  }
  s->refs++; /* the borrower's: gpa_buffer_release gives it back */
  b->loan.size_of = sizeof b->loan;
  /* Backends that take device memory keep theirs there too. */
  b->loan.kind = a->be->external_check ? GPA_MEM_DEVICE : GPA_MEM_HOST;
  b->loan.ptr = s->ptr;
  b->loan.bytes = atomic_load_explicit(&s->size, memory_order_relaxed);
  return GPA_OK;
}

gpa_status gpa_buffer_lend(gpa_actor *a, gpa_buffer_id id, gpa_buffer_loan *out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_buffer_lend: NULL argument");
  if (out->size_of && out->size_of < sizeof *out)
    return gpa__fail(GPA_EINVAL, "gpa_buffer_lend: loan.size_of %u too small", out->size_of);
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m;
  gpa_status st = buf_call(a, lend_fn, &m);
  if (st != GPA_OK) return st;
  buf_args *b = (buf_args *)m->params;
  b->id = id;
  st = gpa__call(a, m);
  if (st == GPA_OK) *out = b->loan;
  gpa__msg_unref(m);
  return st;
}
