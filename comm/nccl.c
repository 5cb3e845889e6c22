/* The NCCL engine: collectives of cuda (and sim) actors.
 *
 * Overview. libnccl.so.2 (or GPA_NCCL, or the simulator's subset on sim
 * actors: backends/coll.h) is opened per communicator with dlopen and its
 * entry points resolved into a table (comm/nccl_abi.h). A collective's turn
 * on the actor thread is one NCCL call on its queue's stream followed by the
 * backend's fence: the queue is not parked, the stream orders the
 * collective with the ops before and after it, and the handle completes
 * through the backend like any op. Its settle hook (comm.c) then gives the
 * status: NCCL reports failures asynchronously (ncclCommGetAsyncError), and
 * a collective that completes on a failed communicator has failed.
 *
 * A watchdog thread per communicator does what nobody waiting on a stream
 * can: while collectives are in flight it looks every millisecond for
 * NCCL's asynchronous error, for the earliest deadline (the communicator's
 * timeout) and for the actor's shutdown, and on any of them marks the
 * communicator failed and calls ncclCommAbort, which ends NCCL's waiting
 * kernels so that the streams move on and every handle completes (NCCL's
 * documented way out of a hung peer). Every NCCL call on the communicator
 * is made under its mutex, so none races the abort, and none is made after
 * it (the handle is gone then).
 *
 * Init. NCCL's init uses the calling thread's current device, so it is
 * started on the actor thread (a call message). From NCCL 2.14 on it is
 * non-blocking (ncclCommInitRankConfig, config.blocking = 0): the call
 * returns at once and the actor goes on with its queues, while the thread
 * in gpa_comm_init polls ncclCommGetAsyncError (ncclInProgress: still
 * joining) with sleeps that grow to a millisecond, until every rank is
 * ready, one failed, the communicator's timeout passed (ETIMEDOUT) or an
 * actor shuts down (ESHUTDOWN); on the last three every rank not ready is
 * ended with ncclCommAbort. Older NCCL: ncclCommInitRank, which blocks the
 * actor thread until every rank joined, with no timeout. gpa_comm_init_all
 * starts every rank's init on its actor before waiting for any: one thread
 * per device, NCCL's other way besides group calls. On a non-blocking
 * communicator a collective call may answer ncclInProgress too (NCCL still
 * enqueuing it): enqueue waits for the state to settle before it fences.
 * Ranks of one process share NCCL's unique id through a table keyed by the
 * id's token, made by the first rank to join; ranks in several processes
 * need an id that carries it (gpa_comm_id_make_nccl). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/bufcache.h"
#include "backends/coll.h"
#include "comm/comm_id.h"
#include "comm/comm_internal.h"
#include "comm/nccl_abi.h"

/* where an id carries NCCL's unique id (gpa_comm_id_make_nccl) */
#define UID_FLAG_OFF 40
#define UID_OFF 64
_Static_assert(UID_OFF + sizeof(gpa__ncclUniqueId) <= GPA_COMM_ID_BYTES, "the unique id fits the id");

typedef struct nccl_state {
  gpa__nccl_api api;
  gpa__ncclComm_t nc;
  pthread_mutex_t mu; /* every NCCL call on nc; the fields below */
  pthread_cond_t cv;
  pthread_t watchdog;
  bool has_watchdog, quit, dead; /* dead: nc aborted (the handle is gone) */
  bool nonblocking;              /* nc made with config.blocking = 0 */
  uint32_t inflight;
  gpa__coll *head; /* in flight, by deadline order of submission */
} nccl_state;

/* ---- loading -------------------------------------------------------------------- */

static bool load(gpa__nccl_api *api, const char *path, char *why, size_t cap) {
  memset(api, 0, sizeof *api);
  /* never unloaded: NCCL ends a non-blocking communicator on a thread of
   * its own after ncclCommDestroy/Abort returned (ncclInProgress), so its
   * code must outlive our last call into it */
  api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!api->lib) {
    const char *e = dlerror();
    snprintf(why, cap, "cannot load %s (%s)", path, e ? e : "dlopen failed");
    return false;
  }
  void *fn;
