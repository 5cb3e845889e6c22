/* libgpuactor_mpi.so: the MPI engine's MPI side (comm/mpi_abi.h).
 *
 * Collectives start as non-blocking MPI calls on the calling (actor)
 * thread, which then tests its own (test) while it has nothing else to do;
 * one progress thread per process tests every request in flight, the
 * actor's too, and reports each once it completes. (It used to stay away
 * while an actor tested: 2 ranks on 2 cores ran 16 KiB to 1 MiB allreduces
 * at 0.53-0.93 of MPI's own then, 0.70-0.99 with both testing; docs/
 * collectives.md, "Measured".) MPI progresses non-blocking collectives
 * only inside MPI calls (a large transfer moves a fragment per call), so
 * the tests are what moves them: while anything is in flight the thread
 * tests round after round, yielding the core between rounds; only when
 * nothing has completed for SLOW_NS (a peer far behind) does it sleep
 * 100 us between rounds. With nothing in flight for HOT_IDLE_NS it sleeps
 * on a condition variable. Two threads call MPI at once, hence
 * MPI_THREAD_MULTIPLE.
 *
 * A request the actor gave up on (cancel, abort) cannot be taken back from
 * MPI: it stays in flight, abandoned, until the peers reach it. detach
 * then hands us the memory its buffers had (the actor moved them: comm.c,
 * let_go); those blocks are freed once no request in flight points into
 * them, or after MPI_Finalize at exit. */
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi_abi.h"
#include "gpuactor/comm.h"
#include "gpuactor/status.h"
#include "gpuactor/tensor.h"

#define SLOW_NS 100000000ll /* 100 ms without a completion: stop polling hot */
#define HOT_IDLE_NS 200000ll /* nothing in flight for 200 us: sleep until work comes */

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_SEND, K_RECV };

/* A communicator outlives gpa_comm_destroy while requests on it are in
 * flight (cancelled ones included): Open MPI's non-blocking collectives
 * crash progressing on a freed communicator. */
typedef struct box {
  MPI_Comm c;
  int size;
  int entries; /* under lock */
  int freeing;
} box;

typedef struct entry {
  struct entry *next;
  MPI_Request req;
  void *ctx;     /* the collective; NULL once detached (its message may be reused) */
  int abandoned; /* cancelled or aborted: finishes unwatched, host->done never called */
  box *comm;
  char *buf[2]; /* send, recv: MPI may touch them until the request completes */
  size_t len[2];
  void *tmp; /* in-place reduce_scatter: the result lands here first */
  void *copy_to;
  size_t copy_bytes;
} entry;

static gpa__mpi_host H;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static entry *inflight;
/* Memory the actor gave up to abandoned requests (detach): freed once no
 * request in flight points into it. */
typedef struct orphan {
  struct orphan *next;
  char *ptr;
  size_t bytes;
} orphan;
static orphan *orphans;
static pthread_t thread;
static int started, stopping, we_initialized;
static MPI_Op ops16[2][3]; /* [f16, bf16][sum, max, min] */

static void errtext(int rc, const char *what, char *err, size_t cap) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
  snprintf(err, cap, "%s: %.200s", what, s);
}

#define OP16(name, op, dtype)                                                  \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {       \
    (void)dt;                                                                  \
    H.combine16(op, dtype, inout, in, (uint64_t)*len);                         \
  }
OP16(sum_f16, GPA_REDUCE_SUM, GPA_F16)
OP16(max_f16, GPA_REDUCE_MAX, GPA_F16)
OP16(min_f16, GPA_REDUCE_MIN, GPA_F16)
OP16(sum_bf16, GPA_REDUCE_SUM, GPA_BF16)
OP16(max_bf16, GPA_REDUCE_MAX, GPA_BF16)
OP16(min_bf16, GPA_REDUCE_MIN, GPA_BF16)

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* A finished request's entry (under lock). */
static void retire(entry *e) {
  if (--e->comm->entries == 0 && e->comm->freeing) {
    MPI_Comm_free(&e->comm->c);
    free(e->comm);
  }
  free(e->tmp);
  free(e);
}

static bool points_into(const orphan *o) {
  for (const entry *e = inflight; e; e = e->next)
    for (int i = 0; i < 2; i++)
      if (e->len[i] && e->buf[i] < o->ptr + o->bytes && o->ptr < e->buf[i] + e->len[i]) return true;
  return false;
}

/* Frees the orphaned blocks no request in flight points into (under lock). */
static void free_orphans(void) {
  for (orphan **pp = &orphans; *pp;) {
    orphan *o = *pp;
    if (points_into(o)) {
      pp = &o->next;
      continue;
    }
    *pp = o->next;
    free(o->ptr);
    free(o);
  }
}

