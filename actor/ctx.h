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
#include <string.h>

#include "actor/internal.h"

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
  ck_ring_buffer_t *slots;
  _Atomic int owned;         /* a live thread owns it (else it may be adopted) */
  _Atomic int dead;          /* the actor is gone */
  /* ck_ring pads its consumer and producer indices onto lines of their own */
  _Alignas(64) ck_ring_t ring;
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

/* strcmp(a, b) == 0 for op names (short): inline, no call. */
static inline bool gpa__name_eq(const char *a, const char *b) {
  for (;; a++, b++) {
    if (*a != *b) return false;
    if (!*a) return true;
  }
}

/* gpa__registry_find through c's cache (c's owner thread only). One context
 * serves one actor, hence one registry, whose entries live as long. */
static inline const gpa__op *gpa__ctx_find_op(gpa__ctx *c, const gpa_registry *reg, const char *name) {
  const gpa__op_cache *e = &c->ops[((uintptr_t)name >> 3) % GPA__OP_CACHE];
  if (__builtin_expect(e->name == name && e->op, 1) &&
      atomic_load_explicit(&((gpa_registry *)reg)->slot[e->slot], memory_order_acquire) == e->op &&
      gpa__name_eq(e->op->name_buf, name))
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
  return m;
}

void gpa__ctx_free(gpa__ctx *c);

#endif
