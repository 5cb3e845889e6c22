/* gpa-sim NCCL subset: the calls comm/nccl.c makes, for the simulated
 * devices of one process (docs/sim.md, "NCCL").
 *
 * Overview. A unique id names a group; ncclCommInitRank joins rank r of it
 * and waits until every rank joined (inside ncclGroupStart/End the wait
 * moves to ncclGroupEnd, so one thread can join several ranks, as with
 * NCCL). A collective call checks its arguments, takes the rank's next
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
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "gpa_sim_hooks.h"
#include "gpa_sim_nccl.h"
#include "kernels/host/bf16.h"
#include "kernels/host/f16.h"

#define EXPORT __attribute__((visibility("default")))
#define SLOTS 64 /* collectives of one group in flight at once (ranks ahead of the slowest by < SLOTS) */
#define MAXR 64

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_SEND, K_RECV };
static const char *const kind_names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                         "ncclBroadcast", "ncclSend",          "ncclRecv"};

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
  int refs;           /* under g_mu: the user's + one per queued step */
  bool user_gone;     /* destroyed or aborted by the user */
  bool aborted;       /* ncclCommAbort: waiting steps give up */
  ncclResult_t async; /* first asynchronous error */
  char last[256];     /* ncclGetLastError */
  uint64_t seq;       /* collectives issued (send/recv have their own order) */
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

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static group *g_groups;
static __thread char t_last[256];
static __thread int t_group_depth;
static __thread ncclComm_t t_pending[MAXR]; /* inits inside a group call, waited for at ncclGroupEnd */
static __thread int t_n_pending;

/* ---- faults ---------------------------------------------------------------- */

static atomic_uint f_init, f_call, f_async, f_hang;
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
    else if (!strcmp(key, "call")) f_call = v;
    else if (!strcmp(key, "async")) f_async = v;
    else if (!strcmp(key, "hang")) f_hang = v;
    else fprintf(stderr, "gpa-sim nccl: ignoring unknown GPA_SIM_NCCL_FAULT key '%s'\n", key);
  }
}

/* One-shot counters: the n-th event from now fires, then the counter stays 0. */
static bool take(atomic_uint *c) {
  pthread_once(&f_once, read_env);
  unsigned v = atomic_load(c);
  while (v && !atomic_compare_exchange_weak(c, &v, v - 1)) {
  }
  return v == 1;
}

EXPORT void gpa_sim_nccl_fault_init(unsigned n) { pthread_once(&f_once, read_env), f_init = n; }
EXPORT void gpa_sim_nccl_fault_call(unsigned n) { pthread_once(&f_once, read_env), f_call = n; }
EXPORT void gpa_sim_nccl_fault_async(unsigned n) { pthread_once(&f_once, read_env), f_async = n; }
EXPORT void gpa_sim_nccl_fault_hang(unsigned n) { pthread_once(&f_once, read_env), f_hang = n; }
EXPORT void gpa_sim_nccl_fault_clear(void) {
  pthread_once(&f_once, read_env);
  f_init = f_call = f_async = f_hang = 0;
}