static int64_t last; /* the last completion or start (under lock) */

static void *progress(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  while (!stopping) {
    if (!inflight) {
      /* A trainer's collectives come in runs: stay awake a little for the
       * next, which a condition variable's wake-up would delay. */
      if (now_ns() - last < HOT_IDLE_NS) {
        pthread_mutex_unlock(&lock);
        sched_yield();
        pthread_mutex_lock(&lock);
      } else {
        pthread_cond_wait(&cond, &lock);
      }
      continue;
    }
    void *wake[64];
    int n = 0, done = 0;
    for (entry **pp = &inflight; *pp && n < 64;) {
      entry *e = *pp;
      int flag = 0;
      int rc = MPI_Test(&e->req, &flag, MPI_STATUS_IGNORE);
      if (rc == MPI_SUCCESS && !flag) {
        pp = &e->next;
        continue;
      }
      *pp = e->next;
      done++;
      if (e->ctx && !e->abandoned) {
        char why[256] = "";
        if (rc != MPI_SUCCESS) errtext(rc, "MPI", why, sizeof why);
        else if (e->copy_to) memcpy(e->copy_to, e->tmp, e->copy_bytes);
        wake[n++] = H.done(e->ctx, rc == MPI_SUCCESS ? GPA_OK : GPA_EDEVICE, why);
      }
      retire(e);
    }
    if (done) free_orphans();
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) H.wake(wake[i]);
    int64_t t = now_ns();
    pthread_mutex_lock(&lock);
    if (done) last = t;
    bool hot = t - last < SLOW_NS;
    pthread_mutex_unlock(&lock);
    if (hot) sched_yield();
    else nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    pthread_mutex_lock(&lock);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

static void stop_progress(void) {
  if (!started) return;
  pthread_mutex_lock(&lock);
  stopping = 1;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
  pthread_join(thread, NULL);
  started = 0;
}

/* MPI must be finalized before the process exits (mpirun reports a process
 * that did not as failed); the progress thread stops first. */
static void at_exit(void) {
  stop_progress();
  int fin = 0;
  MPI_Finalized(&fin);
  if (!we_initialized || fin) return;
  MPI_Finalize();
  /* MPI is gone: nothing writes the memory of abandoned requests any more */
  for (entry *e = inflight, *next; e; e = next) {
    next = e->next;
    free(e->tmp);
    free(e);
  }
  inflight = NULL;
  while (orphans) {
    orphan *o = orphans;
    orphans = o->next;
    free(o->ptr);
    free(o);
  }
}

static int init(const gpa__mpi_host *host, char *err, size_t cap) {
  static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&once);
  int st = GPA_OK, inited = 0, fin = 0, level = 0;
  MPI_Finalized(&fin);
  MPI_Initialized(&inited);
  if (fin) {
    snprintf(err, cap, "MPI was finalized already");
    st = GPA_EUNSUPPORTED;
    goto out;
  }
  if (!inited) {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
    if (rc != MPI_SUCCESS) {
      errtext(rc, "MPI_Init_thread", err, cap);
      st = GPA_EDEVICE;
      goto out;
    }
    we_initialized = 1;
    atexit(at_exit);
  }
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    snprintf(err, cap, "MPI runs at thread level %d; collectives need MPI_THREAD_MULTIPLE (%d): initialize MPI with "
             "MPI_Init_thread(MPI_THREAD_MULTIPLE) or let gpa_comm_bootstrap_mpi do it", level, MPI_THREAD_MULTIPLE);
    st = GPA_EUNSUPPORTED;
    goto out;
  }
  if (!started) {
    H = *host;
    MPI_User_function *fns[2][3] = {{sum_f16, max_f16, min_f16}, {sum_bf16, max_bf16, min_bf16}};
    for (int d = 0; d < 2; d++)
      for (int o = 0; o < 3; o++) MPI_Op_create(fns[d][o], 1, &ops16[d][o]);
    if (pthread_create(&thread, NULL, progress, NULL)) {
      snprintf(err, cap, "cannot start the MPI progress thread");
      st = GPA_ENOMEM;
      goto out;
    }
    started = 1;
    if (!we_initialized) atexit(stop_progress);
  }
out:
  pthread_mutex_unlock(&once);
  return st;
}

static int world(int *initialized, int *rank, int *size) {
  int fin = 0;
  MPI_Initialized(initialized);
  MPI_Finalized(&fin);
  if (!*initialized || fin) {
    *initialized = 0;
    return GPA_OK;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return GPA_OK;
}

static int bcast_world(void *buf, int bytes, int root, char *err, size_t cap) {
  int rc = MPI_Bcast(buf, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    errtext(rc, "MPI_Bcast", err, cap);
    return GPA_EDEVICE;
  }
  return GPA_OK;
}

static int min_world(int *v, char *err, size_t cap) {
  int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    errtext(rc, "MPI_Allreduce", err, cap);
    return GPA_EDEVICE;
  }
  return GPA_OK;
}

