/* The mailbox: one SPSC ring per producer thread, scanned by the actor.
 *
 * Why not one MPSC ring: ck_ring's multi-producer enqueue spins until earlier
 * producers commit, so a preempted producer stalls all others for a time
 * slice (shared/notes/messaging-facts.md). With a ring per producer, a
 * preempted producer delays only its own messages.
 *
 * Wake-up: the actor sleeps on a ck_ec32 event count. Producers increment it
 * only when the actor has announced it is going idle; the idle flag and the
 * ring contents form a Dekker pair, so a message is never left unseen while
 * the actor sleeps.
 *
 * Shutdown: destroy sets `closing`, then waits until no producer is inside
 * gpa__send (`busy`, again a Dekker pair), so every message that was accepted
 * is in a ring before the actor's final drain.
 *
 * Both pairs put their full fence on the rare side (the actor going to sleep,
 * destroy) and only a compiler barrier on the producer's side (fence.h).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "actor/ctx.h"
#include "actor/fence.h"
#include "actor/spin.h"
#include "backends/backend.h"

/* ck_ec platform layer: futex wait/wake and the monotonic clock. */
static int ec_gettime(const struct ck_ec_ops *ops, struct timespec *out) {
  (void)ops;
  return clock_gettime(CLOCK_MONOTONIC, out);
}
static void ec_wait32(const struct ck_ec_wait_state *st, const uint32_t *addr, uint32_t expected,
                      const struct timespec *deadline) {
  (void)st;
  syscall(SYS_futex, addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected, deadline, NULL,
          FUTEX_BITSET_MATCH_ANY);
}
static void ec_wake32(const struct ck_ec_ops *ops, const uint32_t *addr) {
  (void)ops;
  syscall(SYS_futex, addr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, INT_MAX, NULL, NULL, 0);
}
const struct ck_ec_ops gpa__ec_ops = {
    .gettime = ec_gettime, .wait32 = ec_wait32, .wake32 = ec_wake32, .busy_loop_iter = 200,
    .initial_wait_ns = 1000000};
const struct ck_ec_mode gpa__ec_mp = {.ops = &gpa__ec_ops, .single_producer = false};

/* Per-thread list of this thread's contexts, one per actor it submitted to. */
typedef struct tls_ctxs {
  gpa__ctx **v;
  uint32_t n, cap;
} tls_ctxs;
static _Thread_local tls_ctxs gpa__tls;
_Thread_local gpa__ctx *gpa__tls_last;
static pthread_key_t gpa__tls_key;
static pthread_once_t gpa__tls_once = PTHREAD_ONCE_INIT;
void gpa__tls_drop_dead(void);

void gpa__ctx_free(gpa__ctx *c) {
  for (uint32_t i = 0; i < c->n_slabs; i++) free(c->slabs[i]);
  free(c->slabs);
  free(c->ring.cells);
  free(c);
}

void gpa__ctx_unref_n(gpa__ctx *c, uint64_t n) {
  if (atomic_fetch_sub_explicit(&c->refs, n, memory_order_acq_rel) == n) gpa__ctx_free(c);
}

void gpa__ctx_unref(gpa__ctx *c) { gpa__ctx_unref_n(c, 1); }

/* Thread exit: give up ownership so another thread can adopt the context. */
static void tls_destructor(void *p) {
  tls_ctxs *t = p;
  gpa__tls_last = NULL;
  for (uint32_t i = 0; i < t->n; i++) {
    gpa__ctx *c = t->v[i];
    uint64_t prepaid = c->prepaid;
    c->prepaid = 0;
    atomic_store_explicit(&c->owned, 0, memory_order_release);
    gpa__ctx_unref_n(c, 1 + prepaid);
  }
  free(t->v);
  t->v = NULL;
  t->n = t->cap = 0;
}

static void tls_key_init(void) { pthread_key_create(&gpa__tls_key, tls_destructor); }

