/* gpuactor_nif: the gpuactor C API as Erlang NIFs (module gpuactor_nif).
 *
 * Scheduling. Calls that only validate and enqueue (submit, upload,
 * readback, batch_begin, infeed_push, infeed, outfeed, handle_status,
 * handle_data) run on normal schedulers: they never wait for the device. The
 * actor is created with GPA_FULL_FAIL, so a full mailbox answers
 * {error, {eagain, _}} instead of blocking (the Erlang side may retry; an
 * environment GPA_FULL_POLICY=wait would override this, docs/bindings.md).
 * Calls that wait (await, sync_batch, actor create/destroy, queue create,
 * buffer acquire/release, which are round trips to the actor thread, and
 * feed_close) are dirty I/O NIFs. Uploads over 1 MiB are rescheduled onto a
 * dirty CPU scheduler, since copying them takes longer than a NIF may run.
 *
 * Resources. Actor, queue, buffer, handle and feed are resources with
 * destructors; what a destructor would wait for (destroying an actor,
 * releasing a buffer, closing a feed) is done by one reaper thread, since
 * the GC may run destructors on a normal scheduler. Queues, buffers and feeds keep their actor's resource alive;
 * an actor destroyed explicitly stays a resource whose users answer
 * {error, {eshutdown, _}}: a per-actor rwlock orders every call that touches
 * the C actor (read side) against the destroy (write side), after a
 * gpa_actor_shutdown that fails parked work so that no reader waits forever.
 * Normal-scheduler NIFs only try the read side (a busy lock means a destroy
 * is under way: ESHUTDOWN), so they never wait for it.
 * Handles outlive actors (the C API allows it).
 *
 * Feed sessions. The session's tag is the external term format of the
 * owning pid; the sink (on the session's delivery thread) decodes it and
 * enif_sends {gpuactor_outfeed, FeedId, UserTag, [{Dtype, Shape, Binary}]}.
 *
 * Bad terms raise error:{badarg, Reason}; nothing here aborts the VM. */
#include <erl_nif.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gpuactor.h"

/* ---- resources ----------------------------------------------------------- */

typedef struct nif_actor {
  gpa_actor *a;
  ErlNifRWLock *lock;
  bool closed;
} nif_actor;

typedef struct nif_queue {
  nif_actor *actor;
  gpa_queue *q;
  bool owned, destroyed;
} nif_queue;

typedef struct nif_buffer {
  nif_actor *actor;
  gpa_buffer_id id;
  uint64_t size;
  bool released;
} nif_buffer;

typedef struct nif_handle {
  gpa_handle *h;
} nif_handle;

/* What the sink reads: apart from the resource, so that it lives until the
 * session is closed (by the reaper, after the resource is gone). */
typedef struct feed_ctx {
  uint64_t id;
  ErlNifEnv *tag_env; /* holds the user tag term */
  ERL_NIF_TERM user_tag;
} feed_ctx;

typedef struct nif_feed {
  nif_actor *actor;
  gpa_feed *f;
  feed_ctx *ctx;
  ErlNifMutex *mu; /* held only around non-blocking calls into the session */
  bool closed;
} nif_feed;

static ErlNifResourceType *R_ACTOR, *R_QUEUE, *R_BUFFER, *R_HANDLE, *R_FEED;
static ERL_NIF_TERM A_OK, A_ERROR, A_PENDING, A_BADARG, A_UNDEFINED, A_INFINITY, A_OUTFEED, A_TRUE, A_FALSE;

static const char *const DTYPES[] = {NULL, "f32", "f16", "bf16", "i32", "u8", "i64"};

/* ---- terms ----------------------------------------------------------------- */

static ERL_NIF_TERM badarg(ErlNifEnv *env, const char *reason) {
  return enif_raise_exception(env, enif_make_tuple2(env, A_BADARG, enif_make_atom(env, reason)));
}

static ERL_NIF_TERM bin_of(ErlNifEnv *env, const void *data, size_t n) {
  ERL_NIF_TERM t;
  unsigned char *p = enif_make_new_binary(env, n, &t);
  if (n) memcpy(p, data, n);
  return t;
}

static ERL_NIF_TERM str_bin(ErlNifEnv *env, const char *s) { return bin_of(env, s, s ? strlen(s) : 0); }

static ERL_NIF_TERM status_atom(ErlNifEnv *env, int st) {
  const char *name = gpa_status_name(st); /* "GPA_EINVAL" -> einval */
  char buf[40];
  size_t i = 0;
  if (!strncmp(name, "GPA_", 4)) name += 4;
  for (; name[i] && i < sizeof buf - 1; i++) buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
  buf[i] = 0;
  return enif_make_atom(env, buf);
}

static ERL_NIF_TERM error_msg(ErlNifEnv *env, int st, const char *msg) {
  return enif_make_tuple2(env, A_ERROR,
                          enif_make_tuple2(env, status_atom(env, st), str_bin(env, msg && *msg ? msg : gpa_strerror(st))));
}

static ERL_NIF_TERM error_last(ErlNifEnv *env, int st) { return error_msg(env, st, gpa_last_error_message()); }

static ERL_NIF_TERM shut(ErlNifEnv *env) { return error_msg(env, GPA_ESHUTDOWN, "actor destroyed"); }

static ERL_NIF_TERM ok_res(ErlNifEnv *env, void *res) {
  ERL_NIF_TERM t = enif_make_resource(env, res);
  enif_release_resource(res);
  return enif_make_tuple2(env, A_OK, t);
}

