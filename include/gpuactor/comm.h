#ifndef GPUACTOR_COMM_H
#define GPUACTOR_COMM_H
#include <stdint.h>

#include "actor.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

/* Communicators and collectives (docs/collectives.md).
 *
 * A communicator spans `size` ranks; each rank is one actor. Every rank
 * joins with the same id, made once (gpa_comm_id_make) and shared out of
 * band: by MPI (gpa_comm_bootstrap_mpi), a file (gpa_comm_id_write_file /
 * gpa_comm_id_read_file) or a string in the environment (gpa_comm_id_format
 * / gpa_comm_id_parse). Collectives are messages on a queue: they run in
 * the queue's order with its other ops, return handles and count in
 * batches like every op. On one communicator every rank must issue the same
 * collectives in the same order (from one queue per rank, or in an order
 * the program fixes); a collective only completes once every rank has
 * issued it. */
typedef struct gpa_comm gpa_comm;

#define GPA_COMM_ID_BYTES 256
/* Opaque bytes: copy, send, compare them; never interpret them. */
typedef struct gpa_comm_id {
  unsigned char bytes[GPA_COMM_ID_BYTES];
} gpa_comm_id;
/* gpa_comm_id_format's text: two hex digits a byte, and a terminator. */
#define GPA_COMM_ID_TEXT (2 * GPA_COMM_ID_BYTES + 1)

typedef enum gpa_comm_transport {
  GPA_COMM_AUTO = 0,  /* cpu: MPI when the process runs under MPI with more than one process, else LOCAL;
                         cuda: NCCL */
  GPA_COMM_LOCAL = 1, /* every rank an actor of this process (shared memory) */
  GPA_COMM_MPI = 2,   /* one rank per MPI process (cpu actors) */
  GPA_COMM_NCCL = 3   /* NCCL (cuda actors) */
} gpa_comm_transport;

typedef struct gpa_comm_options {
  uint32_t size;      /* sizeof(gpa_comm_options), or 0 */
  int32_t transport;  /* gpa_comm_transport */
  int64_t timeout_ns; /* a collective waiting longer for its peers fails with ETIMEDOUT and fails the
                         communicator; so does an NCCL init (NCCL 2.14 and later) whose ranks have not
                         all joined by then; 0 or < 0: no limit */
} gpa_comm_options;

typedef enum gpa_reduce_op {
  GPA_REDUCE_SUM = 0,
  GPA_REDUCE_AVG = 1, /* the sum divided by size (floating-point dtypes only) */
  GPA_REDUCE_MAX = 2,
  GPA_REDUCE_MIN = 3
} gpa_reduce_op;

/* Ids and bootstrap ---------------------------------------------------------- */

/* A new id (random, unique with overwhelming probability). Any thread.
 * Errors: EINVAL (NULL), EUNSUPPORTED (no random source). */
gpa_status gpa_comm_id_make(gpa_comm_id *out);
/* The id as text (hex) into buf of cap >= GPA_COMM_ID_TEXT bytes, for an
 * environment variable or a command line. Any thread. Errors: EINVAL (NULL,
 * cap too small). */
gpa_status gpa_comm_id_format(const gpa_comm_id *id, char *buf, uint64_t cap);
/* Parses gpa_comm_id_format's text. Any thread. Errors: EINVAL (NULL, not
 * an id's text). */
gpa_status gpa_comm_id_parse(const char *text, gpa_comm_id *out);
/* Writes the id to path atomically (a temporary file renamed over it), for
 * ranks that wait for it with gpa_comm_id_read_file. Any thread. Errors:
 * EINVAL (NULL), ENOTFOUND (cannot write there; the reason in the
 * message). */
gpa_status gpa_comm_id_write_file(const char *path, const gpa_comm_id *id);
/* Reads an id from path, waiting up to timeout_ns for the file to appear
 * (< 0: no limit; 0: look once). Any thread. Errors: EINVAL (NULL, not an
 * id), ETIMEDOUT (no file in time), ENOTFOUND (cannot read it). */
gpa_status gpa_comm_id_read_file(const char *path, int64_t timeout_ns, gpa_comm_id *out);
/* An id that also carries NCCL's unique id (ncclGetUniqueId of the NCCL
 * that cuda actor `actor` loads): needed when NCCL ranks of one
 * communicator live in several processes (make it on one, share it like
 * any id). Ranks of one process need none: their first rank makes NCCL's
 * id. Any thread. Errors: EINVAL (NULL), EUNSUPPORTED (a cpu actor, or
 * NCCL unavailable: the message says why), EDEVICE (ncclGetUniqueId
 * failed). */
