/* Internal structures of the actor runtime.
 *
 * Overview
 * --------
 * A message and its handle are one object (struct gpa_handle): the submit
 * call fills it, the actor executes and completes it, the caller awaits and
 * releases it. Messages come from per-producer pools (gpa__ctx) so the hot
 * path does not call malloc; whoever drops the last reference returns the
 * message to its owner's lock-free return stack.
 *
 * Each producer thread has its own SPSC ring into the actor (mailbox.c), so a
 * preempted producer never stalls another one (ck_ring's MPSC enqueue does).
 * Rings carry no order between producers, so every message bound for a queue
 * takes a ticket from that queue (after its ring slot is reserved, so a ticket
 * is never lost) and the actor runs each queue's messages in ticket order
 * (queue.c). A thread that submits m1 and then causes another thread to
 * submit m2 on the same queue therefore sees m1 run first.
 *
 * Ownership: everything under "actor thread only" is touched by the actor
 * thread alone; submit-side fields are atomics or immutable after creation.
 */
#ifndef GPA_ACTOR_INTERNAL_H
#define GPA_ACTOR_INTERNAL_H
#include <ck_ec.h>
#include <ck_ring.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuactor.h"
#include "actor/clock.h"
#include "actor/debug.h"
#include "actor/hooks.h"
#include "actor/limits.h"
#include "actor/registry.h"
#include "actor/status.h"
#include "backends/backend.h"

/* The per-message path is a chain of small steps; inlining them saves the
 * register saves and restores that otherwise cost as much as the steps. */
#define GPA__HOT_INLINE static inline __attribute__((always_inline))

typedef struct gpa__ctx gpa__ctx;
typedef struct gpa__backend gpa__backend;
typedef struct gpa__bufcache gpa__bufcache;

typedef enum gpa__msg_kind {
  GPA__MSG_OP = 1,   /* a registry op */
  GPA__MSG_UPLOAD,   /* payload -> tensor t[0] */
  GPA__MSG_READBACK, /* tensor t[0] -> payload */
  GPA__MSG_CALL,     /* fn(actor, msg) on the actor thread: control requests */
  GPA__MSG_EXT,      /* of an extension's message class (m->cls: actor/hooks.h; feed/) */
} gpa__msg_kind;


typedef struct gpa_handle gpa__msg;
typedef gpa_status (*gpa__call_fn)(gpa_actor *a, gpa__msg *m);

struct gpa_handle {
  /* completion: any thread */
  /* Line-aligned (the pools hand out arrays of them): a plain op touches the
   * first two lines only. */
  _Alignas(64) _Atomic uint32_t state; /* 0 pending, 1 done: the futex word */
  _Atomic uint32_t waiters;
  _Atomic uint32_t refs;
  _Atomic uint32_t synced; /* readback data may be read */
  int32_t status;
  /* message: written by the submitter, then owned by the actor */
  uint8_t kind;
  uint8_t pinned;  /* holds pins on its buffers (actor thread) */
  uint8_t barrier; /* a queue-ordered call that waits for the queue's device work;
                     GPA__BARRIER_SYNC: a sync, which runs on a destroyed queue too */
  uint8_t deferred; /* started on the device; completes through gpa__complete_async */
  /* 1: the backend holds it unlaunched (a graph batch, GPA__HELD): a waiter
   * asks the actor to release it (2: asked). */
  _Atomic uint8_t held;
  gpa__ctx *owner;
  gpa__msg *next; /* free list, queue pending list, batch readback list */
  gpa_queue *q;   /* NULL: not queue-ordered (control calls) */
  uint64_t ticket;
  const gpa__op *op;
  union {
    gpa__call_fn fn;            /* GPA__MSG_CALL */
    const gpa__msg_class *cls;  /* GPA__MSG_EXT */
  };
  uint32_t n_in, n_out;
  gpa_tensor *t; /* inputs then outputs: t_inline or heap */
  void *payload; /* upload source copy or readback destination (host) */
  uint64_t payload_size;
  uint64_t version;
  uint64_t bytes;    /* moved, for the batch (set when started) */
  int64_t device_ns; /* set by the backend before completion */
  /* The fields above fit two cache lines: all that a plain op touches. */
  int64_t t_start;   /* when the actor started it (profiling) */
  uint32_t depth;    /* queue depth behind it when it started (profiling) */
  _Alignas(16) unsigned char params[GPA_OP_PARAMS_MAX];
  gpa_tensor t_inline[GPA__MSG_TENSORS];
  char err[GPA__ERR_MAX];
#if GPA_DEBUG
  uint32_t dbg_magic; /* GPA__MSG_LIVE or GPA__MSG_FREE (actor/debug.h) */
  _Atomic uint32_t dbg_user; /* references the caller holds (handed out + retained - released) */
#endif
};
#define GPA__BARRIER_SYNC 2

