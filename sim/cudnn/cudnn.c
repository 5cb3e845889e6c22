/* gpa-sim cuDNN subset: the part of cuDNN's backend descriptor API that the
 * fused attention path (backends/cuda/cudnn*.c) calls, under cuDNN's real
 * names and signatures (docs/sim.md, "cuDNN subset").
 *
 * Descriptors keep their attributes as set (copied), and check at finalize
 * what the real library checks for the descriptors we use: required
 * attributes present, referenced descriptors finalized, no change after
 * finalize. An operation graph is finalized only if it is an SDPA forward
 * or backward this library can run (sdpa.c recognizes it by its structure,
 * as cuDNN's fused engines do); the heuristics then offer its engine: a
 * backward whose dQ goes through an fp32 accumulator the fast
 * non-deterministic engine, one whose dQ comes straight from its product
 * the deterministic engine, the forward one deterministic engine; a configuration the
 * real engines refuse (sdpa.c) gets no engine. Execute queues a host
 * computation on the handle's stream (the driver's hooks).
 *
 * H100-class device, so the limits are Hopper's. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpa_sim_cudnn.h"
#include "gpa_sim_hooks.h"
#include "internal.h"

#define SD_MAGIC 0x5d9e5c01u
#define H_MAGIC 0x5d9e4a11u

static _Atomic unsigned f_create, f_graph, f_plan, f_exec, f_heur;
static _Atomic long long workspace_bytes = 1 << 20, n_graphs, n_plans, n_execs, n_live;
static _Atomic int last_engine = -1;
static _Atomic size_t version = 91400;
static _Atomic int env_read;
static _Atomic long long c_create, c_set, c_get, c_fin, c_destroy, c_exec, c_stream; /* gpa_sim_cudnn_api_calls */

static void read_env(void) {
  if (atomic_exchange(&env_read, 1)) return;
  const char *e = getenv("GPA_SIM_CUDNN_FAULT");
  for (const char *p = e; p && *p;) {
    char key[16] = {0};
    unsigned v = 0;
    int used = 0;
    if (sscanf(p, "%15[a-z]=%u%n", key, &v, &used) == 2) {
      if (!strcmp(key, "create")) f_create = v;
      else if (!strcmp(key, "graph")) f_graph = v;
      else if (!strcmp(key, "plan")) f_plan = v;
      else if (!strcmp(key, "exec")) f_exec = v;
      else if (!strcmp(key, "heur")) f_heur = v;
      else fprintf(stderr, "gpa-sim cudnn: ignoring unknown GPA_SIM_CUDNN_FAULT key '%s'\n", key);
      p += used;
    } else {
      fprintf(stderr, "gpa-sim cudnn: ignoring malformed GPA_SIM_CUDNN_FAULT '%s'\n", p);
      break;
    }
    if (*p == ',') p++;
  }
  if ((e = getenv("GPA_SIM_CUDNN_VERSION")) && *e) version = (size_t)strtoull(e, NULL, 10);
  if ((e = getenv("GPA_SIM_CUDNN_WORKSPACE")) && *e) workspace_bytes = strtoll(e, NULL, 10);
}

/* One-shot counter: true when this call is the armed n-th. */
static int fires(_Atomic unsigned *c) {
  read_env();
  unsigned v = atomic_load(c);
  while (v) {
    if (atomic_compare_exchange_weak(c, &v, v - 1)) return v == 1;
  }
  return 0;
}

EXPORT void gpa_sim_cudnn_fault_create(unsigned n) { read_env(), f_create = n; }
EXPORT void gpa_sim_cudnn_fault_graph(unsigned n) { read_env(), f_graph = n; }
EXPORT void gpa_sim_cudnn_fault_plan(unsigned n) { read_env(), f_plan = n; }
EXPORT void gpa_sim_cudnn_fault_exec(unsigned n) { read_env(), f_exec = n; }
EXPORT void gpa_sim_cudnn_fault_heur(unsigned n) { read_env(), f_heur = n; }
EXPORT void gpa_sim_cudnn_set_workspace(long long bytes) { read_env(), workspace_bytes = bytes; }
EXPORT void gpa_sim_cudnn_set_version(size_t v) { read_env(), version = v; }
EXPORT void gpa_sim_cudnn_fault_clear(void) {
  read_env();
  f_create = f_graph = f_plan = f_exec = f_heur = 0;
}
EXPORT void gpa_sim_cudnn_counts(long long *graphs, long long *plans, long long *execs, int *engine) {
  if (graphs) *graphs = n_graphs;
  if (plans) *plans = n_plans;
  if (execs) *execs = n_execs;
  if (engine) *engine = last_engine;
}
EXPORT long long gpa_sim_cudnn_live_descriptors(void) { return n_live; }
EXPORT void gpa_sim_cudnn_api_calls(gpa_sim_cudnn_calls *c) {
  *c = (gpa_sim_cudnn_calls){c_create, c_set, c_get, c_fin, c_destroy, c_exec, c_stream};
}

