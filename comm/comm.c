/* Communicators: init, destroy, abort, and the collective calls of any
 * thread (validation, then a message of gpa__coll_class). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/bufcache.h"
#include "actor/spin.h"
#include "comm/comm_id.h"
#include "comm/comm_internal.h"

static const char *const kind_names[] = {"gpa_allreduce", "gpa_reduce_scatter", "gpa_allgather",
                                         "gpa_broadcast", "gpa_send",           "gpa_recv"};

/* ---- failure and completion (engines, any thread) ------------------------ */

void gpa__comm_fail(gpa_comm *c, gpa_status st, const char *why) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  if (!atomic_load(&c->failed)) {
    snprintf(c->why, sizeof c->why, "%s", why);
    atomic_store_explicit(&c->failed, st, memory_order_release);
  }
  pthread_mutex_unlock(&lock);
}

void gpa__coll_done(gpa__coll *op, gpa_status st, const char *why) {
  op->status = st;
  if (st != GPA_OK) snprintf(op->m->err, sizeof op->m->err, "%s", why && why[0] ? why : gpa_strerror(st));
  atomic_store_explicit(&op->state, GPA__COLL_DONE, memory_order_release);
}

gpa_actor *gpa__coll_done_held(gpa__coll *op, gpa_status st, const char *why) {
  gpa_actor *a = op->c->a;
  /* before the state: whoever sees it done may go on to destroy the actor */
  atomic_fetch_add_explicit(&a->holds, 1, memory_order_relaxed);
  gpa__coll_done(op, st, why);
  return a;
}

static bool coll_ready(gpa_actor *a, gpa_queue *q, gpa__msg *m);

/* Unparks the queues whose collective has finished. */
static gpa_status wake_fn(gpa_actor *a, gpa__msg *m) {
  (void)m;
  for (gpa_queue *q = a->parked, *next; q; q = next) {
    next = q->s->parked_next;
    gpa__msg *h = gpa__queue_head(q);
    if (h && h->kind == GPA__MSG_EXT && h->cls == &gpa__coll_class && coll_ready(a, q, h)) gpa__queue_unpark(a, q);
  }
  return GPA_OK;
}

_Atomic int64_t gpa__coll_wake_pause_ns;
_Atomic uint64_t gpa__coll_wakes;

static void wake(gpa_actor *a) {
  /* The actor itself looks at its parked queues before it sleeps. */
  if (pthread_equal(pthread_self(), a->thread)) return;
  int64_t pause = atomic_load_explicit(&gpa__coll_wake_pause_ns, memory_order_relaxed);
  if (pause) nanosleep(&(struct timespec){pause / 1000000000, pause % 1000000000}, NULL);
  if (atomic_load_explicit(&a->closing, memory_order_acquire)) return; /* the shutdown cancels what is parked */
  gpa__msg *m = gpa__msg_new(a, GPA__MSG_CALL);
  if (!m) return; /* out of memory: a deadline, if any, still ends the wait */
  m->fn = wake_fn;
  gpa__send(a, m);
  gpa__msg_unref(m);
}

void gpa__coll_wake(gpa_actor *a, uint32_t holds) {
  wake(a);
  atomic_fetch_add_explicit(&gpa__coll_wakes, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&a->holds, holds, memory_order_release); /* a may be freed from here on */
}

/* ---- the message class (actor thread) ------------------------------------ */

static gpa__coll *params(gpa__msg *m) { return (gpa__coll *)m->params; }

static void *tensor_ptr(gpa_actor *a, const gpa_tensor *t) {
  return (char *)gpa__bufcache_slot(a->cache, t->buffer)->ptr + t->offset;
}

/* The actor, with nothing else to do, moves the collective itself (beside
 * the engine's progress thread, if it has one), so that the collective's
 * end costs no hand-off (on a machine with fewer cores than threads, a
 * thread that waits for the CPU is slower than one already on it). It
 * stops at the first message in its mailbox, at the collective's deadline,
 * or after GPA__COLL_POLL_NS (a peer far behind), and parks the queue. */
#define GPA__COLL_POLL_NS 100000000ll