/* The caller gets a reference to m as a handle (a debug build counts it). */
static inline void gpa__handle_out(gpa__msg *m) {
#if GPA_DEBUG
  atomic_fetch_add_explicit(&m->dbg_user, 1, memory_order_relaxed);
#else
  (void)m;
#endif
}

/* Held messages of one queue from one source ring, in ticket order. */
typedef struct gpa__lane {
  const gpa__ctx *src;
  gpa__msg *head, *tail;
} gpa__lane;

/* Batch accounting of one queue (actor thread only). */
typedef struct gpa__batch {
  char label[64];
  int64_t t0_ns;
  uint64_t ops, errors, bytes, skipped;
  int64_t device_ns;
  int32_t first_error;
  char first_msg[GPA__ERR_MAX];
  gpa__msg *readbacks; /* held references, made readable at sync */
} gpa__batch;

/* What a queue holds while it lives (actor thread only): its ticket order,
 * parking and batch. Freed when the queue is destroyed (queue.c, bury);
 * the gpa_queue below stays as a tombstone. */
typedef struct gpa__qstate {
  uint64_t expect; /* ticket to run next */
  /* messages not yet started (queue.c): one lane per source ring, whose
   * arrivals come in ticket order; a sorted spill list past GPA__LANES */
  gpa__lane lane[GPA__LANES];
  uint32_t n_lanes, hint; /* hint: the lane that held the last one to run */
  gpa__msg *spill;
  uint32_t n_held;
  uint32_t inflight; /* started on the device, not yet completed */
  /* parking (actor/hooks.h): the head message waits for its class */
  bool parked;
  bool dead;             /* gpa_queue_destroy ran: buried when its run returns */
  void *park_on;         /* what it waits for: its class's business */
  int64_t park_deadline; /* CLOCK_MONOTONIC ns; 0 = none */
  gpa_queue *parked_next; /* the actor's list of parked queues */
  /* after a parked message timed out, later messages of the batch fail with this */
  int32_t poison;
  const char *poison_by; /* the class of the message that timed out */
  gpa__batch batch;
  void *bq; /* backend's queue (stream) */
} gpa__qstate;

/* The queue a caller holds. A destroyed queue keeps only this (128 bytes)
 * until its actor is destroyed, so that a later call on it answers
 * GPA_ECLOSED instead of touching freed memory (docs/api.md); its state (s)
 * is freed when the destroy runs, unless its batch has work not yet synced:
 * then it stays (last) until a sync collects it. */
struct gpa_queue {
  /* read by every submit (and, s, by the actor per message); written once */
  gpa_actor *actor;
  gpa__qstate *s; /* actor thread only; NULL once destroyed */
  uint32_t id;
  _Atomic int closed;
  char name[32];
  gpa__qstate *last; /* actor thread: a destroyed queue's batch not yet synced */
  /* submit side: written per message, so on a line of its own (the actor's
   * per-message writes below would otherwise pull it away each time) */
  _Alignas(64) _Atomic uint64_t next_ticket;
  /* NULL, then the first submitter's context, which takes tickets without a
   * locked instruction; shared from a second submitter on (mailbox.c,
   * ticket_mode) */
  _Atomic(gpa__ctx *) ticket_owner;
  _Atomic int batch_open;
  _Atomic int64_t batch_t0; /* set by begin/sync callers, read by the actor */
  gpa_queue *next_all;      /* the actor's list of queues (queue_lock) */
};
_Static_assert(sizeof(struct gpa_queue) == 128, "a destroyed queue keeps 128 bytes: docs/api.md says so");

/* Messages the actor freed, per owner, not yet given back (handle.c). */
typedef struct gpa__ret_cache {
  gpa__ctx *c;
  gpa__msg *first, *last;
  uint64_t n;
} gpa__ret_cache;

