/* A producer context: one per (thread, actor).
 *
 * It holds the thread's SPSC ring into the actor and its message pool. A
 * message returns to the pool of the context that allocated it, from any
 * thread, through `returned`: a Treiber stack that only the owner pops, and
 * pops whole (atomic exchange), so there is no ABA problem.
 *
 * Lifetime: `refs` counts the actor (until destroy), the owning thread (until
 * it exits), and every message allocated from the pool and not yet returned.
 * Whoever drops the last reference frees the context, so a handle may outlive
 * both its actor and the thread that made it.
 */
#ifndef GPA_ACTOR_CTX_H
#define GPA_ACTOR_CTX_H
#include <stdlib.h>
#include <string.h>

#include "actor/fence.h"
#include "actor/internal.h"
#include "actor/ring.h"

/* A registry lookup remembered by the thread that made it. It is valid
 * while the registry slot still holds `op` and op's name equals the name
 * asked for (gpa__ctx_find_op), so it needs no invalidation. */
#define GPA__OP_CACHE 8
typedef struct gpa__op_cache {
  const char *name; /* the caller's pointer: picks the entry, proves nothing */
  const gpa__op *op;
  uint32_t slot;
} gpa__op_cache;

/* Laid out by who writes what, one group per cache line, so that neither
 * thread's per-message writes evict a line the other reads per message. */
struct gpa__ctx {
  /* read by both, written rarely */
  gpa_actor *actor;          /* not dereferenced once `dead` */
  gpa__ctx *next;            /* the actor's list */
  _Atomic int owned;         /* a live thread owns it (else it may be adopted) */
  _Atomic int dead;          /* the actor is gone */
  gpa__ring ring; /* its indices sit on lines of their own */
  /* the owner's, per message */
  _Alignas(64) _Atomic int busy; /* inside gpa__send: the shutdown handshake */
  gpa__msg *free_list;       /* owner only */
  uint64_t prepaid;          /* owner only: refs taken ahead for messages to hand out */
  gpa__op_cache ops[GPA__OP_CACHE]; /* owner only: recent op lookups */
  void **slabs;              /* owner only while owned; freed with the context */
  uint32_t n_slabs, cap_slabs;
  /* the actor's (and other releasers'), per pass */
  _Alignas(64) _Atomic(gpa__msg *) returned;
  _Atomic uint64_t refs;
  _Atomic int want_space;    /* the owner waits for ring space */
  /* the actor's: the ring's head record waited for its turn (mailbox.c) */
  bool waited;
  uint32_t waited_at;
};

/* The context this thread used last: most threads submit to one actor. */
extern _Thread_local gpa__ctx *gpa__tls_last;
gpa__ctx *gpa__ctx_lookup(gpa_actor *a);

/* The calling thread's context for actor a, registering one on first use. */
static inline gpa__ctx *gpa__ctx_get(gpa_actor *a) {
  gpa__ctx *c = gpa__tls_last;
  /* A destroyed actor's address may be reused: `dead` tells them apart. */
  if (__builtin_expect(c && c->actor == a && !atomic_load_explicit(&c->dead, memory_order_relaxed), 1)) return c;
  return gpa__ctx_lookup(a);
}

const gpa__op *gpa__ctx_find_op_slow(gpa__ctx *c, const gpa_registry *reg, const char *name);

/* gpa__registry_find through c's cache (c's owner thread only). One context
 * serves one actor, hence one registry, whose entries live as long. */
static inline const gpa__op *gpa__ctx_find_op(gpa__ctx *c, const gpa_registry *reg, const char *name) {
  const gpa__op_cache *e = &c->ops[((uintptr_t)name >> 3) % GPA__OP_CACHE];
  if (__builtin_expect(e->name == name && e->op, 1) &&
      atomic_load_explicit(&((gpa_registry *)reg)->slot[e->slot], memory_order_acquire) == e->op &&
      strcmp(e->op->name_buf, name) == 0)
    return e->op;
  return gpa__ctx_find_op_slow(c, reg, name);
}
void gpa__ctx_unref(gpa__ctx *c);
void gpa__ctx_unref_n(gpa__ctx *c, uint64_t n);
/* Refills c's free list (from returned messages, else a new slab). */
bool gpa__ctx_refill(gpa__ctx *c);
gpa__msg *gpa__msg_take_slow(gpa__ctx *c, int kind);

