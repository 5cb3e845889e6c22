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
  int kt, vt; /* k (v) given transposed: [b,h,d,s] */
} sdpa_spec;

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
  /* operations: inputs x, b, t (pointwise), a (matmul: x = A, b = B); output y; the op's descriptor */
  const sdesc *x, *b, *t, *y, *desc;
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

/* sdpa.c: recognizes the operation graph's operations as an SDPA forward or
 * backward (1), or says why not (0, why). */
int sim_sdpa_recognize(const sdesc *const *ops, int n, sdpa_spec *s, char *why, size_t wn);
/* What the simulated engines refuse for a recognized graph (NULL: none). */
const char *sim_sdpa_refuses(const sdpa_spec *s);
/* Checks the variant pack against the spec and queues the computation on
 * stream s. CUDNN_STATUS_SUCCESS or the reason in why. */
cudnnStatus_t sim_sdpa_execute(const sdpa_spec *s, const sdesc *vp, int64_t workspace, CUstream stream, char *why,
                               size_t wn);

#endif
