/* Internals of the CUDA backend (docs/cuda.md), shared by the files in backends/cuda/.
 *
 * Ownership: everything in gpa__cu_ctx belongs to the actor thread, except
 * what a completion record's host-function callback touches (its own record,
 * the message it completes, and the actor's lock-free completion stack). */
#ifndef GPA_BACKENDS_CUDA_INTERNAL_H
#define GPA_BACKENDS_CUDA_INTERNAL_H
#include <stdatomic.h>

#include "actor/limits.h"
#include "backends/backend.h"
#include "backends/cuda/cu.h"

/* A pinned host staging block. */
typedef struct gpa__cu_stage {
  void *p;
  uint64_t cap;
  void *rb_dst; /* a readback's destination: the completion copies rb_n bytes there */
  uint64_t rb_n;
  struct gpa__cu_stage *next;
  bool graph; /* a graph's own (graph.c): its nodes copy to or from it; never pooled */
} gpa__cu_stage;

typedef struct gpa__cu_ctx gpa__cu_ctx;

/* A check whose outcome the device computes (an index out of range): its
 * two 64-bit results land in `stage` and are read when the op completes. */
enum { GPA__CU_POST_NONE = 0, GPA__CU_POST_IDS2D, GPA__CU_POST_TARGETS, GPA__CU_POST_LENGTHS };
/* or'ed into a kind: one result, (position << 32) | (uint32) value, which
 * an op's own kernel found with one atomicMin (gpa__cu_index_fused_*) */
#define GPA__CU_POST_PACKED 0x100
typedef struct gpa__cu_post {
  int kind;
  const char *op;
  long long a, b; /* IDS2D: L, V; TARGETS: V, ignore_index */
  gpa__cu_stage *stage;
} gpa__cu_post;

/* One message in flight on a stream: events around its work, the staging it
 * holds, and the host function that completes it. `claimed` decides who
 * completes the message, exactly once: the host function, or the poll that
 * found a sticky error (the host function may then never run, or run late:
 * such a record is kept, untouched, until the context is torn down). */
typedef struct gpa__cu_rec {
  gpa__cu_ctx *C;
  gpa__work w; /* the work it completes */
  CUevent ev0, ev1; /* owned; ev1 is recorded after its work (timed, or a group's last) */
  /* Timed: where its device time starts, ev0 or the end event of the timed
   * record before it on the stream (its lender), shared while the stream is
   * still busy with that one (backend.c, start_event) */
  CUevent start;
  struct gpa__cu_rec *lender, *borrower; /* actor thread only */
  gpa__cu_stage *stages; /* held until the work is done; readbacks land from here */
  gpa__cu_post post;
  _Atomic int claimed;
  bool abandoned; /* claimed by the poll (actor thread only) */
  bool group_end; /* untimed: the last of its group, holding the group's events */
  bool has_end;   /* ev1 was recorded after its work: reap can query it */
  struct gpa__cu_rec *next;
  /* One host function completes a group of a stream's records (flush):
   * gnext links the group, NULL after its last. Separate from next, which
   * the actor edits while the host function walks the group. */
  struct gpa__cu_rec *gnext;
} gpa__cu_rec;

/* The backend's queue: a stream and its records in completion order. */
typedef struct gpa__cu_queue {
  CUstream s;
  gpa__cu_rec *head, *tail;
  gpa__cu_stage *unfenced; /* staging of copies enqueued without a message (fence() takes it) */
  CUdeviceptr scratch; /* per stream: ops of one stream never overlap */
  uint64_t scratch_cap;
  struct gpa__cu_queue *next_free;
  struct gpa__cu_queue *busy_prev, *busy_next; /* on C->busy while it has records */
  /* records enqueued since the last flush: no host function covers them yet */
  gpa__cu_rec *open, *open_last;
  uint32_t n_open;
  struct gpa__cu_queue *dirty_next; /* on C->dirty while open */
  /* flushed records no host function covers yet (gnext-linked): the
   * spinning actor reaps them, or park hands them to one host function */
  gpa__cu_rec *poll_first, *poll_last;
  uint32_t n_polled;
  bool on_polled;
  struct gpa__cu_queue *polled_next; /* on C->polled while poll_first */
  /* graphs (graph.c): made at the first batch that asks for them */
  struct gpa__cu_gq *gq;
  struct gpa__cu_queue *graph_next; /* on C->graph_queues while gq */
  uint64_t scratch_gen; /* bumped when the scratch block moves: graphs point into it */
  CUdeviceptr blas_ws; /* cuBLAS's workspace on this stream (blas.c), made once */
  uint64_t blas_ws_size;
  /* grid-wide counters of split sums (kernels/cuda/split_sum.h), made once
   * and zeroed on the stream; every kernel that counts leaves them zero */
  CUdeviceptr counters;
  bool scratch_refused; /* a capture needed more scratch than the block has */
  uint32_t direct; /* completions of held work without a record, for cu_complete */
  /* the timed record whose end event is the last thing enqueued on the
   * stream: the next timed op may start at that event (start_event) */
  gpa__cu_rec *share;
} gpa__cu_queue;