/* gpa__msg_new from c's pool (c's owner thread only). */
static inline gpa__msg *gpa__msg_take(gpa__ctx *c, int kind) {
  if (__builtin_expect(!c->free_list, 0)) return gpa__msg_take_slow(c, kind);
  gpa__msg *m = c->free_list;
  c->free_list = m->next;
  if (c->free_list) { /* the next one's header, last written by the actor */
    __builtin_prefetch(c->free_list, 1);
    __builtin_prefetch((char *)c->free_list + 64, 1);
  }
  /* Each message out holds a reference on c; take them 64 at a time. */
  if (!c->prepaid) {
    atomic_fetch_add_explicit(&c->refs, 64, memory_order_relaxed);
    c->prepaid = 64;
  }
  c->prepaid--;
  /* Reset the header only: tensors and params are written before use, and
   * err is empty in the pool (drop_ref). */
  atomic_store_explicit(&m->state, 0, memory_order_relaxed);
  atomic_store_explicit(&m->waiters, 0, memory_order_relaxed);
  atomic_store_explicit(&m->refs, 1, memory_order_relaxed);
  atomic_store_explicit(&m->synced, 0, memory_order_relaxed);
  m->status = GPA_OK;
  m->kind = (uint8_t)kind;
  m->pinned = 0;
  m->barrier = 0;
  m->deferred = 0;
  atomic_store_explicit(&m->held, 0, memory_order_relaxed);
  m->bytes = 0;
  m->device_ns = 0;
  m->next = NULL;
  m->q = NULL;
  m->ticket = 0;
  m->op = NULL;
  m->fn = NULL;
  m->n_in = m->n_out = 0;
  m->t = m->t_inline;
  m->payload = NULL;
  m->payload_size = 0;
  m->version = 0;
#if GPA_DEBUG
  m->dbg_magic = GPA__MSG_LIVE;
  atomic_store_explicit(&m->dbg_user, 0, memory_order_relaxed);
#endif
  return m;
}

void gpa__ctx_free(gpa__ctx *c);

/* Drops one reference; true when it was the last (the message is then
 * clean for its pool). */