static bool get_dtype(ErlNifEnv *env, ERL_NIF_TERM t, int32_t *out) {
  char buf[8];
  if (enif_get_atom(env, t, buf, sizeof buf, ERL_NIF_LATIN1) <= 0) return false;
  for (int i = 1; i < (int)(sizeof DTYPES / sizeof *DTYPES); i++)
    if (!strcmp(buf, DTYPES[i])) {
      *out = i;
      return true;
    }
  return false;
}

static bool get_shape(ErlNifEnv *env, ERL_NIF_TERM list, uint32_t *rank, int64_t *shape) {
  unsigned len;
  if (!enif_get_list_length(env, list, &len) || len > GPA_MAX_RANK) return false;
  ERL_NIF_TERM h, t = list;
  for (unsigned i = 0; i < len; i++) {
    ErlNifSInt64 d;
    if (!enif_get_list_cell(env, t, &h, &t) || !enif_get_int64(env, h, &d) || d < 0) return false;
    shape[i] = d;
  }
  *rank = len;
  return true;
}

static ERL_NIF_TERM make_shape(ErlNifEnv *env, uint32_t rank, const int64_t *shape) {
  ERL_NIF_TERM l = enif_make_list(env, 0);
  for (uint32_t i = rank; i-- > 0;) l = enif_make_list_cell(env, enif_make_int64(env, shape[i]), l);
  return l;
}

/* A tensor term: {Buffer, Offset, Dtype, Shape}. */
static const char *get_tensor(ErlNifEnv *env, ERL_NIF_TERM term, const nif_actor *owner, gpa_tensor *t) {
  int arity;
  const ERL_NIF_TERM *el;
  nif_buffer *b;
  ErlNifUInt64 off;
  memset(t, 0, sizeof *t);
  if (!enif_get_tuple(env, term, &arity, &el) || arity != 4) return "tensor_not_a_4_tuple";
  if (!enif_get_resource(env, el[0], R_BUFFER, (void **)&b)) return "tensor_buffer";
  if (b->actor != owner) return "tensor_buffer_of_another_actor";
  if (!enif_get_uint64(env, el[1], &off)) return "tensor_offset";
  if (!get_dtype(env, el[2], &t->dtype)) return "tensor_dtype";
  if (!get_shape(env, el[3], &t->rank, t->shape)) return "tensor_shape";
  t->buffer = b->released ? 0 : b->id; /* 0: the library answers ESTALE-like EINVAL */
  t->offset = off;
  return NULL;
}

enum { MAX_TENSORS = 64, MAX_ATTRS = 32 };

static const char *get_tensors(ErlNifEnv *env, ERL_NIF_TERM list, const nif_actor *owner, gpa_tensor *ts,
                               uint32_t *n) {
  unsigned len;
  if (!enif_get_list_length(env, list, &len)) return "tensors_not_a_list";
  if (len > MAX_TENSORS) return "too_many_tensors";
  ERL_NIF_TERM h, t = list;
  for (unsigned i = 0; i < len; i++) {
    enif_get_list_cell(env, t, &h, &t);
    const char *e = get_tensor(env, h, owner, &ts[i]);
    if (e) return e;
  }
  *n = len;
  return NULL;
}

/* Attributes: [{Name :: atom() | binary(), integer() | float()}]. */
static const char *get_attrs(ErlNifEnv *env, ERL_NIF_TERM list, gpa_attr *at, char names[][64], uint32_t *n) {
  unsigned len;
  if (!enif_get_list_length(env, list, &len)) return "attrs_not_a_list";
  if (len > MAX_ATTRS) return "too_many_attrs";
  ERL_NIF_TERM h, t = list;
  for (unsigned i = 0; i < len; i++) {
    int arity;
    const ERL_NIF_TERM *el;
    ErlNifBinary nb;
    enif_get_list_cell(env, t, &h, &t);
    if (!enif_get_tuple(env, h, &arity, &el) || arity != 2) return "attr_not_a_pair";
    if (enif_get_atom(env, el[0], names[i], 64, ERL_NIF_LATIN1) <= 0) {
      if (!enif_inspect_binary(env, el[0], &nb) || nb.size == 0 || nb.size >= 64) return "attr_name";
      memcpy(names[i], nb.data, nb.size);
      names[i][nb.size] = 0;
    }
    at[i].name = names[i];
    ErlNifSInt64 iv;
    double fv;
    if (enif_get_int64(env, el[1], &iv)) {
      at[i].type = GPA_ATTR_INT;
      at[i].i = iv;
    } else if (enif_get_double(env, el[1], &fv)) {
      at[i].type = GPA_ATTR_FLOAT;
      at[i].f = fv;
    } else {
      return "attr_value";
    }
  }
  *n = len;
  return NULL;
}

static int64_t timeout_ns(ErlNifEnv *env, ERL_NIF_TERM t, bool *ok) {
  ErlNifSInt64 ms;
  *ok = true;
  if (enif_is_identical(t, A_INFINITY)) return -1;
  if (enif_get_int64(env, t, &ms) && ms >= 0 && ms < INT64_MAX / 1000000) return ms * 1000000;
  *ok = false;
  return 0;
}

/* Read side of the actor lock: false (and unlocked) when it is destroyed. */
static bool actor_enter(nif_actor *a) {
  enif_rwlock_rlock(a->lock);
  if (a->closed) {
    enif_rwlock_runlock(a->lock);
    return false;
  }
  return true;
}
static void actor_leave(nif_actor *a) { enif_rwlock_runlock(a->lock); }
/* The same for normal schedulers, which must not wait: the write side is
 * only taken by a destroy, after its shutdown, so a busy lock means that the
 * actor is going away (ESHUTDOWN either way). */
static bool actor_try(nif_actor *a) {
  if (enif_rwlock_tryrlock(a->lock) != 0) return false;
  if (a->closed) {
    enif_rwlock_runlock(a->lock);
    return false;
  }
  return true;
}

