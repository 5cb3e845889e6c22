/* gpa-sim NCCL subset: the calls comm/nccl.c makes, for the simulated
 * devices of one process or of several processes of one machine
 * (docs/sim.md, "NCCL subset"). Ranks in several processes: xproc.c (the
 * group's shared-memory segment, which every group gets at its first
 * join; once every rank joined, a group whose ranks are all here goes on
 * as below, one with ranks elsewhere runs its steps in xcoll.c).
 *
 * Overview. A unique id names a group; ncclCommInitRank joins rank r of it
 * and waits until every rank joined (inside ncclGroupStart/End the wait
 * moves to ncclGroupEnd, so one thread can join several ranks, as with
 * NCCL). ncclCommInitRankConfig with config.blocking = 0 joins and returns
 * ncclInProgress at once: ncclCommGetAsyncError then answers ncclInProgress
 * until every rank joined (ncclSuccess) or the init ended otherwise (an
 * abort, a peer's failure: an error), and ncclCommAbort may end it while
 * pending. On such a non-blocking communicator every collective call
 * answers ncclInProgress, and the next ncclCommGetAsyncError too, as NCCL's
 * may while it is still enqueuing: callers must wait for ncclSuccess. A collective call checks its arguments, takes the rank's next
 * sequence number and queues a step on the stream (gpa_sim__enqueue): the
 * step posts the rank's buffers in the group's slot of that number and waits
 * until every rank posted; the last one computes the whole collective for
 * every rank, as the LOCAL transport does (comm/local.c): reductions
 * accumulate the ranks in rank order in f32 (i32 for i32) and round once, so
 * the results are bit-identical to LOCAL's. Every input is read into
 * temporaries before any output is written, which makes every in-place form
 * safe. Sends are buffered (a send's step copies its data into the pair's
 * mailbox and goes on); a recv's step waits for the pair's next message.
 *
 * Errors as NCCL reports them: invalid arguments at the call
 * (ncclInvalidArgument, text in ncclGetLastError); failures while running
 * are asynchronous (ncclCommGetAsyncError), and a waiting step stays blocked
 * until every rank came or its communicator is aborted (ncclCommAbort), as a
 * real NCCL kernel spins. A rank that aborts fails its peers' waiting and
 * later steps with ncclRemoteError. A step never makes the CUDA context
 * sticky: NCCL's errors are not the device's.
 *
 * Faults, from GPA_SIM_NCCL_FAULT="init=N,call=N,async=N,hang=N" (read at
 * the first call) or gpa_sim_nccl_fault_* (gpa_sim_nccl.h): the N-th
 * ncclCommInitRank from now fails (ncclSystemError); the N-th collective
 * call fails at the call (ncclSystemError); the N-th collective fails on
 * the stream (async ncclSystemError on its rank, ncclRemoteError on the
 * peers); the N-th collective hangs on its stream without posting (a hung
 * peer: its rank and every peer wait until they are aborted).
 *
 * Lifetime: a communicator is referenced by its user and by every step
 * queued on it; ncclCommDestroy/Abort drop the user's reference, the last
 * step frees it. Groups live while a rank is in them. One lock covers the
 * groups (a test's sizes: the copies are small). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpa_sim_nccl.h"
#include "internal.h"

const char *const snc_kind_names[6] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                        "ncclBroadcast", "ncclSend",          "ncclRecv"};

pthread_mutex_t snc_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t snc_cv = PTHREAD_COND_INITIALIZER;
static group *g_groups;
static __thread char t_last[256];
static __thread int t_group_depth;
static __thread ncclComm_t t_pending[MAXR]; /* inits inside a group call, waited for at ncclGroupEnd */
static __thread int t_n_pending;
static atomic_int g_version = NCCL_VERSION(2, 28, 0);

/* ---- faults ---------------------------------------------------------------- */

static atomic_uint f_init, f_destroy;
atomic_uint snc_f_call, snc_f_async, snc_f_hang;
static pthread_once_t f_once = PTHREAD_ONCE_INIT;

