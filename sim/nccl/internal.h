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
  /* Across processes (xproc.c): the group's shared segment, named by the
   * unique id; NULL when /dev/shm is unavailable (ranks of this process
   * only). cross: decided once every rank joined (some rank is another
   * process's): the collectives then go through the segment (xcoll.c). */
  struct xseg *x;
  int xfd;
  char xname[80];
  bool xnamed, xdecided, cross;
  unsigned char *xdata;     /* the ranks' staging areas (cross only) */
  size_t xalloc[MAXR][2];   /* bytes of rank's [collective, send] area made real (fallocate) */
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

/* ---- what coll.c and xcoll.c share ---- */
typedef struct step {
  ncclComm_t c;
  post p;
  uint64_t seq;
  int peer;
  bool async_fault, hang;
} step;
HIDDEN size_t snc_dsize(int dt);
HIDDEN void snc_reduce_block(const post *p, int n, size_t off, void *acc);
HIDDEN void snc_store(int dt, void *dst, const void *acc, size_t cnt, float scale);
/* Empty why when every rank issued the same collective, else the text. */
HIDDEN bool snc_mismatch(const post *p, int n, char *why, size_t cap);
HIDDEN void snc_set_async(ncclComm_t c, ncclResult_t r, const char *why);
HIDDEN bool snc_give_up(step *s);

/* ---- across processes (xproc.c) ---- */
/* Per rank of the segment, the staging areas' sizes (bytes): a collective
 * stages at most XCAP per rank, a send at most XPCAP. */
#define XCAP ((size_t)256 << 20)
#define XPCAP ((size_t)64 << 20)
/* Under snc_mu. Opens or makes the segment of g's id (g->x stays NULL when
 * /dev/shm refuses: then only ranks of this process meet; r is the error
 * when the id is another process's, whose ranks could then never meet). */
HIDDEN ncclResult_t snc_x_attach_locked(group *g, const ncclUniqueId *id, int nranks);
/* Takes rank's place in the segment (ncclInvalidUsage: taken by another
 * process, or another nranks). */
HIDDEN ncclResult_t snc_x_join_locked(group *g, int rank);
/* Every rank joined, in this process or others (decides g->cross, maps the
 * staging areas, unlinks the segment's name). */
HIDDEN bool snc_x_complete_locked(group *g);
/* A failure published by a rank of another process becomes g's (and ours,
 * published); a peer whose process exited fails g too. */
HIDDEN void snc_x_sync_locked(group *g);
HIDDEN void snc_x_publish_failure(group *g, const char *why);
/* rank's communicator is gone (freed): peers waiting for it give up. */
HIDDEN void snc_x_left_locked(group *g, int rank);
HIDDEN void snc_x_detach_locked(group *g);
/* Removes the segment's name (the mappings stay). */
HIDDEN void snc_x_unlink_locked(group *g);
/* Whether a rank of g lives in another process (known so far). */
HIDDEN bool snc_x_remote_seen(group *g);
/* Waits on snc_cv for a while (*ns, doubled up to half a millisecond): the
 * ranks of other processes cannot signal it, so the waits poll. */
HIDDEN void snc_x_nap_locked(long *ns);
/* The steps across processes (xcoll.c), under snc_mu. */
HIDDEN void snc_x_run_collective(step *s);
HIDDEN void snc_x_run_p2p(step *s);
HIDDEN ncclResult_t snc_x_check_size(ncclComm_t c, const char *api, size_t stage_bytes, bool p2p);

#endif
