/* Queues: ticket order on the actor thread, creation and destruction.
 *
 * Messages reach the actor through per-producer rings, so two messages of
 * one queue can arrive out of ticket order. A message that is not the
 * queue's next waits (hold, below) until it is; a gap always fills, because
 * a ticket is taken only once its ring cells are reserved (mailbox.c).
 *
 * A barrier (batch sync, queue destroy) also waits until the queue's device
 * work has completed: on an asynchronous backend, sync must see every earlier
 * message finished. Ops do not wait for each other here; the stream orders
 * them on the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/bufcache.h"
#include "backends/backend.h"

/* One source ring delivers its messages for a queue in ticket order (it
 * takes its tickets in program order), so a message waiting for an earlier
 * ticket joins the tail of its source's lane in O(1), and the next to run is
 * at the head of one of the few lanes. A single sorted list instead costs a
 * walk per arrival when sources interleave: callgrind measured ~450
 * instructions a message in the walk alone with 2 and 4 producers. Sources
 * past GPA__LANES at once (rare) share the sorted spill list. */
static void hold(gpa_actor *a, gpa__qstate *s, gpa__msg *m, const gpa__ctx *src) {
  m->next = NULL;
  s->n_held++;
  a->held_total++;
  uint32_t i = 0;
  while (i < s->n_lanes && s->lane[i].src != src) i++;
  if (i == s->n_lanes && i < GPA__LANES) {
    s->lane[i] = (gpa__lane){src, NULL, NULL};
    s->n_lanes++;
  }
  if (i < s->n_lanes) {
    gpa__lane *l = &s->lane[i];
    if (l->tail) l->tail->next = m;
    else l->head = m;
    l->tail = m;
    return;
  }
  gpa__msg **pp = &s->spill;
  while (*pp && (*pp)->ticket < m->ticket) pp = &(*pp)->next;
  m->next = *pp;
  *pp = m;
}

/* Where the held message with ticket t is: a lane index, GPA__LANES for the
 * spill list, or -1. A lane in use is never empty (unhold frees it). */
static int held_find(const gpa__qstate *s, uint64_t t) {
  if (!s->n_held) return -1;
  if (s->hint < s->n_lanes && s->lane[s->hint].head->ticket == t) return (int)s->hint;
  for (uint32_t i = 0; i < s->n_lanes; i++)
    if (s->lane[i].head->ticket == t) return (int)i;
  if (s->spill && s->spill->ticket == t) return GPA__LANES;
  return -1;
}

static gpa__msg *held_at(gpa__qstate *s, int where) { return where == GPA__LANES ? s->spill : s->lane[where].head; }

static gpa__msg *unhold(gpa_actor *a, gpa__qstate *s, int where) {
  gpa__msg *m;
  if (where == GPA__LANES) {
    m = s->spill;
    s->spill = m->next;
  } else {
    gpa__lane *l = &s->lane[where];
    m = l->head;
    l->head = m->next;
    if (!l->head) /* free the lane for another source */
      *l = s->lane[--s->n_lanes];
    else
      s->hint = (uint32_t)where;
  }
  s->n_held--;
  a->held_total--;
  return m;
}

/* The held message with the smallest ticket (n_held > 0). */
static gpa__msg *unhold_first(gpa_actor *a, gpa__qstate *s) {
  int w = s->spill ? GPA__LANES : 0;
  for (uint32_t i = 0; i < s->n_lanes; i++)
    if (held_at(s, (int)i)->ticket < held_at(s, w)->ticket) w = (int)i;
  return unhold(a, s, w);
}

gpa__msg *gpa__queue_head(gpa_queue *q) {
  int w = q->s ? held_find(q->s, q->s->expect) : -1;
  return w < 0 ? NULL : held_at(q->s, w);
}

/* Authoritative buffer check, at intake: ids must be live now; the message
 * then pins its buffers so that a later release waits for it. */