/* ---- handle, version, errors ---------------------------------------------------------------------- */

EXPORT size_t cudnnGetVersion(void) {
  read_env();
  return version;
}

EXPORT const char *cudnnGetErrorString(cudnnStatus_t s) {
  switch ((int)s) {
  case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
  case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
  case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
  case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
  case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
  case CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND: return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
  case CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE: return "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE";
  case CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE: return "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE";
  case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
  case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN: return "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN";
  case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
  case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  default: return "CUDNN_STATUS_UNKNOWN (gpa-sim)";
  }
}

EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
  if (!h) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  CUcontext ctx = NULL;
  if (fires(&f_create) || cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return CUDNN_STATUS_NOT_INITIALIZED;
  struct cudnnContext *c = calloc(1, sizeof *c);
  if (!c) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  c->magic = H_MAGIC;
  *h = c;
  return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  if (!h || h->magic != H_MAGIC) return CUDNN_STATUS_BAD_PARAM;
  h->magic = 0;
  free(h);
  return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  c_stream++;
  if (!h || h->magic != H_MAGIC) return CUDNN_STATUS_BAD_PARAM;
  h->stream = (CUstream)s;
  return CUDNN_STATUS_SUCCESS;
}

/* ---- descriptors ---------------------------------------------------------------------------------- */

static size_t elem_size(cudnnBackendAttributeType_t t) {
  switch (t) {
  case CUDNN_TYPE_HANDLE: case CUDNN_TYPE_VOID_PTR: case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void *);
  case CUDNN_TYPE_DATA_TYPE: case CUDNN_TYPE_HEUR_MODE: case CUDNN_TYPE_NUMERICAL_NOTE: case CUDNN_TYPE_POINTWISE_MODE:
  case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: case CUDNN_TYPE_INT32: case CUDNN_TYPE_FLOAT:
  case CUDNN_TYPE_CONVOLUTION_MODE: return 4;
  case CUDNN_TYPE_BOOLEAN: case CUDNN_TYPE_CHAR: return 1;
  case CUDNN_TYPE_INT64: case CUDNN_TYPE_DOUBLE: return 8;
  default: return 0;
  }
}

static sdesc *as_desc(cudnnBackendDescriptor_t d) {
  sdesc *s = d;
  return s && s->magic == SD_MAGIC ? s : NULL;
}

EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out) {
  c_create++;
  if (!out) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  sdesc *d = calloc(1, sizeof *d);
  if (!d) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  d->magic = SD_MAGIC;
  d->type = (int)t;
  d->engine = -1;
  n_live++;
  *out = d;
  return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t dd) {
  c_destroy++;
  sdesc *d = as_desc(dd);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < d->n_attrs; i++) free(d->attrs[i].data);
  free(d->uids);
  free(d->ptrs);
  d->magic = 0;
  free(d);
  n_live--;
  return CUDNN_STATUS_SUCCESS;
}

const sattr *sd_attr(const sdesc *d, int name) {
  for (int i = 0; i < d->n_attrs; i++)
    if (d->attrs[i].name == name) return &d->attrs[i];
  return NULL;
}

void *sd_find(const sdesc *vp, const sdesc *t) {
  for (int64_t i = 0; t && i < vp->n_vp; i++)
    if (vp->uids[i] == t->uid) return vp->ptrs[i];
  return NULL;
}

