/* The CUDA backend: the actor on a GPU through the driver API (or on the
 * simulated device, GPA_DEVICE=sim). Design notes in docs/cuda.md.
 *
 * Completion path
 * ---------------
 * Every deferred message gets a record; each flush closes a stream's group
 * of records with one end event (two events per op only when timed). While
 * the actor spins, it queries those end events and completes finished
 * groups itself (cu_reap): an awaited op's round trip then crosses no
 * driver thread. Before it sleeps, or once GPA__CU_POLL_MAX records wait,
 * the pending groups get one cuLaunchHostFunc(stream, done, first) (cu_park;
 * GPA_CUDA_NO_POLL: at every flush). A record is reaped or covered by a
 * host function, never both. `done`
 * runs on the driver's callback thread: it copies a readback's pinned
 * staging into the message's payload (memcpy only: no CUDA call, no
 * allocation) and pushes the message onto the actor's lock-free completion
 * stack (gpa__complete_async), which wakes the actor if it sleeps. The actor
 * then calls our `complete` method in completion order: it pops the record
 * (records of a stream complete in FIFO order), reads the device time from
 * the events, recycles staging and record, and turns the status into
 * GPA_EDEVICE if the context has a sticky error (every driver call reports it
 * once it happened). The actor sleeps on its event count and waiters on their
 * handle's futex.
 *
 * A real driver calls no host function after a sticky error, so the records
 * pending then would never complete. While work is in flight the actor wakes
 * every few ms and calls our `poll`: it queries the busy streams
 * (cuStreamQuery reports the sticky error) and, once the context failed,
 * completes every record whose host function has not run with GPA_EDEVICE.
 * A record is completed by whoever claims it first (rec->claimed), the host
 * function or the poll; a record the poll claimed stays allocated, untouched,
 * until fini, because its host function may still be called late.
 *
 * Staging: an upload's data was copied by gpa_upload into a malloc'ed
 * payload (the caller may free at once); the actor copies it into a pinned
 * block from the staging pool and enqueues an async H2D copy from there. A
 * readback lands in a pinned block by async D2H. Blocks are recycled (at most
 * GPA__CU_STAGE_CACHE bytes kept).
 *
 * Memory: the core's buffer cache (its own size classes, LRU of released
 * buffers, evict-and-retry-once on out-of-memory) and the queues' scratch
 * sit on stream-ordered allocation (alloc.c): no free synchronizes the
 * device. The cache frees only buffers no in-flight work names (pins).
 * Pinned staging is freed only when its cache overflows, on out-of-memory
 * and at fini (cuMemFreeHost synchronizes the device). */
#include "backends/cuda/alloc.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/graph.h"
#include "backends/cuda/timing.h"
#include "kernels/cuda/launch_shapes.h"

#define GPA__CU_STAGE_MIN (64u << 10)
#define GPA__CU_STAGE_CACHE (256ull << 20)

#ifndef GPA_SIM_DRIVER_DEFAULT
#define GPA_SIM_DRIVER_DEFAULT "libgpa_sim_cuda.so"
#endif

static bool is_sticky(CUresult r) {
  switch ((int)r) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_UNKNOWN: return true;
    default: return false;
  }
}

gpa_status gpa__cu_fail(gpa__cu_ctx *C, CUresult r, const char *what, char *msg, size_t cap) {
  char e[160];
  gpa__cu_errstr(&C->cu, r, e, sizeof e);
  if (is_sticky(r) && !C->failed) {
    C->failed = r;
    snprintf(C->fail_msg, sizeof C->fail_msg, "%s", e);
    gpa__log(GPA_LOG_ERROR, C->host.log_level, "cuda: sticky device error (%s): every pending and later op fails",
             e);
  }
  if (msg) {
    if (C->failed) snprintf(msg, cap, "%s: device failed: %s", what, C->fail_msg);
    else snprintf(msg, cap, "%s: %s", what, e);
  }
  return r == CUDA_ERROR_OUT_OF_MEMORY ? GPA_ENOMEM : GPA_EDEVICE;
}

static gpa_status failed_state(gpa__cu_ctx *C, char *msg, size_t cap) {
  snprintf(msg, cap, "device failed earlier: %s", C->fail_msg);
  return GPA_EDEVICE;
}

/* ---- init / fini ---------------------------------------------------------------------------------- */

static gpa_status parse_device(const char *dev, bool *sim, int *ordinal, char *msg, size_t cap) {
  /* sim:N: simulated device N (GPA_SIM_DEVICES of them, docs/sim.md) */
  *sim = !strcmp(dev, "sim") || !strncmp(dev, "sim:", 4);
  *ordinal = 0;
  size_t at = !strncmp(dev, "cuda:", 5) ? 5 : !strncmp(dev, "sim:", 4) ? 4 : 0;
  if (at) {
    char *end;
    long v = strtol(dev + at, &end, 10);
    if (!dev[at] || *end || v < 0 || v > 1024) {
      snprintf(msg, cap, "device '%s': expected %s:N with N a device ordinal", dev, *sim ? "sim" : "cuda");
      return GPA_EINVAL;
    }
    *ordinal = (int)v;
  }
  return GPA_OK;
}

static const char *driver_path(const gpa__cu_ctx *C) {
  if (C->host.cuda_driver) return C->host.cuda_driver;
  return C->sim ? GPA_SIM_DRIVER_DEFAULT : NULL;
}

