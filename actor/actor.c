/* Actor lifecycle and the actor thread's loop. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/bufcache.h"
#include "actor/fence.h"
#include "actor/spin.h"
#include "backends/backend.h"
#include "kernels/host/blas_lib.h"

extern const struct ck_ec_mode gpa__ec_mp;
void gpa__tls_drop_dead(void);

typedef struct startup {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;
  gpa_status st;
  char msg[256];
} startup;

/* Streaming producers: how long the actor lets its rings fill before it
 * looks again, once a pass has emptied them twice in a row. An actor that
 * keeps up with a producer otherwise takes each message as soon as it is
 * committed, and every message then moves the ring's tail line and its
 * record's line between the cores, twice: most of the async cost
 * (docs/benchmarks.md). A few microseconds let the producer write a batch
 * on lines it owns, which the actor then reads in one go. A request that
 * someone waits for (gpa__call) ends the wait early through `hurry`; a lone
 * message (a round trip) never meets it: the pass before found nothing. */
#define GPA__COALESCE_NS 3000

static void coalesce(gpa_actor *a) {
  uint32_t h = atomic_load_explicit(&a->hurry, memory_order_relaxed);
  int64_t t0 = gpa__clock_ns();
  while (gpa__clock_ns() - t0 < GPA__COALESCE_NS && atomic_load_explicit(&a->hurry, memory_order_relaxed) == h)
    gpa__cpu_relax();
}

void *gpa__ext_state(gpa_actor *a, const gpa__ext *e) {
  for (uint32_t i = 0; i < GPA__MAX_EXTS; i++) {
    void *st = atomic_load_explicit(&a->ext_state[i], memory_order_acquire);
    if (st && a->ext[i] == e) return st;
  }
  pthread_mutex_lock(&a->ext_lock);
  void *st = NULL;
  uint32_t i = 0;
  while (i < GPA__MAX_EXTS && a->ext[i] && a->ext[i] != e) i++;
  if (i == GPA__MAX_EXTS) {
    gpa__fail(GPA_EINTERNAL, "more than %d runtime extensions", GPA__MAX_EXTS);
  } else if (a->ext[i]) {
    st = atomic_load_explicit(&a->ext_state[i], memory_order_relaxed);
  } else if ((st = e->create(a))) {
    a->ext[i] = e;
    atomic_store_explicit(&a->ext_state[i], st, memory_order_release);
  } else {
    gpa__fail(GPA_ENOMEM, "out of memory");
  }
  pthread_mutex_unlock(&a->ext_lock);
  return st;
}

void gpa__exts_shutdown(gpa_actor *a) {
  pthread_mutex_lock(&a->ext_lock);
  for (uint32_t i = 0; i < GPA__MAX_EXTS && a->ext[i]; i++)
    if (a->ext[i]->shutdown) a->ext[i]->shutdown(a, atomic_load_explicit(&a->ext_state[i], memory_order_relaxed));
  pthread_mutex_unlock(&a->ext_lock);
}

void gpa__exts_destroy(gpa_actor *a) {
  for (uint32_t i = 0; i < GPA__MAX_EXTS && a->ext[i]; i++) {
    a->ext[i]->destroy(a, atomic_load_explicit(&a->ext_state[i], memory_order_relaxed));
    a->ext[i] = NULL;
    atomic_store_explicit(&a->ext_state[i], NULL, memory_order_relaxed);
  }
}