/* ---- destructors ---------------------------------------------------------- */

static void actor_close(nif_actor *a) {
  /* Shut down under the read lock (other readers go on; shutdown is safe with
   * concurrent callers): it fails parked work, so readers blocked in a sync
   * or a feed close return; then the write lock waits for them. */
  if (!actor_enter(a)) return;
  gpa_actor_shutdown(a->a);
  actor_leave(a);
  enif_rwlock_rwlock(a->lock);
  if (!a->closed) {
    a->closed = true;
    gpa_actor_destroy(a->a);
    a->a = NULL;
  }
  enif_rwlock_rwunlock(a->lock);
}

/* Destructors run wherever the GC runs them, often on a normal scheduler.
 * What may wait (an actor's destroy joins its thread; a buffer release and a
 * queue destroy are round trips to the actor; a feed close waits for its
 * sink) goes to one reaper thread, in order. An item carries the actor
 * reference its object held; the reaper releases it when done. */
enum { REAP_ACTOR, REAP_QUEUE, REAP_BUFFER, REAP_FEED };
typedef struct reap_item {
  struct reap_item *next;
  int kind;
  nif_actor *actor;   /* QUEUE/BUFFER/FEED: the reference to release */
  gpa_actor *a;       /* ACTOR: NULL if destroyed already */
  ErlNifRWLock *lock; /* ACTOR */
  gpa_queue *q;
  gpa_buffer_id id;
  gpa_feed *f;
  feed_ctx *ctx;
} reap_item;

static struct {
  ErlNifMutex *mu;
  ErlNifCond *cv;
  reap_item *head, *tail;
  ErlNifTid tid;
  bool stop, started;
} reaper;

static void feed_ctx_free(feed_ctx *c) {
  if (!c) return;
  if (c->tag_env) enif_free_env(c->tag_env);
  enif_free(c);
}

static void reap_do(reap_item *it) {
  switch (it->kind) {
  case REAP_ACTOR:
    if (it->a) gpa_actor_destroy(it->a);
    enif_rwlock_destroy(it->lock);
    break;
  case REAP_QUEUE:
    if (actor_enter(it->actor)) {
      gpa_queue_destroy(it->q);
      actor_leave(it->actor);
    }
    break;
  case REAP_BUFFER:
    if (actor_enter(it->actor)) {
      gpa_buffer_release(it->actor->a, it->id);
      actor_leave(it->actor);
    }
    break;
  case REAP_FEED:
    if (actor_enter(it->actor)) {
      gpa_feed_close(it->f);
      actor_leave(it->actor);
    } /* else the actor's destroy closed it */
    feed_ctx_free(it->ctx);
    break;
  }
  if (it->actor) enif_release_resource(it->actor); /* may queue the actor itself */
  enif_free(it);
}

static void *reaper_main(void *arg) {
  (void)arg;
  enif_mutex_lock(reaper.mu);
  for (;;) {
    while (!reaper.head && !reaper.stop) enif_cond_wait(reaper.cv, reaper.mu);
    if (!reaper.head) break; /* stopping and nothing left */
    reap_item *it = reaper.head;
    reaper.head = it->next;
    if (!reaper.head) reaper.tail = NULL;
    enif_mutex_unlock(reaper.mu);
    reap_do(it);
    enif_mutex_lock(reaper.mu);
  }
  enif_mutex_unlock(reaper.mu);
  return NULL;
}

static void reap(reap_item tmpl) {
  reap_item *it = enif_alloc(sizeof *it);
  if (!it) return; /* out of memory: leak the object rather than block or crash */
  *it = tmpl;
  it->next = NULL;
  if (!reaper.started) { /* no thread: do it here */
    reap_do(it);
    return;
  }
  enif_mutex_lock(reaper.mu);
  if (reaper.tail) reaper.tail->next = it;
  else reaper.head = it;
  reaper.tail = it;
  enif_cond_signal(reaper.cv);
  enif_mutex_unlock(reaper.mu);
}

static void actor_dtor(ErlNifEnv *env, void *obj) {
  (void)env;
  nif_actor *a = obj; /* no references left: nobody else is using it */
  if (a->lock) reap((reap_item){.kind = REAP_ACTOR, .a = a->closed ? NULL : a->a, .lock = a->lock});
}

static void queue_dtor(ErlNifEnv *env, void *obj) {
  (void)env;
  nif_queue *q = obj;
  if (!q->actor) return;
  if (q->owned && !q->destroyed) reap((reap_item){.kind = REAP_QUEUE, .actor = q->actor, .q = q->q});
  else enif_release_resource(q->actor);
}

static void buffer_dtor(ErlNifEnv *env, void *obj) {
  (void)env;
  nif_buffer *b = obj;
  if (!b->actor) return;
  if (!b->released) reap((reap_item){.kind = REAP_BUFFER, .actor = b->actor, .id = b->id});
  else enif_release_resource(b->actor);
}

static void handle_dtor(ErlNifEnv *env, void *obj) {
  (void)env;
  gpa_handle_release(((nif_handle *)obj)->h); /* a reference count: never waits */
}

static void feed_dtor(ErlNifEnv *env, void *obj) {
  (void)env;
  nif_feed *f = obj;
  if (f->mu) enif_mutex_destroy(f->mu);
  if (!f->actor) { /* never opened: no session refers to ctx */
    feed_ctx_free(f->ctx);
    return;
  }
  if (!f->closed) {
    reap((reap_item){.kind = REAP_FEED, .actor = f->actor, .f = f->f, .ctx = f->ctx});
  } else {
    feed_ctx_free(f->ctx);
    enif_release_resource(f->actor);
  }
}