static gpa_status cu_init(const gpa__be_host *host, void **bctx, char *msg, size_t cap) {
  gpa__cu_ctx *C = calloc(1, sizeof *C);
  if (!C) return GPA_ENOMEM;
  C->host = *host;
  C->no_poll = host->cuda_no_poll;
  C->env.backend = C;
  gpa_status st = parse_device(host->device, &C->sim, &C->ordinal, msg, cap);
  if (st == GPA_OK) st = gpa__cu_open(&C->cu, driver_path(C), msg, cap);
  if (st != GPA_OK) {
    free(C);
    return st;
  }
  int n = 0;
  C->cu.cuDeviceGetCount(&n);
  CUresult r = CUDA_SUCCESS;
  if (C->ordinal >= n) {
    snprintf(msg, cap, "no CUDA device %d: the driver reports %d device%s", C->ordinal, n, n == 1 ? "" : "s");
    st = GPA_ENODEVICE;
  } else if ((r = C->cu.cuDeviceGet(&C->dev, C->ordinal)) != CUDA_SUCCESS ||
             (r = C->cu.cuDevicePrimaryCtxRetain(&C->ctx, C->dev)) != CUDA_SUCCESS ||
             (r = C->cu.cuCtxSetCurrent(C->ctx)) != CUDA_SUCCESS) {
    char e[160];
    snprintf(msg, cap, "CUDA device %d: cannot make its primary context current: %s", C->ordinal,
             gpa__cu_errstr(&C->cu, r, e, sizeof e));
    if (C->ctx) C->cu.cuDevicePrimaryCtxRelease(C->dev);
    st = GPA_ENODEVICE;
  }
  if (st != GPA_OK) {
    gpa__cu_close(&C->cu);
    free(C);
    return st;
  }
  C->cu.cuDeviceGetAttribute(&C->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, C->dev);
  C->cu.cuDeviceGetAttribute(&C->max_smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, C->dev);
  if (C->sm_count <= 0) C->sm_count = 1;
  /* Grid caps of grid-stride launches. The emulator pays per emulated thread
   * (and far more under TSan): there, few threads that loop longer. */
  C->grid_cap = C->sim ? 2 : C->sm_count * 8;
  C->row_cap = C->sim ? 4 : C->sm_count * 16;
  gpa__cu_mem_init(C);
  char name[128] = "";
  C->cu.cuDeviceGetName(name, sizeof name, C->dev);
  gpa__log(GPA_LOG_INFO, C->host.log_level, "cuda: device %d (%s), %d SMs%s", C->ordinal, name, C->sm_count,
           C->sim ? ", simulated" : "");
  *bctx = C;
  return GPA_OK;
}

/* Device teardown runs on the thread that shuts the actor down: make the
 * context current there first. */
static void enter(gpa__cu_ctx *C) { C->cu.cuCtxSetCurrent(C->ctx); }

/* After a sticky error every driver call fails: the only way to give the
 * device resources back is to reset the primary context (it frees streams,
 * memory and modules; other actors on this device in this process have lost
 * the context already). The reset frees events, streams and pinned memory
 * too: their handles are dangling then, and the driver crashes on a destroy
 * of one (seen on an H100), so they are only forgotten. */
static void cu_fini(void *bctx) {
  gpa__cu_ctx *C = bctx;
  enter(C);
  bool reset = C->failed != CUDA_SUCCESS;
  /* This actor's streams, not cuCtxSynchronize: the primary context is
   * shared by every actor of the device in the process (issue 30). */
  for (gpa__cu_queue *q = C->free_queues; q && !reset; q = q->next_free)
    if (C->cu.cuStreamSynchronize(q->s) != CUDA_SUCCESS) reset = true;
  gpa__cu_blas_release(C);
  gpa__cudnn_release(C);
  if (reset) {
    C->cu.cuDevicePrimaryCtxReset(C->dev);
    memset(C->mods, 0, sizeof C->mods);
    enter(C);
  }
  gpa__cu_kernels_release(C);
  /* The streams are gone (reset) or idle: no host function can run now. */
  while (C->abandoned) {
    gpa__cu_rec *r = C->abandoned;
    C->abandoned = r->next;
    r->next = C->free_recs;
    C->free_recs = r;
    for (gpa__cu_stage *st = r->stages, *n; st; st = n) {
      n = st->next;
      st->next = C->free_stages;
      C->free_stages = st;
    }
    if (r->post.stage) {
      r->post.stage->next = C->free_stages;
      C->free_stages = r->post.stage;
    }
  }
  while (C->free_queues) {
    gpa__cu_queue *q = C->free_queues;
    C->free_queues = q->next_free;
    if (!reset) C->cu.cuStreamDestroy(q->s);
    free(q);
  }
  while (C->free_recs) {
    gpa__cu_rec *r = C->free_recs;
    C->free_recs = r->next;
    if (!reset) {
      C->cu.cuEventDestroy(r->ev0);
      C->cu.cuEventDestroy(r->ev1);
    }
    free(r);
  }
  while (C->free_stages) {
    gpa__cu_stage *s = C->free_stages;
    C->free_stages = s->next;
    if (!reset) C->cu.cuMemFreeHost(s->p);
    free(s);
  }
  gpa__cu_mem_fini(C, reset);
  C->cu.cuCtxSetCurrent(NULL);
  C->cu.cuDevicePrimaryCtxRelease(C->dev);
  gpa__cu_close(&C->cu);
  gpa__exec_env_fini(&C->env);
  free(C);
}

/* ---- memory ---------------------------------------------------------------------------------------- */

static gpa_status cu_alloc(void *bctx, uint64_t size, void **ptr) {
  gpa__cu_ctx *C = bctx;
  CUdeviceptr p = 0;
  CUresult r = gpa__cu_mem_alloc(C, NULL, size, &p);
  if (r != CUDA_SUCCESS) {
    gpa__cu_check(C, r, "cuMemAlloc", NULL, 0);
    *ptr = NULL;
    return GPA_ENOMEM;
  }
  *ptr = (void *)(uintptr_t)p;
  return GPA_OK;
}