static void read_env(void) {
  const char *e = getenv("GPA_SIM_NCCL_FAULT");
  if (!e) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", e);
  char *save = NULL;
  for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char key[32];
    unsigned v;
    if (sscanf(item, "%31[a-z]=%u", key, &v) != 2) {
      fprintf(stderr, "gpa-sim nccl: ignoring GPA_SIM_NCCL_FAULT item '%s' (want key=N)\n", item);
      continue;
    }
    if (!strcmp(key, "init")) f_init = v;
    else if (!strcmp(key, "call")) snc_f_call = v;
    else if (!strcmp(key, "async")) snc_f_async = v;
    else if (!strcmp(key, "hang")) snc_f_hang = v;
    else if (!strcmp(key, "destroy")) f_destroy = v;
    else fprintf(stderr, "gpa-sim nccl: ignoring unknown GPA_SIM_NCCL_FAULT key '%s'\n", key);
  }
}

/* One-shot counters: the n-th event from now fires, then the counter stays 0. */
bool snc_take(atomic_uint *c) {
  pthread_once(&f_once, read_env);
  unsigned v = atomic_load(c);
  while (v && !atomic_compare_exchange_weak(c, &v, v - 1)) {
  }
  return v == 1;
}

EXPORT void gpa_sim_nccl_fault_init(unsigned n) { pthread_once(&f_once, read_env), f_init = n; }
EXPORT void gpa_sim_nccl_fault_call(unsigned n) { pthread_once(&f_once, read_env), snc_f_call = n; }
EXPORT void gpa_sim_nccl_fault_async(unsigned n) { pthread_once(&f_once, read_env), snc_f_async = n; }
EXPORT void gpa_sim_nccl_fault_hang(unsigned n) { pthread_once(&f_once, read_env), snc_f_hang = n; }
EXPORT void gpa_sim_nccl_fault_destroy(unsigned n) { pthread_once(&f_once, read_env), f_destroy = n; }
EXPORT void gpa_sim_nccl_fault_clear(void) {
  pthread_once(&f_once, read_env);
  f_init = snc_f_call = snc_f_async = snc_f_hang = f_destroy = 0;
}

EXPORT void gpa_sim_nccl_set_version(int code) { g_version = code ? code : NCCL_VERSION(2, 28, 0); }

static void reclaim_due_locked(bool all);
EXPORT int gpa_sim_nccl_live_comms(void) {
  int n = 0;
  pthread_mutex_lock(&snc_mu);
  reclaim_due_locked(false);
  for (group *g = g_groups; g; g = g->next) n += g->alive;
  pthread_mutex_unlock(&snc_mu);
  return n;
}

/* ---- small things ------------------------------------------------------------ */

ncclResult_t snc_fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  snprintf(t_last, sizeof t_last, "%s", buf);
  if (c) snprintf(c->last, sizeof c->last, "%s", buf);
  return r;
}

EXPORT const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

/* A copy: the communicator's text is written by its steps on the stream
 * threads. */
EXPORT const char *ncclGetLastError(ncclComm_t c) {
  static __thread char copy[256];
  if (!c) return t_last;
  pthread_mutex_lock(&snc_mu);
  snprintf(copy, sizeof copy, "%s", c->last[0] ? c->last : t_last);
  pthread_mutex_unlock(&snc_mu);
  return copy;
}

EXPORT ncclResult_t ncclGetVersion(int *v) {
  if (!v) return ncclInvalidArgument;
  *v = atomic_load(&g_version);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return snc_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: %s", "NULL id");
  static atomic_ullong counter;
  memset(id, 0, sizeof *id);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned long long v[3] = {(unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30),
                             atomic_fetch_add(&counter, 1) + 1, (unsigned long long)(uintptr_t)&counter};
  memcpy(id->internal, "gpa-sim-nccl-id", 16);
  memcpy(id->internal + 16, v, sizeof v);
  int32_t pid = (int32_t)getpid(); /* groups live in this process's memory */
  memcpy(id->internal + 16 + sizeof v, &pid, sizeof pid);
  return ncclSuccess;
}

/* ---- communicators ----------------------------------------------------------- */

static void group_release_locked(group *g);
void snc_unref_locked(ncclComm_t c) {
  if (--c->refs) return;
  group *g = c->g;
  g->rank[c->rank] = NULL;
  snc_x_left_locked(g, c->rank);
  free(c);
  --g->alive;
  group_release_locked(g);
}

/* Frees g once nobody uses it: no rank alive, and (a failed init) every
 * rank came, so that none arrives at a freed group (unless some rank is
 * another process's: this process's may never all come). Under snc_mu. */
