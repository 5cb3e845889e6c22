/* The actor gives finished messages back to their producer's pool as it
 * goes (actor/ctx.h: gpa__msg_unref_actor gathers them per owner, each
 * drain and completion pass hands them back, gpa__msg_return_held), so a
 * producer that streams messages without handles reuses a bounded pool
 * instead of growing it until shutdown. Uploads without a handle travel as
 * pooled messages whose last reference is the actor's: 20000 of them, then
 * the producer's slabs are counted (internals: its context). Any backend. */
#include "actor/ctx.h"
#include "util/testutil.h"

enum { N = 16, UPLOADS = 20000, EVERY = 512, SLAB = 32 /* handle.c's GPA__SLAB_MSGS */ };

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, N);
  float host[N] = {0};
  /* A sync every EVERY uploads bounds the work in flight (an asynchronous
   * backend's device work is not bounded by the ring). */
  for (int i = 1; i <= UPLOADS; i++) {
    CHECK_OK(gpa_upload(q, &x, host, sizeof host, 0, NULL));
    if (i % EVERY == 0) CHECK_OK(gpa_sync_batch(q, NULL));
  }
  CHECK_OK(gpa_sync_batch(q, NULL));
  /* Out at once: EVERY uploads in the ring or in flight, a pass's returns
   * not yet handed back, the returned stack the producer has not taken
   * yet. Generous, and far below the UPLOADS / SLAB = 625 slabs of a pool
   * never given back. */
  const gpa__ctx *c = gpa__ctx_get(a);
  uint32_t bound = (3 * EVERY + 256) / SLAB + 2;
  printf("msg_returns: %u slabs after %d uploads (bound %u)\n", c->n_slabs, UPLOADS, bound);
  CHECK(c->n_slabs <= bound);
  CHECK_OK(gpa_actor_destroy(a));
  printf("msg_returns: ok\n");
  return 0;
}