static void cu_free(void *bctx, void *ptr) {
  gpa__cu_ctx *C = bctx;
  enter(C);
  gpa__cu_mem_free(C, NULL, (CUdeviceptr)(uintptr_t)ptr);
}

gpa__cu_stage *gpa__cu_stage_get(gpa__cu_ctx *C, uint64_t n) {
  /* Best fit among cached blocks no more than 4x too large. */
  gpa__cu_stage **best = NULL;
  for (gpa__cu_stage **pp = &C->free_stages; *pp; pp = &(*pp)->next)
    if ((*pp)->cap >= n && (*pp)->cap / 4 <= n + GPA__CU_STAGE_MIN && (!best || (*pp)->cap < (*best)->cap)) best = pp;
  if (best) {
    gpa__cu_stage *s = *best;
    *best = s->next;
    C->staged_cached -= s->cap;
    s->next = NULL;
    return s;
  }
  gpa__cu_stage *s = malloc(sizeof *s);
  if (!s) return NULL;
  uint64_t cap = GPA__CU_STAGE_MIN;
  while (cap < n) cap *= 2;
  CUresult r = C->cu.cuMemAllocHost(&s->p, cap);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && C->free_stages) {
    /* Give the cached blocks back and retry once. */
    while (C->free_stages) {
      gpa__cu_stage *f = C->free_stages;
      C->free_stages = f->next;
      C->cu.cuMemFreeHost(f->p);
      free(f);
    }
    C->staged_cached = 0;
    r = C->cu.cuMemAllocHost(&s->p, cap);
  }
  if (r != CUDA_SUCCESS) {
    gpa__cu_check(C, r, "cuMemAllocHost", NULL, 0);
    free(s);
    return NULL;
  }
  s->cap = cap;
  s->rb_dst = NULL;
  s->rb_n = 0;
  s->next = NULL;
  s->graph = false;
  return s;
}

void gpa__cu_stage_put(gpa__cu_ctx *C, gpa__cu_stage *s) {
  if (!s || s->graph) return; /* a graph's own: freed with the graph */
  if (C->staged_cached + s->cap > GPA__CU_STAGE_CACHE) {
    C->cu.cuMemFreeHost(s->p);
    free(s);
    return;
  }
  s->rb_dst = NULL;
  s->rb_n = 0;
  s->next = C->free_stages;
  C->free_stages = s;
  C->staged_cached += s->cap;
}

static void stages_put(gpa__cu_ctx *C, gpa__cu_stage *s) {
  while (s) {
    gpa__cu_stage *n = s->next;
    gpa__cu_stage_put(C, s);
    s = n;
  }
}

/* ---- queues ---------------------------------------------------------------------------------------- */

static gpa_status cu_queue_init(void *bctx, void **bq) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = C->free_queues;
  if (q) {
    C->free_queues = q->next_free;
  } else {
    q = calloc(1, sizeof *q);
    if (!q) return GPA_ENOMEM;
    CUresult r = C->cu.cuStreamCreate(&q->s, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) {
      free(q);
      char msg[200];
      gpa_status st = gpa__cu_check(C, r, "cuStreamCreate", msg, sizeof msg);
      gpa__log(GPA_LOG_WARN, C->host.log_level, "cuda: a new queue has no stream: %s", msg);
      return st;
    }
  }
  q->head = q->tail = NULL;
  q->share = NULL;
  *bq = q;
  return GPA_OK;
}

/* Idle streams kept for later queues; a queue destroyed beyond them takes
 * its stream with it. */
#define GPA__CU_QUEUE_POOL 8

/* Called with nothing of the queue in flight: at gpa_queue_destroy (a
 * barrier: its work has completed) and at shutdown. The stream goes back to
 * the pool for the next queue, or is destroyed once the pool holds
 * GPA__CU_QUEUE_POOL, so a program that opens and closes queues holds no
 * more streams than it had queues open at once. After a sticky error the
 * stream stays in the pool: fini resets the context, which frees it (a
 * destroy after the reset would crash the driver). */
static void cu_queue_fini(void *bctx, void *bq) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = bq;
  enter(C);
  /* the scratch's free goes in stream order, so the wait below covers it */
  gpa__cu_mem_free(C, q->s, q->scratch);
  q->scratch = 0;
  q->scratch_cap = 0;
  gpa__cu_mem_free(C, q->s, q->blas_ws);
  q->blas_ws = 0;
  q->blas_ws_size = 0;
  gpa__cu_mem_free(C, q->s, q->counters);
  q->counters = 0;
  CUresult r = C->cu.cuStreamSynchronize(q->s);
  if (r != CUDA_SUCCESS) gpa__cu_check(C, r, "cuStreamSynchronize", NULL, 0);
  if (q->on_polled) { /* its records are done; a parked chain left it listed */
    gpa__cu_queue **pq = &C->polled;
    while (*pq != q) pq = &(*pq)->polled_next;
    *pq = q->polled_next;
    q->on_polled = false;
  }
  stages_put(C, q->unfenced);
  q->unfenced = NULL;
  gpa__cu_graph_free(C, q);
  unsigned pooled = 0;
  for (gpa__cu_queue *f = C->free_queues; f && pooled < GPA__CU_QUEUE_POOL; f = f->next_free) pooled++;
  if (pooled >= GPA__CU_QUEUE_POOL && r == CUDA_SUCCESS && !C->failed) {
    C->cu.cuStreamDestroy(q->s);
    free(q);
    return;
  }
  q->next_free = C->free_queues;
  C->free_queues = q;
}

