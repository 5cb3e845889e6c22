/* Communicators: internal structures (docs/collectives.md).
 *
 * A collective is a message of class gpa__coll_class (actor/hooks.h) whose
 * params block is a gpa__coll. On the host backend its turn starts it in
 * the communicator's engine and parks its queue: the host backend has no
 * stream to order the queue's later ops after it, so the queue itself
 * waits. The engine finishes it from any thread with gpa__coll_done (no
 * blocking there) and then wakes the actor with gpa__coll_wake (a control
 * message: the one wake-up the actor cannot miss); the actor's loop finds
 * the parked head ready, unparks it and runs it, which only reports.
 *
 * An engine must not touch a collective after its cancel hook returned: a
 * message that is cancelled (shutdown), times out or is aborted leaves the
 * engine through it while it may still be in flight. */
#ifndef GPA_COMM_INTERNAL_H
#define GPA_COMM_INTERNAL_H
#include "actor/internal.h"
#include "gpuactor/comm.h"

typedef enum gpa__coll_kind {
  GPA__COLL_ALLREDUCE = 0,
  GPA__COLL_REDUCE_SCATTER,
  GPA__COLL_ALLGATHER,
  GPA__COLL_BROADCAST,
  GPA__COLL_SEND,
  GPA__COLL_RECV,
} gpa__coll_kind;

enum { GPA__COLL_IDLE = 0, GPA__COLL_FLIGHT = 1, GPA__COLL_DONE = 2 };

typedef struct gpa__coll gpa__coll;
/* One rank's part of one collective (the message's params block). */
struct gpa__coll {
  gpa_comm *c;
  gpa__msg *m;
  int32_t kind, op, dtype;
  int32_t peer;   /* broadcast: root; send/recv: the other rank */
  uint64_t count; /* elements of one rank's block (allreduce: of the tensor) */
  void *send, *recv; /* host addresses, set when it starts */
  bool in_place;
  bool scale_after;  /* avg: the engine summed, run() divides by size */
  _Atomic int state; /* GPA__COLL_* */
  int32_t status;    /* when DONE (the error text is in m->err) */
  int64_t deadline;  /* CLOCK_MONOTONIC ns; 0: none */
  gpa__coll *next;   /* the engine's lists */
  void *eng;         /* the engine's per-collective data */
};
_Static_assert(sizeof(gpa__coll) <= GPA_OP_PARAMS_MAX, "a collective fits a message's params");

typedef struct gpa__comm_engine {
  const char *name;
  /* Starts op on the actor thread. GPA_OK: started (gpa__coll_done follows,
   * maybe before this returns); else failed, with err set. */
  gpa_status (*start)(gpa_comm *c, gpa__coll *op, char *err, size_t cap);
  /* Optional: looks once whether op finished, on the actor thread (which
   * polls while it is otherwise idle before parking its queue: comm.c,
   * poll_while_idle); true: gpa__coll_done ran. */
  bool (*poll)(gpa_comm *c, gpa__coll *op);
  /* The engine forgets op (never calls gpa__coll_done for it afterwards). */
  void (*cancel)(gpa_comm *c, gpa__coll *op);
  /* Optional, for engines that cannot take back an operation they started
   * (MPI): whether op, finished for the actor (cancelled, timed out,
   * aborted), still runs in the engine, which may write its buffers until
   * the peers come; and detach, which hands the engine the memory those
   * buffers had (comm.c, let_go, gives the buffers new memory first) and
   * ends the engine's tie to op: 1 if it took the blocks, 0 if op had
   * finished meanwhile (the blocks stay the caller's). Actor thread. */
  bool (*held)(gpa_comm *c, gpa__coll *op);
  int (*detach)(gpa_comm *c, gpa__coll *op, void *const *blocks, const size_t *bytes, int n);
  /* Fails every collective of c not finished (on a LOCAL communicator the
   * peers' too) with st and why. */
  void (*abort)(gpa_comm *c, gpa_status st, const char *why);
  void (*destroy)(gpa_comm *c);
  /* Device engines (NCCL), instead of start/poll: the collective's turn on
   * the actor thread enqueues it on its queue's stream (no parking) and
   * returns the backend's fence (GPA__DEFERRED) or an error with m->err
   * set; settle gives the status once the stream passed it. */
  gpa_status (*enqueue)(gpa_actor *a, gpa_comm *c, gpa__coll *op, gpa__msg *m);
  gpa_status (*settle)(gpa_comm *c, gpa__coll *op, gpa__msg *m, gpa_status st);
} gpa__comm_engine;

