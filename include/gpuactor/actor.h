#ifndef GPUACTOR_ACTOR_H
#define GPUACTOR_ACTOR_H
#include <stdint.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

typedef struct gpa_actor gpa_actor;
typedef struct gpa_queue gpa_queue;
typedef struct gpa_handle gpa_handle;

/* What a producer does when its mailbox ring is full. */
typedef enum gpa_full_policy { GPA_FULL_WAIT = 0, GPA_FULL_FAIL = 1 } gpa_full_policy;
/* What destroy does with work that is still queued. */
typedef enum gpa_shutdown_policy { GPA_SHUTDOWN_DRAIN = 0, GPA_SHUTDOWN_CANCEL = 1 } gpa_shutdown_policy;
typedef enum gpa_log_level {
  GPA_LOG_DEFAULT = 0, GPA_LOG_ERROR = 1, GPA_LOG_WARN = 2, GPA_LOG_INFO = 3, GPA_LOG_DEBUG = 4
} gpa_log_level;

/* Actor options. All-zero means defaults. These are the program's defaults:
 * the environment (GPA_DEVICE, GPA_MAILBOX_SIZE, ...; see docs/api.md)
 * overrides them. */
typedef struct gpa_actor_options {
  uint32_t size;            /* sizeof(gpa_actor_options), or 0 */
  const char *device;       /* "auto" | "cpu" | "cuda:N" | "sim"; NULL = auto */
  uint32_t mailbox_size;    /* 32-byte cells of each producer thread's ring, power of two >= 4; 0 = 1024
                               (docs/api.md: what a message takes) */
  int32_t full_policy;      /* gpa_full_policy */
  int64_t full_timeout_ns;  /* GPA_FULL_WAIT limit; 0 = 10 s, < 0 = none */
  int32_t shutdown_policy;  /* gpa_shutdown_policy */
  uint64_t mem_budget;      /* buffer-cache bytes before eviction; 0 = no limit (host) */
  uint32_t threads;         /* host backend threads incl. the actor; 0 = online CPUs */
  uint32_t max_pending;     /* messages the actor holds before it stops draining; 0 = 65536 */
  int32_t log_level;        /* gpa_log_level */
  const char *trace_path;   /* Chrome/Perfetto trace JSON written here; NULL = none */
  int32_t profile;          /* 1: print a per-op summary table at destroy */
} gpa_actor_options;

/* Creates an actor and its thread. opts may be NULL. Any thread.
 * Errors: EINVAL (bad option, message names it; limits.h bounds mailbox_size
 * and threads), EUNSUPPORTED (a device kind not built in), ENODEVICE,
 * ENOMEM. */
gpa_status gpa_actor_create(const gpa_actor_options *opts, gpa_actor **out);
/* Stops intake (calls that have not enqueued yet answer ESHUTDOWN), drains or
 * cancels queued work per shutdown_policy (every handle completes; control
 * calls already accepted answer ECANCELED under GPA_SHUTDOWN_CANCEL, having
 * done nothing), joins the actor thread and frees every device resource. The
 * actor and its queues stay valid objects that answer ESHUTDOWN, so other
 * threads may still be calling into it while and after this runs; free it
 * with gpa_actor_destroy once they are done. Idempotent. Any thread but the
 * actor's own. Errors: EINVAL (NULL, or the actor's own thread), ESHUTDOWN
 * (another thread's shutdown is still running). */
gpa_status gpa_actor_shutdown(gpa_actor *actor);
/* gpa_actor_shutdown if not done yet, then frees the actor and its queues: no
 * other thread may use them any more. Handles still held stay valid until
 * released. Any thread but the actor's own; once. Errors: EINVAL, ESHUTDOWN
 * (as gpa_actor_shutdown; the actor is then not freed). */
gpa_status gpa_actor_destroy(gpa_actor *actor);
/* The backend in use: "cpu", "cuda", "sim". Any thread. */
const char *gpa_actor_backend(const gpa_actor *actor);

/* Queues: ordered lanes of work. Ops of one queue run in submission order. */
gpa_queue *gpa_actor_default_queue(gpa_actor *actor);