static void pin_buffers(gpa_actor *a, gpa__msg *m) {
  uint32_t n = m->n_in + m->n_out;
  for (uint32_t i = 0; i < n; i++) {
    gpa__slot *sl = gpa__bufcache_live(a->cache, m->t[i].buffer);
    if (!sl) {
      for (uint32_t j = 0; j < i; j++) gpa__bufcache_unpin(a, gpa__bufcache_slot(a->cache, m->t[j].buffer));
      m->status = GPA_ESTALE;
      snprintf(m->err, sizeof m->err, "%s[%u]: buffer 0x%llx was released before the message ran",
               i < m->n_in ? "inputs" : "outputs", i < m->n_in ? i : i - m->n_in,
               (unsigned long long)m->t[i].buffer);
      return;
    }
    gpa__bufcache_pin(sl);
  }
  m->pinned = 1;
}

/* A message of a destroyed queue fails without its turn: the queue's order
 * ended with the destroy, and its state is gone (the message's buffers are
 * unpinned, its handle completed, by dispatch as for any failure). A sync
 * runs: it collects the batch the destroy left (batch.c). */
static void fail_closed(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  if (m->status == GPA_OK && m->barrier != GPA__BARRIER_SYNC) {
    m->status = GPA_ECLOSED;
    snprintf(m->err, sizeof m->err, "queue '%s' was destroyed before this message ran", q->name);
  }
  gpa__dispatch(a, m);
}

/* The batch's references to its readbacks, at a destroy or shutdown. */
static void drop_readbacks(gpa__qstate *s) {
  for (gpa__msg *rb = s->batch.readbacks; rb;) {
    gpa__msg *n = rb->next;
    gpa__msg_unref(rb);
    rb = n;
  }
  s->batch.readbacks = NULL;
}

/* After the destroy ran: the queue's state goes, only the gpa_queue stays
 * (docs/api.md: a destroyed queue keeps 128 bytes until its actor is
 * destroyed), and its state while its batch has work a sync has not
 * collected. Messages that arrived early for later tickets fail now, in
 * ticket order; later arrivals fail at intake (q->s is NULL). The destroy
 * was a barrier: nothing of the queue is in flight or parked. */
static void bury(gpa_actor *a, gpa_queue *q) {
  gpa__qstate *s = q->s;
  gpa__msg *early = NULL, **tail = &early;
  while (s->n_held) {
    *tail = unhold_first(a, s);
    tail = &(*tail)->next;
  }
  *tail = NULL;
  q->s = NULL;
  if (a->run_q == q) a->run_q = NULL;
  const gpa__batch *b = &s->batch;
  if (b->ops || b->readbacks || b->label[0]) q->last = s;
  else free(s);
  while (early) { /* a sync among them may collect and free q->last */
    gpa__msg *m = early;
    early = m->next;
    fail_closed(a, q, m);
  }
}

GPA__HOT_INLINE void run(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  gpa__qstate *s = q->s;
  GPA__ASSERT(2, m->ticket == s->expect); /* each queue runs in ticket order */
  s->expect++;
  if (s->poison && m->kind != GPA__MSG_CALL && m->status == GPA_OK) {
    m->status = s->poison;
    snprintf(m->err, sizeof m->err, "skipped: an earlier %s in this batch of queue '%s' timed out", s->poison_by,
             q->name);
  }
  gpa__dispatch(a, m);
  if (__builtin_expect(s->dead, 0)) bury(a, q); /* m was the destroy */
}

void gpa__queue_advance(gpa_actor *a, gpa_queue *q) {
  for (int w; q->s && (w = held_find(q->s, q->s->expect)) >= 0;) { /* q->s: NULL once a destroy ran */
    gpa__qstate *s = q->s;
    gpa__msg *m = held_at(s, w);
    if (m->barrier && s->inflight) {
      /* work the backend holds (a graph batch) starts: the barrier waits for it */
      if (a->be->release) a->be->release(a->bctx, s->bq, GPA__RELEASE_END);
      return; /* resumed by the last completion */
    }
    if (s->parked) return; /* resumed by gpa__queue_unpark */
    if (m->kind == GPA__MSG_EXT && m->cls->must_park(a, q, m)) {
      s->parked = true;
      s->parked_next = a->parked;
      a->parked = q;
      return;
    }
    run(a, q, unhold(a, s, w));
  }
}

