/* The backend interface: how an actor executes. One backend per file (or
 * folder), chosen in one place (backends/select.c). Every method is called
 * on the actor thread. Optional methods may be NULL.
 *
 * A backend does not see the actor's internals. It gets, at init, what it
 * needs of the actor (gpa__be_host: options, and the two services it may
 * call), and for each piece of work a gpa__work: the queue it runs on, where
 * its error text and device time go, and an opaque token to hand back to
 * host->complete when the work finishes asynchronously. */
#ifndef GPA_BACKENDS_BACKEND_H
#define GPA_BACKENDS_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "actor/clock.h"
#include "actor/status.h"
#include "gpuactor.h"

typedef struct gpa_handle gpa__msg; /* opaque here: a token for host->complete */
typedef struct gpa__backend gpa__backend;
typedef struct gpa__pool gpa__pool;

/* A method that enqueued its work returns GPA__DEFERRED; host->complete
 * follows when the work is done. */
#define GPA__DEFERRED 2
/* Deferred, but nothing was launched yet: the backend holds the work (a
 * batch replayed as a graph) until release() or the batch's end. The actor
 * marks the message so that a waiter asks for its release. */
#define GPA__HELD 3
/* Why held work is released: the batch ends (a barrier, the next begin,
 * shutdown), someone waits on a held message, or other work must follow it
 * on the stream. */
enum { GPA__RELEASE_END = 0, GPA__RELEASE_KICK = 1, GPA__RELEASE_OTHER = 2 };
#define GPA__POLL_NS 5000000 /* 5 ms: see poll below */

/* What the actor gives a backend at init. */
typedef struct gpa__be_host {
  gpa_actor *actor; /* opaque: the argument of the services below */
  const char *device; /* "cpu", "sim", "cuda:N", ... */
  uint32_t threads;   /* host threads for parallel loops (0: the machine's) */
  int32_t log_level;
  /* device libraries from the options table (GPA_CUDA_DRIVER, GPA_CUBLAS,
   * GPA_CUBLASLT, GPA_CUDNN, GPA_NCCL): NULL = the backend's default search */
  const char *cuda_driver, *cublas, *cublaslt, *cudnn, *nccl;
  bool cuda_no_poll; /* GPA_CUDA_NO_POLL: no completion polling while the actor spins */
  /* GPA_CUDNN_CONV (backends/cuda/cudnn_conv.c): 0 unset (cuDNN for large
   * convolutions and inside graph captures), 1 "0" (never), 2 "1" (always) */
  int32_t cudnn_conv;
  /* GPA_CONV_TC (ops/conv1d/cuda_tc.c, cuda_tc32.c): 1 "0" (bf16 conv1d
   * on the SIMT implicit-GEMM kernels, A/B benches and tests), 2 "1" (f32
   * too on its 3xTF32 kernels, opt-in), 0 unset (bf16 on tensor cores) */
  int32_t conv_tc;
  /* GPA_CONV_IG_SMALL (ops/conv1d/cuda_igsmall.c): conv1d's y and dx on
   * the SIMT kernels in 32 x 32 tiles: 1 "0" (never: the 64 x 64 ones), 2
   * "1" (wherever they fit), 3 "auto" (where the 64 x 64 grid is small),
   * 0 unset (as "0" until a GPU has timed both) */
  int32_t conv_ig_small;
  /* GPA_FA2_EXACT (ops/attention/cuda.c): 1 "0" (bf16 and fp16 attention
   * with D = 64, 96 or 128 on the class FA2 kernels, A/B benches and tests),
   * else the exact-head-dim ones, the faster */
  int32_t fa2_exact;
  /* GPA_FA2_DKV128 (ops/attention/cuda.c): 2 "1" (the deterministic bf16
   * and fp16 attention backward at D = 64, 96, 128 takes its dK/dV from
   * attention_fa2_dkv128.cu's 128-key, 8-warp kernels where they fit),
   * else the 64-key ones (opt-in until a GPU has timed both) */
  int32_t fa2_dkv128;
  /* GPA_CUDA_SPLIT_SUMS (backends/cuda/cuda_ops.h gpa__cu_split_sums): 1
   * "0" (the column sums of layernorm_bwd, linear_bwd and conv1d_bwd's
   * bias in one pass per column tile, as before issue 25: A/B benches),
   * else split over chunks of rows where that fills the GPU better */
  int32_t cuda_split_sums;
  /* GPA_EMB_BWD_ROWS (ops/embedding/cuda_rows.c): 1 "0" (embedding_bwd
   * always sorts), 2 "1" (without a sort wherever the ids fit), 3 "auto"
   * or 0 unset (the size rule) */
  int32_t emb_bwd_rows;
  /* Completes deferred work w->m with st: any thread, no allocation, no
   * driver call (a driver's host-function thread calls it). Set w's err and
   * device time first (work done on the actor thread: gpa__clock_ns). */
  void (*complete)(gpa_actor *actor, gpa__msg *m, gpa_status st);
  /* Frees the cached buffers no one holds (the buffer cache's LRU); returns
   * the bytes freed. Actor thread; for a backend out of memory for its own
   * allocations (scratch, staging). */
  uint64_t (*trim)(gpa_actor *actor);
} gpa__be_host;