int sd_workspace_ok(const sdesc *vp, int64_t workspace, char *why, size_t wn) {
  char w[160];
  if (workspace > 0 &&
      (!vp->ws || !gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)vp->ws, (size_t)workspace, w, sizeof w))) {
    snprintf(why, wn, "workspace of %lld bytes: %s", (long long)workspace, vp->ws ? w : "none given");
    return 0;
  }
  return 1;
}

static size_t esize(int dt) { return dt == CUDNN_DATA_FLOAT || dt == CUDNN_DATA_INT32 ? 4 : 2; }

int sd_covers(const sdesc *t, void *p, char *why, size_t wn) {
  size_t last = 0;
  char w[160];
  for (int i = 0; i < t->nd; i++) last += (size_t)(t->dim[i] - 1) * (size_t)t->str[i];
  if (!p) {
    snprintf(why, wn, "no pointer for tensor uid %lld in the variant pack", (long long)t->uid);
    return 0;
  }
  if (!gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)p, (last + 1) * esize(t->dt), w, sizeof w)) {
    snprintf(why, wn, "tensor uid %lld: %s", (long long)t->uid, w);
    return 0;
  }
  return 1;
}

EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t dd, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void *elements) {
  c_set++;
  sdesc *d = as_desc(dd);
  size_t es = elem_size(type);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  /* the real library's answer to a change after finalize (9.19, a variant
   * pack's pointers: tests nothing here relies on more) */
  if (d->finalized) return CUDNN_STATUS_BAD_PARAM;
  if (!es) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  if (count < 0 || (count && !elements)) return CUDNN_STATUS_BAD_PARAM;
  sattr *a = (sattr *)sd_attr(d, name);
  if (!a) {
    if (d->n_attrs == SD_MAX_ATTRS) return CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND;
    a = &d->attrs[d->n_attrs++];
    a->name = name;
  }
  free(a->data);
  a->type = type;
  a->count = count;
  a->data = malloc(es * (size_t)(count ? count : 1));
  if (!a->data) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  if (count) memcpy(a->data, elements, es * (size_t)count);
  return CUDNN_STATUS_SUCCESS;
}

/* Attribute `name` of type t with exactly n elements (n < 0: at least 1). */
static const void *need(const sdesc *d, int name, cudnnBackendAttributeType_t t, int64_t n, int64_t *count) {
  const sattr *a = sd_attr(d, name);
  if (!a || a->type != (int)t || (n >= 0 && a->count != n) || (n < 0 && a->count < 1)) return NULL;
  if (count) *count = a->count;
  return a->data;
}

