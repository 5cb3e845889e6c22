/* gpa-sim NCCL subset: what its two files share (nccl.c: communicators,
 * faults, errors; coll.c: the collectives and their steps on the streams).
 * Design notes at the top of nccl.c. Nothing here is exported. */
#ifndef GPA_SIM_NCCL_INTERNAL_H
#define GPA_SIM_NCCL_INTERNAL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))
#define SLOTS 64 /* collectives of one group in flight at once (ranks ahead of the slowest by < SLOTS) */
#define MAXR 64

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_SEND, K_RECV };
HIDDEN extern const char *const snc_kind_names[6];

typedef struct group group;
typedef struct msg {
  struct msg *next;
  size_t bytes;
  int dtype;
  unsigned char data[];
} msg;

struct ncclComm {
  group *g;
  int rank, nranks;
  int refs;           /* under snc_mu: the user's + one per queued step */
  bool user_gone;     /* destroyed or aborted by the user */
  bool aborted;       /* ncclCommAbort: waiting steps give up */
  ncclResult_t async; /* first asynchronous error */
  char last[256];     /* ncclGetLastError */
  bool nonblocking;   /* made with config.blocking = 0: calls may answer ncclInProgress */
  bool init_done;     /* non-blocking: every rank joined (seen by snc_init_state_locked) */
  int busy_polls;     /* ncclCommGetAsyncError answers ncclInProgress this many more times (a call "still
                         enqueuing" on a non-blocking communicator) */
  uint64_t seq;       /* collectives issued (send/recv have their own order) */
  struct ncclComm *reclaim_next; /* destroyed or aborted, freed once reclaim_due passes (nccl.c) */
  int64_t reclaim_due;
};

typedef struct post {
  int kind, dtype, op, root;
  size_t count;
  const void *send;
  void *recv;
} post;

typedef struct slot {
  uint64_t seq; /* which collective the slot holds now */
  int posted;
  bool done;
  ncclResult_t result;
  char why[160];
  post p[MAXR];
  bool has[MAXR];
} slot;

struct group {
  group *next;
  ncclUniqueId id;
  int nranks, joined, alive, arrived; /* arrived: joins tried, failed ones included */
  ncclComm_t rank[MAXR];
  bool failed; /* a rank aborted or failed: ncclRemoteError for the rest */
  char fail_why[200];
  slot s[SLOTS];
  msg *box[MAXR][MAXR]; /* [src][dst] FIFO of buffered sends */
  msg *box_tail[MAXR][MAXR];
};

/* One lock and one condition for every group (nccl.c). */
HIDDEN extern pthread_mutex_t snc_mu;
HIDDEN extern pthread_cond_t snc_cv;
/* One-shot fault counters (nccl.c): true when this event is the chosen one. */
HIDDEN extern atomic_uint snc_f_call, snc_f_async, snc_f_hang;
HIDDEN bool snc_take(atomic_uint *c);
/* Records the error text (the thread's, and c's when c) and returns r. */
HIDDEN ncclResult_t snc_fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Under snc_mu: drops a reference to c (the last frees it, and its group
 * once unused); marks c's group failed for every rank still waiting. */
HIDDEN void snc_unref_locked(ncclComm_t c);
HIDDEN void snc_fail_group_locked(group *g, int rank, const char *why);
/* Under snc_mu: ncclSuccess once every rank of c's group joined,
 * ncclInProgress while some have not (non-blocking init), or the error that
 * ended the init (an abort, a peer's failure). */
HIDDEN ncclResult_t snc_init_state_locked(ncclComm_t c);

#endif
