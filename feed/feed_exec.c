/* Feed sessions on the actor thread: parking, running feed ops, putting
 * landed outfeed items in order, timeouts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/bufcache.h"
#include "backends/backend.h"
#include "feed/feed_internal.h"


static gpa__feed_params *params(gpa__msg *m) { return (gpa__feed_params *)m->params; }

static bool must_park(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  (void)a;
  gpa__feed_params *p = params(m);
  gpa_feed *s = p->s;
  if (m->status != GPA_OK || q->s->poison || atomic_load(&s->closed)) return false; /* runs to fail */
  if (m->cls == &gpa__infeed_class) {
    if (s->in_head) return false;
    q->s->park_on = s;
    if (p->timeout_ns >= 0 && !q->s->park_deadline) q->s->park_deadline = gpa__now_ns() + p->timeout_ns;
    return true;
  }
  if (p->reserved) return false;
  /* Only this thread adds to out_pending, so a check then add is exact. */
  for (int tries = 0; tries < 2; tries++) {
    if (atomic_load(&s->out_pending) < s->out_cap) {
      atomic_fetch_add(&s->out_pending, 1);
      p->reserved = 1;
      return false;
    }
    if (s->policy == GPA_OUTFEED_FAIL) {
      m->status = GPA_EAGAIN;
      snprintf(m->err, sizeof m->err, "outfeed full: %u items of session %llu wait for delivery", s->out_cap,
               (unsigned long long)s->id);
      return false;
    }
    /* Announce, then look again: the delivering side exchanges the flag
     * after giving room back, so one of us sees the other. */
    atomic_store(&s->out_waiters, 1);
  }
  q->s->park_on = s;
  return true;
}

static gpa_status cancelled(gpa__msg *m, gpa_feed *s) {
  snprintf(m->err, sizeof m->err, "cancelled: feed session %llu was closed", (unsigned long long)s->id);
  return GPA_ECANCELED;
}

static bool same_layout(const gpa_host_tensor *h, const gpa_tensor *t) {
  if (h->rank != t->rank) return false;
  for (uint32_t k = 0; k < t->rank; k++)
    if (h->shape[k] != t->shape[k]) return false;
  return true;
}

static gpa_status run_infeed(gpa_actor *a, gpa__msg *m, gpa_feed *s) {
  gpa__feed_item *it = s->in_head;
  if (!it) {
    snprintf(m->err, sizeof m->err, "infeed: no item (internal error)");
    return GPA_EINTERNAL;
  }
  s->in_head = it->next;
  if (!s->in_head) s->in_tail = NULL;
  atomic_fetch_sub(&s->in_count, 1);
  m->payload = it; /* a mismatching item is consumed too: it is this op's */
  if (it->n != m->n_out) {
    snprintf(m->err, sizeof m->err, "infeed: the item has %u tensors, the op has %u outputs", it->n, m->n_out);
    return GPA_ESHAPE;
  }
  for (uint32_t i = 0; i < it->n; i++) {
    const gpa_tensor *t = &m->t[i];
    if (it->t[i].dtype != t->dtype) {
      snprintf(m->err, sizeof m->err, "infeed: item tensor %u is %s, outputs[%u] is %s", i,
               gpa_dtype_name(it->t[i].dtype), i, gpa_dtype_name(t->dtype));
      return GPA_EDTYPE;
    }
    if (!same_layout(&it->t[i], t)) {
      snprintf(m->err, sizeof m->err, "infeed: item tensor %u's shape differs from outputs[%u]'s", i, i);
      return GPA_ESHAPE;
    }
  }
  for (uint32_t i = 0; i < it->n; i++) {
    gpa__slot *sl = gpa__bufcache_slot(a->cache, m->t[i].buffer);
    gpa_status st = a->be->upload(a->bctx, m->q->s->bq, NULL, (char *)sl->ptr + m->t[i].offset, it->t[i].data,
                                  it->t[i].bytes);
    if (st != GPA_OK) return st;
    m->bytes += it->t[i].bytes;
  }
  gpa__work w = gpa__work_of(m);
  return a->be->fence ? a->be->fence(a->bctx, &w) : GPA_OK;
}

static gpa_status run_outfeed(gpa_actor *a, gpa__msg *m, gpa_feed *s) {
  gpa__feed_params *p = params(m);
  uint64_t bytes[64];
  for (uint32_t i = 0; i < m->n_in; i++) gpa__tensor_bytes(&m->t[i], &bytes[i], "outfeed");
  gpa__feed_item *it = gpa__feed_item_new(m->n_in, bytes);
  if (!it) {
    snprintf(m->err, sizeof m->err, "outfeed: out of host memory for the item");
    return GPA_ENOMEM;
  }
  m->payload = it;
  for (uint32_t i = 0; i < m->n_in; i++) {
    it->t[i].dtype = m->t[i].dtype;
    it->t[i].rank = m->t[i].rank;
    memcpy(it->t[i].shape, m->t[i].shape, sizeof it->t[i].shape);
    gpa__slot *sl = gpa__bufcache_slot(a->cache, m->t[i].buffer);
    gpa_status st =
        a->be->readback(a->bctx, m->q->s->bq, NULL, (void *)it->t[i].data, (char *)sl->ptr + m->t[i].offset, bytes[i]);
    if (st != GPA_OK) return st;
    m->bytes += bytes[i];
  }
  p->seq = s->out_seq++;
  p->placed = 1;
  gpa__work w = gpa__work_of(m);
  return a->be->fence ? a->be->fence(a->bctx, &w) : GPA_OK;
}