struct gpa_comm {
  gpa_actor *a;
  int32_t rank, size;
  const gpa__comm_engine *eng;
  void *es; /* the engine's state */
  int64_t timeout_ns;
  _Atomic int32_t failed;        /* 0, or why collectives fail at once (ECANCELED, ETIMEDOUT) */
  _Atomic uint32_t outstanding;  /* submitted and not finished */
  char why[128];                 /* the failure, set before `failed` */
  unsigned char token[32];       /* the id's token (comm.c's transport registry) */
};

extern const gpa__msg_class gpa__coll_class;
extern const gpa__comm_engine gpa__comm_local, gpa__comm_mpi, gpa__comm_nccl;

/* op finished with st (why: its error text, or NULL); never blocks. On the
 * actor thread: gpa__coll_done. Elsewhere (engines): gpa__coll_done_held,
 * which also holds op's actor (its memory stays, actor_free waits) and
 * returns it; once the caller holds no lock of its own, gpa__coll_wake
 * wakes that actor and lets go of `holds` such holds (one wake-up serves
 * several ops of one actor; on the actor thread it only lets go). */
void gpa__coll_done(gpa__coll *op, gpa_status st, const char *why);
gpa_actor *gpa__coll_done_held(gpa__coll *op, gpa_status st, const char *why);
void gpa__coll_wake(gpa_actor *a, uint32_t holds);
/* Tests: a pause before each wake-up of another thread's actor (to stage a
 * destroy racing it), and the count of gpa__coll_wake calls finished. */
extern _Atomic int64_t gpa__coll_wake_pause_ns;
extern _Atomic uint64_t gpa__coll_wakes;
/* Marks c failed with st (the first reason stays). Any thread. */
void gpa__comm_fail(gpa_comm *c, gpa_status st, const char *why);

/* engine constructors (the engine's state into c->es) */
gpa_status gpa__comm_local_join(gpa_comm *c, const gpa_comm_id *id);
gpa_status gpa__comm_mpi_join(gpa_comm *c, const gpa_comm_id *id);
/* NCCL: n ranks of this process at once (each init on its actor thread,
 * all sent before any is awaited); blocks until every rank joined. */
gpa_status gpa__comm_nccl_join_all(gpa_comm **cs, int32_t n, const gpa_comm_id *id);
gpa_status gpa__comm_nccl_join(gpa_comm *c, const gpa_comm_id *id);
/* NCCL: whether actor a's NCCL can join ranks of other processes (not the
 * simulator's subset): GPA_OK, or EUNSUPPORTED with the reason. */
gpa_status gpa__comm_nccl_across_processes(gpa_actor *a, const char *what);
/* MPI: whether this process runs under MPI with more than one process */
bool gpa__comm_mpi_world(void);

/* reduce.c: host reductions in rank order. The accumulator is f32 for the
 * floating dtypes (one rounding at the end), i32 (wrapping) for i32. */
void gpa__comm_acc_load(int dtype, void *acc, const void *src, uint64_t n);
void gpa__comm_acc_combine(int op, int dtype, void *acc, const void *src, uint64_t n);
/* acc (times scale when scale != 1: avg) into dst's dtype */
void gpa__comm_acc_store(int dtype, void *dst, const void *acc, uint64_t n, float scale);
/* dst = op(dst, src) in dst's own dtype, rounding each step (MPI's user ops
 * on f16 and bf16) */
void gpa__comm_combine16(int op, int dtype, void *inout, const void *in, uint64_t n);
/* x *= scale in place (avg after an engine's sum) */
void gpa__comm_scale(int dtype, void *x, uint64_t n, float scale);

#endif