static void group_free_locked(group *g);
static void group_release_locked(group *g) {
  if (g->alive) return;
  if (g->failed && g->arrived < g->nranks && !snc_x_remote_seen(g)) {
    snc_x_unlink_locked(g); /* kept for this process's late ranks only */
    return;
  }
  group_free_locked(g);
}

/* At unload (the last dlclose, or exit): the groups kept for ranks that
 * never came go with the library, whose list of them is about to vanish.
 * Groups with a live rank stay (a stream's step may still use them). */
__attribute__((destructor)) static void groups_unload(void) {
  pthread_mutex_lock(&snc_mu);
  reclaim_due_locked(true);
  for (group *g = g_groups, *next; g; g = next) {
    next = g->next;
    if (!g->alive) group_free_locked(g);
    else snc_x_unlink_locked(g); /* a process leaving during an init leaves no name behind */
  }
  pthread_mutex_unlock(&snc_mu);
}

static void group_free_locked(group *g) {
  for (int s = 0; s < g->nranks; s++)
    for (int d = 0; d < g->nranks; d++)
      for (msg *m = g->box[s][d], *n; m; m = n) {
        n = m->next;
        free(m);
      }
  snc_x_detach_locked(g);
  for (group **pp = &g_groups; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      break;
    }
  free(g);
}

/* Waits (under snc_mu) until every rank of c's group joined; false if c was
 * aborted meanwhile. */
static bool wait_joined(ncclComm_t c) {
  long nap = 5000;
  for (;;) {
    if (c->g->x) snc_x_sync_locked(c->g);
    if (c->aborted || c->g->failed) return false;
    if (snc_x_complete_locked(c->g)) return !c->g->failed;
    if (c->g->x) snc_x_nap_locked(&nap); /* ranks of other processes cannot signal snc_cv */
    else pthread_cond_wait(&snc_cv, &snc_mu);
  }
}

ncclResult_t snc_init_state_locked(ncclComm_t c) {
  if (c->init_done) return ncclSuccess;
  if (c->aborted) return ncclSystemError;
  if (c->g->x) snc_x_sync_locked(c->g);
  if (snc_x_complete_locked(c->g)) { /* every rank joined once: later failures are the collectives' */
    c->init_done = true;
    return ncclSuccess;
  }
  return c->g->failed ? ncclRemoteError : ncclInProgress;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, bool blocking) {
  if (!out) return snc_fail(NULL, ncclInvalidArgument, "ncclCommInitRank: %s", "NULL comm");
  *out = NULL;
  if (nranks < 1 || nranks > MAXR)
    return snc_fail(NULL, ncclInvalidArgument, "ncclCommInitRank: nranks %d (1 to 64 in the simulator)", nranks);
  if (rank < 0 || rank >= nranks)
    return snc_fail(NULL, ncclInvalidArgument, "ncclCommInitRank: rank %d outside [0, %d)", rank, nranks);
  if (memcmp(id.internal, "gpa-sim-nccl-id", 16))
    return snc_fail(NULL, ncclInvalidArgument, "ncclCommInitRank: %s", "not a unique id of ncclGetUniqueId");
  bool fault = snc_take(&f_init);
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) return snc_fail(NULL, ncclSystemError, "ncclCommInitRank: %s", "out of host memory");
  pthread_mutex_lock(&snc_mu);
  group *g = g_groups;
  while (g && memcmp(&g->id, &id, sizeof id)) g = g->next;
  ncclResult_t r = ncclSuccess;
  if (g && g->nranks != nranks)
    r = snc_fail(NULL, ncclInvalidUsage, "ncclCommInitRank: nranks %d differs from the other ranks' %d", nranks, g->nranks);
  else if (g && g->rank[rank])
    r = snc_fail(NULL, ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
  else if (!g && !(g = calloc(1, sizeof *g)))
    r = snc_fail(NULL, ncclSystemError, "ncclCommInitRank: %s", "out of host memory");
  if (r != ncclSuccess) {
    pthread_mutex_unlock(&snc_mu);
    free(c);
    return r;
  }
  if (!g->nranks) {
    g->id = id;
    g->nranks = nranks;
    g->next = g_groups;
    g_groups = g;
    if ((r = snc_x_attach_locked(g, &id, nranks)) != ncclSuccess) {
      group_free_locked(g);
      pthread_mutex_unlock(&snc_mu);
      free(c);
      return r;
    }
  }
  g->arrived++;
  if (g->x) snc_x_sync_locked(g); /* an init that failed in another process */
  if (!fault && !g->failed && (r = snc_x_join_locked(g, rank)) != ncclSuccess) {
    group_release_locked(g);
    pthread_mutex_unlock(&snc_mu);
    free(c);
    return r;
  }
  if (fault || g->failed) {
    /* the peers waiting, and those still to come, fail too (NCCL's would
     * wait for its bootstrap timeout) */
    if (fault) snc_fail_group_locked(g, rank, "injected init failure");
    r = snc_fail(NULL, ncclSystemError, "ncclCommInitRank: %s (rank %d)",
             fault ? "injected init failure" : "another rank's init failed", rank);
    group_release_locked(g);
    pthread_mutex_unlock(&snc_mu);
    free(c);
    return r;
  }
  c->g = g;
  c->rank = rank;
  c->nranks = nranks;
  c->refs = 1;
  c->nonblocking = !blocking;
  g->rank[rank] = c;
  g->joined++;
  g->alive++;
  pthread_cond_broadcast(&snc_cv);
  *out = c;
  if (!blocking) { /* the peers are waited for in ncclCommGetAsyncError */
    pthread_mutex_unlock(&snc_mu);
    return ncclInProgress;
  }
  if (t_group_depth > 0 && t_n_pending < MAXR) {
    t_pending[t_n_pending++] = c; /* ncclGroupEnd waits */
    pthread_mutex_unlock(&snc_mu);
    return ncclSuccess;
  }
  bool ok = wait_joined(c);
  if (!ok) {
    *out = NULL;
    c->user_gone = true;
    snc_unref_locked(c);
  }
  pthread_mutex_unlock(&snc_mu);
  return ok ? ncclSuccess : snc_fail(NULL, ncclSystemError, "ncclCommInitRank: another rank's init failed (rank %d)", rank);
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  return init_rank(out, nranks, id, rank, true);
}

