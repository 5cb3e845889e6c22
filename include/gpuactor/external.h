#ifndef GPUACTOR_EXTERNAL_H
#define GPUACTOR_EXTERNAL_H
/* External buffers: memory the caller owns, used by the actor in place.
 *
 * gpa_buffer_wrap makes a buffer id for [ptr, ptr + bytes) without copying:
 * ops read and write the caller's memory directly. The buffer cache never
 * evicts, reuses or frees it. It is released like any buffer
 * (gpa_buffer_release); once released and no longer named by work in
 * flight, or at the latest when the actor is destroyed, the actor calls
 * `release(ptr, user_data)`: exactly once, on the actor thread, after the
 * device work that used the memory has completed. Until then the caller
 * must keep the memory alive (a DLPack import holds the producer's
 * reference for that time).
 *
 * Kinds: host memory on the cpu backend; device memory (a CUdeviceptr) on
 * cuda and sim. A kind the backend cannot reach is refused (GPA_EUNSUPPORTED),
 * and where the driver can tell, so is a pointer that is not of the kind
 * claimed.
 *
 * Ordering on cuda: the producer's writes must finish before the actor's
 * work reads them, and the actor's writes before the producer reads them.
 * Events carry it, never a device-wide sync:
 *  - desc.ready_event (a CUevent the producer recorded after its writes):
 *    every queue that exists when the wrap runs waits for it on its stream;
 *  - gpa_queue_wait_event(q, ev): q's later work waits for ev;
 *  - gpa_queue_record_event(q, ev): ev completes when q's earlier work has,
 *    so the producer's stream can wait for it (cuStreamWaitEvent).
 * The cpu backend runs each op to completion before the next: there is
 * nothing to order, and the event calls answer GPA_EUNSUPPORTED there.
 */
#include <stdint.h>

#include "gpuactor/actor.h"
#include "gpuactor/status.h"
#include "gpuactor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

typedef enum gpa_mem_kind {
  GPA_MEM_HOST = 1,        /* pageable host memory */
  GPA_MEM_DEVICE = 2,      /* device memory of the actor's device (CUdeviceptr) */
  GPA_MEM_HOST_PINNED = 3, /* page-locked host memory (cuMemHostAlloc, DLPack kDLCUDAHost) */
} gpa_mem_kind;

/* The start of wrapped memory must be aligned to this (vector loads, and
 * the alignment of the cache's own buffers). Wrap the aligned base of an
 * unaligned view and address the view through the tensor's offset. */
#define GPA_EXTERNAL_ALIGN 16

/* Called once per wrapped buffer when the actor no longer needs the memory:
 * on the actor thread, or, for buffers still wrapped when the actor is
 * destroyed, on the thread calling gpa_actor_destroy. It must not call back
 * into the actor. */
typedef void (*gpa_external_release_fn)(void *ptr, void *user_data);

typedef struct gpa_external_desc {
  uint32_t size_of;                /* sizeof(gpa_external_desc); 0 = this version */
  int32_t kind;                    /* gpa_mem_kind */
  void *ptr;                       /* start of the memory, GPA_EXTERNAL_ALIGN-aligned */
  uint64_t bytes;                  /* 1 .. 2^48 */
  gpa_external_release_fn release; /* NULL: nothing to call */
  void *user_data;                 /* passed to release */
  void *ready_event;               /* cuda: a CUevent after the producer's writes, or NULL */
} gpa_external_desc;

/* Wraps the caller's memory as a buffer of the actor; *out gets its id (one
 * reference, released with gpa_buffer_release). On failure nothing was
 * taken: release is not called and the memory stays the caller's. Any
 * thread; a round trip (a control call). Errors: EINVAL (NULL, zero size,
 * misaligned, size_of), EOVERFLOW (past GPA_MAX_BUFFER_BYTES), EUNSUPPORTED
 * (a kind this backend cannot use, or a pointer that is not of that kind),
 * EDEVICE (the ready event could not be waited on), ENOMEM, ESHUTDOWN,
 * ETIMEDOUT, ECANCELED. */
gpa_status gpa_buffer_wrap(gpa_actor *actor, const gpa_external_desc *desc, gpa_buffer_id *out);

/* Queue-ordered (after the queue's earlier messages are on its stream):
 * q's later work waits for `event` (a CUevent). Any thread; waits until the
 * wait is enqueued (a control call). Errors: EINVAL, ECLOSED, EUNSUPPORTED
 * (a backend without streams), EDEVICE, ENOMEM, ESHUTDOWN, ETIMEDOUT,
 * ECANCELED. */
gpa_status gpa_queue_wait_event(gpa_queue *q, void *event);
/* The same wait, posted without waiting for the actor (any thread): it returns once the
 * message is in the queue's order (no round trip), so a producer that then
 * submits ops and records an event pays one round trip per exchange, not
 * two. The wait is on the stream before any later message of q runs. Its
 * failure (EDEVICE, EUNSUPPORTED) is reported as a released handle's is: by
 * the queue's batch (gpa_sync_batch's first error). Errors: EINVAL,
 * ECLOSED, ENOMEM, ESHUTDOWN, EAGAIN / ETIMEDOUT (mailbox full). */
gpa_status gpa_queue_wait_event_async(gpa_queue *q, void *event);
/* Queue-ordered: records `event` (a CUevent of the actor's context) on q's
 * stream after the queue's earlier work. Any thread; returns once it is
 * recorded (a control call). Errors: EINVAL, ECLOSED, EUNSUPPORTED (a
 * backend without streams), EDEVICE, ENOMEM, ESHUTDOWN, ETIMEDOUT,
 * ECANCELED. */
gpa_status gpa_queue_record_event(gpa_queue *q, void *event);

/* Lending a buffer out (DLPack export): where its memory is, and one more
 * reference to it, so it stays allocated until the borrower calls
 * gpa_buffer_release (which any thread may do). The actor must outlive
 * the loan: its destruction frees the memory whatever the references. The
 * memory holds what the work submitted before it wrote only once that work
 * is done: await a later message of its queue (cpu), or order with an
 * event (gpa_queue_record_event). */
typedef struct gpa_buffer_loan {
  uint32_t size_of; /* sizeof(gpa_buffer_loan), set by the caller; 0 = this version */
  int32_t kind;     /* gpa_mem_kind of the memory */
  void *ptr;
  uint64_t bytes; /* the buffer's requested size */
} gpa_buffer_loan;
/* Any thread; a round trip (a control call). Errors: EINVAL, ESTALE (a
 * released id), ENOMEM, ESHUTDOWN, ETIMEDOUT, ECANCELED. */
gpa_status gpa_buffer_lend(gpa_actor *actor, gpa_buffer_id id, gpa_buffer_loan *out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