static int local_rank(int *rank, int *size, char *err, size_t cap) {
  MPI_Comm node;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) {
    errtext(rc, "MPI_Comm_split_type", err, cap);
    return GPA_EDEVICE;
  }
  MPI_Comm_rank(node, rank);
  MPI_Comm_size(node, size);
  MPI_Comm_free(&node);
  return GPA_OK;
}

static int comm_create(int color, int key, void **comm, int *rank, int *size, char *err, size_t cap) {
  box *b = calloc(1, sizeof *b);
  if (!b) return GPA_ENOMEM;
  int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &b->c);
  if (rc != MPI_SUCCESS) {
    errtext(rc, "MPI_Comm_split", err, cap);
    free(b);
    return GPA_EDEVICE;
  }
  /* Errors come back to us as codes: the default handler ends the job. */
  MPI_Comm_set_errhandler(b->c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(b->c, rank);
  MPI_Comm_size(b->c, size);
  b->size = *size;
  *comm = b;
  return GPA_OK;
}

static void comm_free(void *comm) {
  box *b = comm;
  pthread_mutex_lock(&lock);
  int now = b->entries == 0;
  b->freeing = 1;
  pthread_mutex_unlock(&lock);
  if (!now) return; /* the last request's completion frees it */
  MPI_Comm_free(&b->c);
  free(b);
}

static MPI_Datatype dtype_of(int dtype) {
  switch (dtype) {
    case GPA_F32: return MPI_FLOAT;
    case GPA_I32: return MPI_INT32_T;
    default: return MPI_UINT16_T; /* f16, bf16: bits, reduced by our own ops */
  }
}

static MPI_Op op_of(int op, int dtype) {
  int o = op == GPA_REDUCE_MAX ? 1 : op == GPA_REDUCE_MIN ? 2 : 0;
  if (dtype == GPA_F16 || dtype == GPA_BF16) return ops16[dtype == GPA_BF16][o];
  return o == 1 ? MPI_MAX : o == 2 ? MPI_MIN : MPI_SUM;
}

static int start(void *comm, const gpa__mpi_op *op, void *ctx, char *err, size_t cap) {
  MPI_Comm c = ((box *)comm)->c;
  entry *e = calloc(1, sizeof *e);
  if (!e) return GPA_ENOMEM;
  e->ctx = ctx;
  e->comm = comm;
  MPI_Datatype dt = dtype_of(op->dtype);
  int n = (int)op->count, rc = MPI_SUCCESS, rank = 0;
  size_t es = op->dtype == GPA_F32 || op->dtype == GPA_I32 ? 4 : 2;
  const char *what = "?";
  switch (op->kind) {
    case K_ALLREDUCE:
      what = "MPI_Iallreduce";
      rc = MPI_Iallreduce(op->in_place ? MPI_IN_PLACE : op->send, op->recv, n, dt, op_of(op->op, op->dtype), c,
                          &e->req);
      break;
    case K_REDUCE_SCATTER:
      what = "MPI_Ireduce_scatter_block";
      if (op->in_place) {
        /* MPI's in-place form leaves the result at the start of the buffer,
         * ours at this rank's block: take it aside and copy it there. */
        e->tmp = malloc(op->count * es + 1);
        if (!e->tmp) {
          free(e);
          return GPA_ENOMEM;
        }
        e->copy_to = op->recv;
        e->copy_bytes = op->count * es;
      }
      rc = MPI_Ireduce_scatter_block(op->send, e->tmp ? e->tmp : op->recv, n, dt, op_of(op->op, op->dtype), c,
                                     &e->req);
      break;
    case K_ALLGATHER:
      what = "MPI_Iallgather";
      if (op->in_place) rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op->recv, n, dt, c, &e->req);
      else rc = MPI_Iallgather(op->send, n, dt, op->recv, n, dt, c, &e->req);
      break;
    case K_BROADCAST:
      what = "MPI_Ibcast";
      MPI_Comm_rank(c, &rank);
      if (rank == op->peer && op->send != op->recv) memcpy(op->recv, op->send, op->count * es);
      rc = MPI_Ibcast(op->recv, n, dt, op->peer, c, &e->req);
      break;
    case K_SEND:
      what = "MPI_Isend";
      rc = MPI_Isend(op->send, n, dt, op->peer, 0, c, &e->req);
      break;
    case K_RECV:
      what = "MPI_Irecv";
      rc = MPI_Irecv(op->recv, n, dt, op->peer, 0, c, &e->req);
      break;
  }
  if (rc != MPI_SUCCESS) {
    errtext(rc, what, err, cap);
    free(e->tmp);
    free(e);
    return GPA_EDEVICE;
  }
  /* what MPI may read or write until the request completes (in-place
   * reduce_scatter writes tmp, which is ours) */
  size_t blocks = op->kind == K_REDUCE_SCATTER ? (size_t)((box *)comm)->size : 1;
  size_t rblocks = op->kind == K_ALLGATHER ? (size_t)((box *)comm)->size : 1;
  if (op->kind != K_RECV && op->kind != K_BROADCAST && !(op->in_place && op->kind == K_ALLGATHER)) {
    e->buf[0] = op->send;
    e->len[0] = op->count * es * blocks;
  }
  if (op->kind != K_SEND) {
    e->buf[1] = op->recv;
    e->len[1] = op->count * es * rblocks;
  }
  pthread_mutex_lock(&lock);
  e->comm->entries++;
  last = now_ns();
  e->next = inflight;
  inflight = e;
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&lock);
  return GPA_OK;
}