gpa_status gpa_comm_id_make_nccl(gpa_actor *actor, gpa_comm_id *out);
/* MPI bootstrap: initializes MPI with MPI_THREAD_MULTIPLE unless the
 * program did (then it must have asked for MPI_THREAD_MULTIPLE), rank 0 of
 * MPI_COMM_WORLD makes the id and broadcasts it; every process gets the id,
 * its world rank and the world size (rank, size may be NULL). Collective
 * over MPI_COMM_WORLD. Errors: EINVAL (NULL id), EUNSUPPORTED (a build or
 * machine without MPI, or MPI initialized below MPI_THREAD_MULTIPLE; the
 * message says which), EDEVICE (an MPI call failed; its text in the
 * message). */
gpa_status gpa_comm_bootstrap_mpi(gpa_comm_id *id, int32_t *rank, int32_t *size);
/* MPI bootstrap of NCCL ranks in several processes (one cuda actor per
 * process, e.g. mpirun with one process per GPU): every process checks
 * that actor's NCCL can join ranks of other processes and they agree (one
 * that cannot fails them all here, not later in gpa_comm_init); then rank 0
 * of MPI_COMM_WORLD makes the id with gpa_comm_id_make_nccl(actor) and
 * broadcasts it, with its status: a rank 0 that could not make it fails
 * every process with its status and message. MPI is initialized as by
 * gpa_comm_bootstrap_mpi. Join with gpa_comm_init(actor, id, size, rank)
 * (transport AUTO or NCCL). Collective over MPI_COMM_WORLD. Errors: EINVAL
 * (NULL), EUNSUPPORTED (no MPI; a cpu actor; NCCL unavailable: the
 * message says which), EDEVICE (an MPI call or ncclGetUniqueId failed).
 * On sim actors the simulator's NCCL subset joins the processes of one
 * machine (docs/sim.md). */
gpa_status gpa_comm_bootstrap_mpi_nccl(gpa_actor *actor, gpa_comm_id *id, int32_t *rank, int32_t *size);
/* This process's rank among the MPI processes of its machine
 * (MPI_COMM_TYPE_SHARED) and their number, e.g. to pick cuda:<local_rank>
 * before creating the actor; either may be NULL. Initializes MPI as
 * gpa_comm_bootstrap_mpi does. Collective over MPI_COMM_WORLD. Errors:
 * EUNSUPPORTED (no MPI), EDEVICE (an MPI call failed). */
gpa_status gpa_comm_mpi_local_rank(int32_t *local_rank, int32_t *local_size);

/* Communicators ------------------------------------------------------------ */

/* Makes actor's communicator as rank `rank` of `size` on id. LOCAL: returns
 * at once, collectives wait until every rank joined; MPI: collective over
 * MPI_COMM_WORLD (every process calls it, in the same order as its other
 * communicator inits), one rank per process, rank order free; NCCL: returns
 * once every rank joined, the actor running its ops meanwhile (NCCL 2.14
 * and later; older ones block the actor). opts may be NULL. Any thread. Errors: EINVAL (NULL, size < 1, rank outside [0, size),
 * a rank already taken, a size other ranks disagree with, a bad option),
 * EUNSUPPORTED (the transport is not available for this actor's backend or
 * build, the message naming the missing library; or this process's earlier
 * ranks of the id joined through another transport), EDEVICE (the engine
 * failed: its text in the message), ETIMEDOUT (NCCL: the ranks had not all
 * joined within opts' timeout_ns; the message names the rank), ESHUTDOWN
 * (also: the actor shut down during an NCCL init), ENOMEM. */
gpa_status gpa_comm_init(gpa_actor *actor, const gpa_comm_id *id, int32_t size, int32_t rank,
                         const gpa_comm_options *opts, gpa_comm **out);
/* Makes a LOCAL communicator of n actors of this process, actors[i] being
 * rank i; out[i] is its communicator. Any thread. Errors: EINVAL (also n <
 * 1, an actor listed twice), EUNSUPPORTED, EDEVICE, ETIMEDOUT, ESHUTDOWN,
 * ENOMEM. */
