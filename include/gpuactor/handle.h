#ifndef GPUACTOR_HANDLE_H
#define GPUACTOR_HANDLE_H
#include <stdint.h>

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

/* A handle completes exactly once: OK, failed (status + message) or
 * ECANCELED. Handles are refcounted; every gpa_ call that returns one gives
 * the caller one reference. All calls here: any thread. */

/* Waits until h completes or timeout_ns passes (< 0: no limit; 0: poll).
 * Returns the handle's status, or ETIMEDOUT if it is still pending. Spins
 * briefly, then sleeps. A successful await makes a readback's data readable.
 * Errors: EINVAL (NULL), ETIMEDOUT; otherwise the handle's own status. */
gpa_status gpa_await(gpa_handle *h, int64_t timeout_ns);
/* The status, or EPENDING while not complete. Does not mark a readback
 * synced. Errors: EINVAL (NULL), EPENDING; otherwise the handle's status. */
gpa_status gpa_handle_status(const gpa_handle *h);
/* The error detail ("" when ok or pending). Valid while the reference is held. */
const char *gpa_handle_error_message(const gpa_handle *h);
void gpa_handle_retain(gpa_handle *h);
/* Drops one reference; NULL is ignored. */
void gpa_handle_release(gpa_handle *h);

/* Readbacks --------------------------------------------------------------- */

/* Copies tensor src to host memory owned by the returned handle (out is
 * required). Validated at once. Errors: EINVAL, EDTYPE, ERANGE, EOVERFLOW,
 * ESTALE, ECLOSED, ESHUTDOWN, EAGAIN (mailbox full with GPA_FULL_FAIL),
 * ETIMEDOUT (mailbox full past full_timeout_ns), ENOMEM. */
gpa_status gpa_readback(gpa_queue *q, const gpa_tensor *src, gpa_handle **out);
/* The data of a readback handle. ENOTSYNCED until the handle was awaited
 * successfully or the batch it was submitted in was synced, even if the copy
 * has landed; the handle's error if it failed; EINVAL for a handle that is not
 * a readback. The data stays valid while the reference is held. Errors:
 * EINVAL, ENOTSYNCED; otherwise the handle's own error. */
gpa_status gpa_handle_data(gpa_handle *h, const void **data, uint64_t *size);

/* Uploads ----------------------------------------------------------------- */

/* Copies `size` bytes from src (copied before the call returns: the caller may
 * free it at once) into tensor dst; size must equal dst's byte size. A
 * version > 0 equal to the buffer's current version skips the copy (counted
 * in the batch and actor stats); a completed upload with version > 0 sets the
 * buffer's version. out may be NULL (tracked by the batch only). Errors:
 * EINVAL, ESHAPE (size is not dst's), EDTYPE, ERANGE, EOVERFLOW, ESTALE,
 * ECLOSED, ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_upload(gpa_queue *q, const gpa_tensor *dst, const void *src, uint64_t size,
                      uint64_t version, gpa_handle **out);

/* Batches ----------------------------------------------------------------- */

typedef struct gpa_batch_stats {
  uint32_t size;             /* sizeof(gpa_batch_stats), or 0 */
  uint64_t ops;              /* messages of the batch that ran (ok or failed) */
  uint64_t errors;           /* of which failed or were cancelled */
  uint64_t bytes_moved;      /* upload + readback + device copy bytes */
  uint64_t uploads_skipped;
  int64_t host_ns;           /* wall time, batch begin (or last sync) to sync completion */
  int64_t device_ns;         /* time the device spent executing the batch's ops */
  int32_t first_error;       /* gpa_status of the first failure, 0 if none */
  char first_error_message[192];
  char label[64];
  uint32_t graph;            /* how it ran on a CUDA device: 0 eagerly, 1 recorded into a CUDA graph, 2 replayed
                                as one (docs/graphs.md); added in 0.9: a smaller size (the struct without it)
                                is accepted and filled up to its size */
} gpa_batch_stats;

/* Whether a batch runs as a CUDA graph (docs/graphs.md). */
typedef enum gpa_graph_mode {
  GPA_GRAPH_DEFAULT = 0, /* the actor's option: GPA_GRAPHS=N replays a label's batches once N in a row were alike */
  GPA_GRAPH_OFF = 1,
  GPA_GRAPH_ON = 2 /* record this batch (or replay its label's graph) */
} gpa_graph_mode;

typedef struct gpa_batch_options {
  uint32_t size;  /* sizeof(gpa_batch_options), or 0 */
  uint32_t graph; /* gpa_graph_mode */
} gpa_batch_options;

/* Opens a batch on q. Any thread; does not wait for the actor. Errors:
 * EINVAL, EBUSY (a batch is open on q), ECLOSED, ENOMEM, ESHUTDOWN,
 * ETIMEDOUT (a control call: never EAGAIN). */
gpa_status gpa_batch_begin(gpa_queue *q, const char *label);
/* gpa_batch_begin with options (opts may be NULL: defaults). With graphs, a
 * handle of the batch completes when the batch's graph has run: the graph is
 * launched once the batch matched its recorded sequence, at gpa_sync_batch,
 * or as soon as someone waits on one of its handles (the rest of the batch
 * then runs eagerly). Errors: those of gpa_batch_begin; EINVAL (bad mode). */
gpa_status gpa_batch_begin_opts(gpa_queue *q, const char *label, const gpa_batch_options *opts);
/* Waits for every message submitted to q since the batch began (or since the
 * last sync), makes the batch's readbacks readable, fills stats (nullable),
 * closes the batch and returns its first error (GPA_OK if none). Blocks the
 * calling thread; any thread but the actor's. A destroyed queue can still be
 * synced: the first sync after the destroy returns the work it left unsynced,
 * later ones empty stats. Errors: EINVAL, ENOMEM, ESHUTDOWN, ETIMEDOUT, ECANCELED (the
 * batch's readbacks stay unreadable); otherwise the batch's first error. */
gpa_status gpa_sync_batch(gpa_queue *q, gpa_batch_stats *stats);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
