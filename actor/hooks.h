/* Hooks through which a runtime extension (feed/ is one) adds message
 * kinds and waits to the actor without the actor naming it.
 *
 * A message of class `cls` (kind GPA__MSG_EXT, m->cls) may park its queue
 * before it starts: the queue then holds it at its head until the class
 * calls gpa__queue_unpark, the class says it is ready (polled by the actor
 * loop while queues are parked), or the queue's park_deadline passes (the
 * class fails it: timed_out). The actor sleeps no longer than the earliest
 * deadline. An extension with per-actor state registers it once with
 * gpa__ext_state; the actor calls its shutdown hook on the actor thread as
 * it exits and its destroy hook in gpa_actor_destroy. All hooks but destroy
 * run on the actor thread. */
#ifndef GPA_ACTOR_HOOKS_H
#define GPA_ACTOR_HOOKS_H
#include <stdbool.h>
#include <stdint.h>

#include "gpuactor.h"

typedef struct gpa_handle gpa__msg;

typedef struct gpa__msg_class {
  const char *name; /* profilers' and NVTX's name for such a message */
  /* Its turn came on q: true parks q (the class may set q->s->park_on and
   * q->s->park_deadline); false runs it (possibly to fail: m->status). */
  bool (*must_park)(gpa_actor *a, gpa_queue *q, gpa__msg *m);
  /* Parked: whether it may run now (the actor loop asks while it holds
   * parked queues). NULL: only gpa__queue_unpark resumes it. */
  bool (*ready)(gpa_actor *a, gpa_queue *q, gpa__msg *m);
  /* Parked past q->s->park_deadline: set m->status and m->err; the queue's
   * later messages of the batch then fail too (q->s->poison). */
  void (*timed_out)(gpa_actor *a, gpa_queue *q, gpa__msg *m);
  gpa_status (*run)(gpa_actor *a, gpa__msg *m);
  /* m finished with st. false: the actor completes it now; true: the
   * class took the actor's reference and completes it later. */
  bool (*finished)(gpa_actor *a, gpa__msg *m, gpa_status st);
  /* Optional: m finished with st; returns its final status (before the
   * batch counts it), setting m->err for an error. An asynchronous engine's
   * verdict on work the device stream reported done (comm/nccl.c). */
  gpa_status (*settle)(gpa_actor *a, gpa__msg *m, gpa_status st);
} gpa__msg_class;

typedef struct gpa__ext {
  void *(*create)(gpa_actor *a);            /* its state; NULL: out of memory */
  void (*shutdown)(gpa_actor *a, void *st); /* the actor thread exits */
  void (*destroy)(gpa_actor *a, void *st);  /* gpa_actor_destroy frees it */
} gpa__ext;

/* The extension's state for actor a, created on first use (any thread).
 * NULL with the error set when it cannot be made. */
void *gpa__ext_state(gpa_actor *a, const gpa__ext *e);

#endif