static gpa_status run(gpa_actor *a, gpa__msg *m) {
  gpa_feed *s = params(m)->s;
  if (atomic_load(&s->closed)) return cancelled(m, s);
  return m->cls == &gpa__infeed_class ? run_infeed(a, m, s) : run_outfeed(a, m, s);
}

/* Hands in-order items to delivery; failed ones complete in their turn. */
static void flush(gpa_feed *s) {
  while (s->reorder && params(s->reorder)->seq == s->landed_seq) {
    gpa__msg *m = s->reorder;
    s->reorder = m->next;
    m->next = NULL;
    s->landed_seq++;
    if (m->status != GPA_OK || atomic_load(&s->closed)) {
      gpa_status st = m->status != GPA_OK ? m->status : GPA_ECANCELED;
      if (m->status == GPA_OK) cancelled(m, s);
      gpa__feed_delivered(s, m, st, false);
      continue;
    }
    pthread_mutex_lock(&s->lock);
    if (s->dq_tail) s->dq_tail->next = m;
    else s->dq_head = m;
    s->dq_tail = m;
    atomic_fetch_add_explicit(&s->dq_len, 1, memory_order_release);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
  }
}

static void place(gpa_feed *s, gpa__msg *m) {
  gpa__msg **pp = &s->reorder;
  while (*pp && params(*pp)->seq < params(m)->seq) pp = &(*pp)->next;
  m->next = *pp;
  *pp = m;
  flush(s);
}

/* An outfeed that ran goes to delivery, in the session's order (failures
 * too, once they have a place in it): its handle completes there. */
static bool finished(gpa_actor *a, gpa__msg *m, gpa_status st) {
  (void)a;
  gpa__feed_params *p = params(m);
  gpa_feed *s = p->s;
  bool out = m->cls == &gpa__outfeed_class;
  if (out && (st == GPA_OK || p->placed)) {
    m->status = st;
    place(s, m);
    return true;
  }
  if (out && p->reserved) gpa__feed_room(s);
  gpa__feed_unref(s);
  return false;
}

/* Outfeed room given back on the actor thread itself (no message wakes it). */
static bool room_ready(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  (void)a;
  (void)m;
  gpa_feed *s = q->s->park_on;
  return atomic_load(&s->out_pending) < s->out_cap;
}

static void timed_out(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  (void)a;
  (void)q;
  m->status = GPA_ETIMEDOUT;
  snprintf(m->err, sizeof m->err, "infeed: no item arrived in session %llu within %lld ms",
           (unsigned long long)params(m)->s->id, (long long)(params(m)->timeout_ns / 1000000));
}

const gpa__msg_class gpa__infeed_class = {"infeed", must_park, NULL, timed_out, run, finished, NULL};
const gpa__msg_class gpa__outfeed_class = {"outfeed", must_park, room_ready, timed_out, run, finished, NULL};

void gpa__feed_drop_pending(gpa_feed *s) {
  while (s->in_head) {
    gpa__feed_item *it = s->in_head;
    s->in_head = it->next;
    free(it);
  }
  s->in_tail = NULL;
  /* Landed out of order and never to be delivered now. */
  while (s->reorder) {
    gpa__msg *r = s->reorder;
    s->reorder = r->next;
    gpa__feed_delivered(s, r, r->status != GPA_OK ? r->status : GPA_ECANCELED, false);
  }
}

static void *feeds_create(gpa_actor *a) {
  (void)a;
  gpa__feeds *f = calloc(1, sizeof *f);
  if (f) pthread_mutex_init(&f->lock, NULL);
  return f;
}

/* The actor exits: items nobody took are freed, landed ones cancelled. */
static void feeds_shutdown(gpa_actor *a, void *st) {
  (void)a;
  gpa__feeds *f = st;
  pthread_mutex_lock(&f->lock);
  for (gpa_feed *s = f->list; s; s = s->next) gpa__feed_drop_pending(s);
  pthread_mutex_unlock(&f->lock);
}

void gpa__feeds_destroy(gpa_actor *a, void *st); /* feed.c */

const gpa__ext gpa__feed_ext = {feeds_create, feeds_shutdown, gpa__feeds_destroy};