/* ---- actors, queues, buffers ---------------------------------------------- */

/* actor_create(Opts) -> {ok, Actor} | {error, {Status, Msg}}.
 * Opts: [{device, binary() | atom()}, {threads, N}, {mailbox_size, N}]. Dirty I/O. */
static ERL_NIF_TERM nif_actor_create(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  gpa_actor_options o;
  memset(&o, 0, sizeof o);
  o.full_policy = GPA_FULL_FAIL;
  char device[32] = {0};
  unsigned len;
  if (!enif_get_list_length(env, argv[0], &len)) return badarg(env, "options_not_a_list");
  ERL_NIF_TERM h, t = argv[0];
  while (enif_get_list_cell(env, t, &h, &t)) {
    int arity;
    const ERL_NIF_TERM *el;
    char key[32];
    ErlNifBinary b;
    unsigned u;
    if (!enif_get_tuple(env, h, &arity, &el) || arity != 2 ||
        enif_get_atom(env, el[0], key, sizeof key, ERL_NIF_LATIN1) <= 0)
      return badarg(env, "option_not_a_pair");
    if (!strcmp(key, "device")) {
      if (enif_get_atom(env, el[1], device, sizeof device, ERL_NIF_LATIN1) <= 0) {
        if (!enif_inspect_binary(env, el[1], &b) || b.size >= sizeof device) return badarg(env, "device");
        memcpy(device, b.data, b.size);
        device[b.size] = 0;
      }
      o.device = device;
    } else if (!strcmp(key, "threads") && enif_get_uint(env, el[1], &u)) {
      o.threads = u;
    } else if (!strcmp(key, "mailbox_size") && enif_get_uint(env, el[1], &u)) {
      o.mailbox_size = u;
    } else {
      return badarg(env, "unknown_option");
    }
  }
  gpa_actor *a = NULL;
  gpa_status st = gpa_actor_create(&o, &a);
  if (st) return error_last(env, st);
  nif_actor *r = enif_alloc_resource(R_ACTOR, sizeof *r);
  r->a = a;
  r->closed = false;
  r->lock = enif_rwlock_create("gpuactor_actor");
  return ok_res(env, r);
}

static ERL_NIF_TERM nif_actor_destroy(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_actor *a;
  if (!enif_get_resource(env, argv[0], R_ACTOR, (void **)&a)) return badarg(env, "not_an_actor");
  actor_close(a);
  return A_OK;
}

static ERL_NIF_TERM nif_actor_backend(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_actor *a;
  if (!enif_get_resource(env, argv[0], R_ACTOR, (void **)&a)) return badarg(env, "not_an_actor");
  if (!actor_try(a)) return shut(env);
  ERL_NIF_TERM r = enif_make_atom(env, gpa_actor_backend(a->a));
  actor_leave(a);
  return r;
}

static ERL_NIF_TERM new_queue(ErlNifEnv *env, nif_actor *a, gpa_queue *q, bool owned) {
  nif_queue *r = enif_alloc_resource(R_QUEUE, sizeof *r);
  r->actor = a;
  r->q = q;
  r->owned = owned;
  r->destroyed = false;
  enif_keep_resource(a);
  return ok_res(env, r);
}

static ERL_NIF_TERM nif_default_queue(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_actor *a;
  if (!enif_get_resource(env, argv[0], R_ACTOR, (void **)&a)) return badarg(env, "not_an_actor");
  if (!actor_try(a)) return shut(env);
  gpa_queue *q = gpa_actor_default_queue(a->a);
  actor_leave(a);
  return new_queue(env, a, q, false);
}

/* queue_create(Actor, Name :: binary()) -> {ok, Queue}. Dirty I/O. */
static ERL_NIF_TERM nif_queue_create(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_actor *a;
  ErlNifBinary nb;
  char name[64];
  if (!enif_get_resource(env, argv[0], R_ACTOR, (void **)&a)) return badarg(env, "not_an_actor");
  if (!enif_inspect_binary(env, argv[1], &nb) || nb.size >= sizeof name) return badarg(env, "queue_name");
  memcpy(name, nb.data, nb.size);
  name[nb.size] = 0;
  if (!actor_enter(a)) return shut(env);
  gpa_queue *q = NULL;
  gpa_status st = gpa_queue_create(a->a, name, &q);
  actor_leave(a);
  if (st) return error_last(env, st);
  return new_queue(env, a, q, true);
}

static ERL_NIF_TERM nif_queue_destroy(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if (!q->owned) return error_msg(env, GPA_EINVAL, "the default queue cannot be destroyed");
  if (!actor_enter(q->actor)) return shut(env);
  gpa_status st = q->destroyed ? GPA_ECLOSED : gpa_queue_destroy(q->q);
  q->destroyed = true;
  actor_leave(q->actor);
  return st ? error_last(env, st) : A_OK;
}

/* buffer_acquire(Actor, Label :: binary() | undefined, Size) -> {ok, Buffer}. Dirty I/O. */
static ERL_NIF_TERM nif_buffer_acquire(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_actor *a;
  ErlNifBinary lb;
  ErlNifUInt64 size;
  char label[64], *lp = NULL;
  if (!enif_get_resource(env, argv[0], R_ACTOR, (void **)&a)) return badarg(env, "not_an_actor");
  if (!enif_is_identical(argv[1], A_UNDEFINED)) {
    if (!enif_inspect_binary(env, argv[1], &lb) || lb.size >= sizeof label || memchr(lb.data, 0, lb.size))
      return badarg(env, "label");
    memcpy(label, lb.data, lb.size);
    label[lb.size] = 0;
    lp = label;
  }
  if (!enif_get_uint64(env, argv[2], &size)) return badarg(env, "size");
  if (!actor_enter(a)) return shut(env);
  gpa_buffer_id id = 0;
  gpa_status st = gpa_buffer_acquire(a->a, lp, size, &id);
  actor_leave(a);
  if (st) return error_last(env, st);
  nif_buffer *b = enif_alloc_resource(R_BUFFER, sizeof *b);
  b->actor = a;
  b->id = id;
  b->size = size;
  b->released = false;
  enif_keep_resource(a);
  return ok_res(env, b);
}