EXPORT int gpa_sim_nccl_live_comms(void) {
  int n = 0;
  pthread_mutex_lock(&g_mu);
  for (group *g = g_groups; g; g = g->next) n += g->alive;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* ---- small things ------------------------------------------------------------ */

static ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ncclResult_t fail(ncclComm_t c, ncclResult_t r, const char *fmt, ...) {
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
  pthread_mutex_lock(&g_mu);
  snprintf(copy, sizeof copy, "%s", c->last[0] ? c->last : t_last);
  pthread_mutex_unlock(&g_mu);
  return copy;
}

EXPORT ncclResult_t ncclGetVersion(int *v) {
  if (!v) return ncclInvalidArgument;
  *v = NCCL_VERSION(2, 28, 0);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: %s", "NULL id");
  static atomic_ullong counter;
  memset(id, 0, sizeof *id);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  unsigned long long v[3] = {(unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30),
                             atomic_fetch_add(&counter, 1) + 1, (unsigned long long)(uintptr_t)&counter};
  memcpy(id->internal, "gpa-sim-nccl-id", 16);
  memcpy(id->internal + 16, v, sizeof v);
  return ncclSuccess;
}

/* ---- communicators ----------------------------------------------------------- */

static void group_release_locked(group *g);
static void fail_group_locked(group *g, int rank, const char *why);
static void unref_locked(ncclComm_t c) {
  if (--c->refs) return;
  group *g = c->g;
  g->rank[c->rank] = NULL;
  free(c);
  --g->alive;
  group_release_locked(g);
}

/* Frees g once nobody uses it: no rank alive, and (a failed init) every
 * rank came, so that none arrives at a freed group. Under g_mu. */
static void group_release_locked(group *g) {
  if (g->alive || (g->failed && g->arrived < g->nranks)) return;
  for (int s = 0; s < g->nranks; s++)
    for (int d = 0; d < g->nranks; d++)
      for (msg *m = g->box[s][d], *n; m; m = n) {
        n = m->next;
        free(m);
      }
  for (group **pp = &g_groups; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      break;
    }
  free(g);
}

/* Waits (under g_mu) until every rank of c's group joined; false if c was
 * aborted meanwhile. */
static bool wait_joined(ncclComm_t c) {
  while (c->g->joined < c->g->nranks && !c->aborted && !c->g->failed) pthread_cond_wait(&g_cv, &g_mu);
  return !c->aborted && !c->g->failed;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  if (!out) return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: %s", "NULL comm");
  *out = NULL;
  if (nranks < 1 || nranks > MAXR)
    return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: nranks %d (1 to 64 in the simulator)", nranks);
  if (rank < 0 || rank >= nranks)
    return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: rank %d outside [0, %d)", rank, nranks);
  if (memcmp(id.internal, "gpa-sim-nccl-id", 16))
    return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: %s", "not a unique id of ncclGetUniqueId");
  bool fault = take(&f_init);
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) return fail(NULL, ncclSystemError, "ncclCommInitRank: %s", "out of host memory");
  pthread_mutex_lock(&g_mu);
  group *g = g_groups;
  while (g && memcmp(&g->id, &id, sizeof id)) g = g->next;
  ncclResult_t r = ncclSuccess;
  if (g && g->nranks != nranks)
    r = fail(NULL, ncclInvalidUsage, "ncclCommInitRank: nranks %d differs from the other ranks' %d", nranks, g->nranks);
  else if (g && g->rank[rank])
    r = fail(NULL, ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice", rank);
  else if (!g && !(g = calloc(1, sizeof *g)))
    r = fail(NULL, ncclSystemError, "ncclCommInitRank: %s", "out of host memory");
  if (r != ncclSuccess) {
    pthread_mutex_unlock(&g_mu);
    free(c);
    return r;
  }
  if (!g->nranks) {
    g->id = id;
    g->nranks = nranks;
    g->next = g_groups;
    g_groups = g;
  }
  g->arrived++;
  if (fault || g->failed) {
    /* the peers waiting, and those still to come, fail too (NCCL's would
     * wait for its bootstrap timeout) */
    if (fault) fail_group_locked(g, rank, "injected init failure");
    r = fail(NULL, ncclSystemError, "ncclCommInitRank: %s (rank %d)",
             fault ? "injected init failure" : "another rank's init failed", rank);
    group_release_locked(g);
    pthread_mutex_unlock(&g_mu);
    free(c);
    return r;
  }
  c->g = g;
  c->rank = rank;
  c->nranks = nranks;
  c->refs = 1;
  g->rank[rank] = c;
  g->joined++;
  g->alive++;
  pthread_cond_broadcast(&g_cv);
  *out = c;
  if (t_group_depth > 0 && t_n_pending < MAXR) {
    t_pending[t_n_pending++] = c; /* ncclGroupEnd waits */
    pthread_mutex_unlock(&g_mu);
    return ncclSuccess;
  }
  bool ok = wait_joined(c);
  if (!ok) {
    *out = NULL;
    c->user_gone = true;
    unref_locked(c);
  }
  pthread_mutex_unlock(&g_mu);
  return ok ? ncclSuccess : fail(NULL, ncclSystemError, "ncclCommInitRank: another rank's init failed (rank %d)", rank);
}

EXPORT ncclResult_t ncclGroupStart(void) {
  t_group_depth++;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
  if (t_group_depth <= 0) return fail(NULL, ncclInvalidUsage, "ncclGroupEnd: %s", "without ncclGroupStart");
  if (--t_group_depth) return ncclSuccess;
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < t_n_pending; i++)
    if (!wait_joined(t_pending[i])) r = ncclSystemError;
  t_n_pending = 0;
  pthread_mutex_unlock(&g_mu);
  return r == ncclSuccess ? r : fail(NULL, r, "ncclGroupEnd: %s", "a communicator was aborted during init");
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
  pthread_mutex_lock(&g_mu);
  *e = c->async;
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}

