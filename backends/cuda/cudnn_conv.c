/* conv1d's cuDNN graphs and their execution (design in cudnn_conv.h).
 *
 * cuDNN's convolutions take 2-D or 3-D spatial tensors, so a conv1d is a
 * 2-D convolution of height 1: x [B,Cin,1,L], W [Cout,Cin/G,1,K], y
 * [B,Cout,1,Lout], with pre-paddings {0, pad_l} and post-paddings {0,
 * pad_r} (causal: the left pad alone), dilations {1, dil}, strides {1,
 * stride}, cross-correlation (PyTorch's convolution). Groups are implied by
 * the tensors: W's second dim is Cin/G. Our row-major layouts are cuDNN's
 * NCHW with H = 1, or under layout nlc its NHWC ([B,L,C]: strides {L C, 1,
 * L C, C}), so nothing moves in memory.
 *
 * One graph per pass: forward (bf16 with a bias: the convolution into a
 * virtual fp32 tensor, then a pointwise add of b [1,Cout,1,1] into y, so y
 * is rounded once), data gradient, filter gradient. Compute type fp32.
 * bf16: x, W, b, y, dy, dx bf16 and dW an fp32 tensor (the filter
 * gradient's output type differs from its inputs'; a cuDNN that refuses it
 * declines the call). Engines: deterministic only (key.nondet = 0), and
 * exact ones (key.exact: for f32 no tensor-core (TF32), FFT or Winograd
 * engine and no down-converted inputs; for bf16 no down-conversion or
 * reduced-precision sums), so results stay within our f32 / bf16 parity
 * bounds and repeat bit for bit.
 *
 * Declines (GPA_SKIP, before anything is enqueued): no usable cuDNN, the
 * GPA_CUDNN_CONV=0 knob, a dtype other than f32/bf16, an empty tensor, an
 * operand not 16-byte aligned, a graph, heuristics or plan cuDNN refuses,
 * no device memory for the workspace; after: a cudnnBackendExecute that
 * fails (our kernels then rewrite every output, in stream order). */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cudnn_build.h"
#include "backends/cuda/cudnn_conv.h"

enum { UID_X = 1, UID_W, UID_Y, UID_B, UID_DY, UID_DX, UID_DW, UID_VIRT = 100 };

/* ---- graph building ------------------------------------------------------------------------------- */

typedef gpa__dnn_b cb;

/* [n, c, 1, l], packed NCHW, or NHWC when nlc (virtual: an intermediate of the graph). */
static cudnnBackendDescriptor_t tensor(cb *b, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t l,
                                       bool virt, int nlc) {
  const int64_t dim[4] = {n, c, 1, l}, ncl[4] = {c * l, l, l, 1}, nhwc[4] = {c * l, 1, c * l, c};
  return gpa__dnn_tensor(b, uid, dt, dim, nlc ? nhwc : ncl, virt ? GPA__DNN_VIRT : 0);
}

typedef struct geo {
  int64_t B, Cin, L, Cout, K, stride, pad_l, pad_r, dil, G, Lout, nlc;
} geo;

static geo geo_of(const gpa__dnn_key *k) {
  const int64_t *c = k->cg;
  geo g = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], 0, c[10]};
  g.Lout = (g.L + g.pad_l + g.pad_r - g.dil * (g.K - 1) - 1) / g.stride + 1;
  return g;
}

static cudnnBackendDescriptor_t conv_desc(cb *b, const geo *g) {
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, pre[2] = {0, g->pad_l}, post[2] = {0, g->pad_r}, dil[2] = {1, g->dil},
                str[2] = {1, g->stride};
  cudnnBackendDescriptor_t c = gpa__dnn_mk(b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "convolution compute type");
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "convolution spatial dims");
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre, "convolution pre-paddings");
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post, "convolution post-paddings");
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "convolution dilations");
  gpa__dnn_set(b, c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, "convolution strides");
  gpa__dnn_fin(b, c, "convolution descriptor");
  return c;
}

/* The convolution operation of kind `conv`: its three tensors in the
 * attribute order of that operation (fwd: W, X, Y; dgrad: W, DX, DY;
 * wgrad: DW, X, DY). */