void gpa__queue_unpark(gpa_actor *a, gpa_queue *q) {
  gpa__qstate *s = q->s;
  if (!s || !s->parked) return;
  for (gpa_queue **pp = &a->parked; *pp; pp = &(*pp)->s->parked_next)
    if (*pp == q) {
      *pp = s->parked_next;
      break;
    }
  s->parked = false;
  s->park_on = NULL;
  s->park_deadline = 0;
  s->parked_next = NULL;
  gpa__queue_advance(a, q);
}

int64_t gpa__queues_next_deadline(gpa_actor *a) {
  int64_t dl = 0;
  for (gpa_queue *q = a->parked; q; q = q->s->parked_next)
    if (q->s->park_deadline && (!dl || q->s->park_deadline < dl)) dl = q->s->park_deadline;
  return dl;
}

/* Parked heads whose class now lets them run, and those past their
 * deadline (failed by their class; the rest of their batch with them). */
uint32_t gpa__queues_expire(gpa_actor *a, int64_t now) {
  uint32_t n = 0;
  for (gpa_queue *q = a->parked, *next; q; q = next) {
    next = q->s->parked_next;
    gpa__msg *m = gpa__queue_head(q);
    if (m && m->cls->ready && m->cls->ready(a, q, m)) {
      gpa__queue_unpark(a, q);
      n++;
      continue;
    }
    if (!m || !q->s->park_deadline || q->s->park_deadline > now) continue;
    m->cls->timed_out(a, q, m);
    q->s->poison = m->status;
    q->s->poison_by = m->cls->name;
    gpa__queue_unpark(a, q);
    n++;
  }
  return n;
}

void gpa__intake(gpa_actor *a, gpa__msg *m, const gpa__ctx *src) {
  if (m->kind != GPA__MSG_CALL && m->n_in + m->n_out) pin_buffers(a, m);
  gpa_queue *q = m->q;
  if (!q) {
    gpa__dispatch(a, m);
    return;
  }
  gpa__qstate *s = q->s;
  if (__builtin_expect(!s, 0)) {
    fail_closed(a, q, m);
    return;
  }
  /* The common case: its turn, nothing waiting, a plain op. */
  if (!s->n_held && m->ticket == s->expect && !s->parked && m->kind != GPA__MSG_EXT &&
      !(m->barrier && s->inflight)) {
    run(a, q, m);
    return;
  }
  hold(a, s, m, src);
  gpa__queue_advance(a, q);
}

static gpa_queue *queue_new(gpa_actor *a, const char *name, gpa_status *st) {
  /* line-aligned, both: the queue's split between producers' and the
   * actor's lines needs it */
  gpa_queue *q = aligned_alloc(_Alignof(gpa_queue), sizeof *q);
  gpa__qstate *s = aligned_alloc(64, (sizeof *s + 63) / 64 * 64);
  if (!q || !s) {
    free(q);
    free(s);
    *st = GPA_ENOMEM;
    return NULL;
  }
  memset(q, 0, sizeof *q);
  memset(s, 0, sizeof *s);
  q->actor = a;
  q->s = s;
  if (a->be->queue_init) {
    *st = a->be->queue_init(a->bctx, &s->bq);
    if (*st != GPA_OK) {
      free(s);
      free(q);
      return NULL;
    }
  }
  pthread_mutex_lock(&a->queue_lock);
  q->id = a->next_queue_id++;
  if (name && name[0]) snprintf(q->name, sizeof q->name, "%s", name);
  else snprintf(q->name, sizeof q->name, "q%u", q->id);
  q->next_all = a->queues;
  a->queues = q;
  pthread_mutex_unlock(&a->queue_lock);
  s->batch.t0_ns = gpa__clock_ns();
  *st = GPA_OK;
  return q;
}

gpa_status gpa__queue_init_default(gpa_actor *a) {
  gpa_status st;
  a->default_q = queue_new(a, "default", &st);
  return st;
}

typedef struct create_args {
  char name[32];
  gpa_queue *out;
} create_args;