static void actor_loop(gpa_actor *a) {
  int64_t poll_at = 0; /* next backend poll while device work is in flight */
  bool slept = false;   /* the last sleep ended and nothing has arrived since */
  bool streaming = false; /* the last pass emptied rings that had messages */
  for (;;) {
    if (atomic_load_explicit(&a->stopping, memory_order_acquire) && a->opts.shutdown_policy == GPA_SHUTDOWN_CANCEL)
      a->cancelling = true;
    uint32_t did = gpa__drain_completions(a);
    bool full = false;
    uint32_t got = gpa__mailbox_drain(a, 64, &full);
    did += got;
    if (a->parked) {
      did += gpa__queues_expire(a, gpa__now_ns());
      gpa__msg_return_flush(a);
    }
    if (did && a->be->flush) a->be->flush(a->bctx);
    if (did) {
      slept = false;
      if (got && !full && streaming) coalesce(a);
      streaming = got && !full;
      continue;
    }
    streaming = false;
    if (a->run_q) gpa__run_switch(a, NULL); /* idle time is nobody's device time */
    if (atomic_load_explicit(&a->stopping, memory_order_acquire)) {
      /* closing + quiesce happened before stopping was set: every accepted
       * message is in a ring, and the drain above found them all. Device
       * work still in flight completes before the actor leaves; work a
       * backend holds (graph batches never synced) starts now. */
      if (a->inflight_total && a->be->release) {
        a->be->release(a->bctx, NULL, GPA__RELEASE_END);
        if (a->be->flush) a->be->flush(a->bctx);
      }
      if (gpa__mailbox_empty(a) && !a->inflight_total) return;
    }
    /* Spin a little before sleeping (spin.h). Not again after a sleep that
     * found nothing (a poll's timeout): with device work in flight for
     * long, that spin would be most of the actor's CPU time. */
    bool work = false;
    for (gpa__spin s = gpa__spin_begin(GPA__SPIN_IDLE_NS); !work && !slept && gpa__spin_on(&s);) {
      work = !gpa__mailbox_empty(a) || atomic_load_explicit(&a->done, memory_order_relaxed) ||
             (atomic_load_explicit(&a->stopping, memory_order_relaxed) && !a->inflight_total);
      /* device work done while we spin completes here, not via a driver
       * thread's host function and a wake-up (a round trip's two hops) */
      if (!work && a->inflight_total && a->be->reap && (s.n & 7) == 0) work = a->be->reap(a->bctx) != 0;
    }
    if (work) continue;
    if (a->be->park) a->be->park(a->bctx); /* about to sleep: host functions take over */
    /* Device work in flight: let the backend look for failures no completion
     * will report, every GPA__POLL_NS at most, and sleep no longer than that. */
    int64_t dl = gpa__queues_next_deadline(a);
    if (a->inflight_total && a->be->poll) {
      int64_t now = gpa__now_ns();
      if (now >= poll_at) {
        poll_at = now + GPA__POLL_NS;
        if (a->be->poll(a->bctx)) continue;
      }
      if (!dl || poll_at < dl) dl = poll_at;
    }
    uint32_t snap = ck_ec32_value(&a->ec);
    atomic_store_explicit(&a->idle, 1, memory_order_relaxed);
    gpa__fence_heavy(); /* the rare side of the idle/ring pair (fence.h) */
    if (gpa__mailbox_empty(a) && !atomic_load_explicit(&a->done, memory_order_acquire) &&
        !(atomic_load_explicit(&a->stopping, memory_order_acquire) && !a->inflight_total)) {
      /* A parked message with a deadline bounds the sleep, and so does a poll. */
      struct timespec ts = {dl / 1000000000, dl % 1000000000};
      ck_ec32_wait(&a->ec, &gpa__ec_mp, snap, dl ? &ts : NULL);
    }
    atomic_store_explicit(&a->idle, 0, memory_order_relaxed);
    slept = true;
  }
}

static void *actor_main(void *arg) {
  void **args = arg;
  gpa_actor *a = args[0];
  startup *su = args[1];
  gpa_status st = gpa__own_pool_init(a);
  const gpa__opts *o = &a->opts;
  gpa__be_host host = {.actor = a, .device = o->device, .threads = o->threads, .log_level = o->log_level,
                       .cuda_driver = o->cuda_driver[0] ? o->cuda_driver : NULL,
                       .cublas = o->cublas[0] ? o->cublas : NULL,
                       .cublaslt = o->cublaslt[0] ? o->cublaslt : NULL,
                       .cudnn = o->cudnn[0] ? o->cudnn : NULL,
                       .nccl = o->nccl[0] ? o->nccl : NULL,
                       .cuda_no_poll = gpa__options_process()->cuda_no_poll != 0,
                       .cudnn_conv = o->cudnn_conv, .conv_tc = o->conv_tc,
                       .conv_ig_small = o->conv_ig_small,
                       .fa2_exact = o->fa2_exact, .fa2_dkv128 = o->fa2_dkv128, .cuda_split_sums = o->cuda_split_sums,
                       .emb_bwd_rows = o->emb_bwd_rows,
                       .complete = gpa__complete_async, .trim = gpa__bufcache_trim};
  if (st == GPA_OK) st = a->be->init(&host, &a->bctx, su->msg, sizeof su->msg);
  if (st == GPA_OK) st = gpa__bufcache_init(a);
  if (st == GPA_OK) st = gpa__queue_init_default(a);
  if (st == GPA_OK) st = gpa__profilers_start(a, su->msg, sizeof su->msg);
  a->nvtx_tool = gpa__nvtx_tool();
  pthread_mutex_lock(&su->lock);
  su->st = st;
  su->done = 1;
  pthread_cond_signal(&su->cond);
  pthread_mutex_unlock(&su->lock);
  if (st != GPA_OK) {
    gpa__own_pool_fini(a);
    return NULL;
  }
  actor_loop(a);
  gpa__queues_cancel_held(a);
  gpa__exts_shutdown(a);
  gpa__profilers_stop(a);
  gpa__msg_return_flush(a);
  gpa__own_pool_fini(a);
  return NULL;
}

/* Device-side resources: buffers' memory, streams, the backend. */
static void release_device(gpa_actor *a) {
  gpa__queues_release_device(a);
  gpa__bufcache_release_memory(a);
  if (a->bctx && a->be->fini) a->be->fini(a->bctx);
  a->bctx = NULL;
}