/* The queue's scratch block, at least `bytes`. Out of memory: the buffer
 * cache gives its unused buffers back and the allocation is tried once more
 * (as buffer allocation does); then the op fails with GPA_ENOMEM. */
CUresult gpa__cu_queue_block(gpa__cu_ctx *C, gpa__cu_queue *q, const char *what, uint64_t asked, uint64_t size,
                             CUdeviceptr *slot, char *msg, size_t msg_cap) {
  if (gpa__cu_mem_capturing(C, q->s)) { /* a free or an allocation would be captured into the graph */
    snprintf(msg, msg_cap, "%s: cannot grow to %" PRIu64 " bytes while the stream is captured", what, asked);
    q->scratch_refused = true; /* graph.c: the eager run grows it; record again later */
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  /* freed after the stream's earlier ops, which may still use it */
  gpa__cu_mem_free(C, q->s, *slot);
  *slot = 0;
  CUresult r = gpa__cu_mem_alloc(C, q->s, size, slot);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    uint64_t freed = C->host.trim(C->host.actor);
    gpa__cu_mem_trim(C);
    gpa__log(GPA_LOG_DEBUG, C->host.log_level,
             "cuda: %s of %" PRIu64 " bytes: out of memory, %" PRIu64 " cached bytes evicted, retrying", what, size,
             freed);
    r = gpa__cu_mem_alloc(C, q->s, size, slot);
  }
  if (r != CUDA_SUCCESS) {
    char where[64];
    snprintf(where, sizeof where, "%s: cuMemAlloc", what);
    gpa__cu_check(C, r, where, msg, msg_cap);
    *slot = 0;
  }
  return r;
}

static CUdeviceptr scratch_get(gpa__cu_ctx *C, gpa__cu_queue *q, uint64_t bytes, char *msg, size_t msg_cap) {
  if (!bytes) bytes = 256;
  if (q->scratch_cap >= bytes) return q->scratch;
  uint64_t cap = gpa__size_class(bytes);
  CUresult r = gpa__cu_queue_block(C, q, "scratch", bytes, cap, &q->scratch, msg, msg_cap);
  if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) return 0; /* nothing changed */
  q->scratch_gen++; /* the old block is gone: graphs recorded with it cannot replay */
  q->scratch_cap = r == CUDA_SUCCESS ? cap : 0;
  return q->scratch;
}

CUdeviceptr gpa__cu_scratch(const gpa_op_exec *x, uint64_t bytes) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  return scratch_get(C, C->cur_q, bytes, x->msg, x->msg_size);
}

CUdeviceptr gpa__cu_counters(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__cu_queue *q = C->cur_q;
  if (q->counters) return q->counters;
  const uint64_t bytes = GPA_SPLIT_COUNTERS * sizeof(unsigned);
  if (gpa__cu_queue_block(C, q, "split-sum counters", bytes, bytes, &q->counters, x->msg, x->msg_size) !=
      CUDA_SUCCESS)
    return 0;
  /* stream ordered: zero before the first kernel that counts on them */
  CUresult r = C->cu.cuMemsetD32Async(q->counters, 0, GPA_SPLIT_COUNTERS, q->s);
  if (r != CUDA_SUCCESS) {
    gpa__cu_check(C, r, "split-sum counters: cuMemsetD32Async", x->msg, x->msg_size);
    gpa__cu_mem_free(C, q->s, q->counters);
    q->counters = 0;
  }
  return q->counters;
}

/* gpa_exec_scratch for user ops' CUDA implementations: the same per-stream
 * block, device memory, stream ordered (the op's work on x->stream may use it;
 * the next op of the stream reuses it). */
static void *exec_scratch(gpa_exec_env *env, uint64_t bytes) {
  gpa__cu_ctx *C = env->backend;
  return (void *)(uintptr_t)scratch_get(C, C->cur_q, bytes, C->cur_w.err, C->cur_w.err_cap);
}

gpa_status gpa__cu_sync(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  return gpa__cu_check(C, C->cu.cuStreamSynchronize(C->cur_q->s), "cuStreamSynchronize", x->msg, x->msg_size);
}

/* ---- completion ------------------------------------------------------------------------------------ */

gpa__cu_rec *gpa__cu_rec_get(gpa__cu_ctx *C, const gpa__work *w, char *msg, size_t cap) {
  gpa__cu_rec *r = C->free_recs;
  if (r) {
    C->free_recs = r->next;
  } else {
    r = calloc(1, sizeof *r);
    if (!r) {
      snprintf(msg, cap, "out of host memory for a completion record");
      return NULL;
    }
    CUresult e = C->cu.cuEventCreate(&r->ev0, CU_EVENT_DEFAULT);
    if (e == CUDA_SUCCESS) e = C->cu.cuEventCreate(&r->ev1, CU_EVENT_DEFAULT);
    if (e != CUDA_SUCCESS) {
      if (r->ev0) C->cu.cuEventDestroy(r->ev0);
      free(r);
      gpa__cu_check(C, e, "cuEventCreate", msg, cap);
      return NULL;
    }
    r->C = C;
  }
  r->w = *w;
  gpa__cu_timing_reset(r);
  r->group_end = false;
  r->has_end = false;
  r->stages = NULL;
  r->post = (gpa__cu_post){0};
  atomic_store_explicit(&r->claimed, 0, memory_order_relaxed); /* published by cuLaunchHostFunc */
  r->abandoned = false;
  r->next = NULL;
  return r;
}

void gpa__cu_rec_put(gpa__cu_ctx *C, gpa__cu_rec *r) {
  gpa__cu_timing_release(r);
  stages_put(C, r->stages);
  r->stages = NULL;
  gpa__cu_stage_put(C, r->post.stage);
  r->post = (gpa__cu_post){0};
  r->w = (gpa__work){0};
  r->next = C->free_recs;
  C->free_recs = r;
}