typedef struct gpa__opts {
  char device[32];
  uint32_t mailbox_size;
  int32_t full_policy;
  int64_t full_timeout_ns;
  int32_t shutdown_policy;
  uint64_t mem_budget;
  uint32_t threads;
  uint32_t max_pending;
  int32_t log_level;
  char trace_path[256];
  int32_t profile;
  uint32_t graphs; /* GPA_GRAPHS: a label's batches replay as CUDA graphs once N in a row were alike (0: off) */
  /* libraries of the cuda backend ("" = the default search), read from the
   * environment at each actor creation */
  char cuda_driver[256], cublas[256], cublaslt[256], cudnn[256], nccl[256];
  int32_t cudnn_conv; /* GPA_CUDNN_CONV: 0 auto, 1 off ("0" given), 2 on; also at each actor creation */
  int32_t conv_tc;    /* GPA_CONV_TC: 1 ("0"): bf16 conv1d off the tensor cores; 2 ("1"): f32 on its 3xTF32 kernels too */
  int32_t conv_ig_small; /* GPA_CONV_IG_SMALL: 1 ("0"), 2 ("1"), 3 ("auto"): conv1d's SIMT y and dx in 32 x 32 tiles */
  int32_t fa2_exact;  /* GPA_FA2_EXACT: 1 ("0" given): bf16/fp16 attention at D 64/96/128 keeps off the exact-head-dim kernels */
  int32_t fa2_dkv128; /* GPA_FA2_DKV128: 2 ("1" given): that backward's dK/dV on the 128-key, 8-warp kernels */
  int32_t cuda_split_sums; /* GPA_CUDA_SPLIT_SUMS: 1 ("0" given): column sums in one pass, not split over rows */
  int32_t emb_bwd_rows; /* GPA_EMB_BWD_ROWS: 1 ("0"), 2 ("1"), 3 ("auto"): embedding_bwd without a sort */
  /* process-wide: read once, applied at the first actor (options.c) */
  int32_t host_nt;       /* 0 auto, 1 never stream, 2 always stream */
  int32_t no_membarrier; /* asymmetric fences off (the fallback's tests) */
  int32_t tgemm_avx512, conv1d_avx512; /* 1 ("0" given): the host tile GEMM / direct conv1d keep to AVX2 (benches) */
  int32_t cuda_no_poll;  /* cuda: completions by host functions only (backends/cuda/backend.c) */
  char blas[256];          /* the host BLAS library ("" = libopenblas.so.0) */
  char blas_coretype[32];  /* its kernel set ("" / "auto" = the best the CPU runs) */
} gpa__opts;

struct gpa_actor {
  gpa__opts opts;
  const gpa__backend *be;
  void *bctx; /* backend context */
  const char *backend_name;
  gpa_registry registry;
  gpa__bufcache *cache;
  pthread_t thread;

  /* mailbox */
  _Atomic(gpa__ctx *) ctxs; /* producer contexts, newest first */
  pthread_mutex_t ctx_lock; /* registration and adoption */
  ck_ec32_t ec;             /* wakes the actor */
  ck_ec32_t space_ec;       /* wakes producers waiting for ring space */
  _Atomic int idle;         /* the actor is about to sleep */
  _Atomic int closing;      /* intake stopped */
  _Atomic int stopping;     /* the actor drains and exits */
  _Atomic int shut;         /* shutdown finished: only host structures remain */
  _Atomic uint32_t producers;
  /* other threads that will still touch this actor: an engine between a
   * collective's completion and its wake-up (comm.c); the actor's memory
   * is freed only once there are none */
  _Atomic uint32_t holds;
  /* bumped by callers about to wait (actor.c, coalesce); apart from the
   * flags above, which every submit reads */
  _Alignas(64) _Atomic uint32_t hurry;

  /* queues */
  pthread_mutex_t queue_lock; /* the list of all queues (freed at destroy) */
  gpa_queue *queues;
  gpa_queue *default_q;
  uint32_t next_queue_id;

  _Atomic(gpa__msg *) done; /* device completions pushed by other threads */

  /* extensions' per-actor state (actor/hooks.h), made on first use */
  pthread_mutex_t ext_lock;
  const gpa__ext *ext[GPA__MAX_EXTS];
  void *_Atomic ext_state[GPA__MAX_EXTS];