static int test(void *ctx) {
  int fin = 0;
  void *a = NULL;
  pthread_mutex_lock(&lock);
  for (entry **pp = &inflight; *pp; pp = &(*pp)->next) {
    entry *e = *pp;
    if (e->ctx != ctx) continue;
    if (e->abandoned) { /* aborted meanwhile: host->done ran then */
      fin = 1;
      break;
    }
    int flag = 0, rc = MPI_Test(&e->req, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag) break;
    *pp = e->next;
    char why[256] = "";
    if (rc != MPI_SUCCESS) errtext(rc, "MPI", why, sizeof why);
    else if (e->copy_to) memcpy(e->copy_to, e->tmp, e->copy_bytes);
    a = H.done(e->ctx, rc == MPI_SUCCESS ? GPA_OK : GPA_EDEVICE, why);
    retire(e);
    free_orphans();
    last = now_ns();
    fin = 1;
    break;
  }
  pthread_mutex_unlock(&lock);
  if (a) H.wake(a); /* the caller's own actor: only its done's hold goes */
  return fin;
}

static void cancel(void *ctx) {
  pthread_mutex_lock(&lock);
  for (entry *e = inflight; e; e = e->next)
    if (e->ctx == ctx) e->abandoned = 1;
  pthread_mutex_unlock(&lock);
}

static int held(void *ctx) {
  int n = 0;
  pthread_mutex_lock(&lock);
  for (entry *e = inflight; e; e = e->next) n |= e->ctx == ctx;
  pthread_mutex_unlock(&lock);
  return n;
}

static int detach(void *ctx, void *const *blocks, const size_t *bytes, int n) {
  int found = 0;
  pthread_mutex_lock(&lock);
  for (entry *e = inflight; e; e = e->next)
    if (e->ctx == ctx) {
      e->abandoned = 1;
      e->ctx = NULL;
      found = 1;
    }
  for (int i = 0; found && i < n; i++) {
    orphan *o = malloc(sizeof *o);
    if (!o) continue; /* leaked rather than freed under MPI's feet */
    o->ptr = blocks[i];
    o->bytes = bytes[i];
    o->next = orphans;
    orphans = o;
  }
  if (found) free_orphans(); /* a block no request points into goes at once */
  pthread_mutex_unlock(&lock);
  return found;
}

static void abort_comm(void *comm, int status, const char *why) {
  /* in rounds of 256: every done gets its wake (the entries done are
   * abandoned, so a round does not find them again) */
  for (int n = 256; n == 256;) {
    void *wake[256];
    n = 0;
    pthread_mutex_lock(&lock);
    for (entry *e = inflight; e && n < 256; e = e->next)
      if (e->comm == comm && e->ctx && !e->abandoned) {
        wake[n++] = H.done(e->ctx, status, why);
        e->abandoned = 1;
      }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) H.wake(wake[i]);
  }
}

static const gpa__mpi_fns fns = {.abi = GPA__MPI_ABI,
                                 .init = init,
                                 .world = world,
                                 .bcast_world = bcast_world,
                                 .min_world = min_world,
                                 .local_rank = local_rank,
                                 .comm_create = comm_create,
                                 .comm_free = comm_free,
                                 .start = start,
                                 .test = test,
                                 .cancel = cancel,
                                 .held = held,
                                 .detach = detach,
                                 .abort = abort_comm};

__attribute__((visibility("default"))) const gpa__mpi_fns *gpa_mpi_module_v1(void) { return &fns; }