/* Control calls (queue create/destroy, buffer acquire/release/query, stats,
 * batch begin/sync, profilers) are round trips to the actor. They never
 * answer EAGAIN: on a full mailbox they wait like a submit, up to
 * full_timeout_ns, then fail with ETIMEDOUT having done nothing. A call the
 * actor accepted and a GPA_SHUTDOWN_CANCEL shutdown then cancelled answers
 * ECANCELED and did nothing either (docs/api.md, "Control calls"). */

/* Any thread; round trip to the actor. name may be NULL. A stream per queue
 * on a device, given back when the queue is destroyed. Errors: EINVAL,
 * ENOMEM, EDEVICE (no stream), ESHUTDOWN, ETIMEDOUT, ECANCELED. */
gpa_status gpa_queue_create(gpa_actor *actor, const char *name, gpa_queue **out);
/* Work already submitted to q still runs; later submits answer ECLOSED. The
 * queue pointer stays valid (answering ECLOSED; a sync collects the batch
 * left unsynced) until the actor is destroyed, at 128 bytes; the rest of the
 * queue and its stream go once its work has completed. Any thread; round
 * trip. Errors: EINVAL (NULL, the default queue), ECLOSED
 * (destroyed already), ENOMEM, ESHUTDOWN, ETIMEDOUT, ECANCELED. */
gpa_status gpa_queue_destroy(gpa_queue *q);
gpa_actor *gpa_queue_actor(gpa_queue *q);

/* Buffers ----------------------------------------------------------------- */

/* Acquires a buffer of `size` bytes. With a label: the live buffer of that
 * label if there is one (its size must match: EMISMATCH otherwise), else the
 * cached one (contents and version kept) if not evicted, else a new one.
 * Without a label (NULL): a new or reused anonymous buffer. Any thread; a
 * round trip to the actor. Errors: EINVAL (size 0, label empty or not shorter
 * than GPA_LABEL_MAX), EOVERFLOW (past GPA_MAX_BUFFER_BYTES), EMISMATCH,
 * EBUSY (label released but still in use by queued work), ENOMEM (device or
 * budget), ESHUTDOWN, ETIMEDOUT, ECANCELED (*out is 0 on every error). */
gpa_status gpa_buffer_acquire(gpa_actor *actor, const char *label, uint64_t size, gpa_buffer_id *out);
/* Releases one acquisition. At the last one the id turns stale (ESTALE on
 * use) and the memory goes back to the cache once the work already submitted
 * by this thread on it has run. Any thread; round trip. Errors: EINVAL,
 * ESTALE (released already, or never acquired), ENOMEM, ESHUTDOWN, ETIMEDOUT,
 * ECANCELED (released nothing: the shutdown frees the buffer). */
gpa_status gpa_buffer_release(gpa_actor *actor, gpa_buffer_id id);

typedef struct gpa_buffer_info {
  uint32_t size_of;  /* sizeof(gpa_buffer_info), or 0 */
  uint64_t size;     /* bytes requested */
  uint64_t capacity; /* bytes of its size class */
  uint64_t version;  /* last upload version, 0 if none */
  uint32_t refs;     /* acquisitions */
  char label[64];
} gpa_buffer_info;
/* Snapshot of a buffer's state. Any thread; round trip. Errors: EINVAL,
 * ESTALE, ENOMEM, ESHUTDOWN, ETIMEDOUT, ECANCELED. */
gpa_status gpa_buffer_query(gpa_actor *actor, gpa_buffer_id id, gpa_buffer_info *out);

typedef struct gpa_actor_stats {
  uint32_t size;            /* sizeof(gpa_actor_stats), or 0 */
  uint64_t messages;        /* messages executed or completed */
  uint64_t cache_hits;      /* acquisitions served from live or cached buffers */
  uint64_t cache_misses;    /* acquisitions that allocated */
  uint64_t evictions;       /* cached buffers freed to meet the budget */
  uint64_t bytes_allocated; /* device bytes held now (live + cached) */
  uint64_t bytes_cached;    /* of which unused, evictable */
  uint64_t live_buffers;
  uint64_t uploads_skipped; /* versioned uploads that the buffer already held */
  uint64_t bytes_uploaded;
  uint64_t bytes_read_back;
  uint64_t producers;       /* producer threads registered */
} gpa_actor_stats;
/* Any thread; round trip. Errors: EINVAL, ENOMEM, ESHUTDOWN, ETIMEDOUT,
 * ECANCELED. */
gpa_status gpa_actor_stats_get(gpa_actor *actor, gpa_actor_stats *out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