  /* actor thread only: off the lines producers read per message */
  _Alignas(64) gpa__ret_cache ret[GPA__RET_SLOTS];
  gpa__ctx *own; /* the pool of messages made from records sent by value (mailbox.c) */
  gpa_profiler profilers[GPA__MAX_PROFILERS];
  uint32_t n_profilers;
  gpa_queue *parked;
  uint32_t held_total;
  uint32_t inflight_total;
  bool cancelling; /* shutdown with GPA_SHUTDOWN_CANCEL: complete instead of run */
  bool nvtx_tool;  /* an NVTX tool is injected: ranges around messages always */
  gpa_queue *run_q; /* the queue whose run of messages is being timed (dispatch.c) */
  int64_t run_t0;
  uint64_t messages;
  uint64_t bytes_uploaded, bytes_read_back, uploads_skipped;
  char scratch_err[GPA__ERR_MAX];
};

/* options.c */
gpa_status gpa__options_resolve(const gpa_actor_options *user, gpa__opts *out);
/* The process-wide options (environment and config file; no program
 * layer), read once. Any thread. */
const gpa__opts *gpa__options_process(void);

/* handle.c: message pool and completion */
gpa__msg *gpa__msg_new(gpa_actor *a, int kind); /* NULL + error set on failure */
void gpa__msg_ref(gpa__msg *m);
void gpa__msg_unref(gpa__msg *m);
/* On the actor thread, gpa__msg_unref_actor (ctx.h) batches them;
 * gpa__msg_return_flush gives them back. */
void gpa__msg_return_flush(gpa_actor *a);
/* Sets status/message (fmt may be NULL) and wakes waiters. Exactly once. */
void gpa__msg_complete(gpa__msg *m, gpa_status st, const char *msg);
gpa_status gpa__msg_set_tensors(gpa__msg *m, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                                uint32_t n_out);
/* Sends a control call and waits for it. Returns its status. */
gpa_status gpa__call(gpa_actor *a, gpa__msg *m);

/* mailbox.c: gpa__send adds the actor's reference; gpa__send_owned hands
 * the caller's to the actor on success (on failure the caller keeps it). */
gpa_status gpa__send(gpa_actor *a, gpa__msg *m);
gpa_status gpa__send_owned(gpa_actor *a, gpa__msg *m);
/* dispatch.c: the control call a waiter sends for a held message (params:
 * the message, with a reference). */
gpa_status gpa__held_release(gpa_actor *a, gpa__msg *kick);
/* Actor side: takes up to budget records per ring and runs or queues them.
 * Returns the count; *full: some ring still has records (its budget ran
 * out, or its head waits for its turn). */
uint32_t gpa__mailbox_drain(gpa_actor *a, uint32_t budget, bool *full);
bool gpa__mailbox_empty(gpa_actor *a);
/* Waits until no producer is inside gpa__send (after closing is set). */
void gpa__mailbox_quiesce(gpa_actor *a);
void gpa__mailbox_fini(gpa_actor *a);
/* The actor's own message pool (actor thread): made before the loop,
 * dropped after it. */
gpa_status gpa__own_pool_init(gpa_actor *a);
void gpa__own_pool_fini(gpa_actor *a);

/* queue.c */
/* src: the context whose ring delivered m (its lane while held) */
void gpa__intake(gpa_actor *a, gpa__msg *m, const gpa__ctx *src);
gpa_status gpa__queue_init_default(gpa_actor *a);
void gpa__queues_cancel_held(gpa_actor *a);
void gpa__queues_release_device(gpa_actor *a);
void gpa__queues_free(gpa_actor *a);

/* dispatch.c: starts one message on the actor thread. A backend that runs
 * it asynchronously returns GPA__DEFERRED (backends/backend.h) from its
 * method and later calls gpa__complete_async (any thread, no allocation, no
 * driver call). */