#define GPA__NCCL_RESOLVE(ret, name, args)          \
  if (!(fn = dlsym(api->lib, #name))) {             \
    snprintf(why, cap, "%s lacks %s", path, #name); \
    goto bad;                                       \
  }                                                 \
  memcpy(&api->name, &fn, sizeof fn);
  GPA__NCCL_API(GPA__NCCL_RESOLVE)
#undef GPA__NCCL_RESOLVE
  if (api->ncclGetVersion(&api->version) != GPA__NCCL_SUCCESS || api->version < GPA__NCCL_MIN_VERSION) {
    snprintf(why, cap, "%s is NCCL version code %d, older than %d (2.10: bf16, avg)", path, api->version,
             GPA__NCCL_MIN_VERSION);
    goto bad;
  }
  /* non-blocking init from 2.14 (older: the blocking one, no timeout) */
  if (api->version >= GPA__NCCL_CONFIG_VERSION && (fn = dlsym(api->lib, "ncclCommInitRankConfig")))
    memcpy(&api->ncclCommInitRankConfig, &fn, sizeof fn);
  return true;
bad:
  dlclose(api->lib);
  memset(api, 0, sizeof *api);
  return false;
}

static const char *backend_nccl(gpa_actor *a, char *why, size_t cap) {
  if (!gpa__cu_nccl_path || !gpa__cu_stream_of) {
    snprintf(why, cap, "this build has no cuda backend");
    return NULL;
  }
  return gpa__cu_nccl_path(a->bctx);
}

/* NCCL's last error on nc when there is one (the specific text), else its
 * text for r. */
static void nccl_text(const gpa__nccl_api *api, gpa__ncclComm_t nc, gpa__ncclResult_t r, char *buf, size_t cap) {
  const char *last = api->ncclGetLastError(nc);
  if (last && last[0]) snprintf(buf, cap, "%s (NCCL result %d)", last, r);
  else snprintf(buf, cap, "%s", api->ncclGetErrorString(r));
}

gpa_status gpa_comm_id_make_nccl(gpa_actor *a, gpa_comm_id *out) {
  if (!a || !out) return gpa__fail(GPA_EINVAL, "gpa_comm_id_make_nccl: NULL argument");
  if (!strcmp(a->be->name, "cpu"))
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_id_make_nccl: NCCL runs on cuda actors, this one is cpu");
  gpa_status st = gpa_comm_id_make(out);
  if (st != GPA_OK) return st;
  char why[256];
  const char *path = backend_nccl(a, why, sizeof why);
  gpa__nccl_api api;
  if (!path || !load(&api, path, why, sizeof why))
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_id_make_nccl: NCCL unavailable: %s", why);
  gpa__ncclUniqueId uid;
  gpa__ncclResult_t r = api.ncclGetUniqueId(&uid);
  if (r != GPA__NCCL_SUCCESS) nccl_text(&api, NULL, r, why, sizeof why);
  dlclose(api.lib);
  if (r != GPA__NCCL_SUCCESS) return gpa__fail(GPA_EDEVICE, "gpa_comm_id_make_nccl: ncclGetUniqueId: %s", why);
  out->bytes[UID_FLAG_OFF] = 'N';
  memcpy(out->bytes + UID_OFF, &uid, sizeof uid);
  return GPA_OK;
}

gpa_status gpa__comm_nccl_across_processes(gpa_actor *a, const char *what) {
  if (!strcmp(a->be->name, "cpu"))
    return gpa__fail(GPA_EUNSUPPORTED, "%s: NCCL runs on cuda actors, this one is cpu", what);
  char why[256];
  const char *path = backend_nccl(a, why, sizeof why);
  gpa__nccl_api api;
  if (!path || !load(&api, path, why, sizeof why)) return gpa__fail(GPA_EUNSUPPORTED, "%s: NCCL unavailable: %s", what, why);
  /* the simulator's subset (sim/nccl) spans the processes of one machine
   * too (its groups in shared memory) */
  dlclose(api.lib);
  return GPA_OK;
}

/* ---- unique ids of ranks in one process ---------------------------------------- */

typedef struct uid_entry {
  struct uid_entry *next;
  unsigned char token[GPA__COMM_TOKEN_BYTES];
  gpa__ncclUniqueId uid;
  int32_t left; /* ranks still to take it */
} uid_entry;

static pthread_mutex_t uid_lock = PTHREAD_MUTEX_INITIALIZER;
static uid_entry *uids;

/* The unique id for id's ranks of this process: carried by the id, else
 * made by the first of them (the last one to take it drops the entry). */
static gpa_status unique_id(const gpa__nccl_api *api, const gpa_comm_id *id, int32_t size, gpa__ncclUniqueId *out,
                            char *why, size_t cap) {
  if (id->bytes[UID_FLAG_OFF] == 'N') {
    memcpy(out, id->bytes + UID_OFF, sizeof *out);
    return GPA_OK;
  }
  const unsigned char *tok = id->bytes + GPA__COMM_TOKEN_OFF;
  gpa_status st = GPA_OK;
  pthread_mutex_lock(&uid_lock);
  uid_entry **pp = &uids;
  while (*pp && memcmp((*pp)->token, tok, GPA__COMM_TOKEN_BYTES)) pp = &(*pp)->next;
  uid_entry *e = *pp;
  if (!e) {
    gpa__ncclResult_t r;
    if (!(e = calloc(1, sizeof *e))) {
      snprintf(why, cap, "out of host memory");
      st = GPA_ENOMEM;
    } else if ((r = api->ncclGetUniqueId(&e->uid)) != GPA__NCCL_SUCCESS) {
      nccl_text(api, NULL, r, why, cap);
      free(e);
      st = GPA_EDEVICE;
    } else {
      memcpy(e->token, tok, sizeof e->token);
      e->left = size;
      e->next = uids;
      uids = e;
      pp = &uids;
    }
  }
  if (st == GPA_OK) {
    *out = e->uid;
    if (--e->left <= 0) {
      *pp = e->next;
      free(e);
    }
  }
  pthread_mutex_unlock(&uid_lock);
  return st;
}

/* ---- the watchdog ------------------------------------------------------------------ */

/* Marks c failed with st and aborts NCCL's communicator (under s->mu). */
static void fail_locked(gpa_comm *c, nccl_state *s, gpa_status st, const char *why) {
  gpa__comm_fail(c, st, why);
  if (!s->dead) {
    s->dead = true;
    s->api.ncclCommAbort(s->nc);
  }
}

static void *watchdog(void *arg) {
  gpa_comm *c = arg;
  nccl_state *s = c->es;
  pthread_mutex_lock(&s->mu);
  while (!s->quit) {
    if (!s->inflight || s->dead) {
      pthread_cond_wait(&s->cv, &s->mu);
      continue;
    }
    char why[256];
    gpa__ncclResult_t err = GPA__NCCL_SUCCESS;
    int64_t now = gpa__now_ns(), dl = 0;
    for (gpa__coll *p = s->head; p; p = p->next)
      if (p->deadline && (!dl || p->deadline < dl)) dl = p->deadline;
    if (atomic_load_explicit(&c->a->stopping, memory_order_acquire)) {
      snprintf(why, sizeof why, "the actor of rank %d shut down with NCCL collectives in flight", c->rank);
      fail_locked(c, s, GPA_ECANCELED, why);
    } else if (dl && now >= dl) {
      snprintf(why, sizeof why, "a collective on rank %d of %d waited %lld ms for its peers (the communicator's timeout)",
               c->rank, c->size, (long long)(c->timeout_ns / 1000000));
      fail_locked(c, s, GPA_ETIMEDOUT, why);
    } else if (s->api.ncclCommGetAsyncError(s->nc, &err) == GPA__NCCL_SUCCESS && err != GPA__NCCL_SUCCESS &&
               err != GPA__NCCL_IN_PROGRESS) {
      char t[200];
      nccl_text(&s->api, s->nc, err, t, sizeof t);
      snprintf(why, sizeof why, "NCCL failed on rank %d: %s", c->rank, t);
      fail_locked(c, s, GPA_EDEVICE, why);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 1000000;
      if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- init ------------------------------------------------------------------------ */

typedef struct init_req {
  gpa_comm *c;
  gpa__ncclUniqueId uid;
} init_req;
_Static_assert(sizeof(init_req) <= GPA_OP_PARAMS_MAX, "an init request fits a message's params");

/* On the actor thread: its device is current there. Non-blocking where
 * NCCL has it: then the init goes on after this returns. */
static gpa_status init_fn(gpa_actor *a, gpa__msg *m) {
  (void)a;
  init_req *q = (init_req *)m->params;
  nccl_state *s = q->c->es;
  gpa__ncclResult_t r;
  s->nc = NULL;
  if (s->api.ncclCommInitRankConfig) {
    gpa__ncclConfig cfg = {sizeof cfg, GPA__NCCL_CONFIG_MAGIC, GPA__NCCL_CONFIG_VERSION, 0,
                           GPA__NCCL_CONFIG_UNDEF_INT};
    s->nonblocking = true;
    r = s->api.ncclCommInitRankConfig(&s->nc, q->c->size, q->uid, q->c->rank, &cfg);
    if (r == GPA__NCCL_IN_PROGRESS) r = GPA__NCCL_SUCCESS; /* gpa__comm_nccl_join_all waits */
  } else {
    r = s->api.ncclCommInitRank(&s->nc, q->c->size, q->uid, q->c->rank);
  }
  if (r == GPA__NCCL_SUCCESS) return GPA_OK;
  char t[112]; /* with the prefix, within the message text */
  nccl_text(&s->api, NULL, r, t, sizeof t);
  snprintf(m->err, sizeof m->err, "gpa_comm_init: %s (rank %d of %d): %s",
           s->nonblocking ? "ncclCommInitRankConfig" : "ncclCommInitRank", q->c->rank, q->c->size, t);
  if (s->nc) s->api.ncclCommAbort(s->nc); /* a non-blocking init may leave one to end */
  s->nc = NULL;
  return GPA_EDEVICE;
}

static void sleep_ns(int64_t ns) {
  nanosleep(&(struct timespec){(time_t)(ns / 1000000000), (long)(ns % 1000000000)}, NULL);
}

static bool actor_ending(const gpa_actor *a) {
  return atomic_load_explicit(&a->closing, memory_order_acquire) ||
         atomic_load_explicit(&a->stopping, memory_order_acquire);
}

/* The caller's thread, once every rank's non-blocking init started: looks
 * at each rank's state until all are ready, one failed, the communicator's
 * timeout passed or an actor is shutting down. Between looks it sleeps,
 * 20 us at first and twice as long each time up to 1 ms (a rank far behind
 * costs a thousand wake-ups a second, no core). On failure every rank's
 * NCCL communicator is aborted (those ready too: their peers are gone) and
 * why says which rank waited for what. */
static gpa_status wait_joined(gpa_comm **cs, int32_t n, char *why, size_t cap) {
  int64_t t0 = gpa__now_ns(), timeout = cs[0]->timeout_ns, dl = timeout > 0 ? t0 + timeout : 0, nap = 20000;
  bool ready[n];
  memset(ready, 0, sizeof ready);
  int32_t left = n;
  gpa_status st = GPA_OK;
  while (left) {
    for (int32_t i = 0; i < n && st == GPA_OK; i++) {
      if (ready[i]) continue;
      nccl_state *s = cs[i]->es;
      gpa__ncclResult_t e = GPA__NCCL_IN_PROGRESS;
      pthread_mutex_lock(&s->mu);
      gpa__ncclResult_t r = s->api.ncclCommGetAsyncError(s->nc, &e);
      if (r != GPA__NCCL_SUCCESS) e = r;
      if (e == GPA__NCCL_SUCCESS) {
        ready[i] = true;
        left--;
      } else if (e != GPA__NCCL_IN_PROGRESS) {
        char t[112];
        nccl_text(&s->api, s->nc, e, t, sizeof t);
        snprintf(why, cap, "gpa_comm_init: NCCL's init of rank %d of %d failed: %s", cs[i]->rank, cs[i]->size, t);
        st = GPA_EDEVICE;
      }
      pthread_mutex_unlock(&s->mu);
    }
    if (st != GPA_OK || !left) break;
    int32_t w = 0; /* a rank still waiting, to name */
    while (ready[w]) w++;
    for (int32_t i = 0; i < n && st == GPA_OK; i++)
      if (actor_ending(cs[i]->a)) {
        snprintf(why, cap, "gpa_comm_init: the actor of rank %d of %d shut down while NCCL's init waited for the "
                 "other ranks to join", cs[i]->rank, cs[i]->size);
        st = GPA_ESHUTDOWN;
      }
    int64_t now = gpa__now_ns();
    if (st == GPA_OK && dl && now >= dl) {
      snprintf(why, cap, "gpa_comm_init: rank %d of %d waited %lld ms for the other ranks to join NCCL's init "
               "(the communicator's timeout; %d of this process's %d ranks were ready)",
               cs[w]->rank, cs[w]->size, (long long)(timeout / 1000000), n - left, n);
      st = GPA_ETIMEDOUT;
    }
    if (st != GPA_OK) break;
    sleep_ns(dl && dl - now < nap ? dl - now : nap);
    if ((nap *= 2) > 1000000) nap = 1000000;
  }
  if (st != GPA_OK)
    for (int32_t i = 0; i < n; i++) {
      nccl_state *s = cs[i]->es;
      pthread_mutex_lock(&s->mu);
      if (s->nc) s->api.ncclCommAbort(s->nc);
      s->nc = NULL;
      s->dead = true;
      pthread_mutex_unlock(&s->mu);
    }
  return st;
}

static void state_free(nccl_state *s) {
  if (s->api.lib) dlclose(s->api.lib);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* c's state with NCCL loaded and the unique id in *req; no NCCL comm yet. */
static gpa_status prepare(gpa_comm *c, const gpa_comm_id *id, init_req *req) {
  char why[256];
  const char *path = backend_nccl(c->a, why, sizeof why);
  nccl_state *s = calloc(1, sizeof *s);
  if (!s) return gpa__fail(GPA_ENOMEM, "gpa_comm_init: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (!path || !load(&s->api, path, why, sizeof why)) {
    state_free(s);
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_init: collectives of %s actors go through NCCL, which is unavailable: %s",
                     c->a->be->name, why);
  }
  gpa_status st = unique_id(&s->api, id, c->size, &req->uid, why, sizeof why);
  if (st != GPA_OK) {
    state_free(s);
    return gpa__fail(st, "gpa_comm_init: ncclGetUniqueId: %s", why);
  }
  req->c = c;
  c->es = s;
  return GPA_OK;
}

static gpa_status start_watchdog(gpa_comm *c) {
  nccl_state *s = c->es;
  if (pthread_create(&s->watchdog, NULL, watchdog, c) != 0)
    return gpa__fail(GPA_ENOMEM, "gpa_comm_init: cannot start the NCCL watchdog thread");
  s->has_watchdog = true;
  return GPA_OK;
}

static void teardown(gpa_comm *c) {
  nccl_state *s = c->es;
  if (!s) return;
  if (s->has_watchdog) {
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->watchdog, NULL);
  }
  if (s->nc && !s->dead) {
    /* Success, or ncclInProgress on a non-blocking communicator: NCCL
     * finishes it in the background and the handle is not ours any more
     * (nothing to poll: ncclCommGetAsyncError would read freed memory).
     * Anything else is NCCL refusing a communicator that is not ready (an
     * asynchronous error since its last collective, say a peer that died
     * while it was idle: ncclCommEnsureReady), which it leaves alive: only
     * ncclCommAbort ends that one. */
    gpa__ncclResult_t r = s->api.ncclCommDestroy(s->nc);
    if (r != GPA__NCCL_SUCCESS && r != GPA__NCCL_IN_PROGRESS) {
      char t[200];
      nccl_text(&s->api, s->nc, r, t, sizeof t);
      gpa__log(GPA_LOG_WARN, c->a->opts.log_level, "gpa_comm_destroy: NCCL refused to destroy rank %d's communicator "
               "(%s); aborted it instead", c->rank, t);
      s->api.ncclCommAbort(s->nc);
    }
  }
  state_free(s);
  c->es = NULL;
}

/* Joins n ranks (one per actor of cs[]): every rank is prepared (NCCL
 * loaded, the unique id) before any init is sent, and every init is sent
 * before any is waited for, so ranks of one process meet. */
gpa_status gpa__comm_nccl_join_all(gpa_comm **cs, int32_t n, const gpa_comm_id *id) {
  gpa__msg *ms[n];
  init_req reqs[n];
  gpa_status st = GPA_OK;
  int32_t sent = 0, ready = 0;
  while (ready < n && (st = prepare(cs[ready], id, &reqs[ready])) == GPA_OK) ready++;
  if (st != GPA_OK) {
    for (int32_t i = 0; i < ready; i++) teardown(cs[i]);
    return st;
  }
  /* A send that fails now (the actor shutting down, out of memory) leaves
   * the inits already sent waiting for their peer: NCCL's to end. */
  for (int32_t i = 0; i < n && st == GPA_OK; i++) {
    gpa__msg *m = gpa__msg_new(cs[i]->a, GPA__MSG_CALL);
    if (!m) {
      st = GPA_ENOMEM;
      break;
    }
    m->fn = init_fn;
    memcpy(m->params, &reqs[i], sizeof reqs[i]); /* the payload would be freed with the message */
    if ((st = gpa__send(cs[i]->a, m)) != GPA_OK) {
      gpa__msg_unref(m);
      break;
    }
    ms[sent++] = m;
  }
  char why[GPA__ERR_MAX] = "";
  if (st != GPA_OK) snprintf(why, sizeof why, "%s", gpa_last_error_message());
  for (int32_t i = 0; i < sent; i++) {
    gpa_status r = gpa_await(ms[i], -1);
    if (r != GPA_OK && st == GPA_OK) {
      st = r;
      snprintf(why, sizeof why, "%s", gpa_handle_error_message(ms[i]));
    }
    gpa_handle_release(ms[i]);
  }
  /* every init started; the non-blocking ones (all or none: one library)
   * still join. A rank whose init failed at the call leaves the others to
   * be aborted by teardown. */
  if (st == GPA_OK && ((nccl_state *)cs[0]->es)->nonblocking) st = wait_joined(cs, n, why, sizeof why);
  for (int32_t i = 0; i < sent && st == GPA_OK; i++)
    if ((st = start_watchdog(cs[i])) != GPA_OK) snprintf(why, sizeof why, "%s", gpa_last_error_message());
  if (st != GPA_OK) {
    for (int32_t i = 0; i < n; i++) {
      /* never usable: abort (destroy would wait for peers that may never come) */
      nccl_state *s = cs[i]->es;
      if (s->nc && !s->dead) s->api.ncclCommAbort(s->nc);
      s->dead = true;
      teardown(cs[i]);
    }
    return gpa__fail(st, "%s", why);
  }
  return GPA_OK;
}

gpa_status gpa__comm_nccl_join(gpa_comm *c, const gpa_comm_id *id) { return gpa__comm_nccl_join_all(&c, 1, id); }

/* ---- collectives -------------------------------------------------------------------- */

static int nccl_dtype(int dtype) {
  switch (dtype) {
    case GPA_F16: return GPA__NCCL_F16;
    case GPA_BF16: return GPA__NCCL_BF16;
    case GPA_I32: return GPA__NCCL_INT32;
    default: return GPA__NCCL_F32;
  }
}

static int nccl_op(int op) {
  static const int ops[] = {GPA__NCCL_SUM, GPA__NCCL_AVG, GPA__NCCL_MAX, GPA__NCCL_MIN};
  return ops[op];
}

/* A call on a non-blocking communicator answered ncclInProgress: NCCL is
 * still enqueuing it (say, connecting to its peers on first use), and the
 * fence must wait until it is on the stream. The actor thread waits for the
 * state to leave ncclInProgress, sleeping between looks (2 us doubling to
 * 1 ms) with s->mu released so that the watchdog and gpa_comm_abort are not
 * held up, until the collective's deadline (then the communicator fails
 * with ETIMEDOUT) or the actor's shutdown. Called and returns with s->mu
 * held; GPA_OK: enqueued; else m->err says why. */
static gpa_status wait_enqueued(gpa_actor *a, gpa_comm *c, nccl_state *s, int64_t dl, gpa__msg *m) {
  const char *name = ((const char *const[]){"allreduce", "reduce_scatter", "allgather", "broadcast", "send",
                                             "recv"})[((gpa__coll *)m->params)->kind];
  char why[GPA__ERR_MAX];
  for (int64_t nap = 2000;; nap = nap * 2 > 1000000 ? 1000000 : nap * 2) {
    if (s->dead) {
      snprintf(m->err, sizeof m->err, "%s on rank %d: the communicator failed: %s", name, c->rank, c->why);
      return atomic_load(&c->failed) ? atomic_load(&c->failed) : GPA_ECLOSED;
    }
    gpa__ncclResult_t e = GPA__NCCL_IN_PROGRESS, r = s->api.ncclCommGetAsyncError(s->nc, &e);
    if (r != GPA__NCCL_SUCCESS) e = r;
    if (e == GPA__NCCL_SUCCESS) return GPA_OK;
    if (e != GPA__NCCL_IN_PROGRESS) {
      char t[150];
      nccl_text(&s->api, s->nc, e, t, sizeof t);
      snprintf(why, sizeof why, "NCCL failed on rank %d: %s", c->rank, t);
      fail_locked(c, s, GPA_EDEVICE, why);
      snprintf(m->err, sizeof m->err, "%s", why);
      return GPA_EDEVICE;
    }
    int64_t now = gpa__now_ns();
    if ((dl && now >= dl) || actor_ending(a)) {
      bool late = dl && now >= dl;
      if (late)
        snprintf(why, sizeof why, "%s on rank %d of %d: NCCL still enqueuing it after %lld ms (the communicator's "
                 "timeout)", name, c->rank, c->size, (long long)(c->timeout_ns / 1000000));
      else
        snprintf(why, sizeof why, "the actor of rank %d shut down while NCCL enqueued a collective", c->rank);
      fail_locked(c, s, late ? GPA_ETIMEDOUT : GPA_ECANCELED, why);
      snprintf(m->err, sizeof m->err, "%s", why);
      return late ? GPA_ETIMEDOUT : GPA_ECANCELED;
    }
    pthread_mutex_unlock(&s->mu);
    sleep_ns(dl && dl - now < nap ? dl - now : nap);
    pthread_mutex_lock(&s->mu);
  }
}

/* Actor thread: one NCCL call on the queue's stream, then the fence. */
static gpa_status enqueue(gpa_actor *a, gpa_comm *c, gpa__coll *p, gpa__msg *m) {
  nccl_state *s = c->es;
  void *stream = gpa__cu_stream_of(a->bctx, gpa__work_of(m).bq);
  int dt = nccl_dtype(p->dtype);
  int64_t dl = c->timeout_ns > 0 ? gpa__now_ns() + c->timeout_ns : 0;
  gpa__ncclResult_t r;
  pthread_mutex_lock(&s->mu);
  if (s->dead) {
    pthread_mutex_unlock(&s->mu);
    snprintf(m->err, sizeof m->err, "collective: the communicator failed: %s", c->why);
    return atomic_load(&c->failed) ? atomic_load(&c->failed) : GPA_ECLOSED;
  }
  switch (p->kind) {
    case GPA__COLL_ALLREDUCE:
      r = s->api.ncclAllReduce(p->send, p->recv, p->count, dt, nccl_op(p->op), s->nc, stream);
      break;
    case GPA__COLL_REDUCE_SCATTER:
      r = s->api.ncclReduceScatter(p->send, p->recv, p->count, dt, nccl_op(p->op), s->nc, stream);
      break;
    case GPA__COLL_ALLGATHER: r = s->api.ncclAllGather(p->send, p->recv, p->count, dt, s->nc, stream); break;
    case GPA__COLL_BROADCAST:
      r = s->api.ncclBroadcast(p->send, p->recv, p->count, dt, p->peer, s->nc, stream);
      break;
    case GPA__COLL_SEND: r = s->api.ncclSend(p->send, p->count, dt, p->peer, s->nc, stream); break;
    default: r = s->api.ncclRecv(p->recv, p->count, dt, p->peer, s->nc, stream); break;
  }
  if (r == GPA__NCCL_IN_PROGRESS && s->nonblocking) {
    gpa_status st = wait_enqueued(a, c, s, dl, m);
    if (st != GPA_OK) {
      pthread_mutex_unlock(&s->mu);
      return st;
    }
    r = GPA__NCCL_SUCCESS;
  }
  if (r != GPA__NCCL_SUCCESS) {
    char t[112]; /* with the prefix, within the message text */
    nccl_text(&s->api, s->nc, r, t, sizeof t);
    pthread_mutex_unlock(&s->mu);
    snprintf(m->err, sizeof m->err, "NCCL on rank %d: %s", c->rank, t);
    return GPA_EDEVICE;
  }
  p->deadline = dl;
  p->next = s->head;
  s->head = p;
  s->inflight++;
  atomic_store_explicit(&p->state, GPA__COLL_FLIGHT, memory_order_relaxed);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  gpa__work w = gpa__work_of(m);
  return a->be->fence(a->bctx, &w);
}

/* Actor thread, as the collective completes: NCCL's verdict. */
static gpa_status settle(gpa_comm *c, gpa__coll *p, gpa__msg *m, gpa_status st) {
  nccl_state *s = c->es;
  pthread_mutex_lock(&s->mu);
  if (atomic_load_explicit(&p->state, memory_order_relaxed) == GPA__COLL_FLIGHT) {
    for (gpa__coll **pp = &s->head; *pp; pp = &(*pp)->next)
      if (*pp == p) {
        *pp = p->next;
        s->inflight--;
        break;
      }
    atomic_store_explicit(&p->state, GPA__COLL_DONE, memory_order_relaxed);
    gpa__ncclResult_t err = GPA__NCCL_SUCCESS;
    /* the stream passed the collective: an asynchronous error is its own */
    if (!s->dead && s->api.ncclCommGetAsyncError(s->nc, &err) == GPA__NCCL_SUCCESS && err != GPA__NCCL_SUCCESS &&
        err != GPA__NCCL_IN_PROGRESS) {
      char t[200], why[256];
      nccl_text(&s->api, s->nc, err, t, sizeof t);
      snprintf(why, sizeof why, "NCCL failed on rank %d: %s", c->rank, t);
      fail_locked(c, s, GPA_EDEVICE, why);
    }
    int32_t f = atomic_load_explicit(&c->failed, memory_order_acquire);
    if (f && st == GPA_OK) {
      st = f;
      snprintf(m->err, sizeof m->err, "collective on rank %d: the communicator failed: %s", c->rank, c->why);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

static void abort_comm(gpa_comm *c, gpa_status st, const char *why) {
  nccl_state *s = c->es;
  pthread_mutex_lock(&s->mu);
  fail_locked(c, s, st, why);
  pthread_mutex_unlock(&s->mu);
}

static void cancel(gpa_comm *c, gpa__coll *op) {
  (void)c;
  (void)op; /* a collective on a stream completes through it */
}

const gpa__comm_engine gpa__comm_nccl = {
    .name = "nccl", .cancel = cancel, .abort = abort_comm, .destroy = teardown, .enqueue = enqueue, .settle = settle};