/* Marks the group failed for every rank still waiting (under g_mu). */
static void fail_group_locked(group *g, int rank, const char *why) {
  if (!g->failed) {
    g->failed = true;
    snprintf(g->fail_why, sizeof g->fail_why, "rank %d: %s", rank, why);
  }
  pthread_cond_broadcast(&g_cv);
}

static ncclResult_t drop_user(ncclComm_t c, bool abort) {
  if (!c) return fail(NULL, ncclInvalidArgument, "ncclComm%s: NULL communicator", abort ? "Abort" : "Destroy");
  pthread_mutex_lock(&g_mu);
  if (abort) {
    c->aborted = true;
    if (!c->async) c->async = ncclSystemError;
    fail_group_locked(c->g, c->rank, "aborted (ncclCommAbort)");
  }
  c->user_gone = true;
  unref_locked(c);
  pthread_mutex_unlock(&g_mu);
  return ncclSuccess;
}

/* Destroy waits for the communicator's queued work on the streams, as
 * NCCL's does: the last step frees it. */
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) { return drop_user(c, false); }
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) { return drop_user(c, true); }
EXPORT ncclResult_t ncclCommFinalize(ncclComm_t c) { return c ? ncclSuccess : ncclInvalidArgument; }

/* ---- reductions (the LOCAL transport's order and rounding: comm/reduce.c) ---- */

static size_t dsize(int dt) { return dt == ncclFloat16 || dt == ncclBfloat16 ? 2 : 4; }

static float widen(int dt, const void *src, size_t i) {
  if (dt == ncclFloat32) return ((const float *)src)[i];
  if (dt == ncclFloat16) return gpa__f16_to_f32(((const uint16_t *)src)[i]);
  return gpa__bf16_to_f32(((const uint16_t *)src)[i]);
}

static float fop(int op, float a, float b) {
  if (op == ncclMax) return a != a ? a : b != b ? b : a > b ? a : b; /* NaN wins */
  if (op == ncclMin) return a != a ? a : b != b ? b : a < b ? a : b;
  return a + b;
}

static int32_t iop(int op, int32_t a, int32_t b) {
  if (op == ncclMax) return a > b ? a : b;
  if (op == ncclMin) return a < b ? a : b;
  return (int32_t)((uint32_t)a + (uint32_t)b);
}

/* acc (f32, or i32 for i32) = op over the ranks' src + off, in rank order */
static void reduce_block(const post *p, int n, size_t off, void *acc) {
  const post *o = &p[0];
  size_t cnt = o->count;
  int op = o->op == ncclAvg ? ncclSum : o->op;
  for (int r = 0; r < n; r++) {
    const char *src = (const char *)p[r].send + off;
    for (size_t i = 0; i < cnt; i++) {
      if (o->dtype == ncclInt32) {
        int32_t v = ((const int32_t *)src)[i];
        ((int32_t *)acc)[i] = r ? iop(op, ((int32_t *)acc)[i], v) : v;
      } else {
        float v = widen(o->dtype, src, i);
        ((float *)acc)[i] = r ? fop(op, ((float *)acc)[i], v) : v;
      }
    }
  }
}