/* A finalized descriptor of type t set as attribute `name` (NULL if absent and optional). */
static cudnnStatus_t ref(const sdesc *d, int name, int type, int required, const sdesc **out) {
  const void *const *p = need(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, NULL);
  *out = NULL;
  if (!p) return required ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
  const sdesc *r = as_desc(*(void *const *)p);
  if (!r || (type >= 0 && r->type != type)) return CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE;
  if (!r->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  *out = r;
  return CUDNN_STATUS_SUCCESS;
}

#define TRY(e)                          \
  do {                                  \
    cudnnStatus_t try_s_ = (e);         \
    if (try_s_) return try_s_;          \
  } while (0)

static cudnnStatus_t fin_tensor(sdesc *d) {
  const int32_t *dt = need(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, NULL);
  int64_t nd = 0, ns = 0;
  const int64_t *dim = need(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, -1, &nd);
  const int64_t *str = need(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, -1, &ns);
  const int64_t *uid = need(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, NULL);
  const int64_t *al = need(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, NULL);
  if (!dt || !dim || !str || !uid || !al || nd != ns || nd > SD_MAX_DIMS) return CUDNN_STATUS_BAD_PARAM;
  for (int64_t i = 0; i < nd; i++)
    if (dim[i] < 1 || str[i] < 0) return CUDNN_STATUS_BAD_PARAM;
  const bool *v = need(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, NULL);
  const bool *bv = need(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, NULL);
  d->dt = *dt, d->nd = (int)nd, d->uid = *uid, d->virt = v && *v, d->byval = bv && *bv;
  memcpy(d->dim, dim, sizeof(int64_t) * (size_t)nd);
  memcpy(d->str, str, sizeof(int64_t) * (size_t)nd);
  return d->virt && d->byval ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t fin_graph(sdesc *d) {
  int64_t n = 0;
  const void *const *ops = need(d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, -1, &n);
  if (!ops || !need(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, NULL)) return CUDNN_STATUS_BAD_PARAM;
  const sdesc **list = malloc(sizeof *list * (size_t)n);
  if (!list) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  for (int64_t i = 0; i < n && !s; i++) {
    list[i] = as_desc((void *)(uintptr_t)ops[i]);
    if (!list[i]) s = CUDNN_STATUS_BAD_PARAM;
    else if (!list[i]->finalized) s = CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  }
  if (!s && fires(&f_graph)) s = CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
  int conv = s ? 0 : sim_conv_recognize(list, (int)n, &d->conv, d->why, sizeof d->why);
  if (conv < 0) s = CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
  d->is_conv = conv > 0;
  if (!s && !conv && !sim_sdpa_recognize(list, (int)n, &d->spec, d->why, sizeof d->why))
    s = CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN;
  free(list);
  if (s == CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN && d->why[0])
    fprintf(stderr, "gpa-sim cudnn: operation graph refused: %s\n", d->why);
  if (!s) {
    d->recognized = true;
    n_graphs++;
  }
  return s;
}

/* The attributes cuDNN requires of a convolution descriptor: compute type,
 * mode, spatial dims and, for each spatial dim, paddings (>= 0), dilations
 * and strides (>= 1). */
static cudnnStatus_t fin_conv_desc(sdesc *d) {
  const int64_t *sp = need(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, NULL);
  const int32_t *mode = need(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, NULL);
  if (!sp || !mode || !need(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, NULL))
    return CUDNN_STATUS_BAD_PARAM;
  if (*sp < 1 || *sp > 3) return CUDNN_STATUS_BAD_PARAM;
  /* the subset keeps two spatial dims (what conv1d as height 1 uses); more: not supported */
  if (*sp != 2) return CUDNN_STATUS_NOT_SUPPORTED;
  const int64_t *pre = need(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, *sp, NULL);
  const int64_t *post = need(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, *sp, NULL);
  const int64_t *dil = need(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, *sp, NULL);
  const int64_t *str = need(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, *sp, NULL);
  if (!pre || !post || !dil || !str) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < 2; i++) {
    if (pre[i] < 0 || post[i] < 0 || dil[i] < 1 || str[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    d->pre[i] = pre[i], d->post[i] = post[i], d->dil[i] = dil[i], d->cstride[i] = str[i];
  }
  d->spatial = *sp;
  d->mode = *mode;
  return CUDNN_STATUS_SUCCESS;
}

/* A scaling factor: float or double, as cuDNN takes either. */
static int scale_of(const sdesc *d, int name, float *out) {
  const sattr *a = sd_attr(d, name);
  if (!a || a->count != 1) return 0;
  if (a->type == CUDNN_TYPE_FLOAT) *out = *(const float *)a->data;
  else if (a->type == CUDNN_TYPE_DOUBLE) *out = (float)*(const double *)a->data;
  else return 0;
  return 1;
}

/* A convolution operation: its descriptor, three tensors and alpha
 * (required), beta (0 if absent); shapes checked by conv.c. */
static cudnnStatus_t fin_conv_op(sdesc *d) {
  int f = d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      bd = d->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
  int base = f ? CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA
               : bd ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA : CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
  /* attribute order from base: alpha, beta, conv desc, then the three tensors:
   * forward W X Y, data gradient W DX DY, filter gradient DW X DY */
  TRY(ref(d, base + 2, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, 1, &d->desc));
  TRY(ref(d, base + 3, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->b));
  TRY(ref(d, base + 4, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->x));
  TRY(ref(d, base + 5, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->y));
  if (!scale_of(d, base, &d->alpha)) return CUDNN_STATUS_BAD_PARAM;
  d->beta = 0.0f;
  if (sd_attr(d, base + 1) && !scale_of(d, base + 1, &d->beta)) return CUDNN_STATUS_BAD_PARAM;
  return sim_conv_check_op(d);
}

EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t dd) {
  c_fin++;
  sdesc *d = as_desc(dd);
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  if (d->finalized) return CUDNN_STATUS_BAD_PARAM;
  const sdesc *r;
  switch (d->type) {
  case CUDNN_BACKEND_TENSOR_DESCRIPTOR: TRY(fin_tensor(d)); break;
  case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: {
    const int32_t *m = need(d, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, NULL);
    const int64_t *ax = need(d, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, NULL);
    if (!m) return CUDNN_STATUS_BAD_PARAM;
    d->mode = *m, d->axis = ax ? *ax : -1;
    if (d->mode == CUDNN_POINTWISE_GEN_INDEX && d->axis < 0) return CUDNN_STATUS_BAD_PARAM;
    break;
  }
  case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: {
    const int32_t *m = need(d, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, NULL);
    if (!m || !need(d, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, NULL)) return CUDNN_STATUS_BAD_PARAM;
    d->mode = *m;
    break;
  }
  case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: TRY(fin_conv_desc(d)); break;
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: TRY(fin_conv_op(d)); break;
  case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    if (!need(d, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, NULL)) return CUDNN_STATUS_BAD_PARAM;
    break;
  case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    TRY(ref(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, 1, &d->desc));
    TRY(ref(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->x));
    TRY(ref(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 0, &d->b));
    TRY(ref(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 0, &d->t));
    TRY(ref(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->y));
    if (d->desc->mode == CUDNN_POINTWISE_BINARY_SELECT && (!d->b || !d->t)) return CUDNN_STATUS_BAD_PARAM;
    break;
  case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    TRY(ref(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->x));
    TRY(ref(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->b));
    TRY(ref(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->y));
    TRY(ref(d, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_BACKEND_MATMUL_DESCRIPTOR, 1, &d->desc));
    if (d->x->nd != 4 || d->b->nd != 4 || d->y->nd != 4 || d->x->dim[3] != d->b->dim[2] ||
        d->y->dim[2] != d->x->dim[2] || d->y->dim[3] != d->b->dim[3])
      return CUDNN_STATUS_BAD_PARAM;
    break;
  case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    TRY(ref(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->x));
    TRY(ref(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->y));
    TRY(ref(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, 1, &d->desc));
    break;
  case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
    TRY(ref(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->x));
    TRY(ref(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_BACKEND_TENSOR_DESCRIPTOR, 1, &d->y));
    break;
  case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: TRY(fin_graph(d)); break;
  case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    TRY(ref(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 1, &d->graph));
    if (!need(d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, NULL)) return CUDNN_STATUS_BAD_PARAM;
    break;
  case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    TRY(ref(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 1, &r));
    if (!need(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, NULL)) return CUDNN_STATUS_BAD_PARAM;
    if (fires(&f_plan)) return CUDNN_STATUS_NOT_SUPPORTED;
    d->graph = r->graph, d->engine = r->engine, d->workspace = workspace_bytes;
    n_plans++;
    break;
  case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
    int64_t nu = 0, np = 0;
    const int64_t *u = need(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, -1, &nu);
    void *const *p = need(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, -1, &np);
    void *const *w = need(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, NULL);
    if (!u || !p || nu != np) return CUDNN_STATUS_BAD_PARAM;
    d->uids = malloc(sizeof(int64_t) * (size_t)nu);
    d->ptrs = malloc(sizeof(void *) * (size_t)nu);
    if (!d->uids || !d->ptrs) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    memcpy(d->uids, u, sizeof(int64_t) * (size_t)nu);
    memcpy(d->ptrs, p, sizeof(void *) * (size_t)nu);
    d->n_vp = nu, d->ws = w ? *w : NULL;
    break;
  }
  case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
  case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    if (!d->graph) return CUDNN_STATUS_BAD_PARAM; /* filled by GetAttribute only, in this subset */
    break;
  default: return CUDNN_STATUS_NOT_SUPPORTED;
  }
  d->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

/* Engines of a recognized graph, in the heuristics' order. SDPA: the
 * backward's pattern offers the non-deterministic engine 0 (dQ through an
 * accumulator) or the deterministic engine 1; the forward engine 1. Convolutions: the
 * gradients the non-deterministic engine 0 first (as cuDNN's atomics-based
 * kernels often rank), f32 the TF32 engine 2 next, then the plain engine 1. */
static int engines_of(const sdesc *g, int *list) {
  int n = 0;
  if (!g->recognized) return 0;
  if (g->is_conv) {
    if (g->conv.kind > 1) list[n++] = 0;
    if (g->conv.io == CUDNN_DATA_FLOAT) list[n++] = 2;
    list[n++] = 1;
    return n;
  }
  if (sim_sdpa_refuses(&g->spec)) return 0;
  /* the backward's pattern picks the kernel: dQ through an fp32
   * accumulator the atomics-based one, dQ straight from its product the
   * deterministic one (cudnn-frontend builds each pattern for that) */
  list[n++] = g->spec.bwd && g->spec.dq_accum ? 0 : 1;
  return n;
}

EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const dd, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t *count,
                                       void *elements) {
  c_get++;
  sdesc *d = as_desc(dd);
  if (!d || !d->finalized) return d ? CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED : CUDNN_STATUS_BAD_PARAM;
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS && d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || !count) return CUDNN_STATUS_BAD_PARAM;
    /* the heuristics fault holds for the graph: its fallback list is empty too */
    if (fires(&f_heur)) ((sdesc *)d->graph)->no_engines = true;
    int list[4], n = d->graph->no_engines ? 0 : engines_of(d->graph, list);
    int64_t k = 0;
    for (; k < n && k < requested; k++) {
      sdesc *c = as_desc(((void **)elements)[k]);
      if (!c || c->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || c->finalized) return CUDNN_STATUS_BAD_PARAM;
      c->graph = d->graph, c->engine = list[k], c->finalized = true;
    }
    *count = k;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINECFG_ENGINE && d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) {
    sdesc *e = requested >= 1 && elements ? as_desc(((void **)elements)[0]) : NULL;
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || !e || e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR || e->finalized)
      return CUDNN_STATUS_BAD_PARAM;
    e->graph = d->graph, e->engine = d->engine, e->finalized = true;
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE && d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
    if (type != CUDNN_TYPE_NUMERICAL_NOTE || !count) return CUDNN_STATUS_BAD_PARAM;
    int64_t k = 0;
    cudnnBackendNumericalNote_t *out = elements;
    /* tensor cores: every SDPA engine; a convolution's on bf16, and f32's TF32 engine */
    int tc = !d->graph->is_conv || d->graph->conv.io != CUDNN_DATA_FLOAT || d->engine == 2;
    if (d->engine == 0 && requested > k) out[k++] = CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    if (tc && requested > k) out[k++] = CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    if (d->engine == 2 && requested > k) out[k++] = CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    *count = k;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX && d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR) {
    if (type != CUDNN_TYPE_INT64 || requested < 1 || !elements) return CUDNN_STATUS_BAD_PARAM;
    *(int64_t *)elements = d->engine; /* the subset's engine numbers are its global indices */
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    if (type != CUDNN_TYPE_INT64 || requested < 1 || !elements) return CUDNN_STATUS_BAD_PARAM;
    *(int64_t *)elements = d->workspace;
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  /* Anything else as set. */
  const sattr *a = sd_attr(d, name);
  if (!a) return CUDNN_STATUS_BAD_PARAM;
  if (a->type != (int)type) return CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE;
  int64_t k = a->count < requested ? a->count : requested;
  if (k > 0 && elements) memcpy(elements, a->data, elem_size(type) * (size_t)k);
  if (count) *count = a->count;
  return CUDNN_STATUS_SUCCESS;
}

EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t vpack) {
  c_exec++;
  sdesc *p = as_desc(plan), *v = as_desc(vpack);
  if (!h || h->magic != H_MAGIC || !p || !v || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return CUDNN_STATUS_BAD_PARAM;
  if (!p->finalized || !v->finalized) return CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED;
  if (fires(&f_exec)) return CUDNN_STATUS_EXECUTION_FAILED;
  char why[200] = "";
  cudnnStatus_t s = p->graph->is_conv
                        ? sim_conv_execute(&p->graph->conv, p->engine, v, p->workspace, h->stream, why, sizeof why)
                        : sim_sdpa_execute(&p->graph->spec, v, p->workspace, h->stream, why, sizeof why);
  if (s) {
    fprintf(stderr, "gpa-sim cudnn: cudnnBackendExecute: %s\n", why);
    return s;
  }
  last_engine = p->engine;
  n_execs++;
  return CUDNN_STATUS_SUCCESS;
}
