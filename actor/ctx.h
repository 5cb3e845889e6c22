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
#include "actor/internal.h"

struct gpa__ctx {
  gpa_actor *actor;          /* not dereferenced once `dead` */
  gpa__ctx *next;            /* the actor's list */
  ck_ring_t ring;
  ck_ring_buffer_t *slots;
  _Atomic int busy;          /* inside gpa__send: the shutdown handshake */
  _Atomic int owned;         /* a live thread owns it (else it may be adopted) */
  _Atomic int dead;          /* the actor is gone */
  _Atomic int want_space;    /* the owner waits for ring space */
  _Atomic uint64_t refs;
  _Atomic(gpa__msg *) returned;
  gpa__msg *free_list;       /* owner only */
  void **slabs;              /* owner only while owned; freed with the context */
  uint32_t n_slabs, cap_slabs;
};

/* The calling thread's context for actor a, registering one on first use. */
gpa__ctx *gpa__ctx_get(gpa_actor *a);
void gpa__ctx_unref(gpa__ctx *c);
void gpa__ctx_free(gpa__ctx *c);

#endif