static gpa__ctx *ctx_register(gpa_actor *a) {
  pthread_once(&gpa__tls_once, tls_key_init);
  tls_ctxs *t = &gpa__tls;
  gpa__tls_drop_dead(); /* contexts of destroyed actors hold pool memory */
  if (t->n == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 4;
    gpa__ctx **v = realloc(t->v, cap * sizeof *v);
    if (!v) {
      gpa__fail(GPA_ENOMEM, "out of memory registering a producer thread");
      return NULL;
    }
    t->v = v;
    t->cap = cap;
  }
  pthread_mutex_lock(&a->ctx_lock);
  gpa__ctx *c = NULL;
  for (gpa__ctx *o = atomic_load(&a->ctxs); o; o = o->next) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&o->owned, &expect, 1)) {
      c = o;
      atomic_fetch_add(&c->refs, 1);
      break;
    }
  }
  if (!c) {
    c = aligned_alloc(_Alignof(gpa__ctx), sizeof *c);
    if (c) memset(c, 0, sizeof *c);
    gpa__cell *cells = aligned_alloc(64, a->opts.mailbox_size * sizeof *cells);
    if (!c || !cells) {
      free(c);
      free(cells);
      pthread_mutex_unlock(&a->ctx_lock);
      gpa__fail(GPA_ENOMEM, "out of memory registering a producer thread");
      return NULL;
    }
    c->actor = a;
    gpa__ring_init(&c->ring, cells, a->opts.mailbox_size);
    atomic_store(&c->owned, 1);
    atomic_store(&c->refs, 2); /* the actor and this thread */
    c->next = atomic_load(&a->ctxs);
    atomic_store_explicit(&a->ctxs, c, memory_order_release);
    atomic_fetch_add(&a->producers, 1);
  }
  pthread_mutex_unlock(&a->ctx_lock);
  t->v[t->n++] = c;
  pthread_setspecific(gpa__tls_key, t);
  return c;
}

gpa__ctx *gpa__ctx_lookup(gpa_actor *a) {
  tls_ctxs *t = &gpa__tls;
  gpa__ctx *c = NULL;
  for (uint32_t i = 0; i < t->n && !c; i++)
    if (t->v[i]->actor == a && !atomic_load_explicit(&t->v[i]->dead, memory_order_relaxed)) c = t->v[i];
  if (!c) c = ctx_register(a);
  if (c) gpa__tls_last = c;
  return c;
}

const gpa__op *gpa__ctx_find_op_slow(gpa__ctx *c, const gpa_registry *reg, const char *name) {
  gpa__op_cache *e = &c->ops[((uintptr_t)name >> 3) % GPA__OP_CACHE];
  uint32_t slot;
  const gpa__op *op = gpa__registry_find_slot(reg, name, &slot);
  if (op) *e = (gpa__op_cache){name, op, slot};
  return op;
}

/* Waits for space in c's ring per the actor's full policy. Control calls
 * (sync, acquire, ...) never fail fast (GPA_FULL_FAIL is for submits):
 * failing them at once would only make the caller spin on a round trip it
 * cannot do without. They wait like a submit does, up to full_timeout_ns, so
 * a stuck actor cannot hang them either (docs/api.md, "Control calls"). */
static gpa_status wait_space(gpa_actor *a, gpa__ctx *c, uint32_t cells, bool control) {
  if (a->opts.full_policy == GPA_FULL_FAIL && !control)
    return gpa__fail(GPA_EAGAIN, "mailbox full (%u slots); message not accepted", a->opts.mailbox_size);
  int64_t limit = a->opts.full_timeout_ns, start = gpa__now_ns();
  for (int spin = 0;; spin++) {
    if (gpa__ring_fits(&c->ring, cells)) return GPA_OK;
    if (atomic_load_explicit(&a->closing, memory_order_acquire))
      return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
    if (limit > 0 && gpa__now_ns() - start > limit)
      return gpa__fail(GPA_ETIMEDOUT, "mailbox full for %.3f ms (full_timeout_ns); message not accepted",
                       (double)limit / 1e6);
    if (spin < 64) {
      gpa__cpu_relax();
      continue;
    }
    uint32_t snap = ck_ec32_value(&a->space_ec);
    atomic_store_explicit(&c->want_space, 1, memory_order_seq_cst);
    if (gpa__ring_fits(&c->ring, cells)) return GPA_OK;
    /* Wake the actor in case it sleeps, then wait for it to drain us. */
    ck_ec32_inc(&a->ec, &gpa__ec_mp);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_nsec += 2000000; /* re-check closing and the limit every 2 ms */
    if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
    ck_ec32_wait(&a->space_ec, &gpa__ec_mp, snap, &dl);
  }
}

/* Marks c busy and tells whether the actor still takes messages: the light
 * side of the pair with gpa__mailbox_quiesce. */
static bool enter(gpa_actor *a, gpa__ctx *c) {
  atomic_store_explicit(&c->busy, 1, memory_order_relaxed);
  gpa__fence_light();
  return !atomic_load_explicit(&a->closing, memory_order_relaxed);
}

void gpa__wake_actor(gpa_actor *a) { ck_ec32_inc(&a->ec, &gpa__ec_mp); }

