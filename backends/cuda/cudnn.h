/* cuDNN's fused attention (docs/cuda.md, "cuDNN fused attention"): the first implementation
 * the CUDA attention adapter tries, before our own kernels and the host
 * fallback. Its convolutions serve conv1d the same way (cudnn_conv.h), on
 * the same library, handle and plan cache. Every entry point answers GPA_SKIP ("not for these inputs") for
 * anything cuDNN cannot or should not do, so the next implementation runs;
 * only failures after work was enqueued are errors.
 *
 * libcudnn.so.9 is dlopened by the first attention or conv1d op of an actor
 * that cuDNN might take (declines that need no library, f32 attention or a
 * small convolution, come first; GPA_CUDNN names another library;
 * GPA_DEVICE=sim uses the simulator's subset) and its backend API resolved
 * into a table of the actor: no process-global state.
 * A missing or too old library, or a cudnnCreate that fails, is logged once
 * at info level and every later call declines. */
#ifndef GPA_BACKENDS_CUDA_CUDNN_H
#define GPA_BACKENDS_CUDA_CUDNN_H
#include <cudnn_graph.h>

#include "backends/cuda/cuda_internal.h"

/* The oldest cuDNN whose fused SDPA engines take what we build (bottom-right
 * causal masks on any S and Sk, per-batch key lengths, GQA): 9.6. */
#define GPA__CUDNN_MIN_VERSION 90600
/* Plans an actor keeps (LRU beyond that). */
#define GPA__CUDNN_PLANS 32

#define GPA__CUDNN_API(X)                                                                                     \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)                  \
  X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute)                \
  X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)

typedef struct gpa__cudnn_api {
  void *lib;
#define GPA__CUDNN_MEMBER(name) __typeof__(name) *name;
  GPA__CUDNN_API(GPA__CUDNN_MEMBER)
#undef GPA__CUDNN_MEMBER
} gpa__cudnn_api;

/* One SDPA call in our layout: q, o, dout, dq [B,S,H,D]; k, v, dk, dv
 * [B,Sk,Hkv,D]; lse [B,H,S] fp32; lens [B] int32 or NULL (non-NULL
 * declines: cuDNN's padding mask is not ours, docs/cuda.md). Filled by the
 * attention adapter from its typed params. `dtype` is the storage type of
 * q/k/v/dout; `out_dtype` that of o (forward) or dq/dk/dv (backward):
 * cuDNN writes only the storage type, so anything else declines. */
typedef struct gpa__sdpa_args {
  int64_t B, S, Sk, H, Hkv, D;
  int dtype, out_dtype;
  int o_dtype; /* backward: the dtype of o as given (cuDNN reads it in the storage type) */
  float scale;
  int causal;
  int nondeterministic; /* the backward may use a faster non-deterministic engine */
  uint64_t scratch_reserved; /* bytes at the start of the stream's scratch the caller keeps */
  /* Called once cuDNN takes the call, before anything is enqueued, with the
   * reserved bytes of the scratch; NULL: none. A failure fails the op. The
   * attention adapter used it for its lengths check while cuDNN took
   * lengths; tests/test_cudnn_attention.c checks that declines never call it. */
  gpa_status (*before)(const gpa_op_exec *x, CUdeviceptr reserved, void *ctx);
  void *before_ctx;
  const void *q, *k, *v, *lens;
  void *o, *lse;                 /* forward outputs; backward inputs */
  const void *dout;              /* backward */
  void *dq, *dk, *dv;            /* backward outputs */
} gpa__sdpa_args;

/* What the plan cache did, for tests and the docs' measurements. */
typedef struct gpa__cudnn_stats {
  uint64_t hits, misses, evictions, builds_failed, declines;
  uint64_t conv_execs; /* convolution plans executed (cudnn_conv.c) */
  /* Host time per call in steady state (docs/cuda.md, "Host time per
   * call"): executions, variant packs built (not found in their plan's
   * pool), cudnnSetStream calls made (the stream changed), and, while
   * gpa__cudnn_set_timing is on, the nanoseconds inside
   * cudnnBackendExecute over `timed` executions. */
  uint64_t execs, packs_built, set_streams, exec_ns, timed;
  /* GPA_CUDNN_GRAPHS=1: executes captured as CUDA graphs, and replays of
   * them (each replay counts in execs too) */
  uint64_t graph_captures, graph_launches;
  uint32_t plans; /* held now (refused keys included) */
} gpa__cudnn_stats;