void gpa__dispatch(gpa_actor *a, gpa__msg *m);
void gpa__complete_async(gpa_actor *a, gpa__msg *m, gpa_status st);
/* Ends the timed run of messages (if any) and starts one for q (or none). */
void gpa__run_switch(gpa_actor *a, gpa_queue *q);
/* Actor thread: finishes what gpa__complete_async pushed. Returns count. */
uint32_t gpa__drain_completions(gpa_actor *a);
/* queue.c: runs what is runnable on q (after a completion, an unpark). */
void gpa__queue_advance(gpa_actor *a, gpa_queue *q);
/* The held message whose turn it is (ticket == expect), or NULL. */
gpa__msg *gpa__queue_head(gpa_queue *q);
/* The queue's batch records a finished message. */
void gpa__batch_note(gpa__batch *b, gpa__msg *m); /* a failure, a readback (batch.c) */
void gpa__batch_fail(gpa__batch *b, gpa_status st, const char *msg);
static inline void gpa__batch_account(gpa_queue *q, gpa__msg *m, int64_t device_ns, uint64_t bytes) {
  gpa__batch *b = &q->s->batch;
  b->ops++;
  b->device_ns += device_ns;
  b->bytes += bytes;
  if (m->status != GPA_OK || m->kind == GPA__MSG_READBACK) gpa__batch_note(b, m);
}

/* queue.c: parked queues (actor/hooks.h). */
void gpa__queue_unpark(gpa_actor *a, gpa_queue *q);
int64_t gpa__queues_next_deadline(gpa_actor *a); /* 0: none */
uint32_t gpa__queues_expire(gpa_actor *a, int64_t now);
/* actor.c: the extensions' shutdown (actor thread) and destroy hooks. */
void gpa__exts_shutdown(gpa_actor *a);
void gpa__exts_destroy(gpa_actor *a);

/* profile.c: profiling hooks, all on the actor thread. GPA_NO_PROFILING
 * compiles them out (for measuring what the idle check costs). */
#ifdef GPA_NO_PROFILING
#define GPA__PROFILING(a) 0
#else
#define GPA__PROFILING(a) ((a)->n_profilers != 0)
#endif
/* What a backend sees of m (backends/backend.h). */
static inline gpa__work gpa__work_of(gpa__msg *m) {
  return (gpa__work){m, m->q && m->q->s ? m->q->s->bq : NULL, m->err, sizeof m->err, &m->device_ns,
                     m->q && GPA__PROFILING(m->q->actor)};
}
void gpa__prof_op(gpa_actor *a, gpa__msg *m, gpa_status st, int64_t end_ns);
/* The name profilers and NVTX give a message: its op's, or "upload", "readback", ... */
const char *gpa__prof_msg_name(const gpa__msg *m);
void gpa__prof_batch(gpa_actor *a, gpa_queue *q, const gpa_batch_stats *st, int64_t start_ns, int64_t end_ns);
gpa_status gpa__profilers_start(gpa_actor *a, char *msg, size_t cap); /* built-ins from options */
void gpa__profilers_stop(gpa_actor *a);
/* trace.c, summary.c: the built-in profilers */
gpa_status gpa__trace_profiler(const char *path, gpa_profiler *out, char *msg, size_t cap);
gpa_status gpa__summary_profiler(gpa_profiler *out);
/* nvtx.c: ranges around ops on the actor thread; no-ops without a tool. */
void gpa__nvtx_push(const char *name);
void gpa__nvtx_pop(void);
/* Whether a tool (Nsight) asks for NVTX ranges: NVTX_INJECTION64_PATH is set. */
bool gpa__nvtx_tool(void);

/* Validation shared by submit paths (ops/validate.c). */
gpa_status gpa__check_queue_slow(gpa_queue *q); /* sets the error */
static inline gpa_status gpa__check_queue(gpa_queue *q) {
  if (__builtin_expect(q && !atomic_load_explicit(&q->actor->closing, memory_order_acquire) &&
                           !atomic_load_explicit(&q->closed, memory_order_acquire), 1))
    return GPA_OK;
  return gpa__check_queue_slow(q);
}
gpa_status gpa__tensor_bytes(const gpa_tensor *t, uint64_t *bytes, const char *what);
gpa_status gpa__check_tensor(gpa_actor *a, const gpa_tensor *t, const char *what);
/* The same for the argument "what: list[index]", named only in a failure. */
gpa_status gpa__tensor_bytes_at(const gpa_tensor *t, uint64_t *bytes, const char *what, const char *list,
                                uint32_t index);
gpa_status gpa__check_tensor_at(gpa_actor *a, const gpa_tensor *t, const char *what, const char *list,
                                uint32_t index);

#endif