static ERL_NIF_TERM nif_buffer_release(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_buffer *b;
  if (!enif_get_resource(env, argv[0], R_BUFFER, (void **)&b)) return badarg(env, "not_a_buffer");
  if (!actor_enter(b->actor)) return shut(env);
  gpa_status st = b->released ? GPA_ESTALE : gpa_buffer_release(b->actor->a, b->id);
  b->released = true;
  actor_leave(b->actor);
  return st ? error_last(env, st) : A_OK;
}

/* ---- ops, uploads, readbacks, batches ------------------------------------- */

static ERL_NIF_TERM new_handle(ErlNifEnv *env, gpa_handle *h) {
  nif_handle *r = enif_alloc_resource(R_HANDLE, sizeof *r);
  r->h = h;
  return ok_res(env, r);
}

/* submit(Queue, Op :: binary(), Inputs, Outputs, Attrs) -> {ok, Handle}. */
static ERL_NIF_TERM nif_submit(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  ErlNifBinary ob;
  char opname[64];
  gpa_tensor in[MAX_TENSORS], out[MAX_TENSORS];
  gpa_attr at[MAX_ATTRS];
  char names[MAX_ATTRS][64];
  uint32_t n_in = 0, n_out = 0, n_at = 0;
  const char *e;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if (!enif_inspect_binary(env, argv[1], &ob) || ob.size == 0 || ob.size >= sizeof opname) {
    if (enif_get_atom(env, argv[1], opname, sizeof opname, ERL_NIF_LATIN1) <= 0) return badarg(env, "op_name");
  } else {
    memcpy(opname, ob.data, ob.size);
    opname[ob.size] = 0;
  }
  if ((e = get_tensors(env, argv[2], q->actor, in, &n_in)) || (e = get_tensors(env, argv[3], q->actor, out, &n_out)) ||
      (e = get_attrs(env, argv[4], at, names, &n_at)))
    return badarg(env, e);
  if (!actor_try(q->actor)) return shut(env);
  gpa_op_call c = {opname, in, n_in, out, n_out, at, n_at};
  gpa_handle *h = NULL;
  gpa_status st = gpa_submit(q->q, &c, &h);
  actor_leave(q->actor);
  return st ? error_last(env, st) : new_handle(env, h);
}

/* upload(Queue, Tensor, Data :: binary(), Version) -> {ok, Handle}. */
static ERL_NIF_TERM upload_run(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  gpa_tensor t;
  ErlNifBinary data;
  ErlNifUInt64 version;
  const char *e;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if ((e = get_tensor(env, argv[1], q->actor, &t))) return badarg(env, e);
  if (!enif_inspect_binary(env, argv[2], &data)) return badarg(env, "data_not_a_binary");
  if (!enif_get_uint64(env, argv[3], &version)) return badarg(env, "version");
  if (!actor_try(q->actor)) return shut(env);
  gpa_handle *h = NULL;
  gpa_status st = gpa_upload(q->q, &t, data.data, data.size, version, &h);
  actor_leave(q->actor);
  return st ? error_last(env, st) : new_handle(env, h);
}

static ERL_NIF_TERM nif_upload(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  ErlNifBinary data;
  if (argc == 4 && enif_inspect_binary(env, argv[2], &data) && data.size > (1u << 20))
    return enif_schedule_nif(env, "upload_dirty", ERL_NIF_DIRTY_JOB_CPU_BOUND, upload_run, argc, argv);
  return upload_run(env, argc, argv);
}

static ERL_NIF_TERM nif_readback(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  gpa_tensor t;
  const char *e;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if ((e = get_tensor(env, argv[1], q->actor, &t))) return badarg(env, e);
  if (!actor_try(q->actor)) return shut(env);
  gpa_handle *h = NULL;
  gpa_status st = gpa_readback(q->q, &t, &h);
  actor_leave(q->actor);
  return st ? error_last(env, st) : new_handle(env, h);
}

/* await(Handle, TimeoutMs | infinity) -> ok | {error, {Status, Msg}}. Dirty I/O. */
static ERL_NIF_TERM nif_await(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_handle *h;
  bool ok;
  if (!enif_get_resource(env, argv[0], R_HANDLE, (void **)&h)) return badarg(env, "not_a_handle");
  int64_t ns = timeout_ns(env, argv[1], &ok);
  if (!ok) return badarg(env, "timeout");
  gpa_status st = gpa_await(h->h, ns);
  if (st == GPA_OK) return A_OK;
  return error_msg(env, st, gpa_handle_status(h->h) == GPA_EPENDING ? "await timed out" : gpa_handle_error_message(h->h));
}

static ERL_NIF_TERM nif_handle_status(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_handle *h;
  if (!enif_get_resource(env, argv[0], R_HANDLE, (void **)&h)) return badarg(env, "not_a_handle");
  gpa_status st = gpa_handle_status(h->h);
  if (st == GPA_OK) return A_OK;
  if (st == GPA_EPENDING) return A_PENDING;
  return error_msg(env, st, gpa_handle_error_message(h->h));
}