gpa_status gpa__cudnn_sdpa_fwd(const gpa_op_exec *x, const gpa__sdpa_args *a);
gpa_status gpa__cudnn_sdpa_bwd(const gpa_op_exec *x, const gpa__sdpa_args *a);

/* Tests: the counters, the reason of the last decline ("" if none), and a
 * smaller bound on the plans (evicting down to it). */
void gpa__cudnn_get_stats(gpa__cu_ctx *C, gpa__cudnn_stats *s);
const char *gpa__cudnn_last_decline(gpa__cu_ctx *C);
void gpa__cudnn_set_plan_bound(gpa__cu_ctx *C, uint32_t bound);
/* Benchmarks: time each cudnnBackendExecute (stats exec_ns, timed); two
 * clock reads a call, so off unless asked for. No effect before cuDNN is
 * loaded (the actor's first attention or conv1d op). */
void gpa__cudnn_set_timing(gpa__cu_ctx *C, int on);
/* The engine the last plan looked up runs ("" if none), for benchmarks
 * and tests: "heur=a cand=I/N engine=G notes=[..] knobs=[type:value ..]
 * ws=BYTES" (cudnn_plan.c). */
const char *gpa__cudnn_plan_info(gpa__cu_ctx *C);

/* backend.c's fini: plans, handle, library. */
void gpa__cudnn_release(gpa__cu_ctx *C);

/* ---- shared by backends/cuda/cudnn*.c ------------------------------------------------------------- */

typedef struct gpa__dnn_plan gpa__dnn_plan;
typedef struct gpa__dnn gpa__dnn;

/* The library's path: GPA_CUDNN (the options table's `cudnn`), the
 * simulator's subset for sim, else libcudnn.so.9. */
const char *gpa__cudnn_path(const gpa__cu_ctx *C);
/* The actor's cuDNN, loaded on first use and set to the op's stream; NULL
 * when unavailable (*why says why; logged once, at the load). */