static void store(int dt, void *dst, const void *acc, size_t cnt, float scale) {
  if (dt == ncclInt32 || (dt == ncclFloat32 && scale == 1.0f)) {
    memmove(dst, acc, cnt * 4);
    return;
  }
  const float *a = acc;
  for (size_t i = 0; i < cnt; i++) {
    float v = a[i] * scale;
    if (dt == ncclFloat32) ((float *)dst)[i] = v;
    else if (dt == ncclFloat16) ((uint16_t *)dst)[i] = gpa__f32_to_f16(v);
    else ((uint16_t *)dst)[i] = gpa__f32_to_bf16(v);
  }
}

static bool same(const post *x, const post *y) {
  if (x->kind != y->kind || x->dtype != y->dtype || x->count != y->count) return false;
  if (x->kind == K_ALLREDUCE || x->kind == K_REDUCE_SCATTER) return x->op == y->op;
  return x->kind != K_BROADCAST || x->root == y->root;
}

/* Every rank posted: compute every rank's result (under g_mu). Inputs go
 * to temporaries first, so in-place forms need no care. */
static ncclResult_t compute(const post *p, int n, char *why, size_t cap) {
  for (int r = 1; r < n; r++)
    if (!same(&p[0], &p[r])) {
      snprintf(why, cap, "the ranks issued different collectives (rank 0: %s count %zu dtype %d; rank %d: %s count %zu dtype %d)",
               kind_names[p[0].kind], p[0].count, p[0].dtype, r, kind_names[p[r].kind], p[r].count, p[r].dtype);
      return ncclInvalidUsage;
    }
  const post *o = &p[0];
  size_t cnt = o->count, blk = cnt * dsize(o->dtype);
  if (!cnt) return ncclSuccess;
  bool reduces = o->kind == K_ALLREDUCE || o->kind == K_REDUCE_SCATTER;
  size_t tmp_bytes = reduces ? (o->kind == K_REDUCE_SCATTER ? (size_t)n : 1) * cnt * 4
                             : (o->kind == K_ALLGATHER ? (size_t)n : 1) * blk;
  char *tmp = malloc(tmp_bytes);
  if (!tmp) {
    snprintf(why, cap, "out of host memory (%zu bytes)", tmp_bytes);
    return ncclSystemError;
  }
  float scale = o->op == ncclAvg ? 1.0f / (float)n : 1.0f;
  switch (o->kind) {
    case K_ALLREDUCE:
      reduce_block(p, n, 0, tmp);
      for (int r = 0; r < n; r++) store(o->dtype, p[r].recv, tmp, cnt, scale);
      break;
    case K_REDUCE_SCATTER:
      for (int b = 0; b < n; b++) reduce_block(p, n, (size_t)b * blk, tmp + (size_t)b * cnt * 4);
      for (int b = 0; b < n; b++) store(o->dtype, p[b].recv, tmp + (size_t)b * cnt * 4, cnt, scale);
      break;
    case K_ALLGATHER:
      for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * blk, p[r].send, blk);
      for (int r = 0; r < n; r++) memcpy(p[r].recv, tmp, (size_t)n * blk);
      break;
    default: /* broadcast */
      memcpy(tmp, p[o->root].send, blk);
      for (int r = 0; r < n; r++) memcpy(p[r].recv, tmp, blk);
      break;
  }
  free(tmp);
  return ncclSuccess;
}

/* ---- steps on the streams ---------------------------------------------------- */

typedef struct step {
  ncclComm_t c;
  post p;
  uint64_t seq;
  int peer;
  bool async_fault, hang;
} step;

static void step_free(void *arg) {
  step *s = arg;
  pthread_mutex_lock(&g_mu);
  unref_locked(s->c);
  pthread_mutex_unlock(&g_mu);
  free(s);
}

static void set_async(ncclComm_t c, ncclResult_t r, const char *why) {
  if (!c->async) c->async = r;
  snprintf(c->last, sizeof c->last, "%s", why);
}