static void conv_op(cb *b, int conv, cudnnBackendDescriptor_t cd, cudnnBackendDescriptor_t t0,
                    cudnnBackendDescriptor_t t1, cudnnBackendDescriptor_t t2) {
  static const struct {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, desc, a0, a1, a2;
  } k[3] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
  };
  int i = conv == GPA__DNN_CONV_DGRAD ? 1 : conv == GPA__DNN_CONV_WGRAD ? 2 : 0;
  const float alpha = 1.0f, beta = 0.0f;
  cudnnBackendDescriptor_t o = gpa__dnn_mk(b, k[i].type);
  gpa__dnn_set(b, o, k[i].alpha, CUDNN_TYPE_FLOAT, 1, &alpha, "convolution alpha");
  gpa__dnn_set(b, o, k[i].beta, CUDNN_TYPE_FLOAT, 1, &beta, "convolution beta");
  gpa__dnn_set(b, o, k[i].desc, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, "convolution operation's descriptor");
  gpa__dnn_set(b, o, k[i].a0, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t0, "convolution operation's tensor");
  gpa__dnn_set(b, o, k[i].a1, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t1, "convolution operation's tensor");
  gpa__dnn_set(b, o, k[i].a2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t2, "convolution operation's tensor");
  gpa__dnn_op(b, o, "convolution operation");
}

/* y = acc + bias (fp32 math). */
static void add_bias(cb *b, cudnnBackendDescriptor_t acc, cudnnBackendDescriptor_t bias, cudnnBackendDescriptor_t y) {
  const cudnnPointwiseMode_t mode = CUDNN_POINTWISE_ADD;
  const cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t p = gpa__dnn_mk(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  gpa__dnn_set(b, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  gpa__dnn_set(b, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f, "pointwise precision");
  gpa__dnn_fin(b, p, "pointwise descriptor");
  cudnnBackendDescriptor_t o = gpa__dnn_mk(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, "bias add");
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &acc, "bias add");
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bias, "bias add");
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "bias add");
  gpa__dnn_op(b, o, "bias add operation");
}

int gpa__dnn_build_conv(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_descs *g, char *why, size_t n) {
  cb b = {gpa__dnn_api(d), g, CUDNN_STATUS_SUCCESS, NULL, 0};
  memset(g, 0, sizeof *g);
  geo e = geo_of(k);
  cudnnDataType_t io = k->dtype == GPA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t cd = conv_desc(&b, &e);
  cudnnBackendDescriptor_t w = tensor(&b, k->conv == GPA__DNN_CONV_WGRAD ? UID_DW : UID_W,
                                      k->conv == GPA__DNN_CONV_WGRAD ? CUDNN_DATA_FLOAT : io, e.Cout, e.Cin / e.G, e.K,
                                      false, 0);
  const int nl = (int)e.nlc;
  switch (k->conv) {
  case GPA__DNN_CONV_FWD:
  case GPA__DNN_CONV_FWD_BIAS: {
    cudnnBackendDescriptor_t x = tensor(&b, UID_X, io, e.B, e.Cin, e.L, false, nl);
    cudnnBackendDescriptor_t y = tensor(&b, UID_Y, io, e.B, e.Cout, e.Lout, false, nl);
    if (k->conv == GPA__DNN_CONV_FWD) {
      conv_op(&b, k->conv, cd, w, x, y);
      break;
    }
    cudnnBackendDescriptor_t acc = tensor(&b, UID_VIRT, CUDNN_DATA_FLOAT, e.B, e.Cout, e.Lout, true, nl);
    const int64_t bd[4] = {1, e.Cout, 1, 1}, bs[4] = {e.Cout, 1, 1, 1};
    cudnnBackendDescriptor_t bias = gpa__dnn_tensor(&b, UID_B, io, bd, bs, 0);
    conv_op(&b, k->conv, cd, w, x, acc);
    add_bias(&b, acc, bias, y);
    break;
  }
  case GPA__DNN_CONV_DGRAD: {
    cudnnBackendDescriptor_t dx = tensor(&b, UID_DX, io, e.B, e.Cin, e.L, false, nl);
    cudnnBackendDescriptor_t dy = tensor(&b, UID_DY, io, e.B, e.Cout, e.Lout, false, nl);
    conv_op(&b, k->conv, cd, w, dx, dy);
    break;
  }
  default: {
    cudnnBackendDescriptor_t x = tensor(&b, UID_X, io, e.B, e.Cin, e.L, false, nl);
    cudnnBackendDescriptor_t dy = tensor(&b, UID_DY, io, e.B, e.Cout, e.Lout, false, nl);
    conv_op(&b, GPA__DNN_CONV_WGRAD, cd, w, x, dy);
    break;
  }
  }
  cudnnBackendDescriptor_t ops[4];
  int64_t n_ops = 0;
  for (int i = 0; i < g->n && n_ops < 4; i++)
    if (g->op[i]) ops[n_ops++] = g->d[i];
  cudnnBackendDescriptor_t graph = gpa__dnn_mk(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnHandle_t h = gpa__dnn_handle(d);
  /* no handle: a graph checked against the real library without a GPU (tests) */
  if (h) gpa__dnn_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  gpa__dnn_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops, "graph operations");
  gpa__dnn_fin(&b, graph, "operation graph");
  if (b.s) {
    static const char *names[] = {"", "forward", "forward+bias", "data-gradient", "filter-gradient"};
    snprintf(why, n, "convolution %s graph: %s: %s", k->conv >= 1 && k->conv <= 4 ? names[k->conv] : "?",
             b.what ? b.what : "?", b.A->cudnnGetErrorString(b.s));
    gpa__dnn_descs_free(b.A, g);
    return 0;
  }
  g->graph = graph;
  return 1;
}