gpa__dnn *gpa__cudnn_get(const gpa_op_exec *x, const char **why);
const gpa__cudnn_api *gpa__dnn_api(const gpa__dnn *d);
cudnnHandle_t gpa__dnn_handle(const gpa__dnn *d);
/* Records why the current call declines (debug log, last_decline). */
gpa_status gpa__dnn_decline(const gpa_op_exec *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same for a reason that is a string constant: kept by address, not
 * formatted (declines that recur on every call of a shape, such as a small
 * convolution's, cost no formatting). */
gpa_status gpa__dnn_decline_const(const gpa_op_exec *x, const char *why);

/* Plan cache (cudnn_plan.c). The key is everything a plan depends on. */
typedef struct gpa__dnn_key {
  int32_t bwd, dtype, causal, lens, nondet, ordinal;
  int64_t B, S, Sk, H, Hkv, D;
  /* convolutions (cudnn_conv.c; zero for SDPA): which graph (GPA__DNN_CONV_*),
   * whether engines that round f32 inputs or reorder sums (TF32 tensor
   * cores, FFT, Winograd, reduced-precision sums) are refused, and the
   * geometry B Cin L Cout K stride pad_l pad_r dil groups, and the layout
   * (1: channels last) */
  int32_t conv, exact;
  int64_t cg[11];
} gpa__dnn_key;
/* The descriptors of one operation graph: kept alive with its plan (the
 * plan refers to the graph through its engine config). */
#define GPA__DNN_DESCS 192
typedef struct gpa__dnn_descs {
  cudnnBackendDescriptor_t d[GPA__DNN_DESCS];
  unsigned char op[GPA__DNN_DESCS]; /* d[i] is an operation of the graph */
  int n;
  cudnnBackendDescriptor_t graph; /* finalized; also in d[] */
} gpa__dnn_descs;
void gpa__dnn_descs_free(const gpa__cudnn_api *A, gpa__dnn_descs *g);
/* Builds the graph for key k into *g (cudnn_sdpa.c): 1, or 0 (declined:
 * why in why[], g freed). */
typedef int (*gpa__dnn_build_fn)(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_descs *g, char *why, size_t n);
/* The plan for key k, built on a miss; NULL when none (why says why). */
gpa__dnn_plan *gpa__dnn_plan_get(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_build_fn build, char *why, size_t n);
int64_t gpa__dnn_plan_workspace(const gpa__dnn_plan *p);
/* By-value scalars of a call, held by its plan: their addresses stay the
 * same from call to call, so a variant pack can be reused. */
typedef struct gpa__dnn_scalars {
  float scale, neg, one;
  int32_t shift;
} gpa__dnn_scalars;
gpa__dnn_scalars *gpa__dnn_plan_scalars(gpa__dnn_plan *p);
/* The plan's finalized variant pack for these uids, pointers and workspace.
 * cuDNN refuses any change to a finalized variant pack (BAD_PARAM, 9.19),
 * so each plan keeps a pool of the last GPA__DNN_PACKS it built, one per
 * set of pointers (a model calls one shape from each of its layers, with
 * each layer's buffers, and again every step); a set not in the pool is
 * built (create, three attributes, finalize), evicting the least recently
 * used. NULL and *st on failure. */
#define GPA__DNN_VP_MAX 16
#define GPA__DNN_PACKS 16
cudnnBackendDescriptor_t gpa__dnn_plan_pack(gpa__dnn *d, gpa__dnn_plan *p, int n, const int64_t *uid,
                                            void *const *ptr, void *ws, cudnnStatus_t *st);
/* cudnnBackendExecute of plan p with pack vp on the handle's stream,
 * counted (and timed when asked for). */
cudnnStatus_t gpa__dnn_execute(gpa__dnn *d, gpa__dnn_plan *p, cudnnBackendDescriptor_t vp);
void gpa__dnn_plans_release(gpa__dnn *d);

/* Experiment knobs of the SDPA plans (docs/cuda.md, "cuDNN fused
 * attention"), read from the environment when an actor loads the library;
 * all zero is the default (what PyTorch's cudnn-frontend graphs get).
 * Convolution plans ignore them. */
typedef struct gpa__dnn_tune {
  int heur;    /* GPA_CUDNN_SDPA_HEUR: 0 mode A (default), 1 mode B, 2 the fallback list */
  int first;   /* GPA_CUDNN_SDPA_BWD_ENGINE=N: the backward's heuristics candidates from the N-th (0-based) on */
  int ds_io;   /* GPA_CUDNN_SDPA_DS=io: the backward's dS typed in the storage type (default fp32) */
  int verbose; /* GPA_CUDNN_VERBOSE=1: the candidates tried for every plan built, on stderr; 2: the whole list */
  int graphs;  /* GPA_CUDNN_GRAPHS=1: each variant pack's execute captured once as a CUDA graph and replayed
                * (cudnn_plan.c); attention and convolutions alike */
} gpa__dnn_tune;
/* Fills *t from the environment (unknown values: the default, said on stderr). */
void gpa__dnn_tune_read(gpa__dnn_tune *t);

/* The state kept by the actor (hung off gpa__cu_ctx.dnn). */
struct gpa__dnn {
  int state; /* 0 not tried, 1 ready, -1 unavailable */
  gpa__cudnn_api api;
  cudnnHandle_t h;
  size_t version;
  int cc_major; /* the device's compute capability, 0 until read */
  gpa__cu_ctx *C;
  gpa__dnn_tune tune;
  gpa__dnn_plan *plans; /* most recently used first */
  gpa__dnn_plan *last;  /* the plan the last lookup returned (gpa__cudnn_plan_info) */
  uint32_t n_plans, bound;
  uint64_t tick;
  gpa__cudnn_stats st;
  /* The stream the handle was last set to: cudnnSetStream runs only when an
   * op's stream differs (the handle is the actor's alone). */
  void *stream;
  int stream_set;
  int timing;         /* gpa__cudnn_set_timing */
  /* cuStreamIsCapturing, resolved at the load when tune.graphs asks for
   * graphs (NULL: no graphs): a stream the actor is capturing for a graph
   * batch gets the plain execute, captured into the batch */
  CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *);
  int conv_told;      /* a convolution decline was logged at info level (cudnn_conv.c) */
  const char *why_const; /* the last decline when a constant (gpa__dnn_decline_const), else why[] */
  char why[256];      /* the last decline */
  char load_why[200]; /* why the library is unavailable */
};

#endif