/* Tickets without a locked instruction for a queue that one producer feeds
 * (the common case: a trainer loop, one thread per queue). A locked
 * read-modify-write per message drains the store buffer, so the producer
 * waits for every store into the message it just filled to own its line.
 *
 * The first context to send on q owns its ticket counter and increments it
 * with a plain load and store. A second one makes the counter shared for
 * good: it marks the owner PENDING, waits until the old owner is outside
 * gpa__send (its `busy`), then publishes SHARED. That is the asymmetric pair
 * of destroy's quiesce: the heavy fence makes the owner either see PENDING
 * at its next ticket (and use the locked add) or show `busy` while it may
 * still take one the plain way. Everyone else waits out PENDING, so no
 * locked add can interleave with the owner's last plain one. Called outside
 * c's busy section, so two contexts waiting on each other cannot deadlock.
 * On return q's owner is c or SHARED, as gpa__send_inline requires. */
static void ticket_mode(gpa__ctx *c, gpa_queue *q) {
  for (;;) {
    gpa__ctx *o = atomic_load_explicit(&q->ticket_owner, memory_order_acquire);
    if (o == c || o == GPA__TICKETS_SHARED) return;
    if (o == GPA__TICKETS_PENDING) {
      sched_yield();
      continue;
    }
    gpa__ctx *to = o ? GPA__TICKETS_PENDING : c;
    if (!atomic_compare_exchange_strong(&q->ticket_owner, &o, to)) continue;
    if (to == c) return;
    gpa__fence_heavy();
    while (atomic_load_explicit(&o->busy, memory_order_acquire)) sched_yield();
    atomic_store_explicit(&q->ticket_owner, GPA__TICKETS_SHARED, memory_order_release);
    return;
  }
}

/* ctx.h's gpa__send_inline is this function's common case: keep the two
 * in step. */
gpa_status gpa__send_slow(gpa_actor *a, gpa__ctx *c, const gpa__sendv *v) {
  gpa_status st = GPA_OK;
  if (v->q) ticket_mode(c, v->q);
  if (!enter(a, c)) {
    st = gpa__fail(GPA_ESHUTDOWN, "actor is shutting down; message not accepted");
    goto out;
  }
  gpa__rec *r;
  while (!(r = gpa__ring_reserve(&c->ring, v->cells))) {
    /* Leave `busy` while waiting so that destroy is not blocked by us. */
    atomic_store_explicit(&c->busy, 0, memory_order_release);
    st = wait_space(a, c, v->cells, v->m && v->m->kind == GPA__MSG_CALL);
    if (st != GPA_OK) return st;
    if (!enter(a, c)) {
      st = gpa__fail(GPA_ESHUTDOWN, "actor is shutting down; message not accepted");
      goto out;
    }
  }
  /* The cells are ours: from here on the message cannot fail to arrive, so
   * the queue ticket is taken now and never skipped. */
  uint64_t ticket =
      v->q ? gpa__ticket_take(v->q, c, atomic_load_explicit(&v->q->ticket_owner, memory_order_acquire)) : 0;
  gpa__rec_fill(r, v, ticket);
  gpa__ring_commit(&c->ring);
out:
  /* release: quiesce sees the message in the ring once it sees busy 0. */
  atomic_store_explicit(&c->busy, 0, memory_order_release);
  if (st != GPA_OK) return st;
  gpa__fence_light(); /* the ring's commit before the look at idle */
  if (atomic_load_explicit(&a->idle, memory_order_relaxed)) gpa__wake_actor(a);
  return st;
}

static gpa_status send_msg(gpa_actor *a, gpa__msg *m, bool keep) {
  gpa__sendv v = {.m = m, .keep = keep, .cells = 1, .q = m->q};
  return gpa__send_inline(a, m->owner, &v);
}

gpa_status gpa__send(gpa_actor *a, gpa__msg *m) { return send_msg(a, m, true); }
gpa_status gpa__send_owned(gpa_actor *a, gpa__msg *m) { return send_msg(a, m, false); }

/* The actor's own pool: messages made from records sent by value. Only the
 * actor thread takes from it; refs counts the actor and each message out. */
gpa_status gpa__own_pool_init(gpa_actor *a) {
  gpa__ctx *c = aligned_alloc(_Alignof(gpa__ctx), sizeof *c);
  if (!c) return GPA_ENOMEM;
  memset(c, 0, sizeof *c);
  c->actor = a;
  atomic_store(&c->owned, 1);
  atomic_store(&c->refs, 1);
  a->own = c;
  return GPA_OK;
}

void gpa__own_pool_fini(gpa_actor *a) {
  gpa__ctx *c = a->own;
  if (!c) return;
  a->own = NULL;
  uint64_t prepaid = c->prepaid;
  c->prepaid = 0;
  gpa__ctx_unref_n(c, 1 + prepaid);
}

/* A message for a record sent by value; NULL when out of memory (the
 * record then waits in the ring). */