/* Completes a stream's records from r up to stop (exclusive; gnext links
 * them, NULL ends a group) in order, each one the poll has not claimed (its
 * message may be gone): with st == GPA_OK the readbacks land from their
 * staging first; else each message gets st and msg. Runs on the driver's
 * callback thread as the group's host function (no CUDA call, no
 * allocation), or on the actor when it reaps them or their host function
 * could not be enqueued. A completed record goes back to the actor, so the
 * link to the next is read first. Returns the records walked. */
static uint32_t complete_until(gpa__cu_rec *r, gpa__cu_rec *stop, gpa_status st, const char *msg) {
  uint32_t n = 0;
  for (; r != stop; n++) {
    gpa__cu_rec *next = r->gnext;
    if (!atomic_exchange_explicit(&r->claimed, 1, memory_order_acq_rel)) {
      if (st == GPA_OK) {
        for (gpa__cu_stage *s = r->stages; s; s = s->next)
          if (s->rb_n) memcpy(s->rb_dst, s->p, s->rb_n);
      } else {
        snprintf(r->w.err, r->w.err_cap, "%s", msg);
      }
      r->C->host.complete(r->C->host.actor, r->w.m, st);
    }
    r = next;
  }
  return n;
}

static void group_complete(gpa__cu_rec *r, gpa_status st, const char *msg) { complete_until(r, NULL, st, msg); }

static void CUDA_CB done(void *arg) { group_complete(arg, GPA_OK, NULL); }

/* After the message's work was enqueued on q: the end event, and the record
 * joins q's open group, whose host function the next flush enqueues. A host
 * function per message stalled the stream for a round trip to the CPU after
 * every op (a real GPU sat idle between kernels). Returns GPA__DEFERRED, or
 * the error (record released). */
gpa_status gpa__cu_enqueue_done(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r, char *msg, size_t cap) {
  CUresult e = gpa__cu_end_event(C, q, r);
  if (e != CUDA_SUCCESS) {
    gpa_status st = gpa__cu_check(C, e, "cuEventRecord", msg, cap);
    /* The stream may still read the staging block: let it drain. */
    C->cu.cuStreamSynchronize(q->s);
    gpa__cu_rec_put(C, r);
    return st;
  }
  if (q->tail) {
    q->tail->next = r;
  } else {
    q->head = r;
    q->busy_prev = NULL; /* onto the poll's list */
    q->busy_next = C->busy;
    if (C->busy) C->busy->busy_prev = q;
    C->busy = q;
  }
  q->tail = r;
  r->gnext = NULL;
  r->has_end = r->w.timed;
  if (q->open) {
    q->open_last->gnext = r;
  } else {
    q->open = r;
    q->dirty_next = C->dirty;
    C->dirty = q;
  }
  q->open_last = r;
  q->n_open++;
  return GPA__DEFERRED;
}

/* One host function for a stream's records from first (gnext-linked). If
 * it cannot be enqueued, no host function will complete them: the stream is
 * drained and they complete here with the error. */
static void launch_done(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *first, CUresult e, const char *what) {
  /* The host function holds the stream: the next op must not count it. */
  q->share = NULL;
  if (e == CUDA_SUCCESS) e = C->cu.cuLaunchHostFunc(q->s, done, first), what = "cuLaunchHostFunc";
  if (e == CUDA_SUCCESS) return;
  char msg[GPA__ERR_MAX];
  gpa_status st = gpa__cu_check(C, e, what, msg, sizeof msg);
  C->cu.cuStreamSynchronize(q->s);
  group_complete(first, st, msg);
}

/* Hands q's polled records to one host function. */
static void park_queue(gpa__cu_ctx *C, gpa__cu_queue *q) {
  gpa__cu_rec *first = q->poll_first;
  q->poll_first = q->poll_last = NULL;
  q->n_polled = 0;
  if (first) launch_done(C, q, first, CUDA_SUCCESS, NULL);
}

/* Closes each stream's group of records enqueued since the last flush (its
 * end event). Completion polling (the default): the group joins the
 * stream's polled records, which the spinning actor reaps (cu_reap) or, once
 * GPA__CU_POLL_MAX are pending or the actor goes to sleep (cu_park), one
 * host function covers. GPA_CUDA_NO_POLL: a host function per group. */
#define GPA__CU_POLL_MAX 64
static void cu_flush(void *bctx) {
  gpa__cu_ctx *C = bctx;
  while (C->dirty) {
    gpa__cu_queue *q = C->dirty;
    C->dirty = q->dirty_next;
    gpa__cu_rec *first = q->open, *last = q->open_last;
    uint32_t n = q->n_open;
    q->open = q->open_last = NULL;
    q->n_open = 0;
    CUresult e = gpa__cu_group_timing(C, q, first, last);
    if (C->no_poll || e != CUDA_SUCCESS) {
      park_queue(C, q); /* older records first: a stream's host functions run in order */
      launch_done(C, q, first, e, "cuEventRecord");
      continue;
    }
    if (q->poll_last) q->poll_last->gnext = first;
    else q->poll_first = first;
    q->poll_last = last;
    q->n_polled += n;
    if (!q->on_polled) {
      q->on_polled = true;
      q->polled_next = C->polled;
      C->polled = q;
    }
    if (q->n_polled >= GPA__CU_POLL_MAX) park_queue(C, q);
  }
}

/* Completes the polled records whose group's end event has passed, on the
 * actor thread. A query error is left to the poll (a sticky error) or to
 * the host function park enqueues. Returns the records taken (some may have
 * been the poll's already: the actor then only looks once more). */