/* The config's layout up to `blocking` (NCCL 2.14's), read as NCCL reads
 * it: the magic of NCCL_CONFIG_INITIALIZER, fields newer than `version`
 * left at their defaults, INT_MIN (undefined) meaning the default. */
EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                           ncclConfig_t *config) {
  bool blocking = true;
  if (config) {
    size_t size;
    memcpy(&size, config, sizeof size);
    if (size < offsetof(ncclConfig_t, blocking) + sizeof(int) || config->magic != 0xcafebeef)
      return snc_fail(NULL, ncclInvalidArgument, "ncclCommInitRankConfig: %s",
                      "config not initialized by NCCL_CONFIG_INITIALIZER (size or magic)");
    if (config->version >= NCCL_VERSION(2, 14, 0) && config->blocking != NCCL_CONFIG_UNDEF_INT)
      blocking = config->blocking != 0;
  }
  return init_rank(out, nranks, id, rank, blocking);
}

EXPORT ncclResult_t ncclGroupStart(void) {
  t_group_depth++;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
  if (t_group_depth <= 0) return snc_fail(NULL, ncclInvalidUsage, "ncclGroupEnd: %s", "without ncclGroupStart");
  if (--t_group_depth) return ncclSuccess;
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&snc_mu);
  for (int i = 0; i < t_n_pending; i++)
    if (!wait_joined(t_pending[i])) r = ncclSystemError;
  t_n_pending = 0;
  pthread_mutex_unlock(&snc_mu);
  return r == ncclSuccess ? r : snc_fail(NULL, r, "ncclGroupEnd: %s", "a communicator was aborted during init");
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
  if (!c || !n) return ncclInvalidArgument;
  *n = c->nranks;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
  if (!c || !r) return ncclInvalidArgument;
  *r = c->rank;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
  if (!c || !e) return ncclInvalidArgument;
  pthread_mutex_lock(&snc_mu);
  reclaim_due_locked(false);
  ncclResult_t st = c->nonblocking ? snc_init_state_locked(c) : ncclSuccess;
  if (c->async) *e = c->async;
  else if (st == ncclInProgress) *e = ncclInProgress;
  else if (st != ncclSuccess) {
    /* the init ended without every rank: NCCL's text, as its bootstrap would */
    snprintf(c->last, sizeof c->last, "ncclCommInitRankConfig (rank %d): %s", c->rank,
             c->aborted ? "aborted (ncclCommAbort) during init" : c->g->fail_why);
    *e = c->async = st;
  } else if (c->busy_polls > 0) {
    c->busy_polls--;
    *e = ncclInProgress;
  } else *e = ncclSuccess;
  pthread_mutex_unlock(&snc_mu);
  return ncclSuccess;
}