static void poll_while_idle(gpa_actor *a, gpa_comm *c, gpa__coll *p) {
  int64_t t0 = gpa__now_ns(), stop = t0 + GPA__COLL_POLL_NS;
  if (p->deadline && p->deadline < stop) stop = p->deadline;
  for (uint32_t i = 1;; i++) {
    /* the progress thread may have finished it (its wake-up follows) */
    if (c->eng->poll(c, p) || atomic_load_explicit(&p->state, memory_order_acquire) == GPA__COLL_DONE) return;
    if ((i & 15) == 0) {
      if (!gpa__mailbox_empty(a) || atomic_load_explicit(&a->stopping, memory_order_relaxed)) return;
      if (gpa__now_ns() >= stop) return;
    }
    gpa__cpu_relax();
  }
}

static bool must_park(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  gpa__coll *p = params(m);
  int s = atomic_load_explicit(&p->state, memory_order_acquire);
  if (s == GPA__COLL_DONE) return false;
  if (s == GPA__COLL_FLIGHT) {
    q->s->park_on = p;
    q->s->park_deadline = p->deadline;
    return true;
  }
  if (m->status != GPA_OK || q->s->poison || a->cancelling) return false; /* runs to fail */
  gpa_comm *c = p->c;
  int32_t f = atomic_load_explicit(&c->failed, memory_order_acquire);
  if (f) {
    m->status = f;
    snprintf(m->err, sizeof m->err, "%s: the communicator failed: %s", kind_names[p->kind], c->why);
    return false;
  }
  uint32_t n = m->n_in + m->n_out;
  if (p->in_place) {
    /* one region: reduce_scatter's send, allgather's recv, else both */
    char *b = tensor_ptr(a, &m->t[0]);
    uint64_t blk = (uint64_t)c->rank * p->count * gpa_dtype_size(p->dtype);
    p->send = p->kind == GPA__COLL_ALLGATHER ? b + blk : b;
    p->recv = p->kind == GPA__COLL_REDUCE_SCATTER ? b + blk : b;
  } else {
    if (m->n_in) p->send = tensor_ptr(a, &m->t[0]);
    if (m->n_out) p->recv = tensor_ptr(a, &m->t[n - 1]);
  }
  if (c->eng->enqueue) return false; /* a device engine: run() puts it on the stream */
  atomic_store_explicit(&p->state, GPA__COLL_FLIGHT, memory_order_relaxed);
  p->deadline = c->timeout_ns > 0 ? gpa__now_ns() + c->timeout_ns : 0;
  gpa_status st = c->eng->start(c, p, m->err, sizeof m->err);
  if (st != GPA_OK) {
    atomic_store_explicit(&p->state, GPA__COLL_IDLE, memory_order_relaxed);
    m->status = st;
    return false;
  }
  if (c->eng->poll) poll_while_idle(a, c, p);
  if (atomic_load_explicit(&p->state, memory_order_acquire) == GPA__COLL_DONE) return false;
  q->s->park_on = p;
  q->s->park_deadline = p->deadline;
  return true;
}

static bool coll_ready(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  (void)a;
  (void)q;
  return atomic_load_explicit(&params(m)->state, memory_order_acquire) == GPA__COLL_DONE;
}

static void timed_out(gpa_actor *a, gpa_queue *q, gpa__msg *m) {
  (void)a;
  (void)q;
  gpa__coll *p = params(m);
  gpa_comm *c = p->c;
  c->eng->cancel(c, p);
  if (atomic_load_explicit(&p->state, memory_order_acquire) == GPA__COLL_DONE) {
    m->status = p->status; /* it finished as the deadline passed */
    return;
  }
  char why[160];
  snprintf(why, sizeof why, "%s on rank %d of %d waited %lld ms for its peers (the communicator's timeout)",
           kind_names[p->kind], c->rank, c->size, (long long)(c->timeout_ns / 1000000));
  gpa__coll_done(p, GPA_ETIMEDOUT, why);
  m->status = GPA_ETIMEDOUT;
  gpa__comm_fail(c, GPA_ETIMEDOUT, why);
  c->eng->abort(c, GPA_ETIMEDOUT, why);
}