static uint32_t cu_reap(void *bctx) {
  gpa__cu_ctx *C = bctx;
  uint32_t n = 0;
  for (gpa__cu_queue **pq = &C->polled; *pq;) {
    gpa__cu_queue *q = *pq;
    while (q->poll_first) {
      gpa__cu_rec *end = q->poll_first;
      while (!end->has_end) end = end->gnext; /* every group's last has one */
      if (C->cu.cuEventQuery(end->ev1) != CUDA_SUCCESS) break;
      gpa__cu_rec *r = q->poll_first, *stop = end->gnext;
      q->poll_first = stop;
      if (!stop) q->poll_last = NULL;
      uint32_t k = complete_until(r, stop, GPA_OK, NULL);
      q->n_polled -= k;
      n += k;
    }
    if (q->poll_first) {
      pq = &q->polled_next;
    } else {
      q->on_polled = false;
      *pq = q->polled_next;
    }
  }
  return n;
}

static void cu_park(void *bctx) {
  gpa__cu_ctx *C = bctx;
  while (C->polled) {
    gpa__cu_queue *q = C->polled;
    C->polled = q->polled_next;
    q->on_polled = false;
    park_queue(C, q);
  }
}

/* Unlinks r (whose predecessor in q is prev) from q's records. */
static void rec_unlink(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *prev, gpa__cu_rec *r) {
  if (prev) prev->next = r->next;
  else q->head = r->next;
  if (q->tail == r) q->tail = prev;
  r->next = NULL;
  if (q->head) return;
  if (q->busy_prev) q->busy_prev->busy_next = q->busy_next;
  else C->busy = q->busy_next;
  if (q->busy_next) q->busy_next->busy_prev = q->busy_prev;
  q->busy_prev = q->busy_next = NULL;
}

/* The actor is about to sleep with work in flight: is the context still
 * alive? After a sticky error, every record not claimed by its host function
 * is completed here, with GPA_EDEVICE. Returns the messages completed. */
static uint32_t cu_poll(void *bctx) {
  gpa__cu_ctx *C = bctx;
  for (gpa__cu_queue *q = C->busy; q && !C->failed; q = q->busy_next) {
    CUresult e = C->cu.cuStreamQuery(q->s);
    if (e != CUDA_SUCCESS && e != CUDA_ERROR_NOT_READY) gpa__cu_check(C, e, "cuStreamQuery", NULL, 0);
  }
  if (!C->failed) return 0;
  uint32_t n = 0;
  for (gpa__cu_queue *q = C->busy; q; q = q->busy_next)
    for (gpa__cu_rec *r = q->head; r; r = r->next) {
      if (r->abandoned || atomic_exchange_explicit(&r->claimed, 1, memory_order_acq_rel)) continue;
      r->abandoned = true;
      snprintf(r->w.err, r->w.err_cap, "device failed: %s", C->fail_msg);
      C->host.complete(C->host.actor, r->w.m, GPA_EDEVICE);
      n++;
    }
  return n;
}

static gpa_status post_status(const gpa__cu_rec *r, const gpa__work *w) {
  unsigned long long res[2];
  memcpy(res, r->post.stage->p, sizeof res);
  if (res[0] == ~0ull) return GPA_OK;
  long long pos = (long long)res[0], val = (long long)res[1];
  const int kind = r->post.kind & ~GPA__CU_POST_PACKED;
  if (r->post.kind & GPA__CU_POST_PACKED) pos = (long long)(res[0] >> 32), val = (int)(unsigned)res[0];
  if (kind == GPA__CU_POST_IDS2D)
    snprintf(w->err, w->err_cap, "%s: ids[%lld,%lld] = %lld out of range [0, %lld)", r->post.op,
             pos / r->post.a, pos % r->post.a, val, r->post.b);
  else if (kind == GPA__CU_POST_LENGTHS)
    snprintf(w->err, w->err_cap, "%s: lengths[%lld] = %lld is outside [0, Sk = %lld]", r->post.op, pos, val,
             r->post.a);
  else
    snprintf(w->err, w->err_cap, "%s: targets[%lld] = %lld out of range [0, %lld) (ignore_index %lld)",
             r->post.op, pos, val, r->post.a, r->post.b);
  return GPA_ERANGE;
}

gpa_status gpa__cu_post_check(const gpa_op_exec *x, int kind, const char *op, CUdeviceptr res, long long a,
                              long long b) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__cu_stage *s = gpa__cu_stage_get(C, 16);
  if (!s) {
    snprintf(x->msg, x->msg_size, "%s: out of pinned host memory", op);
    return GPA_ENOMEM;
  }
  CUresult e = C->cu.cuMemcpyDtoHAsync(s->p, res, 16, C->cur_q->s);
  if (e != CUDA_SUCCESS) {
    gpa__cu_stage_put(C, s);
    return gpa__cu_check(C, e, "cuMemcpyDtoHAsync", x->msg, x->msg_size);
  }
  gpa__cu_stage_put(C, C->post.stage); /* a second check of one op replaces the first */
  C->post = (gpa__cu_post){kind, op, a, b, s};
  return GPA_OK;
}