#define GPA__CU_MODULES_MAX 16
#define GPA__CU_FUNCS_MAX 256 /* built-in kernels (ops/cuda_kernels.h), with room to grow */

/* A user op's kernel from its own image, loaded once per actor. */
#define GPA__CU_USER_MAX 64
typedef struct gpa__cu_user {
  const gpa_op_desc *op;
  const void *image;
  CUmodule mod;
  CUfunction fn;
} gpa__cu_user;

struct gpa__cu_ctx {
  gpa__be_host host; /* what the actor gave at init */
  gpa__cu_api cu;
  bool sim;
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  int sm_count, max_smem_optin;
  int grid_cap; /* blocks of a grid-stride elementwise launch */
  int row_cap;  /* blocks of a row-kernel launch */
  /* x->env of our implementations: no pool (parallel loops run inline),
   * scratch_fn = the running op's device scratch, cleared while the host
   * fallback runs a host implementation (host scratch then) */
  gpa_exec_env env;
  /* the work being run and the registration whose impl runs (run()) */
  gpa__work cur_w;
  const gpa_op_desc *cur_op;
  gpa__cu_queue *cur_q;
  gpa__cu_post post; /* set by the running op, moved into its record */
  /* sticky device error: every later op fails with it */
  CUresult failed;
  char fail_msg[160];
  /* queues with records in flight (the poll's list), and records claimed by
   * the poll after a sticky error, freed at fini */
  gpa__cu_queue *busy;
  gpa__cu_rec *abandoned;
  gpa__cu_queue *dirty; /* queues with open records, for the next flush */
  gpa__cu_queue *polled; /* queues with flushed records that reap may complete */
  gpa__cu_queue *graph_queues; /* queues with graph state (graph.c) */
  bool no_poll;          /* GPA_CUDA_NO_POLL: a host function at every flush */
  struct gpa__cu_mem *mem; /* stream-ordered device memory (alloc.c); NULL: cuMemAlloc */
  /* pools */
  gpa__cu_rec *free_recs;
  gpa__cu_stage *free_stages;
  uint64_t staged_cached;
  gpa__cu_queue *free_queues;
  /* kernels: modules loaded lazily, functions cached by id */
  CUmodule mods[GPA__CU_MODULES_MAX];
  /* user ops' kernel images (user_kernel.c) */
  gpa__cu_user user[GPA__CU_USER_MAX];
  uint32_t n_user;
  CUfunction fns[GPA__CU_FUNCS_MAX];
  /* cuBLAS, loaded by the first op that needs it */
  int blas_state; /* 0 not tried, 1 ready, -1 failed */
  gpa__cublas_api blas;
  cublasHandle_t blas_h;
  char blas_msg[160];
  /* the stream and workspace set on blas_h (blas.c), NULL: set them at
   * the next GEMM; blas_sets counts the times they were set */
  CUstream blas_stream;
  CUdeviceptr blas_ws;
  uint64_t blas_sets;
  /* cuBLASLt (blas_lt.c), loaded by the first linear whose epilogue it can fuse */
  struct gpa__cu_lt *lt;
  /* cuDNN (cudnn.c): loaded by the first attention op, with its plan cache */
  struct gpa__dnn *dnn;
  int lt_state; /* 0 not tried, 1 ready, -1 unavailable (cuBLAS + our epilogue kernels) */
};

static inline gpa__cu_ctx *gpa__cu_of(const gpa_op_exec *x) { return x->env->backend; }

/* user_kernel.c: the implementation of kernel-image user ops. */
gpa_status gpa__cu_user_kernel(const gpa_op_exec *x);

/* backend.c */
/* Records a driver failure: sticky errors put the backend in the failed
 * state. Writes "what: error" into msg; returns GPA_EDEVICE (GPA_ENOMEM for
 * out-of-memory). */