static gpa_status run(gpa_actor *a, gpa__msg *m) {
  gpa__coll *p = params(m);
  if (p->c->eng->enqueue) {
    m->bytes = p->count * (p->kind == GPA__COLL_ALLGATHER ? (uint64_t)p->c->size : 1) * gpa_dtype_size(p->dtype);
    return p->c->eng->enqueue(a, p->c, p, m);
  }
  if (atomic_load_explicit(&p->state, memory_order_acquire) != GPA__COLL_DONE) {
    snprintf(m->err, sizeof m->err, "%s: ran before it finished (internal error)", kind_names[p->kind]);
    return GPA_EINTERNAL;
  }
  if (p->status != GPA_OK) return p->status;
  uint64_t n = p->count;
  if (p->kind == GPA__COLL_ALLGATHER) n *= (uint64_t)p->c->size;
  if (p->scale_after) gpa__comm_scale(p->dtype, p->recv, n, 1.0f / (float)p->c->size);
  m->bytes = n * gpa_dtype_size(p->dtype);
  return GPA_OK;
}

static bool finished(gpa_actor *a, gpa__msg *m, gpa_status st) {
  (void)a;
  (void)st;
  gpa__coll *p = params(m);
  /* Cancelled in flight (shutdown): the engine lets go of it first. */
  if (atomic_load_explicit(&p->state, memory_order_acquire) == GPA__COLL_FLIGHT) p->c->eng->cancel(p->c, p);
  atomic_fetch_sub_explicit(&p->c->outstanding, 1, memory_order_release);
  return false;
}

/* A collective the actor is done with (cancelled by a shutdown, timed out,
 * aborted) that MPI still runs: MPI cannot take a started collective back,
 * and a peer that comes late makes it write the receive buffer then. So
 * the buffers get new memory (a copy: the actor's view of them is as it
 * was) and the old blocks go to the engine, which frees them once MPI has
 * let go of them. Nothing then waits for MPI: not gpa_comm_destroy, not a
 * buffer's release or reuse, not the actor's shutdown (which frees the new
 * memory). Wrapped buffers (the caller's memory) and buffers held more
 * than once (gpa_buffer_lend's borrower holds the pointer) do not move:
 * they stay shared with MPI until the peers come (docs/collectives.md,
 * "Faults"). */
static void let_go(gpa_actor *a, gpa_comm *c, gpa__coll *p, gpa__msg *m) {
  int state = atomic_load_explicit(&p->state, memory_order_acquire);
  if (state == GPA__COLL_IDLE || (state == GPA__COLL_DONE && p->status == GPA_OK)) return; /* never started, or ran */
  if (state == GPA__COLL_FLIGHT) c->eng->cancel(c, p);
  void *old[2];
  size_t bytes[2];
  int n = 0;
  if (c->eng->held(c, p))
    for (uint32_t i = 0; i < m->n_in + m->n_out && i < 2; i++) {
      gpa__slot *s = gpa__bufcache_slot(a->cache, m->t[i].buffer);
      if (i == 1 && m->t[1].buffer == m->t[0].buffer) break; /* moved already */
      void *np = NULL;
      /* the caller's memory, or maybe lent out (a borrower holds the pointer) */
      if (s->external || s->refs > 1 || !s->ptr) continue;
      if (a->be->mem_alloc(a->bctx, s->capacity, &np) != GPA_OK) {
        gpa__log(GPA_LOG_WARN, a->opts.log_level,
                 "%s: no memory to move a buffer away from an abandoned MPI operation: it stays shared with MPI "
                 "until the peers come", kind_names[p->kind]);
        continue;
      }
      memcpy(np, s->ptr, s->capacity);
      old[n] = s->ptr;
      bytes[n++] = s->capacity;
      s->ptr = np;
    }
  if (!c->eng->detach(c, p, old, bytes, n)) /* MPI finished it meanwhile */
    for (int i = 0; i < n; i++) a->be->mem_free(a->bctx, old[i]);
}

static gpa_status settle(gpa_actor *a, gpa__msg *m, gpa_status st) {
  gpa__coll *p = params(m);
  if (p->c->eng->detach) let_go(a, p->c, p, m);
  return p->c->eng->settle ? p->c->eng->settle(p->c, p, m, st) : st;
}

const gpa__msg_class gpa__coll_class = {"collective", must_park, coll_ready, timed_out, run, finished, settle};

/* ---- one transport per id in this process --------------------------------- */