/* The group failed or c was aborted: give up (under g_mu). */
static bool give_up(step *s) {
  ncclComm_t c = s->c;
  if (c->aborted) {
    set_async(c, ncclSystemError, "the communicator was aborted");
    return true;
  }
  if (c->g->failed) {
    char why[200];
    snprintf(why, sizeof why, "%s: a peer failed: %s", kind_names[s->p.kind], c->g->fail_why);
    set_async(c, ncclRemoteError, why);
    return true;
  }
  return false;
}

static void run_collective(step *s) {
  ncclComm_t c = s->c;
  group *g = c->g;
  if (s->hang) { /* a hung rank: never posts, waits until aborted */
    while (!c->aborted) pthread_cond_wait(&g_cv, &g_mu);
    give_up(s);
    return;
  }
  if (s->async_fault) {
    char why[160];
    snprintf(why, sizeof why, "%s: injected asynchronous failure on rank %d", kind_names[s->p.kind], c->rank);
    set_async(c, ncclSystemError, why);
    fail_group_locked(g, c->rank, why);
    return;
  }
  slot *sl = &g->s[s->seq % SLOTS];
  /* the slot is free once every rank left its previous collective */
  while (sl->posted && sl->seq != s->seq && !give_up(s)) pthread_cond_wait(&g_cv, &g_mu);
  if (c->aborted || g->failed) {
    give_up(s);
    return;
  }
  if (!sl->posted) {
    memset(sl, 0, sizeof *sl);
    sl->seq = s->seq;
  }
  sl->p[c->rank] = s->p;
  sl->has[c->rank] = true;
  if (++sl->posted == c->nranks) {
    sl->result = compute(sl->p, c->nranks, sl->why, sizeof sl->why);
    sl->done = true;
    pthread_cond_broadcast(&g_cv);
  }
  while (!sl->done && !give_up(s)) pthread_cond_wait(&g_cv, &g_mu);
  if (sl->done && sl->result != ncclSuccess) set_async(c, sl->result, sl->why);
  if (sl->done || !sl->has[c->rank]) {
    sl->has[c->rank] = false;
    if (--sl->posted == 0) pthread_cond_broadcast(&g_cv);
  }
}

static void run_p2p(step *s) {
  ncclComm_t c = s->c;
  group *g = c->g;
  size_t bytes = s->p.count * dsize(s->p.dtype);
  if (s->p.kind == K_SEND) {
    msg *m = malloc(sizeof *m + bytes);
    if (!m) {
      set_async(c, ncclSystemError, "ncclSend: out of host memory");
      return;
    }
    m->next = NULL;
    m->bytes = bytes;
    m->dtype = s->p.dtype;
    if (bytes) memcpy(m->data, s->p.send, bytes);
    msg **tail = &g->box_tail[c->rank][s->peer];
    if (*tail) (*tail)->next = m;
    else g->box[c->rank][s->peer] = m;
    *tail = m;
    pthread_cond_broadcast(&g_cv);
    return;
  }
  msg **head = &g->box[s->peer][c->rank];
  while (!*head && !give_up(s)) pthread_cond_wait(&g_cv, &g_mu);
  msg *m = *head;
  if (!m) return;
  if (!(*head = m->next)) g->box_tail[s->peer][c->rank] = NULL;
  if (m->bytes != bytes || m->dtype != s->p.dtype)
    set_async(c, ncclInvalidUsage, "ncclRecv: the matching ncclSend has another count or dtype");
  else if (bytes) memcpy(s->p.recv, m->data, bytes);
  free(m);
}

static int step_run(void *arg, char *why, size_t n) {
  (void)why;
  (void)n;
  step *s = arg;
  pthread_mutex_lock(&g_mu);
  if (!give_up(s)) {
    if (s->p.kind == K_SEND || s->p.kind == K_RECV) run_p2p(s);
    else run_collective(s);
  }
  pthread_mutex_unlock(&g_mu);
  return 0; /* NCCL's failures are the communicator's, never the context's */
}

static ncclResult_t check_buf(ncclComm_t c, const char *api, const char *what, const void *p, size_t bytes) {
  if (!bytes) return ncclSuccess;
  char why[160];
  if (!p) return fail(c, ncclInvalidArgument, "%s: NULL buffer", api);
  if (!gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)p, bytes, why, sizeof why)) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s buffer: %s", api, what, why);
    return fail(c, ncclInvalidArgument, "%s", msg);
  }
  return ncclSuccess;
}