/* Host-side structures that other threads may still read while a shutdown
 * runs (flags, queue and slot tables, the registry). */
static void actor_free(gpa_actor *a) {
  /* Its owner may have seen a collective complete before the engine that
   * completed it has sent the wake-up (microseconds; comm.c) */
  while (atomic_load_explicit(&a->holds, memory_order_acquire)) sched_yield();
  release_device(a);
  gpa__exts_destroy(a);
  gpa__queues_free(a);
  gpa__bufcache_fini(a);
  gpa__registry_fini(&a->registry);
  gpa__mailbox_fini(a);
  gpa__tls_drop_dead();
  pthread_mutex_destroy(&a->ctx_lock);
  pthread_mutex_destroy(&a->queue_lock);
  pthread_mutex_destroy(&a->ext_lock);
  free(a);
}

gpa_status gpa_actor_create(const gpa_actor_options *opts, gpa_actor **out) {
  if (!out) return gpa__fail(GPA_EINVAL, "gpa_actor_create: out is NULL");
  *out = NULL;
  gpa__clock_init();
  gpa__fence_init();
  gpa_actor *a = aligned_alloc(_Alignof(gpa_actor), sizeof *a); /* its line split needs it */
  if (a) memset(a, 0, sizeof *a);
  if (!a) return gpa__fail(GPA_ENOMEM, "gpa_actor_create: out of memory");
  gpa_status st = gpa__options_resolve(opts, &a->opts);
  if (st == GPA_OK) st = gpa__backend_select(a->opts.device, a->opts.cuda_driver[0] ? a->opts.cuda_driver : NULL, &a->be);
  if (st != GPA_OK) {
    free(a);
    return st;
  }
  a->backend_name = a->be->name;
  pthread_mutex_init(&a->ctx_lock, NULL);
  pthread_mutex_init(&a->queue_lock, NULL);
  pthread_mutex_init(&a->ext_lock, NULL);
  ck_ec32_init(&a->ec, 0);
  ck_ec32_init(&a->space_ec, 0);
  st = gpa__registry_init(&a->registry);
  if (st != GPA_OK) {
    actor_free(a);
    return st;
  }
  startup su = {.done = 0};
  pthread_mutex_init(&su.lock, NULL);
  pthread_cond_init(&su.cond, NULL);
  void *args[2] = {a, &su};
  if (pthread_create(&a->thread, NULL, actor_main, args)) {
    actor_free(a);
    return gpa__fail(GPA_ENOMEM, "gpa_actor_create: cannot start the actor thread");
  }
  pthread_mutex_lock(&su.lock);
  while (!su.done) pthread_cond_wait(&su.cond, &su.lock);
  pthread_mutex_unlock(&su.lock);
  pthread_mutex_destroy(&su.lock);
  pthread_cond_destroy(&su.cond);
  if (su.st != GPA_OK) {
    pthread_join(a->thread, NULL);
    actor_free(a);
    return gpa__fail(su.st, "gpa_actor_create: %s", su.msg[0] ? su.msg : gpa_strerror(su.st));
  }
  gpa__log(GPA_LOG_INFO, a->opts.log_level, "actor started on backend %s", a->be->name);
  /* Loaded here, before a device library that links OpenBLAS (the
   * simulator's cuBLAS) could initialise it with another kernel set. */
  gpa__log(GPA_LOG_INFO, a->opts.log_level, "host BLAS: %s", gpa__blas()->note);
  *out = a;
  return GPA_OK;
}

gpa_status gpa_actor_shutdown(gpa_actor *a) {
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_actor_shutdown: actor is NULL");
  if (pthread_equal(pthread_self(), a->thread))
    return gpa__fail(GPA_EINVAL, "gpa_actor_shutdown: called on the actor's own thread");
  int expect = 0;
  if (!atomic_compare_exchange_strong(&a->closing, &expect, 1)) {
    if (atomic_load(&a->shut)) return GPA_OK;
    return gpa__fail(GPA_ESHUTDOWN, "gpa_actor_shutdown: another thread is shutting the actor down");
  }
  gpa__mailbox_quiesce(a);
  atomic_store_explicit(&a->stopping, 1, memory_order_seq_cst);
  ck_ec32_inc(&a->ec, &gpa__ec_mp);
  pthread_join(a->thread, NULL);
  release_device(a);
  atomic_store(&a->shut, 1);
  return GPA_OK;
}

gpa_status gpa_actor_destroy(gpa_actor *a) {
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_actor_destroy: actor is NULL");
  if (!atomic_load(&a->shut)) {
    gpa_status st = gpa_actor_shutdown(a);
    if (st != GPA_OK) return st;
  }
  actor_free(a);
  return GPA_OK;
}

const char *gpa_actor_backend(const gpa_actor *a) { return a ? a->backend_name : ""; }