/* The transport each id's ranks of this process joined through, counted by
 * rank. A communicator mixing transports (LOCAL ranks here and MPI ranks,
 * or cpu actors' LOCAL and cuda actors' NCCL, on one id) is not supported
 * (docs/collectives.md, "mixed"): left alone, each half would wait for
 * ranks that joined the other engine, and no timeout would say why. A
 * second transport for an id this process already uses is refused at
 * init. Ranks in other processes cannot be seen from here. */
typedef struct id_use {
  struct id_use *next;
  unsigned char token[GPA__COMM_TOKEN_BYTES];
  const gpa__comm_engine *eng;
  int32_t ranks;
} id_use;
_Static_assert(GPA__COMM_TOKEN_BYTES == sizeof(((gpa_comm *)0)->token), "a communicator holds its id's token");

static pthread_mutex_t uses_lock = PTHREAD_MUTEX_INITIALIZER;
static id_use *uses;

static const char *transport_name(const gpa__comm_engine *e) {
  return e == &gpa__comm_mpi ? "MPI" : e == &gpa__comm_nccl ? "NCCL" : "LOCAL";
}

/* Counts c as a rank of its id through c->eng, unless the id's ranks here
 * use another transport (EUNSUPPORTED). */
static gpa_status claim_id(gpa_comm *c, const char *what) {
  gpa_status st = GPA_OK;
  pthread_mutex_lock(&uses_lock);
  id_use *u = uses;
  while (u && memcmp(u->token, c->token, sizeof u->token)) u = u->next;
  if (u && u->eng != c->eng)
    st = gpa__fail(GPA_EUNSUPPORTED,
                   "%s: rank %d would join this id through %s, but %d rank(s) of this process joined it through %s: "
                   "one communicator takes one transport (mixed transports: docs/collectives.md)",
                   what, c->rank, transport_name(c->eng), u->ranks, transport_name(u->eng));
  else if (!u && !(u = calloc(1, sizeof *u)))
    st = gpa__fail(GPA_ENOMEM, "%s: out of memory", what);
  else if (!u->ranks) {
    memcpy(u->token, c->token, sizeof u->token);
    u->eng = c->eng;
    u->next = uses;
    uses = u;
  }
  if (st == GPA_OK) u->ranks++;
  pthread_mutex_unlock(&uses_lock);
  return st;
}

static void release_id(gpa_comm *c) {
  pthread_mutex_lock(&uses_lock);
  for (id_use **pp = &uses; *pp; pp = &(*pp)->next)
    if (!memcmp((*pp)->token, c->token, sizeof c->token)) {
      id_use *u = *pp;
      if (--u->ranks == 0) {
        *pp = u->next;
        free(u);
      }
      break;
    }
  pthread_mutex_unlock(&uses_lock);
}

/* ---- communicators --------------------------------------------------------- */

/* The engine for actor a and the transport asked for: cpu actors LOCAL or
 * MPI, cuda and sim actors NCCL. */