/* ---- execution ------------------------------------------------------------------------------------ */

static uint64_t up256(uint64_t n) { return (n + 255) & ~(uint64_t)255; }
#define STR_(v) #v
#define STR(v) STR_(v)
#define SMALL STR(GPA__CUDNN_CONV_MIN_FLOPS)
static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The first decline of an actor, and each plan cuDNN refuses, at info
 * level (why our kernels run instead); the rest at debug level. */
static gpa_status decline(const gpa_op_exec *x, gpa__dnn *d, int loud, const char *op, const char *why) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  static const char fmt[] = "cuda: %s: cuDNN declines (%s): our kernels run";
  if (loud || (d && !d->conv_told)) gpa__log(GPA_LOG_INFO, C->host.log_level, fmt, op, why);
  if (d) d->conv_told = 1;
  return gpa__dnn_decline(x, "%s: %s", op, why);
}

/* 2 B Cout Lout (Cin / G) K: one pass's multiply-adds, twice. */
static double conv_flops(const gpa__conv_dnn_args *a) {
  return 2.0 * (double)a->B * (double)a->Cout * (double)a->Lout * (double)(a->Cin / a->G) * (double)a->K;
}

static const char *unsupported(const gpa__conv_dnn_args *a) {
  if (a->dtype != GPA_F32 && a->dtype != GPA_BF16) return "storage is not f32/bf16";
  if (a->B < 1 || a->Cin < 1 || a->Cout < 1 || a->L < 1 || a->Lout < 1 || a->K < 1 || a->G < 1) return "empty tensor";
  const void *p[] = {a->x, a->W, a->b, a->dy, a->y, a->dx, a->dW};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
    if (!aligned16(p[i])) return "an operand is not 16-byte aligned";
  return NULL;
}

static void key_of(gpa__dnn_key *k, const gpa__conv_dnn_args *a, int conv, int ordinal) {
  memset(k, 0, sizeof *k); /* compared with memcmp: padding too */
  k->conv = conv, k->dtype = a->dtype, k->exact = a->dtype == GPA_F32 ? 2 : 1, k->ordinal = ordinal;
  const int64_t cg[11] = {a->B, a->Cin, a->L, a->Cout, a->K, a->stride, a->pad_l, a->pad_r, a->dil, a->G, a->nlc};
  memcpy(k->cg, cg, sizeof cg);
}

typedef struct pass {
  gpa__dnn_plan *p;
  int n;
  int64_t uid[4];
  void *ptr[4];
} pass;

static void put(pass *s, int64_t uid, const void *p) {
  s->uid[s->n] = uid;
  s->ptr[s->n++] = (void *)(uintptr_t)p;
}