/* handle_data(Handle) -> {ok, binary()} | {error, {enotsynced, _}} | ... (a copy). */
static ERL_NIF_TERM nif_handle_data(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_handle *h;
  const void *data = NULL;
  uint64_t size = 0;
  if (!enif_get_resource(env, argv[0], R_HANDLE, (void **)&h)) return badarg(env, "not_a_handle");
  gpa_status st = gpa_handle_data(h->h, &data, &size);
  if (st) return error_last(env, st);
  return enif_make_tuple2(env, A_OK, bin_of(env, data, (size_t)size));
}

static ERL_NIF_TERM nif_batch_begin(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  ErlNifBinary lb;
  char label[64];
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if (!enif_inspect_binary(env, argv[1], &lb) || lb.size >= sizeof label) return badarg(env, "label");
  memcpy(label, lb.data, lb.size);
  label[lb.size] = 0;
  if (!actor_try(q->actor)) return shut(env);
  gpa_status st = gpa_batch_begin(q->q, label);
  actor_leave(q->actor);
  return st ? error_last(env, st) : A_OK;
}

/* sync_batch(Queue) -> {ok, Stats} | {error, {Status, Msg}, Stats}. Dirty I/O. */
static ERL_NIF_TERM nif_sync_batch(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if (!actor_enter(q->actor)) return shut(env);
  gpa_batch_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  gpa_status st = gpa_sync_batch(q->q, &s);
  actor_leave(q->actor);
  ERL_NIF_TERM keys[] = {enif_make_atom(env, "ops"),       enif_make_atom(env, "errors"),
                         enif_make_atom(env, "bytes_moved"), enif_make_atom(env, "host_ns"),
                         enif_make_atom(env, "device_ns"), enif_make_atom(env, "label")};
  ERL_NIF_TERM vals[] = {enif_make_uint64(env, s.ops),     enif_make_uint64(env, s.errors),
                         enif_make_uint64(env, s.bytes_moved), enif_make_int64(env, s.host_ns),
                         enif_make_int64(env, s.device_ns), str_bin(env, s.label)};
  ERL_NIF_TERM map;
  enif_make_map_from_arrays(env, keys, vals, 6, &map);
  if (st == GPA_OK) return enif_make_tuple2(env, A_OK, map);
  return enif_make_tuple3(env, A_ERROR,
                          enif_make_tuple2(env, status_atom(env, st), str_bin(env, s.first_error_message)), map);
}

/* ---- feed sessions -------------------------------------------------------- */

static void sink(gpa_feed *session, const void *tag, uint32_t tag_len, const gpa_host_tensor *ts, uint32_t n,
                 void *user_data) {
  (void)session;
  feed_ctx *f = user_data;
  ErlNifEnv *env = enif_alloc_env();
  ERL_NIF_TERM pid_term;
  ErlNifPid pid;
  if (!env) return;
  if (enif_binary_to_term(env, tag, tag_len, &pid_term, ERL_NIF_BIN2TERM_SAFE) == 0 ||
      !enif_get_local_pid(env, pid_term, &pid)) {
    enif_free_env(env);
    return;
  }
  ERL_NIF_TERM list = enif_make_list(env, 0);
  for (uint32_t i = n; i-- > 0;) {
    const gpa_host_tensor *t = &ts[i];
    ERL_NIF_TERM dt = enif_make_atom(env, t->dtype > 0 && t->dtype < GPA_DTYPE_COUNT_ ? DTYPES[t->dtype] : "invalid");
    ERL_NIF_TERM item = enif_make_tuple3(env, dt, make_shape(env, t->rank, t->shape), bin_of(env, t->data, t->bytes));
    list = enif_make_list_cell(env, item, list);
  }
  ERL_NIF_TERM msg = enif_make_tuple4(env, A_OUTFEED, enif_make_uint64(env, f->id),
                                      enif_make_copy(env, f->user_tag), list);
  enif_send(NULL, &pid, env, msg);
  enif_free_env(env);
}

/* feed_open(Actor, UserTag :: term(), Pid, Opts) -> {ok, Feed}. Opts:
 * [{outfeed_capacity, N}, {infeed_capacity, N}, {outfeed_policy, park | fail}]. */
