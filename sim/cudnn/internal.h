/* gpa-sim cuDNN subset (libgpa_sim_cudnn.so): internals shared by
 * cudnn.c (descriptors, handle, plans, execute, faults) and sdpa.c (the
 * SDPA pattern and its host computation). docs/sim.md, "cuDNN subset". */
#ifndef GPA_SIM_CUDNN_INTERNAL_H
#define GPA_SIM_CUDNN_INTERNAL_H
#include <cuda.h>
#include <cudnn_graph.h>
#include <stdbool.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))
#define SD_MAX_ATTRS 24
#define SD_MAX_DIMS 8

typedef struct sattr {
  int name, type;
  int64_t count;
  void *data;
} sattr;

typedef struct sdesc sdesc;

/* One recognized SDPA graph: the uids of its tensors in the variant pack
 * and their descriptors (for extents and strides). */
typedef struct sdpa_spec {
  int bwd;
  int64_t B, S, Sk, H, Hkv, D;
  int io; /* cudnnDataType_t of q/k/v/o/... */
  int causal, lens;
  const sdesc *q, *k, *v, *o, *stats, *scale, *shift, *seq_q, *seq_kv, *neg;
  const sdesc *dout, *dq, *dk, *dv, *delta, *one; /* backward */
  const sdesc *dq_accum; /* backward: dQ's fp32 accumulator, copied to dq (the non-deterministic pattern) */
  int kt, vt; /* k (v) given transposed: [b,h,d,s] */
} sdpa_spec;

/* One recognized convolution graph (conv.c): a forward, data-gradient or
 * filter-gradient convolution on [N,C,1,L] tensors, the forward possibly
 * followed by a pointwise add of a [1,C,1,1] bias. Roles: x the input
 * activation (dx for the data gradient), w the filter (dw for the filter
 * gradient), y the output activation (dy for the gradients); out the
 * tensor the forward writes (y, or the bias add's output). */
typedef struct conv_spec {
  int kind; /* 1 forward, 2 data gradient, 3 filter gradient */
  int64_t N, C, L, K, R, Lout, G, pre, post, dil, stride;
  int io; /* cudnnDataType_t of x (and w, y) */
  float alpha, beta;
  const sdesc *x, *w, *y, *bias, *out;
} conv_spec;

struct sdesc {
  uint32_t magic;
  int type;
  bool finalized;
  sattr attrs[SD_MAX_ATTRS];
  int n_attrs;
  /* tensor */
  int64_t uid, dim[SD_MAX_DIMS], str[SD_MAX_DIMS];
  int nd, dt;
  bool virt, byval;
  /* pointwise / reduction descriptor */
  int mode;
  int64_t axis;
  /* operations: inputs x, b, t (pointwise), a (matmul: x = A, b = B); output y; the op's descriptor;
   * convolutions: x, w (b), y as the operation names them (dx, dw, dy for the gradients) */
  const sdesc *x, *b, *t, *y, *desc;
  /* convolution descriptor */
  int64_t spatial, pre[2], post[2], dil[2], cstride[2];
  float alpha, beta;
  /* operation graph of a convolution (conv.c) instead of an SDPA */
  conv_spec conv;
  bool is_conv;
  bool no_engines; /* the heuristics fault fired for this graph */
  /* operation graph */
  sdpa_spec spec;
  bool recognized;
  char why[160];
  /* engine config / engine: the graph and the engine index */
  const sdesc *graph;
  int engine; /* -1: none set */
  /* plan */
  int64_t workspace;
  /* variant pack */
  int64_t n_vp;
  int64_t *uids;
  void **ptrs;
  void *ws;
};

/* A handle: the stream its work goes to. */
struct cudnnContext {
  uint32_t magic;
  CUstream stream;
};

const sattr *sd_attr(const sdesc *d, int name);
/* The variant pack's pointer for tensor t (NULL: none, or t NULL). */
void *sd_find(const sdesc *vp, const sdesc *t);
/* Whether device pointer p covers tensor t's bytes (1), or why not (0). */
int sd_covers(const sdesc *t, void *p, char *why, size_t wn);
/* Whether the variant pack's workspace covers `workspace` bytes (1), or why not (0). */
int sd_workspace_ok(const sdesc *vp, int64_t workspace, char *why, size_t wn);

/* sdpa.c: recognizes the operation graph's operations as an SDPA forward or
 * backward (1), or says why not (0, why). */
int sim_sdpa_recognize(const sdesc *const *ops, int n, sdpa_spec *s, char *why, size_t wn);
/* What the simulated engines refuse for a recognized graph (NULL: none). */
const char *sim_sdpa_refuses(const sdpa_spec *s);
/* Checks the variant pack against the spec and queues the computation on
 * stream s. CUDNN_STATUS_SUCCESS or the reason in why. */
cudnnStatus_t sim_sdpa_execute(const sdpa_spec *s, const sdesc *vp, int64_t workspace, CUstream stream, char *why,
                               size_t wn);

/* conv.c: the convolution graphs. Recognize: 1 (a convolution graph: s
 * filled), 0 (no convolution in the graph: try SDPA), -1 (a convolution
 * graph this subset refuses: why). */
int sim_conv_recognize(const sdesc *const *ops, int n, conv_spec *s, char *why, size_t wn);
/* Finalize checks of a convolution operation (its tensors' shapes and types
 * against the descriptor), as cuDNN's; CUDNN_STATUS_SUCCESS or BAD_PARAM. */
cudnnStatus_t sim_conv_check_op(const sdesc *op);
/* Engine `engine` computes: 0 the non-deterministic one, 1 the plain fp32
 * one, 2 the TF32 tensor-core one (f32 inputs rounded to 10-bit mantissas). */
cudnnStatus_t sim_conv_execute(const conv_spec *s, int engine, const sdesc *vp, int64_t workspace, CUstream stream,
                               char *why, size_t wn);
#endif