static gpa_status cu_complete(void *bctx, const gpa__work *w, gpa_status st) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = w->bq;
  /* Host functions complete a stream's records in order; the poll's claims
   * may overtake one still on its way. */
  gpa__cu_rec *prev = NULL, *r = q->head;
  while (r && r->w.m != w->m) {
    prev = r;
    r = r->next;
  }
  if (!r && q->direct) { /* held work completed without a record (graph.c) */
    q->direct--;
    if (C->failed && st == GPA_OK) {
      snprintf(w->err, w->err_cap, "device failed: %s", C->fail_msg);
      return GPA_EDEVICE;
    }
    return st;
  }
  if (!r) {
    snprintf(w->err, w->err_cap, "cuda: completion of an unknown message (internal error)");
    return GPA_EINTERNAL;
  }
  rec_unlink(C, q, prev, r);
  if (r->abandoned) {
    /* cu_fini takes its stages once the streams are idle; a graph's own
     * (a replay's readback and check blocks) stay the graph's, freed with
     * it before cu_fini runs */
    for (gpa__cu_stage **pp = &r->stages; *pp;)
      if ((*pp)->graph) *pp = (*pp)->next;
      else pp = &(*pp)->next;
    if (r->post.stage && r->post.stage->graph) r->post = (gpa__cu_post){0};
    gpa__cu_timing_release(r);
    r->w = (gpa__work){0};
    r->next = C->abandoned;
    C->abandoned = r;
    return GPA_EDEVICE; /* its error text was set by the poll */
  }
  CUresult e;
  if (!gpa__cu_device_ns(C, r, w->device_ns, &e) && is_sticky(e)) gpa__cu_check(C, e, "cuEventElapsedTime", NULL, 0);
  if (r->post.kind && st == GPA_OK && !C->failed) st = post_status(r, w);
  gpa__cu_rec_put(C, r);
  if (C->failed && st == GPA_OK) {
    snprintf(w->err, w->err_cap, "device failed: %s", C->fail_msg);
    return GPA_EDEVICE;
  }
  return st;
}

/* ---- copies ---------------------------------------------------------------------------------------- */

/* w == NULL (feed ops): enqueue only; the staging waits on q->unfenced for
 * the fence that completes the message. */
gpa_status gpa__cu_copy(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, bool up, void *host, CUdeviceptr dev,
                       uint64_t n) {
  char scratch[GPA__ERR_MAX];
  char *msg = w ? w->err : scratch;
  size_t cap = w ? w->err_cap : sizeof scratch;
  if (C->failed) return failed_state(C, msg, cap);
  if (!n) return GPA_OK;
  gpa__cu_rec *r = NULL;
  if (w) {
    r = gpa__cu_rec_get(C, w, msg, cap);
    if (!r) return C->failed ? GPA_EDEVICE : GPA_ENOMEM;
  }
  gpa__cu_stage *s = gpa__cu_stage_get(C, n);
  if (!s) {
    if (r) gpa__cu_rec_put(C, r);
    if (C->failed) return failed_state(C, msg, cap);
    snprintf(msg, cap, "out of pinned host memory staging %" PRIu64 " bytes", n);
    return GPA_ENOMEM;
  }
  if (!r) q->share = NULL; /* the copy lands between two timed records */
  CUresult e = r ? gpa__cu_start_event(C, q, r) : CUDA_SUCCESS;
  if (up) {
    memcpy(s->p, host, n);
    if (e == CUDA_SUCCESS) e = C->cu.cuMemcpyHtoDAsync(dev, s->p, n, q->s);
  } else {
    s->rb_dst = host;
    s->rb_n = n;
    if (e == CUDA_SUCCESS) e = C->cu.cuMemcpyDtoHAsync(s->p, dev, n, q->s);
  }
  if (e != CUDA_SUCCESS) {
    gpa__cu_stage_put(C, s);
    if (r) gpa__cu_rec_put(C, r);
    return gpa__cu_check(C, e, up ? "upload: cuMemcpyHtoDAsync" : "readback: cuMemcpyDtoHAsync", msg, cap);
  }
  if (!r) {
    s->next = q->unfenced;
    q->unfenced = s;
    return GPA_OK;
  }
  r->stages = s;
  return gpa__cu_enqueue_done(C, q, r, msg, cap);
}

static gpa_status graph_or_copy(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, bool up, void *host,
                                CUdeviceptr dev, uint64_t n) {
  if (q->gq && !C->failed) {
    gpa_status st = gpa__cu_graph_copy(C, q, w, up, host, dev, n);
    if (st != GPA__CU_EAGER) return st;
  }
  return gpa__cu_copy(C, q, w, up, host, dev, n);
}

static gpa_status cu_upload(void *bctx, void *bq, const gpa__work *w, void *dst, const void *src, uint64_t n) {
  return graph_or_copy(bctx, bq, w, true, (void *)src, (CUdeviceptr)(uintptr_t)dst, n);
}

static gpa_status cu_readback(void *bctx, void *bq, const gpa__work *w, void *dst, const void *src, uint64_t n) {
  return graph_or_copy(bctx, bq, w, false, dst, (CUdeviceptr)(uintptr_t)src, n);
}

/* Feed ops: several copies enqueued with w == NULL, then one completion. */
static gpa_status cu_fence(void *bctx, const gpa__work *w) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = w->bq;
  if (C->failed) return failed_state(C, w->err, w->err_cap);
  gpa__cu_release(C, q, GPA__RELEASE_OTHER);
  gpa__cu_rec *r = gpa__cu_rec_get(C, w, w->err, w->err_cap);
  if (!r) return C->failed ? GPA_EDEVICE : GPA_ENOMEM;
  CUresult e = gpa__cu_start_event(C, q, r);
  if (e != CUDA_SUCCESS) {
    gpa__cu_rec_put(C, r);
    return gpa__cu_check(C, e, "cuEventRecord", w->err, w->err_cap);
  }
  r->stages = q->unfenced;
  q->unfenced = NULL;
  return gpa__cu_enqueue_done(C, q, r, w->err, w->err_cap);
}

/* ---- ops ------------------------------------------------------------------------------------------- */