static ncclResult_t enqueue(ncclComm_t c, post p, int peer, cudaStream_t stream) {
  const char *api = kind_names[p.kind];
  if (!c) return fail(NULL, ncclInvalidArgument, "%s: NULL communicator", api);
  if (p.dtype != ncclFloat32 && p.dtype != ncclFloat16 && p.dtype != ncclBfloat16 && p.dtype != ncclInt32)
    return fail(c, ncclInvalidArgument, "%s: datatype %d (the simulator has f32, f16, bf16, i32)", api, p.dtype);
  bool reduces = p.kind == K_ALLREDUCE || p.kind == K_REDUCE_SCATTER;
  if (reduces && (p.op < ncclSum || p.op > ncclAvg || p.op == ncclProd))
    return fail(c, ncclInvalidArgument, "%s: reduction op %d (the simulator has sum, max, min, avg)", api, p.op);
  if (reduces && p.op == ncclAvg && p.dtype == ncclInt32)
    return fail(c, ncclInvalidArgument, "%s: avg of int32", api);
  if ((p.kind == K_BROADCAST && (p.root < 0 || p.root >= c->nranks)) ||
      ((p.kind == K_SEND || p.kind == K_RECV) && (peer < 0 || peer >= c->nranks || peer == c->rank)))
    return fail(c, ncclInvalidArgument, "%s: root or peer %d out of range", api, p.kind == K_BROADCAST ? p.root : peer);
  size_t blk = p.count * dsize(p.dtype), n = (size_t)c->nranks;
  size_t sb = p.kind == K_RECV ? 0 : p.kind == K_REDUCE_SCATTER ? n * blk : blk;
  size_t rb = p.kind == K_SEND ? 0 : p.kind == K_ALLGATHER ? n * blk : blk;
  if (p.kind == K_BROADCAST && c->rank != p.root) sb = 0; /* read on the root only */
  ncclResult_t r;
  if ((r = check_buf(c, api, "send", p.send, sb)) || (r = check_buf(c, api, "recv", p.recv, rb))) return r;
  if (take(&f_call)) return fail(c, ncclSystemError, "%s: injected failure at the call", api);
  step *s = calloc(1, sizeof *s);
  if (!s) return fail(c, ncclSystemError, "%s: out of host memory", api);
  s->p = p;
  s->peer = peer;
  s->async_fault = p.kind != K_SEND && p.kind != K_RECV && take(&f_async);
  s->hang = !s->async_fault && p.kind != K_SEND && p.kind != K_RECV && take(&f_hang);
  pthread_mutex_lock(&g_mu);
  if (c->user_gone) {
    pthread_mutex_unlock(&g_mu);
    free(s);
    return fail(NULL, ncclInvalidUsage, "%s: the communicator was destroyed", api);
  }
  s->c = c;
  c->refs++;
  if (p.kind != K_SEND && p.kind != K_RECV) s->seq = c->seq++;
  pthread_mutex_unlock(&g_mu);
  CUresult cr = gpa_sim__enqueue((CUstream)stream, step_run, s, step_free);
  if (cr != CUDA_SUCCESS) {
    /* gpa_sim__enqueue frees nothing on failure: undo the reference */
    step_free(s);
    return fail(c, ncclUnhandledCudaError, "%s: the stream refused the work (CUresult %d)", api, (int)cr);
  }
  return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                  ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_ALLREDUCE, dt, op, 0, count, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt,
                                      ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_REDUCE_SCATTER, dt, op, 0, recvcount, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t dt, ncclComm_t c,
                                  cudaStream_t st) {
  return enqueue(c, (post){K_ALLGATHER, dt, 0, 0, sendcount, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                                  ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_BROADCAST, dt, 0, root, count, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t c,
                             cudaStream_t st) {
  return enqueue(c, (post){K_SEND, dt, 0, 0, count, send, NULL}, peer, st);
}

EXPORT ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_RECV, dt, 0, 0, count, NULL, recv}, peer, st);
}
