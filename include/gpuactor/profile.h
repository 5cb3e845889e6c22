#ifndef GPUACTOR_PROFILE_H
#define GPUACTOR_PROFILE_H
#include <stdint.h>

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Profiling. With no profiler attached the actor only tests one flag per
 * message. Built in: a Chrome/Perfetto trace (GPA_TRACE=path; written at
 * gpa_actor_profile_flush, when its log fills, and at destroy), a summary
 * table at destroy (GPA_PROFILE=1), and, while any profiler is attached,
 * NVTX ranges around each message on the actor thread (they reach a tool
 * such as Nsight Systems; without one they do nothing). */

/* One finished message. Valid during the callback only. */
typedef struct gpa_prof_op {
  const char *name;          /* op name, or "upload", "readback", "infeed", "outfeed" */
  const char *queue;         /* queue name */
  uint32_t queue_id;         /* one trace track per queue */
  int32_t status;
  int64_t start_ns, end_ns;  /* monotonic ns (TSC-based where invariant): started, seen complete */
  int64_t device_ns;         /* time on the device (events on CUDA) */
  uint64_t bytes;            /* bytes moved, if the op reports them */
  const gpa_tensor *tensors; /* inputs then outputs */
  uint32_t n_inputs, n_outputs;
  uint32_t queue_depth;      /* messages of the queue waiting behind it when it started */
} gpa_prof_op;

/* One synced batch. */
typedef struct gpa_prof_batch {
  const char *queue;
  uint32_t queue_id;
  const char *label;
  int64_t start_ns, end_ns;
  int64_t device_ns;
  uint64_t ops, errors, bytes;
} gpa_prof_batch;

typedef struct gpa_profiler {
  uint32_t size; /* sizeof(gpa_profiler), or 0 */
  void (*on_op)(const gpa_prof_op *op, void *user_data);          /* nullable */
  void (*on_batch)(const gpa_prof_batch *batch, void *user_data); /* nullable */
  void (*flush)(void *user_data);                                 /* nullable */
  void (*destroy)(void *user_data);                               /* nullable; once, at shutdown */
  void *user_data;
} gpa_profiler;

/* Attaches a profiler (copied). Every callback runs on the actor thread, so
 * it must be quick and must not call into the actor. destroy runs when the
 * actor shuts down, after a last flush. Any thread; round trip. Errors:
 * EINVAL, ENOMEM (GPA_MAX_PROFILERS attached already, or out of memory),
 * ESHUTDOWN, ETIMEDOUT, ECANCELED. */
gpa_status gpa_actor_add_profiler(gpa_actor *actor, const gpa_profiler *profiler);
/* Calls every profiler's flush on the actor thread. Any thread; round trip.
 * Errors: EINVAL, ENOMEM, ESHUTDOWN, ETIMEDOUT, ECANCELED. */
gpa_status gpa_actor_profile_flush(gpa_actor *actor);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
