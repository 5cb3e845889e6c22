/* Feed sessions: the calls of any thread (open, push, submit, pop, close). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/spin.h"
#include "feed/feed_internal.h"

#define ITEM_ALIGN 64

gpa__feed_item *gpa__feed_item_new(uint32_t n, const uint64_t *bytes) {
  uint64_t head = (sizeof(gpa__feed_item) + n * sizeof(gpa_host_tensor) + ITEM_ALIGN - 1) & ~(uint64_t)(ITEM_ALIGN - 1);
  uint64_t total = head;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t b = (bytes[i] + ITEM_ALIGN - 1) & ~(uint64_t)(ITEM_ALIGN - 1);
    if (b < bytes[i] || total + b < total) return NULL;
    total += b;
  }
  gpa__feed_item *it = aligned_alloc(ITEM_ALIGN, total);
  if (!it) return NULL;
  it->next = NULL;
  it->n = n;
  char *p = (char *)it + head;
  for (uint32_t i = 0; i < n; i++) {
    memset(&it->t[i], 0, sizeof it->t[i]);
    it->t[i].data = p;
    it->t[i].bytes = bytes[i];
    p += (bytes[i] + ITEM_ALIGN - 1) & ~(uint64_t)(ITEM_ALIGN - 1);
  }
  return it;
}

void gpa__feed_ref(gpa_feed *s) { atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed); }

void gpa__feed_unref(gpa_feed *s) {
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}

/* ---- the delivery side ---------------------------------------------------- */

static gpa__msg *take_locked(gpa_feed *s) {
  gpa__msg *m = s->dq_head;
  if (m) {
    s->dq_head = m->next;
    if (!s->dq_head) s->dq_tail = NULL;
    m->next = NULL;
    atomic_fetch_sub_explicit(&s->dq_len, 1, memory_order_relaxed);
  }
  return m;
}

static gpa_status room_fn(gpa_actor *a, gpa__msg *m) {
  gpa_feed *s = ((gpa__feed_params *)m->params)->s;
  for (gpa_queue *q = a->parked, *next; q; q = next) {
    next = q->s->parked_next;
    if (q->s->park_on == s) gpa__queue_unpark(a, q);
  }
  gpa__feed_unref(s);
  return GPA_OK;
}

void gpa__feed_room(gpa_feed *s) {
  atomic_fetch_sub_explicit(&s->out_pending, 1, memory_order_acq_rel);
  /* On the actor thread itself, its loop looks at parked queues next. */
  if (pthread_equal(pthread_self(), s->a->thread)) return;
  if (!atomic_exchange_explicit(&s->out_waiters, 0, memory_order_acq_rel)) return;
  /* A queue waits for room: tell the actor. */
  gpa__msg *m = gpa__msg_new(s->a, GPA__MSG_CALL);
  if (!m) return; /* the parked queue is retried at the next delivery */
  gpa__feed_ref(s);
  ((gpa__feed_params *)m->params)->s = s;
  m->fn = room_fn;
  if (gpa__send(s->a, m) != GPA_OK) gpa__feed_unref(s); /* shutting down: the actor cancels parked work */
  gpa__msg_unref(m);
}

/* Completes a delivered outfeed op. The caller keeps no reference. */
void gpa__feed_delivered(gpa_feed *s, gpa__msg *m, gpa_status st, bool keep_ref) {
  const char *why = m->err[0] ? m->err : "cancelled: the feed session was closed before delivery";
  gpa__msg_complete(m, st, st == GPA_OK ? NULL : why);
  gpa__feed_room(s);
  if (!keep_ref) gpa__msg_unref(m);
  gpa__feed_unref(s);
}