static ERL_NIF_TERM nif_feed_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_actor *a;
  ErlNifPid pid;
  ErlNifBinary tag;
  if (!enif_get_resource(env, argv[0], R_ACTOR, (void **)&a)) return badarg(env, "not_an_actor");
  if (!enif_get_local_pid(env, argv[2], &pid)) return badarg(env, "pid");
  gpa_feed_options o;
  memset(&o, 0, sizeof o);
  o.size = sizeof o;
  unsigned len;
  if (!enif_get_list_length(env, argv[3], &len)) return badarg(env, "options_not_a_list");
  ERL_NIF_TERM h, t = argv[3];
  while (enif_get_list_cell(env, t, &h, &t)) {
    int arity;
    const ERL_NIF_TERM *el;
    char key[32], val[16];
    unsigned u;
    if (!enif_get_tuple(env, h, &arity, &el) || arity != 2 ||
        enif_get_atom(env, el[0], key, sizeof key, ERL_NIF_LATIN1) <= 0)
      return badarg(env, "option_not_a_pair");
    if (!strcmp(key, "outfeed_capacity") && enif_get_uint(env, el[1], &u)) o.outfeed_capacity = u;
    else if (!strcmp(key, "infeed_capacity") && enif_get_uint(env, el[1], &u)) o.infeed_capacity = u;
    else if (!strcmp(key, "outfeed_policy") && enif_get_atom(env, el[1], val, sizeof val, ERL_NIF_LATIN1) > 0 &&
             (!strcmp(val, "park") || !strcmp(val, "fail")))
      o.outfeed_policy = !strcmp(val, "fail") ? GPA_OUTFEED_FAIL : GPA_OUTFEED_PARK;
    else
      return badarg(env, "unknown_option");
  }
  if (!enif_term_to_binary(env, enif_make_pid(env, &pid), &tag)) return badarg(env, "pid");
  if (tag.size > 64) {
    enif_release_binary(&tag);
    return badarg(env, "pid_encoding_longer_than_64_bytes");
  }
  nif_feed *f = enif_alloc_resource(R_FEED, sizeof *f);
  memset(f, 0, sizeof *f);
  f->mu = enif_mutex_create("gpuactor_feed");
  f->ctx = enif_alloc(sizeof *f->ctx);
  if (f->ctx) memset(f->ctx, 0, sizeof *f->ctx);
  if (!f->mu || !f->ctx || !(f->ctx->tag_env = enif_alloc_env())) {
    enif_release_binary(&tag);
    enif_release_resource(f);
    return error_msg(env, GPA_ENOMEM, "feed_open: out of memory");
  }
  f->ctx->user_tag = enif_make_copy(f->ctx->tag_env, argv[1]);
  o.tag = tag.data;
  o.tag_len = (uint32_t)tag.size;
  o.sink = sink;
  o.user_data = f->ctx;
  if (!actor_enter(a)) {
    enif_release_binary(&tag);
    enif_release_resource(f);
    return shut(env);
  }
  gpa_status st = gpa_feed_open(a->a, &o, &f->f);
  actor_leave(a);
  enif_release_binary(&tag);
  if (st) {
    ERL_NIF_TERM r = error_last(env, st);
    f->closed = true;
    enif_release_resource(f);
    return r;
  }
  f->actor = a;
  enif_keep_resource(a);
  f->ctx->id = gpa_feed_id(f->f);
  return ok_res(env, f);
}

static nif_feed *get_feed(ErlNifEnv *env, ERL_NIF_TERM t) {
  nif_feed *f;
  return enif_get_resource(env, t, R_FEED, (void **)&f) && f->actor ? f : NULL;
}

static ERL_NIF_TERM nif_feed_close(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_feed *f = get_feed(env, argv[0]);
  if (!f) return badarg(env, "not_a_feed");
  enif_mutex_lock(f->mu);
  bool was = f->closed;
  f->closed = true; /* later calls stop here; none is inside the session now */
  enif_mutex_unlock(f->mu);
  if (was) return error_msg(env, GPA_ECLOSED, "feed already closed");
  if (actor_enter(f->actor)) {
    gpa_feed_close(f->f); /* waits for a sink call in progress */
    actor_leave(f->actor);
  } /* else the actor's destroy closed it */
  return A_OK;
}

static ERL_NIF_TERM nif_feed_id(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_feed *f = get_feed(env, argv[0]);
  if (!f) return badarg(env, "not_a_feed");
  return enif_make_uint64(env, f->ctx->id);
}

/* Runs fn with the session open and the actor alive (else an error term). */
#define FEED_ENTER(f)                                                                      \
  do {                                                                                     \
    enif_mutex_lock((f)->mu);                                                              \
    if ((f)->closed) {                                                                     \
      enif_mutex_unlock((f)->mu);                                                          \
      return error_msg(env, GPA_ECLOSED, "feed closed");                                   \
    }                                                                                      \
    if (!actor_try((f)->actor)) {                                                          \
      enif_mutex_unlock((f)->mu);                                                          \
      return shut(env);                                                                    \
    }                                                                                      \
  } while (0)
#define FEED_LEAVE(f)            \
  do {                           \
    actor_leave((f)->actor);     \
    enif_mutex_unlock((f)->mu);  \
  } while (0)

/* infeed_push(Feed, [{Dtype, Shape, binary()}]) -> ok. */
static ERL_NIF_TERM nif_infeed_push(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_feed *f = get_feed(env, argv[0]);
  gpa_host_tensor ts[MAX_TENSORS];
  unsigned len;
  if (!f) return badarg(env, "not_a_feed");
  if (!enif_get_list_length(env, argv[1], &len) || len > MAX_TENSORS) return badarg(env, "item_not_a_list");
  ERL_NIF_TERM h, t = argv[1];
  for (unsigned i = 0; i < len; i++) {
    int arity;
    const ERL_NIF_TERM *el;
    ErlNifBinary b;
    enif_get_list_cell(env, t, &h, &t);
    memset(&ts[i], 0, sizeof ts[i]);
    if (!enif_get_tuple(env, h, &arity, &el) || arity != 3) return badarg(env, "host_tensor_not_a_3_tuple");
    if (!get_dtype(env, el[0], &ts[i].dtype)) return badarg(env, "host_tensor_dtype");
    if (!get_shape(env, el[1], &ts[i].rank, ts[i].shape)) return badarg(env, "host_tensor_shape");
    if (!enif_inspect_binary(env, el[2], &b)) return badarg(env, "host_tensor_data");
    ts[i].data = b.data;
    ts[i].bytes = b.size;
  }
  FEED_ENTER(f);
  gpa_status st = gpa_infeed_push(f->f, ts, len);
  FEED_LEAVE(f);
  return st ? error_last(env, st) : A_OK;
}

/* infeed(Queue, Feed, Outputs, TimeoutMs | infinity) -> {ok, Handle}. */
static ERL_NIF_TERM nif_infeed(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  nif_feed *f;
  gpa_tensor out[MAX_TENSORS];
  uint32_t n = 0;
  bool ok;
  const char *e;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if (!(f = get_feed(env, argv[1]))) return badarg(env, "not_a_feed");
  if (f->actor != q->actor) return badarg(env, "feed_of_another_actor");
  if ((e = get_tensors(env, argv[2], q->actor, out, &n))) return badarg(env, e);
  int64_t ns = timeout_ns(env, argv[3], &ok);
  if (!ok) return badarg(env, "timeout");
  FEED_ENTER(f);
  gpa_handle *h = NULL;
  gpa_status st = gpa_infeed(q->q, f->f, out, n, ns, &h);
  FEED_LEAVE(f);
  return st ? error_last(env, st) : new_handle(env, h);
}