/* Marks the group failed for every rank still waiting (under snc_mu). */
void snc_fail_group_locked(group *g, int rank, const char *why) {
  if (!g->failed) {
    g->failed = true;
    snprintf(g->fail_why, sizeof g->fail_why, "rank %d: %s", rank, why);
    snc_x_publish_failure(g, g->fail_why); /* to the ranks of other processes */
  }
  pthread_cond_broadcast(&snc_cv);
}

/* Communicators whose user reference goes about a millisecond after their
 * ncclCommDestroy/Abort answered ncclInProgress, as NCCL reclaims a
 * non-blocking one in the background: a caller that touches the handle
 * after that call reads freed memory here too (ASan). Dropped by the next
 * call into the subset after their time (gpa_sim_nccl_live_comms
 * included), and at unload; no thread of its own, so nothing outlives the
 * calls that could race them. Under snc_mu. */
static ncclComm_t g_reclaim;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void reclaim_due_locked(bool all) {
  int64_t now = now_ns();
  for (ncclComm_t *pp = &g_reclaim; *pp;) {
    ncclComm_t c = *pp;
    if (all || now >= c->reclaim_due) {
      *pp = c->reclaim_next;
      snc_unref_locked(c);
    } else {
      pp = &c->reclaim_next;
    }
  }
}

static ncclResult_t drop_user(ncclComm_t c, bool abort) {
  if (!c) return snc_fail(NULL, ncclInvalidArgument, "ncclComm%s: NULL communicator", abort ? "Abort" : "Destroy");
  pthread_mutex_lock(&snc_mu);
  reclaim_due_locked(false);
  if (c->user_gone) {
    pthread_mutex_unlock(&snc_mu);
    return snc_fail(NULL, ncclInvalidArgument, "ncclComm%s: the communicator was already destroyed or aborted",
                    abort ? "Abort" : "Destroy");
  }
  if (!abort && snc_take(&f_destroy)) {
    c->async = ncclRemoteError;
    snprintf(c->last, sizeof c->last, "rank %d: a peer failed while the communicator was idle (injected)", c->rank);
  }
  /* NCCL's destroy first makes sure the communicator is ready
   * (ncclCommEnsureReady): one in an asynchronous error, or still busy,
   * is refused and left alive (only ncclCommAbort ends it) */
  if (!abort) {
    ncclResult_t st = c->async ? c->async : c->nonblocking ? snc_init_state_locked(c) : ncclSuccess;
    if (st == ncclSuccess && c->busy_polls > 0) st = ncclInProgress;
    if (st != ncclSuccess) {
      pthread_mutex_unlock(&snc_mu);
      return snc_fail(c, st == ncclInProgress ? ncclInvalidArgument : st,
                      "ncclCommDestroy (rank %d): the communicator is not ready (state %d); end it with ncclCommAbort",
                      c->rank, (int)st);
    }
  }
  if (abort) {
    c->aborted = true;
    if (!c->async) c->async = ncclSystemError;
    snc_fail_group_locked(c->g, c->rank, "aborted (ncclCommAbort)");
  }
  c->user_gone = true;
  bool later = c->nonblocking; /* c may be gone after the unref */
  if (later) {
    c->reclaim_due = now_ns() + 1000000;
    c->reclaim_next = g_reclaim;
    g_reclaim = c;
  } else {
    snc_unref_locked(c);
  }
  pthread_mutex_unlock(&snc_mu);
  return later ? ncclInProgress : ncclSuccess;
}

/* Destroy waits for the communicator's queued work on the streams, as
 * NCCL's does: the last step frees it. On a non-blocking communicator both
 * answer ncclInProgress and finish in the background (g_reclaim). */
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) { return drop_user(c, false); }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) { return drop_user(c, true); }
EXPORT ncclResult_t ncclCommFinalize(ncclComm_t c) { return c ? ncclSuccess : ncclInvalidArgument; }