/* One piece of work as the backend sees it. Valid until it completes. */
typedef struct gpa__work {
  gpa__msg *m;        /* the token for host->complete */
  void *bq;           /* the backend queue it runs on */
  char *err;          /* its error text (set on failure) */
  size_t err_cap;
  int64_t *device_ns; /* its device time (set before completion) */
  bool timed;         /* profiling wants its own device time; else a batch's
                         total is enough (an asynchronous backend may time
                         groups of work instead, and give a group's time to
                         its last piece) */
} gpa__work;

/* What op implementations reach through gpa_op_exec.env: the services of
 * include/gpuactor/op.h (backends/exec_env.c) and the backend's context.
 * One definition for every backend. */
struct gpa_exec_env {
  gpa__pool *pool;     /* host worker pool; NULL: parallel loops run inline */
  void *scratch;       /* host scratch (gpa_exec_scratch without scratch_fn) */
  uint64_t scratch_size;
  /* gpa_exec_scratch when set: the backend's own scratch (device memory) */
  void *(*scratch_fn)(gpa_exec_env *env, uint64_t bytes);
  void *backend; /* the backend's context (cuda: gpa__cu_ctx) */
};
/* Frees the host scratch of env (a backend's fini). */
void gpa__exec_env_fini(gpa_exec_env *env);
/* The buffer cache's size classes (actor/bufcache.c), for a backend's own
 * blocks: size rounded up, at most 25% over; 0 past the largest buffer. */
uint64_t gpa__size_class(uint64_t size);