/* outfeed(Queue, Feed, Inputs) -> {ok, Handle}: the item arrives as a message. */
static ERL_NIF_TERM nif_outfeed(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  nif_queue *q;
  nif_feed *f;
  gpa_tensor in[MAX_TENSORS];
  uint32_t n = 0;
  const char *e;
  if (!enif_get_resource(env, argv[0], R_QUEUE, (void **)&q)) return badarg(env, "not_a_queue");
  if (!(f = get_feed(env, argv[1]))) return badarg(env, "not_a_feed");
  if (f->actor != q->actor) return badarg(env, "feed_of_another_actor");
  if ((e = get_tensors(env, argv[2], q->actor, in, &n))) return badarg(env, e);
  FEED_ENTER(f);
  gpa_handle *h = NULL;
  gpa_status st = gpa_outfeed(q->q, f->f, in, n, &h);
  FEED_LEAVE(f);
  return st ? error_last(env, st) : new_handle(env, h);
}

static ERL_NIF_TERM nif_status_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  int st;
  if (!enif_get_int(env, argv[0], &st)) return badarg(env, "status");
  return status_atom(env, st);
}

static ERL_NIF_TERM nif_version(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
  (void)argc;
  (void)argv;
  return str_bin(env, gpa_version_string());
}

/* ---- module --------------------------------------------------------------- */

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info) {
  (void)priv;
  (void)info;
  ErlNifResourceFlags fl = ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER;
  R_ACTOR = enif_open_resource_type(env, NULL, "gpuactor_actor", actor_dtor, fl, NULL);
  R_QUEUE = enif_open_resource_type(env, NULL, "gpuactor_queue", queue_dtor, fl, NULL);
  R_BUFFER = enif_open_resource_type(env, NULL, "gpuactor_buffer", buffer_dtor, fl, NULL);
  R_HANDLE = enif_open_resource_type(env, NULL, "gpuactor_handle", handle_dtor, fl, NULL);
  R_FEED = enif_open_resource_type(env, NULL, "gpuactor_feed", feed_dtor, fl, NULL);
  if (!R_ACTOR || !R_QUEUE || !R_BUFFER || !R_HANDLE || !R_FEED) return 1;
  reaper.mu = enif_mutex_create("gpuactor_reaper");
  reaper.cv = enif_cond_create("gpuactor_reaper");
  if (!reaper.mu || !reaper.cv) return 1;
  reaper.started = enif_thread_create("gpuactor_reaper", &reaper.tid, reaper_main, NULL, NULL) == 0;
  A_OK = enif_make_atom(env, "ok");
  A_ERROR = enif_make_atom(env, "error");
  A_PENDING = enif_make_atom(env, "pending");
  A_BADARG = enif_make_atom(env, "badarg");
  A_UNDEFINED = enif_make_atom(env, "undefined");
  A_INFINITY = enif_make_atom(env, "infinity");
  A_OUTFEED = enif_make_atom(env, "gpuactor_outfeed");
  A_TRUE = enif_make_atom(env, "true");
  A_FALSE = enif_make_atom(env, "false");
  return 0;
}

#define DIRTY_IO ERL_NIF_DIRTY_JOB_IO_BOUND
static ErlNifFunc funcs[] = {
    {"actor_create", 1, nif_actor_create, DIRTY_IO},
    {"actor_destroy", 1, nif_actor_destroy, DIRTY_IO},
    {"actor_backend", 1, nif_actor_backend, 0},
    {"default_queue", 1, nif_default_queue, 0},
    {"queue_create", 2, nif_queue_create, DIRTY_IO},
    {"queue_destroy", 1, nif_queue_destroy, DIRTY_IO},
    {"buffer_acquire", 3, nif_buffer_acquire, DIRTY_IO},
    {"buffer_release", 1, nif_buffer_release, DIRTY_IO},
    {"submit", 5, nif_submit, 0},
    {"upload", 4, nif_upload, 0},
    {"readback", 2, nif_readback, 0},
    {"await", 2, nif_await, DIRTY_IO},
    {"handle_status", 1, nif_handle_status, 0},
    {"handle_data", 1, nif_handle_data, 0},
    {"batch_begin", 2, nif_batch_begin, 0},
    {"sync_batch", 1, nif_sync_batch, DIRTY_IO},
    {"feed_open", 4, nif_feed_open, DIRTY_IO},
    {"feed_close", 1, nif_feed_close, DIRTY_IO},
    {"feed_id", 1, nif_feed_id, 0},
    {"infeed_push", 2, nif_infeed_push, 0},
    {"infeed", 4, nif_infeed, 0},
    {"outfeed", 3, nif_outfeed, 0},
    {"status_name", 1, nif_status_name, 0},
    {"version", 0, nif_version, 0},
};

static void unload(ErlNifEnv *env, void *priv) {
  (void)env;
  (void)priv;
  if (reaper.started) {
    enif_mutex_lock(reaper.mu);
    reaper.stop = true;
    enif_cond_signal(reaper.cv);
    enif_mutex_unlock(reaper.mu);
    enif_thread_join(reaper.tid, NULL);
    reaper.started = false;
  }
  enif_cond_destroy(reaper.cv);
  enif_mutex_destroy(reaper.mu);
}

ERL_NIF_INIT(gpuactor_nif, funcs, load, NULL, NULL, unload)
