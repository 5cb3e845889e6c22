/* Asymmetric fences for the mailbox's Dekker pairs.
 *
 * Each pair has a frequent side (a producer publishing a message, then
 * looking at `idle` or `closing`) and a rare side (the actor about to sleep,
 * destroy about to drain). A full fence on the frequent side costs about as
 * much as the rest of a send, so the frequent side only stops the compiler
 * from reordering (gpa__fence_light) and the rare side makes every thread of
 * the process execute a full barrier (gpa__fence_heavy: membarrier(2),
 * private expedited). Either the rare side sees the frequent side's store,
 * or the frequent side's later load sees the rare side's store.
 *
 * Without membarrier (old kernel, seccomp) both sides fall back to a full
 * fence. TSan does not model membarrier, so TSan builds always use full
 * fences. */
#ifndef GPA_ACTOR_FENCE_H
#define GPA_ACTOR_FENCE_H
#include <stdatomic.h>
#include <stdbool.h>

/* Set once by gpa__fence_init, before the first actor exists. */
extern bool gpa__fence_asym;

static inline void gpa__fence_light(void) {
#if defined(GPA_TSAN)
  atomic_thread_fence(memory_order_seq_cst);
#else
  if (__builtin_expect(gpa__fence_asym, 1)) atomic_signal_fence(memory_order_seq_cst);
  else atomic_thread_fence(memory_order_seq_cst);
#endif
}

void gpa__fence_heavy(void);
void gpa__fence_init(void); /* idempotent */

#endif