static void *sink_main(void *arg) {
  gpa_feed *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    gpa__msg *m = take_locked(s);
    if (!m) {
      if (s->stop) break;
      pthread_cond_wait(&s->cond, &s->lock);
      continue;
    }
    pthread_mutex_unlock(&s->lock);
    gpa__feed_item *it = m->payload;
    s->sink(s, s->tag, s->tag_len, it->t, it->n, s->user_data);
    gpa__feed_delivered(s, m, GPA_OK, false);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* ---- open / close ------------------------------------------------------- */

gpa_status gpa_feed_open(gpa_actor *a, const gpa_feed_options *o, gpa_feed **out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_feed_open: NULL argument");
  *out = NULL;
  gpa_feed_options zero = {0};
  if (!o) o = &zero;
  if (o->size && o->size < sizeof *o) return gpa__fail(GPA_EINVAL, "gpa_feed_open: options.size %u too small", o->size);
  if (o->tag_len > GPA_FEED_TAG_MAX)
    return gpa__fail(GPA_EINVAL, "gpa_feed_open: tag_len %u exceeds %d bytes (GPA_FEED_TAG_MAX)", o->tag_len,
                     GPA_FEED_TAG_MAX);
  if (o->tag_len && !o->tag) return gpa__fail(GPA_EINVAL, "gpa_feed_open: tag is NULL but tag_len is %u", o->tag_len);
  if (o->outfeed_policy != GPA_OUTFEED_PARK && o->outfeed_policy != GPA_OUTFEED_FAIL)
    return gpa__fail(GPA_EINVAL, "gpa_feed_open: outfeed_policy %d: expected PARK or FAIL", o->outfeed_policy);
  if (atomic_load(&a->closing)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__feeds *f = gpa__ext_state(a, &gpa__feed_ext);
  if (!f) return gpa__fail(GPA_ENOMEM, "gpa_feed_open: out of memory");
  gpa_feed *s = calloc(1, sizeof *s);
  if (!s) return gpa__fail(GPA_ENOMEM, "gpa_feed_open: out of memory");
  s->a = a;
  if (o->tag_len) memcpy(s->tag, o->tag, o->tag_len);
  s->tag_len = o->tag_len;
  s->sink = o->sink;
  s->user_data = o->user_data;
  s->out_cap = o->outfeed_capacity ? o->outfeed_capacity : 64;
  s->in_cap = o->infeed_capacity ? o->infeed_capacity : 1024;
  s->policy = o->outfeed_policy;
  atomic_store(&s->refs, 1);
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);
  if (s->sink) {
    if (pthread_create(&s->thread, NULL, sink_main, s)) {
      gpa__feed_unref(s);
      return gpa__fail(GPA_ENOMEM, "gpa_feed_open: cannot start the delivery thread");
    }
    s->has_thread = true;
  }
  pthread_mutex_lock(&f->lock);
  s->id = ++f->next_id;
  s->next = f->list;
  f->list = s;
  pthread_mutex_unlock(&f->lock);
  *out = s;
  return GPA_OK;
}

uint64_t gpa_feed_id(const gpa_feed *s) { return s ? s->id : 0; }

static gpa_status close_fn(gpa_actor *a, gpa__msg *m) {
  gpa_feed *s = ((gpa__feed_params *)m->params)->s;
  gpa__feed_drop_pending(s);
  /* Parked infeed/outfeed ops see `closed` and complete with ECANCELED. */
  for (gpa_queue *q = a->parked, *next; q; q = next) {
    next = q->s->parked_next;
    if (q->s->park_on == s) gpa__queue_unpark(a, q);
  }
  return GPA_OK;
}

/* Cancels what waits for delivery and stops the sink thread. */
static void stop_delivery(gpa_feed *s) {
  pthread_mutex_lock(&s->lock);
  s->stop = true;
  gpa__msg *m;
  while ((m = take_locked(s))) {
    pthread_mutex_unlock(&s->lock);
    gpa__feed_delivered(s, m, GPA_ECANCELED, false);
    pthread_mutex_lock(&s->lock);
  }
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  if (s->has_thread) pthread_join(s->thread, NULL);
  s->has_thread = false;
}

static void unlist(gpa_feed *s) {
  gpa__feeds *f = gpa__ext_state(s->a, &gpa__feed_ext); /* made by gpa_feed_open */
  pthread_mutex_lock(&f->lock);
  for (gpa_feed **pp = &f->list; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  pthread_mutex_unlock(&f->lock);
}

gpa_status gpa_feed_close(gpa_feed *s) {
  if (!s) return gpa__fail(GPA_EINVAL, "gpa_feed_close: session is NULL");
  if (s->has_thread && pthread_equal(pthread_self(), s->thread))
    return gpa__fail(GPA_EINVAL, "gpa_feed_close: called from the session's own sink");
  int expect = 0;
  if (!atomic_compare_exchange_strong(&s->closed, &expect, 1))
    return gpa__fail(GPA_ECLOSED, "gpa_feed_close: session %llu is already closed", (unsigned long long)s->id);
  /* After shutdown the actor has already cancelled what it held. */
  if (!atomic_load(&s->a->closing)) {
    gpa__msg *m = gpa__msg_new(s->a, GPA__MSG_CALL);
    if (m) {
      ((gpa__feed_params *)m->params)->s = s;
      m->fn = close_fn;
      gpa__call(s->a, m);
      gpa__msg_unref(m);
    }
  }
  stop_delivery(s);
  unlist(s);
  gpa__feed_unref(s);
  return GPA_OK;
}

/* ---- push ---------------------------------------------------------------- */

static gpa_status push_fn(gpa_actor *a, gpa__msg *m) {
  gpa_feed *s = ((gpa__feed_params *)m->params)->s;
  gpa__feed_item *it = m->payload;
  m->payload = NULL;
  if (atomic_load(&s->closed)) {
    free(it);
    atomic_fetch_sub(&s->in_count, 1);
  } else {
    if (s->in_tail) s->in_tail->next = it;
    else s->in_head = it;
    s->in_tail = it;
    for (gpa_queue *q = a->parked, *next; q; q = next) {
      next = q->s->parked_next;
      if (q->s->park_on == s) gpa__queue_unpark(a, q);
    }
  }
  gpa__feed_unref(s);
  return GPA_OK;
}

static gpa_status check_host_tensor(const gpa_host_tensor *t, uint32_t i, uint64_t *bytes) {
  char what[48];
  snprintf(what, sizeof what, "gpa_infeed_push: tensors[%u]", i);
  gpa_tensor g = {1, 0, t->dtype, t->rank, {0}};
  if (t->rank > GPA_MAX_RANK) return gpa__fail(GPA_EINVAL, "%s: rank %u exceeds %d", what, t->rank, GPA_MAX_RANK);
  memcpy(g.shape, t->shape, sizeof g.shape);
  gpa_status st = gpa__tensor_bytes(&g, bytes, what);
  if (st != GPA_OK) return st;
  if (*bytes != t->bytes)
    return gpa__fail(GPA_ESHAPE, "%s: %llu bytes given, its shape needs %llu", what, (unsigned long long)t->bytes,
                     (unsigned long long)*bytes);
  if (*bytes && !t->data) return gpa__fail(GPA_EINVAL, "%s: data is NULL", what);
  return GPA_OK;
}

gpa_status gpa_infeed_push(gpa_feed *s, const gpa_host_tensor *t, uint32_t n) {
  if (!s || (n && !t)) return gpa__fail(GPA_EINVAL, "gpa_infeed_push: NULL argument");
  if (n > GPA_FEED_MAX_TENSORS)
    return gpa__fail(GPA_EINVAL, "gpa_infeed_push: %u tensors (at most %d per item, GPA_FEED_MAX_TENSORS)", n,
                     GPA_FEED_MAX_TENSORS);
  if (atomic_load(&s->closed)) return gpa__fail(GPA_ECLOSED, "gpa_infeed_push: session is closed");
  uint64_t bytes[64];
  for (uint32_t i = 0; i < n; i++) {
    gpa_status st = check_host_tensor(&t[i], i, &bytes[i]);
    if (st != GPA_OK) return st;
  }
  if (atomic_fetch_add(&s->in_count, 1) >= s->in_cap) {
    atomic_fetch_sub(&s->in_count, 1);
    return gpa__fail(GPA_EAGAIN, "gpa_infeed_push: %u items already wait in the session", s->in_cap);
  }
  gpa__feed_item *it = gpa__feed_item_new(n, bytes);
  gpa__msg *m = it ? gpa__msg_new(s->a, GPA__MSG_CALL) : NULL;
  if (!m) {
    free(it);
    atomic_fetch_sub(&s->in_count, 1);
    return gpa__fail(GPA_ENOMEM, "gpa_infeed_push: out of memory");
  }
  for (uint32_t i = 0; i < n; i++) {
    it->t[i].dtype = t[i].dtype;
    it->t[i].rank = t[i].rank;
    memcpy(it->t[i].shape, t[i].shape, sizeof t[i].shape);
    if (bytes[i]) memcpy((void *)it->t[i].data, t[i].data, bytes[i]);
  }
  m->payload = it;
  m->fn = push_fn;
  ((gpa__feed_params *)m->params)->s = s;
  gpa__feed_ref(s);
  gpa_status st = gpa__send(s->a, m);
  if (st != GPA_OK) {
    gpa__feed_unref(s);
    atomic_fetch_sub(&s->in_count, 1);
  }
  gpa__msg_unref(m); /* frees the item too if it was not sent */
  return st;
}

/* ---- infeed / outfeed ops ------------------------------------------------ */

static gpa_status feed_op(gpa_queue *q, gpa_feed *s, const gpa_tensor *t, uint32_t n, int64_t timeout_ns,
                          const gpa__msg_class *cls, gpa_handle **out) {
  bool in = cls == &gpa__infeed_class;
  const char *name = in ? "gpa_infeed" : "gpa_outfeed";
  if (out) *out = NULL;
  gpa_status st = gpa__check_queue(q);
  if (st != GPA_OK) return st;
  if (!s || (n && !t)) return gpa__fail(GPA_EINVAL, "%s: NULL argument", name);
  if (s->a != q->actor) return gpa__fail(GPA_EINVAL, "%s: the session belongs to another actor", name);
  if (n > GPA_FEED_MAX_TENSORS)
    return gpa__fail(GPA_EINVAL, "%s: %u tensors (at most %d, GPA_FEED_MAX_TENSORS)", name, n, GPA_FEED_MAX_TENSORS);
  if (atomic_load(&s->closed)) return gpa__fail(GPA_ECLOSED, "%s: session %llu is closed", name, (unsigned long long)s->id);
  for (uint32_t i = 0; i < n; i++) {
    st = gpa__check_tensor_at(q->actor, &t[i], name, in ? "outputs" : "inputs", i);
    if (st != GPA_OK) return st;
  }
  gpa__msg *m = gpa__msg_new(q->actor, GPA__MSG_EXT);
  if (!m) return GPA_ENOMEM;
  m->cls = cls;
  st = in ? gpa__msg_set_tensors(m, NULL, 0, t, n) : gpa__msg_set_tensors(m, t, n, NULL, 0);
  if (st == GPA_OK) {
    gpa__feed_params *p = (gpa__feed_params *)m->params;
    memset(p, 0, sizeof *p); /* pooled messages keep old bytes */
    p->s = s;
    p->timeout_ns = timeout_ns;
    m->q = q;
    gpa__feed_ref(s);
    st = gpa__send(q->actor, m);
    if (st != GPA_OK) gpa__feed_unref(s);
  }
  if (st != GPA_OK || !out) gpa__msg_unref(m);
  else gpa__handle_out(*out = m);
  return st;
}

gpa_status gpa_infeed(gpa_queue *q, gpa_feed *s, const gpa_tensor *outputs, uint32_t n, int64_t timeout_ns,
                      gpa_handle **out) {
  return feed_op(q, s, outputs, n, timeout_ns, &gpa__infeed_class, out);
}

gpa_status gpa_outfeed(gpa_queue *q, gpa_feed *s, const gpa_tensor *inputs, uint32_t n, gpa_handle **out) {
  return feed_op(q, s, inputs, n, 0, &gpa__outfeed_class, out);
}

/* ---- pop ------------------------------------------------------------------ */

gpa_status gpa_outfeed_pop(gpa_feed *s, int64_t timeout_ns, gpa_handle **item) {
  if (!s || !item) return gpa__fail(GPA_EINVAL, "gpa_outfeed_pop: NULL argument");
  *item = NULL;
  if (s->sink) return gpa__fail(GPA_EINVAL, "gpa_outfeed_pop: the session delivers to its sink callback");
  struct timespec dl;
  if (timeout_ns > 0) {
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ns / 1000000000;
    dl.tv_nsec += timeout_ns % 1000000000;
    if (dl.tv_nsec >= 1000000000) {
      dl.tv_sec++;
      dl.tv_nsec -= 1000000000;
    }
  }
  /* A wake-up across cores costs tens of microseconds: spin a little first. */
  if (timeout_ns)
    for (gpa__spin sp = gpa__spin_begin(GPA__SPIN_AWAIT_NS); gpa__spin_on(&sp);)
      if (atomic_load_explicit(&s->dq_len, memory_order_acquire)) break;
  pthread_mutex_lock(&s->lock);
  gpa__msg *m;
  while (!(m = take_locked(s))) {
    if (s->stop || atomic_load(&s->closed)) {
      pthread_mutex_unlock(&s->lock);
      return gpa__fail(GPA_ECLOSED, "gpa_outfeed_pop: session is closed");
    }
    if (timeout_ns == 0) break;
    if (timeout_ns < 0) pthread_cond_wait(&s->cond, &s->lock);
    else if (pthread_cond_timedwait(&s->cond, &s->lock, &dl) == ETIMEDOUT) {
      m = take_locked(s);
      break;
    }
  }
  pthread_mutex_unlock(&s->lock);
  if (!m) return gpa__fail(GPA_ETIMEDOUT, "gpa_outfeed_pop: no item delivered in time");
  gpa__feed_delivered(s, m, GPA_OK, true); /* the actor's reference becomes the caller's */
  gpa__handle_out(*item = m);
  return GPA_OK;
}

uint32_t gpa_outfeed_item_count(const gpa_handle *h) {
  if (!h || h->kind != GPA__MSG_EXT || h->cls != &gpa__outfeed_class || !h->payload || !atomic_load(&h->state) || h->status != GPA_OK) return 0;
  return ((const gpa__feed_item *)h->payload)->n;
}

gpa_status gpa_outfeed_item_tensor(const gpa_handle *h, uint32_t i, gpa_host_tensor *out) {
  if (!h || !out) return gpa__fail(GPA_EINVAL, "gpa_outfeed_item_tensor: NULL argument");
  if (h->kind != GPA__MSG_EXT || h->cls != &gpa__outfeed_class)
    return gpa__fail(GPA_EINVAL, "gpa_outfeed_item_tensor: not an outfeed item");
  if (!atomic_load(&h->state)) return gpa__fail(GPA_EPENDING, "gpa_outfeed_item_tensor: not delivered yet");
  if (h->status != GPA_OK) return gpa__fail(h->status, "%s", h->err);
  const gpa__feed_item *it = h->payload;
  if (i >= it->n) return gpa__fail(GPA_ERANGE, "gpa_outfeed_item_tensor: index %u of %u tensors", i, it->n);
  *out = it->t[i];
  return GPA_OK;
}

/* Destroy: sessions the program left open are closed and freed here. */
void gpa__feeds_destroy(gpa_actor *a, void *st) {
  (void)a;
  gpa__feeds *f = st;
  pthread_mutex_lock(&f->lock);
  gpa_feed *s = f->list;
  f->list = NULL;
  pthread_mutex_unlock(&f->lock);
  while (s) {
    gpa_feed *next = s->next;
    if (!atomic_exchange(&s->closed, 1)) {
      stop_delivery(s);
      gpa__feed_unref(s);
    }
    s = next;
  }
  pthread_mutex_destroy(&f->lock);
  free(f);
}