static gpa_status pick(gpa_actor *a, int32_t transport, const gpa__comm_engine **eng) {
  if (atomic_load(&a->closing)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  bool host = strcmp(a->be->name, "cpu") == 0;
  if (!host) {
    if (transport == GPA_COMM_LOCAL || transport == GPA_COMM_MPI)
      return gpa__fail(GPA_EUNSUPPORTED,
                       "gpa_comm_init: the %s transport runs on cpu actors, this one is %s (its collectives go "
                       "through NCCL: transport AUTO or NCCL)",
                       transport == GPA_COMM_LOCAL ? "LOCAL" : "MPI", a->be->name);
    *eng = &gpa__comm_nccl;
    return GPA_OK;
  }
  if (transport == GPA_COMM_NCCL)
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_init: NCCL runs on cuda actors, this one is cpu");
  if (transport == GPA_COMM_AUTO) transport = gpa__comm_mpi_world() ? GPA_COMM_MPI : GPA_COMM_LOCAL;
  *eng = transport == GPA_COMM_MPI ? &gpa__comm_mpi : &gpa__comm_local;
  return GPA_OK;
}

/* A communicator counted as a rank of id through eng (claim_id). */
static gpa_status comm_new(gpa_actor *a, const gpa_comm_id *id, int32_t size, int32_t rank, int64_t timeout_ns,
                           const gpa__comm_engine *eng, gpa_comm **out) {
  gpa_comm *c = calloc(1, sizeof *c);
  if (!c) return gpa__fail(GPA_ENOMEM, "gpa_comm_init: out of memory");
  c->a = a;
  c->rank = rank;
  c->size = size;
  c->timeout_ns = timeout_ns;
  c->eng = eng;
  memcpy(c->token, id->bytes + GPA__COMM_TOKEN_OFF, sizeof c->token);
  gpa_status st = claim_id(c, "gpa_comm_init");
  if (st != GPA_OK) {
    free(c);
    return st;
  }
  *out = c;
  return GPA_OK;
}

static gpa_status init_one(gpa_actor *a, const gpa_comm_id *id, int32_t size, int32_t rank, int32_t transport,
                           int64_t timeout_ns, gpa_comm **out) {
  const gpa__comm_engine *eng;
  gpa_status st = pick(a, transport, &eng);
  if (st != GPA_OK) return st;
  gpa_comm *c;
  if ((st = comm_new(a, id, size, rank, timeout_ns, eng, &c)) != GPA_OK) return st;
  st = eng == &gpa__comm_mpi     ? gpa__comm_mpi_join(c, id)
       : eng == &gpa__comm_nccl ? gpa__comm_nccl_join(c, id)
                                : gpa__comm_local_join(c, id);
  if (st != GPA_OK) {
    release_id(c);
    free(c);
    return st;
  }
  *out = c;
  return GPA_OK;
}

/* Every rank NCCL's (cuda and sim actors): the inits must wait for each
 * other, so they go out together. */
static gpa_status init_all_nccl(gpa_actor *const *actors, int32_t n, const gpa_comm_id *id, int64_t timeout_ns,
                                gpa_comm **out) {
  gpa_status st = GPA_OK;
  for (int32_t i = 0; i < n && st == GPA_OK; i++) {
    const gpa__comm_engine *eng;
    if ((st = pick(actors[i], GPA_COMM_NCCL, &eng)) == GPA_OK)
      st = comm_new(actors[i], id, n, i, timeout_ns, eng, &out[i]);
  }
  if (st == GPA_OK) st = gpa__comm_nccl_join_all(out, n, id);
  if (st != GPA_OK)
    for (int32_t i = 0; i < n; i++) {
      if (out[i]) release_id(out[i]);
      free(out[i]);
      out[i] = NULL;
    }
  return st;
}

static gpa_status check_opts(const gpa_comm_options *o, const char *what) {
  if (!o) return GPA_OK;
  if (o->size && o->size < sizeof *o) return gpa__fail(GPA_EINVAL, "%s: options.size %u too small", what, o->size);
  if (o->transport < GPA_COMM_AUTO || o->transport > GPA_COMM_NCCL)
    return gpa__fail(GPA_EINVAL, "%s: options.transport %d: expected AUTO, LOCAL, MPI or NCCL", what, o->transport);
  return GPA_OK;
}

gpa_status gpa_comm_init(gpa_actor *a, const gpa_comm_id *id, int32_t size, int32_t rank, const gpa_comm_options *o,
                         gpa_comm **out) {
  if (out) *out = NULL;
  if (!a || !id || !out) return gpa__fail(GPA_EINVAL, "gpa_comm_init: NULL argument");
  if (size < 1) return gpa__fail(GPA_EINVAL, "gpa_comm_init: size %d (at least 1)", size);
  if (rank < 0 || rank >= size) return gpa__fail(GPA_EINVAL, "gpa_comm_init: rank %d outside [0, %d)", rank, size);
  gpa_status st = check_opts(o, "gpa_comm_init");
  if (st != GPA_OK) return st;
  if (!gpa__comm_id_valid(id)) return gpa__fail(GPA_EINVAL, "gpa_comm_init: not an id made by gpa_comm_id_make");
  return init_one(a, id, size, rank, o ? o->transport : 0, o ? o->timeout_ns : 0, out);
}

gpa_status gpa_comm_init_all(gpa_actor *const *actors, int32_t n, const gpa_comm_options *o, gpa_comm **out) {
  if (!actors || !out) return gpa__fail(GPA_EINVAL, "gpa_comm_init_all: NULL argument");
  if (n < 1) return gpa__fail(GPA_EINVAL, "gpa_comm_init_all: n %d (at least 1)", n);
  gpa_status st = check_opts(o, "gpa_comm_init_all");
  if (st != GPA_OK) return st;
  if (o && o->transport == GPA_COMM_MPI)
    return gpa__fail(GPA_EINVAL, "gpa_comm_init_all: one process holds every rank: transport must be AUTO, LOCAL "
                                 "or NCCL");
  for (int32_t i = 0; i < n; i++) {
    out[i] = NULL;
    if (!actors[i]) return gpa__fail(GPA_EINVAL, "gpa_comm_init_all: actors[%d] is NULL", i);
    for (int32_t j = 0; j < i; j++)
      if (actors[j] == actors[i])
        return gpa__fail(GPA_EINVAL, "gpa_comm_init_all: actors[%d] is actors[%d] (one rank per actor)", i, j);
  }
  gpa_comm_id id;
  if ((st = gpa_comm_id_make(&id)) != GPA_OK) return st;
  int32_t n_cpu = 0;
  for (int32_t i = 0; i < n; i++) n_cpu += strcmp(actors[i]->be->name, "cpu") == 0;
  if (n_cpu && n_cpu < n)
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_init_all: cpu actors and cuda actors in one communicator (LOCAL "
                                       "and NCCL do not mix; docs/collectives.md)");
  int32_t tr = o ? o->transport : GPA_COMM_AUTO;
  if (n_cpu && tr == GPA_COMM_NCCL)
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_init_all: NCCL runs on cuda actors, these are cpu");
  if (!n_cpu && tr == GPA_COMM_LOCAL)
    return gpa__fail(GPA_EUNSUPPORTED, "gpa_comm_init_all: LOCAL runs on cpu actors, these are %s (transport AUTO "
                                       "or NCCL)", actors[0]->be->name);
  if (!n_cpu) return init_all_nccl(actors, n, &id, o ? o->timeout_ns : 0, out);
  for (int32_t i = 0; i < n; i++) {
    st = init_one(actors[i], &id, n, i, GPA_COMM_LOCAL, o ? o->timeout_ns : 0, &out[i]);
    if (st != GPA_OK) {
      char why[GPA__ERR_MAX];
      snprintf(why, sizeof why, "%s", gpa_last_error_message());
      for (int32_t j = 0; j < i; j++) {
        gpa_comm_destroy(out[j]);
        out[j] = NULL;
      }
      return gpa__fail(st, "%s", why);
    }
  }
  return GPA_OK;
}

int32_t gpa_comm_rank(const gpa_comm *c) { return c ? c->rank : -1; }
int32_t gpa_comm_size(const gpa_comm *c) { return c ? c->size : -1; }

gpa_status gpa_comm_destroy(gpa_comm *c) {
  if (!c) return gpa__fail(GPA_EINVAL, "gpa_comm_destroy: NULL communicator");
  uint32_t n = atomic_load_explicit(&c->outstanding, memory_order_acquire);
  if (n)
    return gpa__fail(GPA_EBUSY, "gpa_comm_destroy: %u collectives of rank %d have not finished (await them first)",
                     n, c->rank);
  c->eng->destroy(c);
  release_id(c);
  free(c);
  return GPA_OK;
}

gpa_status gpa_comm_abort(gpa_comm *c) {
  if (!c) return gpa__fail(GPA_EINVAL, "gpa_comm_abort: NULL communicator");
  char why[96];
  snprintf(why, sizeof why, "aborted by gpa_comm_abort on rank %d", c->rank);
  gpa__comm_fail(c, GPA_ECANCELED, why);
  c->eng->abort(c, GPA_ECANCELED, why);
  return GPA_OK;
}

/* ---- collectives ------------------------------------------------------------ */

static bool overlap(const gpa_tensor *x, uint64_t xb, const gpa_tensor *y, uint64_t yb) {
  return x->buffer == y->buffer && x->offset < y->offset + yb && y->offset < x->offset + xb;
}

typedef struct coll_args {
  int kind;
  const gpa_tensor *send, *recv;
  int32_t op, peer;
} coll_args;

static gpa_status check_dtype(const char *name, const char *arg, int dtype) {
  if (dtype == GPA_F32 || dtype == GPA_F16 || dtype == GPA_BF16 || dtype == GPA_I32) return GPA_OK;
  return gpa__fail(GPA_EDTYPE, "%s: %s is %s; collectives take f32, f16, bf16 or i32", name, arg,
                   gpa_dtype_name(dtype));
}

static gpa_status submit(gpa_queue *q, gpa_comm *c, const coll_args *x, gpa_handle **out) {
  const char *name = kind_names[x->kind];
  if (out) *out = NULL;
  gpa_status st = gpa__check_queue(q);
  if (st != GPA_OK) return st;
  if (!c) return gpa__fail(GPA_EINVAL, "%s: communicator is NULL", name);
  gpa_actor *a = q->actor;
  if (c->a != a) return gpa__fail(GPA_EINVAL, "%s: the queue belongs to another actor than the communicator", name);
  int32_t f = atomic_load_explicit(&c->failed, memory_order_acquire);
  if (f) return gpa__fail(GPA_ECLOSED, "%s: the communicator failed: %s", name, c->why);
  bool reduces = x->kind == GPA__COLL_ALLREDUCE || x->kind == GPA__COLL_REDUCE_SCATTER;
  bool has_send = x->kind != GPA__COLL_RECV, has_recv = x->kind != GPA__COLL_SEND;
  const gpa_tensor *send = x->send, *recv = x->recv;
  if (x->kind == GPA__COLL_BROADCAST && send == NULL) send = recv; /* in place */
  if ((has_send && !send) || (has_recv && !recv)) return gpa__fail(GPA_EINVAL, "%s: NULL tensor", name);
  uint64_t sb = 0, rb = 0;
  if (has_send && (st = gpa__check_tensor_at(a, send, name, x->kind == GPA__COLL_SEND ? "t" : "send", 0)) != GPA_OK)
    return st;
  if (has_recv && (st = gpa__check_tensor_at(a, recv, name, x->kind == GPA__COLL_RECV ? "t" : "recv", 0)) != GPA_OK)
    return st;
  if (has_send && (st = check_dtype(name, "send", send->dtype)) != GPA_OK) return st;
  if (has_recv && (st = check_dtype(name, "recv", recv->dtype)) != GPA_OK) return st;
  if (has_send && has_recv && send->dtype != recv->dtype)
    return gpa__fail(GPA_EDTYPE, "%s: send is %s, recv is %s", name, gpa_dtype_name(send->dtype),
                     gpa_dtype_name(recv->dtype));
  int dtype = has_send ? send->dtype : recv->dtype;
  uint32_t es = gpa_dtype_size(dtype);
  if (reduces) {
    if (x->op < GPA_REDUCE_SUM || x->op > GPA_REDUCE_MIN)
      return gpa__fail(GPA_EINVAL, "%s: op %d: expected SUM, AVG, MAX or MIN", name, x->op);
    if (x->op == GPA_REDUCE_AVG && dtype == GPA_I32)
      return gpa__fail(GPA_EDTYPE, "%s: avg of i32 (floating-point dtypes only)", name);
  }
  if ((x->kind == GPA__COLL_BROADCAST || x->kind == GPA__COLL_SEND || x->kind == GPA__COLL_RECV) &&
      (x->peer < 0 || x->peer >= c->size))
    return gpa__fail(GPA_EINVAL, "%s: %s %d outside [0, %d)", name, x->kind == GPA__COLL_BROADCAST ? "root" : "peer",
                     x->peer, c->size);
  if ((x->kind == GPA__COLL_SEND || x->kind == GPA__COLL_RECV) && x->peer == c->rank)
    return gpa__fail(GPA_EINVAL, "%s: peer %d is this rank", name, x->peer);
  uint64_t ns = has_send ? (uint64_t)gpa_tensor_numel(send) : 0, nr = has_recv ? (uint64_t)gpa_tensor_numel(recv) : 0;
  sb = ns * es;
  rb = nr * es;
  uint64_t count = has_send ? ns : nr, sz = (uint64_t)c->size;
  bool in_place = false;
  switch (x->kind) {
    case GPA__COLL_ALLREDUCE:
    case GPA__COLL_BROADCAST:
      if (ns != nr)
        return gpa__fail(GPA_ESHAPE, "%s: send has %llu elements, recv %llu", name, (unsigned long long)ns,
                         (unsigned long long)nr);
      in_place = send->buffer == recv->buffer && send->offset == recv->offset;
      break;
    case GPA__COLL_REDUCE_SCATTER:
      if (ns != nr * sz)
        return gpa__fail(GPA_ESHAPE, "%s: send has %llu elements, not size (%d) x recv's %llu", name,
                         (unsigned long long)ns, c->size, (unsigned long long)nr);
      count = nr;
      in_place = send->buffer == recv->buffer && recv->offset == send->offset + (uint64_t)c->rank * rb;
      break;
    case GPA__COLL_ALLGATHER:
      if (nr != ns * sz)
        return gpa__fail(GPA_ESHAPE, "%s: recv has %llu elements, not size (%d) x send's %llu", name,
                         (unsigned long long)nr, c->size, (unsigned long long)ns);
      in_place = send->buffer == recv->buffer && send->offset == recv->offset + (uint64_t)c->rank * sb;
      break;
    default: break;
  }
  if (count > 0x7fffffff)
    return gpa__fail(GPA_EOVERFLOW, "%s: %llu elements (at most 2^31 - 1 per rank)", name, (unsigned long long)count);
  if (has_send && has_recv && !in_place && overlap(send, sb, recv, rb))
    return gpa__fail(GPA_EINVAL, "%s: send and recv overlap (in place means the layout of docs/collectives.md)", name);
  gpa__msg *m = gpa__msg_new(a, GPA__MSG_EXT);
  if (!m) return GPA_ENOMEM;
  m->cls = &gpa__coll_class;
  /* in place: the whole region once, as the output */
  if (in_place) st = gpa__msg_set_tensors(m, NULL, 0, x->kind == GPA__COLL_REDUCE_SCATTER ? send : recv, 1);
  else if (!has_send) st = gpa__msg_set_tensors(m, NULL, 0, recv, 1);
  else if (!has_recv) st = gpa__msg_set_tensors(m, send, 1, NULL, 0);
  else st = gpa__msg_set_tensors(m, send, 1, recv, 1);
  if (st == GPA_OK) {
    gpa__coll *p = params(m);
    memset(p, 0, sizeof *p); /* pooled messages keep old bytes */
    p->c = c;
    p->m = m;
    p->kind = x->kind;
    p->op = x->op;
    p->dtype = dtype;
    p->peer = x->peer;
    p->count = count;
    p->in_place = in_place;
    m->q = q;
    atomic_fetch_add_explicit(&c->outstanding, 1, memory_order_relaxed);
    st = gpa__send(a, m);
    if (st != GPA_OK) atomic_fetch_sub_explicit(&c->outstanding, 1, memory_order_relaxed);
  }
  if (st != GPA_OK || !out) gpa__msg_unref(m);
  else gpa__handle_out(*out = m);
  return st;
}

gpa_status gpa_allreduce(gpa_queue *q, gpa_comm *c, const gpa_tensor *send, const gpa_tensor *recv, int32_t op,
                         gpa_handle **out) {
  return submit(q, c, &(coll_args){GPA__COLL_ALLREDUCE, send, recv, op, 0}, out);
}

gpa_status gpa_reduce_scatter(gpa_queue *q, gpa_comm *c, const gpa_tensor *send, const gpa_tensor *recv, int32_t op,
                              gpa_handle **out) {
  return submit(q, c, &(coll_args){GPA__COLL_REDUCE_SCATTER, send, recv, op, 0}, out);
}

gpa_status gpa_allgather(gpa_queue *q, gpa_comm *c, const gpa_tensor *send, const gpa_tensor *recv,
                         gpa_handle **out) {
  return submit(q, c, &(coll_args){GPA__COLL_ALLGATHER, send, recv, 0, 0}, out);
}

gpa_status gpa_broadcast(gpa_queue *q, gpa_comm *c, const gpa_tensor *send, const gpa_tensor *recv, int32_t root,
                         gpa_handle **out) {
  return submit(q, c, &(coll_args){GPA__COLL_BROADCAST, send, recv, 0, root}, out);
}

gpa_status gpa_send(gpa_queue *q, gpa_comm *c, const gpa_tensor *t, int32_t peer, gpa_handle **out) {
  return submit(q, c, &(coll_args){GPA__COLL_SEND, t, NULL, 0, peer}, out);
}

gpa_status gpa_recv(gpa_queue *q, gpa_comm *c, const gpa_tensor *t, int32_t peer, gpa_handle **out) {
  return submit(q, c, &(coll_args){GPA__COLL_RECV, NULL, t, 0, peer}, out);
}