struct gpa__backend {
  const char *name; /* "cpu", "cuda", "sim" */
  gpa_status (*init)(const gpa__be_host *host, void **bctx, char *msg, size_t cap);
  void (*fini)(void *bctx);
  gpa_status (*mem_alloc)(void *bctx, uint64_t size, void **ptr);
  void (*mem_free)(void *bctx, void *ptr);
  gpa_status (*queue_init)(void *bctx, void **bq);
  void (*queue_fini)(void *bctx, void *bq);
  /* Copies on bq. Return GPA_OK when done, or GPA__DEFERRED when the copy
   * was enqueued and w's completion will follow (then also set its device
   * time). With w == NULL: enqueue only, no completion (src stays valid
   * until a later fence completes); return GPA_OK. */
  gpa_status (*upload)(void *bctx, void *bq, const gpa__work *w, void *dst, const void *src, uint64_t n);
  gpa_status (*readback)(void *bctx, void *bq, const gpa__work *w, void *dst_host, const void *src, uint64_t n);
  /* The implementation of registration d for this backend (the chain walk
   * over registrations of one name is the actor's). */
  gpa_op_impl_fn (*impl_of)(const gpa_op_desc *d);
  /* Optional: runs impl, the implementation of registration d, for w. An
   * asynchronous backend enqueues the work and the completion and returns
   * GPA__DEFERRED. NULL: impl(x) runs synchronously. */
  gpa_status (*run)(void *bctx, const gpa__work *w, const gpa_op_desc *d, gpa_op_impl_fn impl, gpa_op_exec *x);
  /* Optional (asynchronous backends): completes w once the work already
   * enqueued on w->bq has finished; returns GPA__DEFERRED. Used after copies
   * issued with w == NULL (several copies, one completion: feed ops). */
  gpa_status (*fence)(void *bctx, const gpa__work *w);
  gpa_exec_env *(*env)(void *bctx);
  /* Optional: called on the actor thread for each piece of work that
   * host->complete finished, in completion order, before the actor finishes
   * it; returns its final status (a device backend turns a sticky device
   * error into GPA_EDEVICE here and recycles its per-work resources). */
  gpa_status (*complete)(void *bctx, const gpa__work *w, gpa_status st);
  /* Optional (asynchronous backends): the actor calls it while work is in
   * flight and it is about to sleep, at most every GPA__POLL_NS, and then
   * sleeps no longer than that. It finds what no completion will report (a
   * real GPU calls no host function after a sticky error), completes that
   * work through host->complete, and returns how many. */
  uint32_t (*poll)(void *bctx);
  /* Optional (asynchronous backends): called after each pass of the actor
   * loop that handled messages. Work deferred since the last flush gets its
   * completions enqueued here, one per stream rather than one per message. */
  void (*flush)(void *bctx);
  /* Optional (asynchronous backends that defer completion signals): the
   * spinning actor calls reap to complete, through host->complete, flushed
   * work it finds done, and returns how many; park before it sleeps, after
   * which every flushed piece of work completes without further calls (a
   * host function covers it). A message someone awaits then completes on the
   * actor thread, with no hop through a driver thread (docs/cuda.md). */
  uint32_t (*reap)(void *bctx);
  void (*park)(void *bctx);
  /* Optional: whether caller-owned memory [ptr, ptr + bytes) of kind
   * (gpa_mem_kind) can be a buffer here (gpa_buffer_wrap); GPA_OK or a
   * status with the reason in msg. NULL: host memory only. */
  gpa_status (*external_check)(void *bctx, int kind, const void *ptr, uint64_t bytes, char *msg, size_t cap);
  /* Optional: queue bq's stream waits for event (wait) or records it (!wait),
   * a CUevent of the caller's (include/gpuactor/external.h). NULL: no streams. */
  gpa_status (*external_event)(void *bctx, void *bq, void *event, bool wait, char *msg, size_t cap);
  /* Optional (backends that replay batches as graphs): a batch labeled
   * label begins on bq. graph: 0 eager, -1 graphs on (gpa_batch_options),
   * N > 0 graphs once the label's batches repeated identically N times. */
  void (*batch_begin)(void *bctx, void *bq, const char *label, int32_t graph);
  /* Optional: work held on bq (NULL: on every queue) starts now; why is a
   * GPA__RELEASE_ value. Cheap when nothing is held. */
  void (*release)(void *bctx, void *bq, int why);
  /* Optional: how the batch that just ended on bq ran: 0 eagerly, 1
   * recorded into a graph (and launched), 2 replayed as a graph. */
  uint32_t (*batch_graph)(void *bctx, void *bq);
  /* Every method completes before it returns (never GPA__DEFERRED): the
   * actor then times runs of one queue's messages instead of each one. */
  bool synchronous;
};

extern const gpa__backend gpa__backend_host;
/* backends/cuda (only in builds with the CUDA toolkit; weak elsewhere). */
extern const gpa__backend gpa__backend_cuda __attribute__((weak));
extern const gpa__backend gpa__backend_sim __attribute__((weak));
/* A CUDA driver with at least one device can be opened ("auto"); driver:
 * the library to try (NULL: libcuda.so.1). */
bool gpa__cuda_probe(const char *driver) __attribute__((weak));
/* Picks the backend for a device string ("auto", "cpu", "cuda:N", "sim");
 * driver as for gpa__cuda_probe. */
gpa_status gpa__backend_select(const char *device, const char *driver, const gpa__backend **out);

#endif