gpa_status gpa_comm_init_all(gpa_actor *const *actors, int32_t n, const gpa_comm_options *opts, gpa_comm **out);
/* Rank and size; -1 for NULL. Any thread. */
int32_t gpa_comm_rank(const gpa_comm *comm);
int32_t gpa_comm_size(const gpa_comm *comm);
/* Frees this rank's communicator. Collectives already submitted on it must
 * have completed (await them, sync their batches, abort the communicator
 * or destroy its actor first): EBUSY otherwise, and nothing is freed. It
 * never waits for the peers: MPI operations this rank gave up on (abort,
 * timeout, shutdown) finish unwatched in memory the buffers no longer use
 * (docs/collectives.md, "Shutdown rules"). May be called after its actor
 * was destroyed. Any thread. Errors: EINVAL (NULL), EBUSY. */
gpa_status gpa_comm_destroy(gpa_comm *comm);
/* Marks the communicator failed: collectives of this rank that have not
 * completed complete with ECANCELED, later ones fail at once; the peers'
 * collectives on a LOCAL communicator fail too. MPI cannot take back an
 * operation it started: it runs on until the peers reach it or exit, into
 * memory the buffers give up (docs/collectives.md, "Faults"). The actor
 * stays usable. Then gpa_comm_destroy. Any thread. Errors: EINVAL (NULL). */
gpa_status gpa_comm_abort(gpa_comm *comm);

/* Collectives ------------------------------------------------------------- */
/* Common to all: q must be comm's actor's queue; dtypes f32, f16, bf16,
 * i32; the tensors of one call share a dtype; in place where send and recv
 * are the same region as described. Validated on the caller's thread. The
 * handle (out may be NULL) completes once this rank's part is done: its
 * recv holds the result. Errors at the call: EINVAL (NULL, another actor's
 * queue, a root or peer outside [0, size), send and recv overlapping other
 * than in place), EDTYPE (another dtype, dtypes differ, avg on i32), ESHAPE
 * (element counts that do not fit the collective), ERANGE, EOVERFLOW (more
 * than 2^31 - 1 elements), ESTALE, ECLOSED (queue closed, or the
 * communicator destroyed or aborted), ESHUTDOWN, EAGAIN, ETIMEDOUT (mailbox
 * full past full_timeout_ns), ENOMEM. Errors while running, on the handle:
 * EUNSUPPORTED (no engine for this backend), EINVAL (the ranks issued
 * collectives that differ, where the engine detects it), ETIMEDOUT (the
 * communicator's timeout), ECANCELED (aborted), EDEVICE (the engine
 * failed). */

/* recv = op over the ranks' send (same element count). In place: send ==
 * recv. Errors: EINVAL, EDTYPE, ESHAPE, ERANGE, EOVERFLOW, ESTALE, ECLOSED,
 * ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_allreduce(gpa_queue *q, gpa_comm *comm, const gpa_tensor *send, const gpa_tensor *recv,
                         int32_t op, gpa_handle **out);
/* send holds size blocks of recv's element count; rank r's recv = op over
 * the ranks' block r. In place: recv is send's block `rank`.
 * Errors: EINVAL, EDTYPE, ESHAPE, ERANGE, EOVERFLOW, ESTALE, ECLOSED,
 * ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_reduce_scatter(gpa_queue *q, gpa_comm *comm, const gpa_tensor *send, const gpa_tensor *recv,
                              int32_t op, gpa_handle **out);
/* recv holds size blocks of send's element count; block r = rank r's send.
 * In place: send is recv's block `rank`.
 * Errors: EINVAL, EDTYPE, ESHAPE, ERANGE, EOVERFLOW, ESTALE, ECLOSED,
 * ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_allgather(gpa_queue *q, gpa_comm *comm, const gpa_tensor *send, const gpa_tensor *recv,
                         gpa_handle **out);
/* Every rank's recv = root's send. send is read on root only (NULL or recv:
 * in place, root's recv is the source).
 * Errors: EINVAL, EDTYPE, ESHAPE, ERANGE, EOVERFLOW, ESTALE, ECLOSED,
 * ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_broadcast(gpa_queue *q, gpa_comm *comm, const gpa_tensor *send, const gpa_tensor *recv,
                         int32_t root, gpa_handle **out);
/* Point to point: t to rank peer / t from rank peer (the same element count
 * and dtype on both sides). The sends from one rank to another match that
 * rank's recvs from it in order (peer == rank: EINVAL).
 * Errors: EINVAL, EDTYPE, ESHAPE, ERANGE, EOVERFLOW, ESTALE, ECLOSED,
 * ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. */
gpa_status gpa_send(gpa_queue *q, gpa_comm *comm, const gpa_tensor *t, int32_t peer, gpa_handle **out);
gpa_status gpa_recv(gpa_queue *q, gpa_comm *comm, const gpa_tensor *t, int32_t peer, gpa_handle **out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