gpa_status gpa__cu_fail(gpa__cu_ctx *C, CUresult r, const char *what, char *msg, size_t cap);
/* GPA_OK for CUDA_SUCCESS, else gpa__cu_fail. Inline: every launch and
 * every record of every message checks a result (a call each was about 20
 * instructions a message for nothing, callgrind, issue 24). */
static inline gpa_status gpa__cu_check(gpa__cu_ctx *C, CUresult r, const char *what, char *msg, size_t cap) {
  return r == CUDA_SUCCESS ? GPA_OK : gpa__cu_fail(C, r, what, msg, cap);
}
/* Device scratch of the current queue, valid for the running op (stream
 * ordered). 0 on failure (message in x->msg). */
CUdeviceptr gpa__cu_scratch(const gpa_op_exec *x, uint64_t bytes);
/* The current queue's GPA_SPLIT_COUNTERS counters (kernels/cuda/launch_shapes.h)
 * for kernels whose last block sums the other blocks' partials: zero before
 * such a kernel runs, and it leaves them zero (its last block resets its
 * counter), so a graph that replays it finds them zero too. Made once per
 * queue, outside any capture (as the scratch); 0 on failure (x->msg). */
CUdeviceptr gpa__cu_counters(const gpa_op_exec *x);
/* A block of q's own (its scratch, cuBLAS's workspace) of `size` bytes
 * (`asked` for the message) into *slot, stream ordered, the block *slot
 * held freed first. CUDA_SUCCESS; the allocation's error (msg says why;
 * out of memory, the cache's unused buffers were evicted and it was tried
 * once more); or, nothing changed, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * while the stream is captured (an allocation or a free would be captured
 * into the graph): q->scratch_refused is set, and graph.c runs the batch
 * eagerly once, which makes it. */
CUresult gpa__cu_queue_block(gpa__cu_ctx *C, gpa__cu_queue *q, const char *what, uint64_t asked, uint64_t size,
                             CUdeviceptr *slot, char *msg, size_t msg_cap);
/* Reads back res[0..2) (first bad position or ~0, its value) when the op's
 * work is done; the op then fails with GPA_ERANGE and the host's message. */
gpa_status gpa__cu_post_check(const gpa_op_exec *x, int kind, const char *op, CUdeviceptr res, long long a,
                              long long b);
/* Synchronizes the current queue's stream (host fallbacks). */
gpa_status gpa__cu_sync(const gpa_op_exec *x);
gpa__cu_stage *gpa__cu_stage_get(gpa__cu_ctx *C, uint64_t n);
void gpa__cu_stage_put(gpa__cu_ctx *C, gpa__cu_stage *s);

/* fallback.c: runs the op's host implementation on staged copies of its
 * tensors (synchronously). For built-in ops without a CUDA kernel, and for
 * the cases a kernel declines. */
gpa_status gpa__cu_fallback(const gpa_op_exec *x);

/* kernels.c */
void gpa__cu_kernels_release(gpa__cu_ctx *C);

/* blas.c */
gpa_status gpa__cu_blas(const gpa_op_exec *x, cublasHandle_t *h);
/* Times the cuBLAS handle's stream and workspace were set (tests). */
uint64_t gpa__cu_blas_sets(const gpa__cu_ctx *C);
void gpa__cu_blas_release(gpa__cu_ctx *C);
/* cudnn.c: the actor's cuDNN (plans, handle, library), at fini */
void gpa__cudnn_release(gpa__cu_ctx *C);

/* blas_lt.c: one GEMM through cublasLtMatmul with a fused epilogue.
 * Column-major: D[m,n] = op(A) op(B) (+ bias[m]); A/B of ab_type, D of
 * d_type, bias of d_type, compute fp32. *done = 0 (and GPA_OK) when cuBLASLt is unavailable or finds no
 * algorithm for it: the caller runs its cuBLAS + kernel path instead. */
typedef struct gpa__lt_gemm {
  int trans_a, trans_b; /* cublasOperation_t */
  int m, n, k;
  int ab_type, d_type; /* cudaDataType */
  const void *A, *B;
  int lda, ldb;
  void *D;
  int ldd;
  unsigned epilogue; /* cublasLtEpilogue_t */
  const void *bias;
} gpa__lt_gemm;
gpa_status gpa__cu_lt_matmul(const gpa_op_exec *x, const gpa__lt_gemm *g, int *done);
void gpa__cu_lt_release(gpa__cu_ctx *C);
/* The per-shape cache of descriptors and heuristic answers: lookups that
 * found their shape, and those that built it. */
void gpa__cu_lt_stats(const gpa__cu_ctx *C, uint64_t *hits, uint64_t *misses);

#endif