/* A registration's CUDA implementation (built-in families bind theirs in
 * their descriptors), else its kernel image, else its host implementation
 * on the host fallback (staged copies), the last resort of DESIGN.md
 * section 8. */
static gpa_op_impl_fn cu_impl_of(const gpa_op_desc *d) {
  if (d->cuda) return d->cuda;
  if (d->cuda_image) return gpa__cu_user_kernel;
  return d->host ? gpa__cu_fallback : NULL;
}

void gpa__cu_enter_op(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, const gpa_op_desc *d,
                      gpa_op_impl_fn impl, gpa_op_exec *x) {
  C->cur_w = *w;
  C->cur_op = d; /* the registration whose impl runs: the fallback runs its host implementation */
  C->cur_q = q;
  x->stream = q->s;
  /* gpa_exec_scratch: device scratch for CUDA implementations, host scratch
   * for a host implementation on the fallback. */
  C->env.scratch_fn = impl == gpa__cu_fallback ? NULL : exec_scratch;
}

gpa_status gpa__cu_run_eager(gpa__cu_ctx *C, const gpa__work *w, const gpa_op_desc *d, gpa_op_impl_fn impl,
                             gpa_op_exec *x) {
  if (C->failed) return failed_state(C, w->err, w->err_cap);
  gpa__cu_queue *q = w->bq;
  gpa__cu_enter_op(C, q, w, d, impl, x);
  if (impl == gpa__cu_fallback) {
    /* Synchronous on the host (its time is the actor's): no record, no
     * event. Its copies go on the stream between two timed ops. */
    q->share = NULL;
    int64_t t0 = gpa__clock_ns();
    gpa_status st = impl(x);
    *w->device_ns = gpa__clock_ns() - t0;
    if (st != GPA_OK && st != GPA_SKIP && C->failed && !w->err[0]) failed_state(C, w->err, w->err_cap);
    return st;
  }
  gpa__cu_rec *r = gpa__cu_rec_get(C, w, w->err, w->err_cap);
  if (!r) return C->failed ? GPA_EDEVICE : GPA_ENOMEM;
  CUresult e = gpa__cu_start_event(C, q, r);
  if (e != CUDA_SUCCESS) {
    gpa__cu_rec_put(C, r);
    return gpa__cu_check(C, e, "cuEventRecord", w->err, w->err_cap);
  }
  C->post = (gpa__cu_post){0};
  gpa_status st = impl(x);
  if (C->post.stage) {
    if (st == GPA_OK) {
      r->post = C->post;
    } else {
      C->cu.cuStreamSynchronize(q->s); /* the check's copy may still be in flight */
      gpa__cu_stage_put(C, C->post.stage);
    }
    C->post = (gpa__cu_post){0};
  }
  if (st != GPA_OK) {
    /* Declined or failed. */
    gpa__cu_rec_put(C, r);
    if (st != GPA_OK && st != GPA_SKIP && C->failed && !w->err[0]) failed_state(C, w->err, w->err_cap);
    return st;
  }
  return gpa__cu_enqueue_done(C, q, r, w->err, w->err_cap);
}

static gpa_status cu_run(void *bctx, const gpa__work *w, const gpa_op_desc *d, gpa_op_impl_fn impl,
                         gpa_op_exec *x) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = w->bq;
  if (q->gq && !C->failed) {
    gpa_status st = gpa__cu_graph_op(C, q, w, d, impl, x);
    if (st != GPA__CU_EAGER) return st;
  }
  return gpa__cu_run_eager(C, w, d, impl, x);
}

static gpa_exec_env *cu_env(void *bctx) { return &((gpa__cu_ctx *)bctx)->env; }

/* extmem.c: external buffers and their events */
gpa_status gpa__cu_external_check(void *bctx, int kind, const void *ptr, uint64_t bytes, char *msg, size_t cap);
gpa_status gpa__cu_external_event(void *bctx, void *bq, void *event, bool wait, char *msg, size_t cap);

/* An external event recorded or waited for between two timed ops: the
 * second starts at its own event (timing.c). */
static gpa_status cu_external_event(void *bctx, void *bq, void *event, bool wait, char *msg, size_t cap) {
  gpa_status st = gpa__cu_external_event(bctx, bq, event, wait, msg, cap);
  ((gpa__cu_queue *)bq)->share = NULL; /* after the held work it may have launched */
  return st;
}

#define GPA__CU_METHODS                                                                                      \
  .init = cu_init, .fini = cu_fini, .mem_alloc = cu_alloc, .mem_free = cu_free, .queue_init = cu_queue_init, \
  .queue_fini = cu_queue_fini, .upload = cu_upload, .readback = cu_readback, .impl_of = cu_impl_of,          \
  .run = cu_run, .fence = cu_fence, .env = cu_env, .complete = cu_complete, .poll = cu_poll, .flush = cu_flush, \
  .reap = cu_reap, .park = cu_park, .batch_begin = gpa__cu_batch_begin, .release = gpa__cu_release,      \
  .batch_graph = gpa__cu_batch_graph, \
  .external_check = gpa__cu_external_check, .external_event = cu_external_event

const gpa__backend gpa__backend_cuda = {.name = "cuda", GPA__CU_METHODS};
const gpa__backend gpa__backend_sim = {.name = "sim", GPA__CU_METHODS};

/* "auto": a driver with a device is present (GPA_CUDA_DRIVER or libcuda.so.1). */
bool gpa__cuda_probe(const char *driver) {
  gpa__cu_api api;
  char msg[256];
  if (gpa__cu_open(&api, driver, msg, sizeof msg) != GPA_OK) return false;
  gpa__cu_close(&api);
  return true;
}