static gpa__msg *msg_of_rec(gpa_actor *a, const gpa__rec *r) {
  gpa__msg *m = gpa__msg_take(a->own, GPA__MSG_OP);
  if (!m) return NULL;
  m->q = r->q;
  m->ticket = r->ticket;
  m->op = r->op;
  m->n_in = r->n_in;
  m->n_out = r->n_out;
  uint32_t n = (uint32_t)r->n_in + r->n_out;
  if (n) memcpy(m->t_inline, gpa__rec_tensors(r), n * sizeof *m->t_inline);
  if (r->params_size) memcpy(m->params, gpa__rec_params(r), r->params_size);
  return m;
}

/* Whether the backend can run op records straight from the ring
 * (gpa__run_record): a synchronous one without a run hook. Asked here,
 * before the call: the CUDA backend never can, and the call that declined
 * was about 20 instructions of each of its messages (issue 24). */
static inline bool runs_records(const gpa_actor *a) { return a->be->synchronous && !a->be->run; }

/* Takes up to budget records from c's ring. An op record whose turn on its
 * queue has not come stays in the ring, once: each ring delivers a queue's
 * records in ticket order, so with several producers on one queue the actor
 * merges the rings by ticket and runs most records straight from them,
 * instead of making each early one a message and holding it. A record found
 * waiting twice in a row is held as a message after all: its turn may be
 * far off (a parked message, a barrier, a ticket behind another ring's waiting
 * head), and the ring's later records, of any queue, must not wait for it. */
static uint32_t drain_ring(gpa_actor *a, gpa__ctx *c, uint32_t budget, bool *waiting) {
  uint32_t got = 0;
  const gpa__rec *r;
  while (got < budget && (r = (const gpa__rec *)gpa__ring_peek(&c->ring))) {
    if (r->h.type == GPA__REC_OP && r->q->s) { /* destroyed (s NULL): intake fails it */
      if (r->ticket != r->q->s->expect) {
        uint32_t at = atomic_load_explicit(&c->ring.head, memory_order_relaxed);
        if (!c->waited || c->waited_at != at) {
          c->waited = true;
          c->waited_at = at;
          *waiting = true;
          break;
        }
      } else if (runs_records(a) && gpa__run_record(a, r)) {
        gpa__ring_release(&c->ring, &r->h);
        got++;
        continue;
      }
    }
    gpa__msg *m = r->h.type == GPA__REC_MSG ? r->m : msg_of_rec(a, r);
    if (!m) break;
    gpa__ring_release(&c->ring, &r->h);
    got++;
    gpa__intake(a, m, c);
  }
  if (got && atomic_load_explicit(&c->want_space, memory_order_seq_cst)) {
    atomic_store_explicit(&c->want_space, 0, memory_order_relaxed);
    ck_ec32_inc(&a->space_ec, &gpa__ec_mp);
  }
  return got;
}

uint32_t gpa__mailbox_drain(gpa_actor *a, uint32_t budget, bool *full) {
  uint32_t total = 0;
  for (gpa__ctx *c = atomic_load_explicit(&a->ctxs, memory_order_acquire); c; c = c->next) {
    uint32_t got = drain_ring(a, c, budget, full);
    if (got == budget) *full = true;
    total += got;
  }
  gpa__msg_return_held(a);
  return total;
}

bool gpa__mailbox_empty(gpa_actor *a) {
  for (gpa__ctx *c = atomic_load_explicit(&a->ctxs, memory_order_acquire); c; c = c->next)
    if (gpa__ring_size(&c->ring)) return false;
  return true;
}

void gpa__mailbox_quiesce(gpa_actor *a) {
  gpa__fence_heavy(); /* every producer sees `closing` or shows its `busy` */
  for (gpa__ctx *c = atomic_load_explicit(&a->ctxs, memory_order_acquire); c; c = c->next)
    while (atomic_load_explicit(&c->busy, memory_order_acquire)) sched_yield();
  /* Producers parked in wait_space re-check `closing` at least every 2 ms. */
  ck_ec32_inc(&a->space_ec, &gpa__ec_mp);
}

void gpa__mailbox_fini(gpa_actor *a) {
  gpa__ctx *c = atomic_load(&a->ctxs);
  atomic_store(&a->ctxs, NULL);
  while (c) {
    gpa__ctx *next = c->next;
    atomic_store_explicit(&c->dead, 1, memory_order_release);
    gpa__ctx_unref(c);
    c = next;
  }
}

/* Drops the calling thread's contexts of destroyed actors now rather than at
 * its next registration or exit. */
void gpa__tls_drop_dead(void) {
  tls_ctxs *t = &gpa__tls;
  for (uint32_t i = 0; i < t->n;) {
    if (atomic_load_explicit(&t->v[i]->dead, memory_order_acquire)) {
      if (gpa__tls_last == t->v[i]) gpa__tls_last = NULL;
      gpa__ctx_unref_n(t->v[i], 1 + t->v[i]->prepaid);
      t->v[i] = t->v[--t->n];
    } else {
      i++;
    }
  }
}