/* Finds the plans of `n` passes, then runs them in order on one workspace. */
static gpa_status run(const gpa_op_exec *x, const gpa__conv_dnn_args *a, const char *op, pass *ps, const int *conv,
                      int n) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  int fwd = conv[0] == GPA__DNN_CONV_FWD || conv[0] == GPA__DNN_CONV_FWD_BIAS;
  if (C->host.cudnn_conv == 1)
    return gpa__dnn_decline_const(x, fwd ? "conv1d_fwd: off (GPA_CUDNN_CONV=0)" : "conv1d_bwd: off (GPA_CUDNN_CONV=0)");
  /* Unset: each execute costs tens of µs of host time (an H100 with cuDNN
   * 9.14: the main job's eager step 2.44 ms with it, 2.14 without), more
   * than its kernels save on a small convolution; on a large one they win
   * (2.5-16x our own at B8 C512 L2048). Decided by size alone, so a batch
   * replayed as a CUDA graph computes what its eager run did, bit for bit.
   * Decided before the library is touched: this decline recurs on every
   * call of the main job's convolutions, so it loads nothing, sets no
   * stream and formats nothing. */
  if (C->host.cudnn_conv == 0 && conv_flops(a) < GPA__CUDNN_CONV_MIN_FLOPS)
    return gpa__dnn_decline_const(x, fwd ? "conv1d_fwd: small (under " SMALL " FLOP): our kernels"
                                         : "conv1d_bwd: small (under " SMALL " FLOP): our kernels");
  const char *no_lib;
  gpa__dnn *d = gpa__cudnn_get(x, &no_lib);
  if (!d) return gpa__dnn_decline(x, "%s: no cuDNN: %s", op, no_lib); /* the load logged it */
  const char *no = unsupported(a);
  if (no) return decline(x, d, 0, op, no);
  uint64_t ws = 0;
  for (int i = 0; i < n; i++) {
    gpa__dnn_key k;
    key_of(&k, a, conv[i], C->ordinal);
    char why[256];
    uint64_t failed = d->st.builds_failed;
    ps[i].p = gpa__dnn_plan_get(d, &k, gpa__dnn_build_conv, why, sizeof why);
    if (!ps[i].p) return decline(x, d, d->st.builds_failed != failed, op, why);
    uint64_t w = (uint64_t)gpa__dnn_plan_workspace(ps[i].p);
    if (w > ws) ws = w;
  }
  CUdeviceptr work = gpa__cu_scratch(x, up256(ws) + 1);
  if (!work) {
    x->msg[0] = 0; /* not the op's failure: our kernels run */
    return decline(x, d, 1, op, "no device memory for cuDNN's workspace");
  }
  const gpa__cudnn_api *A = gpa__dnn_api(d);
  for (int i = 0; i < n; i++) {
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    cudnnBackendDescriptor_t vp = gpa__dnn_plan_pack(d, ps[i].p, ps[i].n, ps[i].uid, ps[i].ptr,
                                                     (void *)(uintptr_t)work, &s);
    if (vp) s = gpa__dnn_execute(d, ps[i].p, vp);
    /* Our kernels rewrite every output after this, in stream order, so a
     * pass that failed (or one that ran before it) leaves nothing behind. */
    if (s) {
      char why[160];
      snprintf(why, sizeof why, "%s: %s", vp ? "cudnnBackendExecute" : "variant pack", A->cudnnGetErrorString(s));
      return decline(x, d, 1, op, why);
    }
    d->st.conv_execs++;
  }
  return GPA_OK;
}

gpa_status gpa__cudnn_conv_fwd(const gpa_op_exec *x, const gpa__conv_dnn_args *a, int *bias_done) {
  pass p[1];
  memset(p, 0, sizeof p);
  int fuse = a->b && a->dtype == GPA_BF16;
  int conv[1] = {fuse ? GPA__DNN_CONV_FWD_BIAS : GPA__DNN_CONV_FWD};
  put(&p[0], UID_X, a->x);
  put(&p[0], UID_W, a->W);
  put(&p[0], UID_Y, a->y);
  if (fuse) put(&p[0], UID_B, a->b);
  gpa__conv_dnn_args c = *a;
  if (!fuse) c.b = NULL;
  c.dy = c.dx = c.dW = NULL;
  *bias_done = fuse;
  return run(x, &c, "conv1d_fwd", p, conv, 1);
}

gpa_status gpa__cudnn_conv_bwd(const gpa_op_exec *x, const gpa__conv_dnn_args *a) {
  pass p[2];
  memset(p, 0, sizeof p);
  const int conv[2] = {GPA__DNN_CONV_DGRAD, GPA__DNN_CONV_WGRAD};
  put(&p[0], UID_W, a->W);
  put(&p[0], UID_DX, a->dx);
  put(&p[0], UID_DY, a->dy);
  put(&p[1], UID_DW, a->dW);
  put(&p[1], UID_X, a->x);
  put(&p[1], UID_DY, a->dy);
  gpa__conv_dnn_args c = *a;
  c.b = c.y = NULL;
  return run(x, &c, "conv1d_bwd", p, conv, 2);
}