static inline bool gpa__msg_drop_ref(gpa__msg *m) {
  /* The only reference: nobody else can take one, no atomic RMW needed. */
  GPA__ASSERT(1, m->dbg_magic == GPA__MSG_LIVE);
  GPA__ASSERT(1, atomic_load_explicit(&m->refs, memory_order_relaxed) != 0);
  if (atomic_load_explicit(&m->refs, memory_order_acquire) != 1 &&
      atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
    return false;
#if GPA_DEBUG
  m->dbg_magic = GPA__MSG_FREE;
#endif
  if (m->t != m->t_inline) free(m->t);
  if (m->payload) {
    free(m->payload);
    m->payload = NULL;
  }
  /* A pooled message's err is empty (the slab starts so): only a failure
   * writes it, and the message's own line stays untouched otherwise. */
  if (m->status != GPA_OK) m->err[0] = 0;
  return true;
}

/* The actor frees most messages: it gathers them per owner and gives each
 * chain back with one CAS instead of one per message. */
static inline void gpa__msg_unref_actor(gpa_actor *a, gpa__msg *m) {
  if (!gpa__msg_drop_ref(m)) return;
  gpa__ctx *own = a->own;
  if (m->owner == own) { /* the actor's own pool: its reference on own becomes prepaid again */
    m->next = own->free_list;
    own->free_list = m;
    own->prepaid++;
    return;
  }
  gpa__ret_cache *rc = a->ret;
  uint32_t i = 0;
  while (i < GPA__RET_SLOTS && rc[i].c != m->owner && rc[i].n) i++;
  if (i == GPA__RET_SLOTS) {
    gpa__msg_return_flush(a);
    i = 0;
  }
  if (!rc[i].n) {
    rc[i].c = m->owner;
    rc[i].last = m;
    m->next = NULL;
  } else {
    m->next = rc[i].first;
  }
  rc[i].first = m;
  rc[i].n++;
}

/* gpa__msg_return_flush where the actor holds returns: most of its passes
 * hold none, and the call alone cost the round trip about 20 instructions a
 * message (callgrind, issue 24). */
static inline void gpa__msg_return_held(gpa_actor *a) {
  if (a->ret[0].n) gpa__msg_return_flush(a);
}

/* A ring record (ring.h): a pooled message by pointer, or an op sent
 * without a handle, by value: this header, then its tensors, then its
 * parameters. The actor runs the latter straight from the ring
 * (gpa__run_record) or copies it into a message of its own pool. */
enum { GPA__REC_MSG = 1, GPA__REC_OP = 2 };
typedef struct gpa__rec {
  gpa__rec_head h;
  uint8_t n_in, n_out;
  uint16_t params_size;
  union {
    gpa__msg *m;        /* GPA__REC_MSG */
    const gpa__op *op;  /* GPA__REC_OP */
  };
  gpa_queue *q;
  uint64_t ticket;
} gpa__rec;
_Static_assert(sizeof(gpa__rec) == GPA__CELL, "a message record is one cell");

/* A record's tensors follow its header; its parameters follow them at a
 * 16-byte boundary (a message's params are so aligned too). */
static inline uint32_t gpa__rec_params_at(uint32_t n_tensors) {
  return ((uint32_t)sizeof(gpa__rec) + n_tensors * (uint32_t)sizeof(gpa_tensor) + 15u) & ~15u;
}
static inline const gpa_tensor *gpa__rec_tensors(const gpa__rec *r) { return (const gpa_tensor *)(r + 1); }
static inline const void *gpa__rec_params(const gpa__rec *r) {
  return (const char *)r + gpa__rec_params_at((uint32_t)r->n_in + r->n_out);
}
/* dispatch.c: runs an op record without a message when it can, on a
 * backend that can (mailbox.c's runs_records asks first). */
bool gpa__run_record(gpa_actor *a, const gpa__rec *r);

/* What one send puts into the ring. */
typedef struct gpa__sendv {
  gpa__msg *m; /* a pooled message; NULL: the op below, by value */
  bool keep;   /* m: the caller keeps its reference (else it becomes the actor's) */
  uint32_t cells;
  gpa_queue *q;
  const gpa__op *op;
  const gpa_op_call *call;
  const void *params;
  uint32_t params_size;
} gpa__sendv;

/* Cells for an op by value, or 0 when it must go as a pooled message: more
 * tensors than a message holds inline, or more than a quarter of the ring
 * (a record may need its own size again in padding). */
static inline uint32_t gpa__rec_cells(const gpa__ring *r, uint32_t n_tensors, uint32_t params_size) {
  if (n_tensors > GPA__MSG_TENSORS) return 0;
  uint32_t bytes = gpa__rec_params_at(n_tensors) + params_size;
  uint32_t n = (bytes + GPA__CELL - 1) / GPA__CELL;
  return n <= gpa__ring_capacity(r) / 4 ? n : 0;
}

static inline void gpa__rec_fill(gpa__rec *r, const gpa__sendv *v, uint64_t ticket) {
  r->q = v->q;
  r->ticket = ticket;
  if (v->m) {
    r->h.type = GPA__REC_MSG;
    r->m = v->m;
    v->m->ticket = ticket;
    if (v->keep) atomic_fetch_add_explicit(&v->m->refs, 1, memory_order_relaxed);
    return;
  }
  const gpa_op_call *call = v->call;
  r->h.type = GPA__REC_OP;
  r->op = v->op;
  r->n_in = (uint8_t)call->n_inputs;
  r->n_out = (uint8_t)call->n_outputs;
  r->params_size = (uint16_t)v->params_size;
  gpa_tensor *t = (gpa_tensor *)(r + 1);
  if (call->n_inputs) memcpy(t, call->inputs, call->n_inputs * sizeof *t);
  if (call->n_outputs) memcpy(t + call->n_inputs, call->outputs, call->n_outputs * sizeof *t);
  if (v->params_size) memcpy((char *)r + gpa__rec_params_at(call->n_inputs + call->n_outputs), v->params, v->params_size);
}

/* mailbox.c: the whole send (full ring, shutdown, ticket mode); wakes the
 * actor. */
gpa_status gpa__send_slow(gpa_actor *a, gpa__ctx *c, const gpa__sendv *v);
void gpa__wake_actor(gpa_actor *a);

#define GPA__TICKETS_SHARED ((gpa__ctx *)1)
#define GPA__TICKETS_PENDING ((gpa__ctx *)2) /* becoming shared */

/* The next ticket of q for c. o is q's ticket owner as loaded (acquire)
 * inside c's busy section, after its fence: the load that the revoking side
 * of ticket_mode (mailbox.c) pairs with, so a plain take on o == c is safe. */
static inline uint64_t gpa__ticket_take(gpa_queue *q, const gpa__ctx *c, const gpa__ctx *o) {
  if (o == c) {
    uint64_t t = atomic_load_explicit(&q->next_ticket, memory_order_relaxed);
    atomic_store_explicit(&q->next_ticket, t + 1, memory_order_relaxed);
    return t;
  }
  return atomic_fetch_add_explicit(&q->next_ticket, 1, memory_order_relaxed);
}

/* A send from c that finds room in the ring and the actor open completes
 * here; anything else starts over in gpa__send_slow. The steps and their
 * reasons are mailbox.c's. */
GPA__HOT_INLINE gpa_status gpa__send_inline(gpa_actor *a, gpa__ctx *c, const gpa__sendv *v) {
  atomic_store_explicit(&c->busy, 1, memory_order_relaxed);
  gpa__fence_light();
  gpa__rec *r;
  /* acquire: SHARED orders the old owner's last plain ticket before ours */
  gpa__ctx *o = v->q ? atomic_load_explicit(&v->q->ticket_owner, memory_order_acquire) : c;
  if (__builtin_expect(atomic_load_explicit(&a->closing, memory_order_relaxed) ||
                           (o != c && o != GPA__TICKETS_SHARED) || !(r = gpa__ring_reserve(&c->ring, v->cells)),
                       0)) {
    atomic_store_explicit(&c->busy, 0, memory_order_release);
    return gpa__send_slow(a, c, v);
  }
  gpa__rec_fill(r, v, v->q ? gpa__ticket_take(v->q, c, o) : 0);
  gpa__ring_commit(&c->ring);
  atomic_store_explicit(&c->busy, 0, memory_order_release);
  gpa__fence_light();
  if (atomic_load_explicit(&a->idle, memory_order_relaxed)) gpa__wake_actor(a);
  return GPA_OK;
}

#endif