static gpa_status create_fn(gpa_actor *a, gpa__msg *m) {
  create_args *args = (create_args *)m->params;
  gpa_status st;
  args->out = queue_new(a, args->name, &st);
  if (st != GPA_OK) snprintf(m->err, sizeof m->err, "queue creation failed: %s", gpa_strerror(st));
  return st;
}

gpa_status gpa_queue_create(gpa_actor *a, const char *name, gpa_queue **out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_queue_create: NULL argument");
  *out = NULL;
  gpa__msg *m = gpa__msg_new(a, GPA__MSG_CALL);
  if (!m) return GPA_ENOMEM;
  create_args *args = (create_args *)m->params;
  snprintf(args->name, sizeof args->name, "%s", name ? name : "");
  args->out = NULL;
  m->fn = create_fn;
  gpa_status st = gpa__call(a, m);
  if (st == GPA_OK) *out = args->out;
  gpa__msg_unref(m);
  return st;
}

/* A barrier: the queue's device work has completed, so its backend queue
 * (a stream) is given back now rather than at shutdown, and its state is
 * freed once this message is done (run, bury); a program that opens and
 * closes queues would otherwise hold a stream and a state per queue it ever
 * had. */
static gpa_status destroy_fn(gpa_actor *a, gpa__msg *m) {
  gpa__qstate *s = m->q->s;
  s->dead = true;
  if (a->be->queue_fini && s->bq) a->be->queue_fini(a->bctx, s->bq);
  s->bq = NULL;
  return GPA_OK;
}

gpa_status gpa_queue_destroy(gpa_queue *q) {
  if (!q) return gpa__fail(GPA_EINVAL, "gpa_queue_destroy: queue is NULL");
  if (q == q->actor->default_q) return gpa__fail(GPA_EINVAL, "gpa_queue_destroy: the default queue lives with its actor");
  int expect = 0;
  if (!atomic_compare_exchange_strong(&q->closed, &expect, 1))
    return gpa__fail(GPA_ECLOSED, "gpa_queue_destroy: queue '%s' was already destroyed", q->name);
  gpa__msg *m = gpa__msg_new(q->actor, GPA__MSG_CALL);
  if (!m) return GPA_ENOMEM;
  m->fn = destroy_fn;
  m->q = q;
  m->barrier = 1;
  gpa_status st = gpa__call(q->actor, m);
  gpa__msg_unref(m);
  return st;
}

gpa_queue *gpa_actor_default_queue(gpa_actor *a) { return a ? a->default_q : NULL; }
gpa_actor *gpa_queue_actor(gpa_queue *q) { return q ? q->actor : NULL; }

void gpa__queues_cancel_held(gpa_actor *a) {
  a->parked = NULL;
  for (gpa_queue *q = a->queues; q; q = q->next_all) {
    gpa__qstate *s = q->s;
    if (!s) continue; /* destroyed: nothing held */
    s->parked = false;
    while (q->s && s->n_held) { /* in ticket order: the smallest head each time */
      gpa__msg *m = unhold_first(a, s);
      if (m->status == GPA_OK) {
        m->status = GPA_ECANCELED;
        snprintf(m->err, sizeof m->err, "cancelled: actor destroyed while the message waited for its turn");
      }
      s->expect = m->ticket; /* keep run()'s ticket bookkeeping consistent */
      run(a, q, m);
    }
  }
}

void gpa__queues_release_device(gpa_actor *a) {
  for (gpa_queue *q = a->queues; q; q = q->next_all) {
    if (q->last) drop_readbacks(q->last);
    gpa__qstate *s = q->s;
    if (!s) continue; /* destroyed: its stream went then */
    drop_readbacks(s);
    if (a->be->queue_fini && s->bq) a->be->queue_fini(a->bctx, s->bq);
    s->bq = NULL;
  }
}

void gpa__queues_free(gpa_actor *a) {
  gpa_queue *q = a->queues;
  while (q) {
    gpa_queue *next = q->next_all;
    free(q->s);
    free(q->last);
    free(q);
    q = next;
  }
  a->queues = NULL;
}
