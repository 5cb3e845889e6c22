/* The SDPA operation graphs, forward and backward, built with cuDNN's
 * backend descriptor API (cudnn_graph.h) in the shape cuDNN's fused flash
 * attention engines recognize: the composition cudnn-frontend lowers its
 * SDPA nodes to (matmuls, pointwise ops, reductions, reshapes), restricted
 * to what our op needs: a scale, bottom-right causal masking, per-batch key
 * lengths, GQA/MQA, fp32 stats; no dropout, bias or alibi.
 *
 * Our [B,S,H,D] is cuDNN's BSHD: the graph names tensors in its [b,h,s,d]
 * order with our strides, so nothing is transposed in memory. K (and V in
 * the backward) enter transposed by strides, as the engines want KT / VT.
 *
 * Masks. Our causal rule is j <= i + Sk - S for every batch, whatever the
 * lengths (tests/util/attn_ref.c), so the diagonal is shifted by the
 * constant Sk - S (a by-value scalar), never by the per-batch lengths as
 * cudnn-frontend's bottom-right alignment with padding would do. Lengths
 * mask keys j >= lengths[b]; every query row is valid (seq_len_q = S).
 * Masked scores are replaced by a by-value "minus infinity" before the
 * softmax: -inf from cuDNN 9.10, the lowest float before (the value
 * cudnn-frontend uses for each version). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cudnn_build.h"
#include "backends/cuda/cudnn_sdpa.h"

typedef gpa__dnn_b gb;

/* A virtual tensor [d0,d1,d2,d3], packed. */
static cudnnBackendDescriptor_t vt(gb *b, cudnnDataType_t dt, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  const int64_t dim[4] = {d0, d1, d2, d3}, str[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
  return gpa__dnn_tensor(b, 0, dt, dim, str, GPA__DNN_VIRT);
}

static cudnnBackendDescriptor_t scalar(gb *b, int64_t uid, cudnnDataType_t dt) {
  const int64_t one[4] = {1, 1, 1, 1};
  return gpa__dnn_tensor(b, uid, dt, one, one, GPA__DNN_BYVAL);
}

/* y = mode(x, b2, t); axis >= 0 for GEN_INDEX. */
static void pw(gb *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t b2, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis) {
  cudnnBackendDescriptor_t p = gpa__dnn_mk(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  gpa__dnn_set(b, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, NULL);
  gpa__dnn_set(b, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, NULL);
  if (axis >= 0) gpa__dnn_set(b, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, NULL);
  gpa__dnn_fin(b, p, "pointwise");
  cudnnBackendDescriptor_t o = gpa__dnn_mk(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, NULL);
  if (b2) gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b2, NULL);
  if (t) gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, NULL);
  gpa__dnn_op(b, o, "pointwise operation");
}

/* c = a b over the last two dims, fp32 accumulate. No GEMM size overrides
 * by the lengths (cudnn-frontend sets them with a padding mask): the
 * lengths are data that our adapter checks on the device only when the op
 * completes, and an override past Sk would make cuDNN read past k and v.
 * With the mask alone a bad length can only mask too much or too little. */
static void mm(gb *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t c) {
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t m = gpa__dnn_mk(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  gpa__dnn_set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, NULL);
  gpa__dnn_fin(b, m, "matmul");
  cudnnBackendDescriptor_t o = gpa__dnn_mk(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, NULL);
  gpa__dnn_op(b, o, "matmul operation");
}

static void red(gb *b, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t r = gpa__dnn_mk(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  gpa__dnn_set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, NULL);
  gpa__dnn_set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, NULL);
  gpa__dnn_fin(b, r, "reduction");
  cudnnBackendDescriptor_t o = gpa__dnn_mk(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, NULL);
  gpa__dnn_op(b, o, "reduction operation");
}

static void reshape(gb *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t o = gpa__dnn_mk(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, NULL);
  gpa__dnn_set(b, o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, NULL);
  gpa__dnn_op(b, o, "reshape operation");
}

/* The graph's common tensors. */
typedef struct sdpa_t {
  int64_t B, S, Sk, H, Hkv, D;
  cudnnDataType_t io;
  cudnnBackendDescriptor_t q, kt, scale, seq_q, seq_kv, neg, shift;
} sdpa_t;

/* [b,h,s,d] views of our [B,S,H,D] (rows of h*d) and of k [B,Sk,Hkv,D]
 * transposed: [b,hkv,d,sk]. */
static cudnnBackendDescriptor_t bshd(gb *b, int64_t uid, cudnnDataType_t dt, int64_t B, int64_t S, int64_t H,
                                     int64_t D) {
  const int64_t dim[4] = {B, H, S, D}, str[4] = {S * H * D, D, H * D, 1};
  return gpa__dnn_tensor(b, uid, dt, dim, str, 0);
}
static cudnnBackendDescriptor_t bshd_t(gb *b, int64_t uid, cudnnDataType_t dt, int64_t B, int64_t S, int64_t H,
                                       int64_t D) {
  const int64_t dim[4] = {B, H, D, S}, str[4] = {S * H * D, D, 1, H * D};
  return gpa__dnn_tensor(b, uid, dt, dim, str, 0);
}

static cudnnBackendDescriptor_t select_masked(gb *b, const sdpa_t *t, cudnnBackendDescriptor_t x,
                                              cudnnBackendDescriptor_t keep) {
  cudnnBackendDescriptor_t y = vt(b, CUDNN_DATA_FLOAT, t->B, t->H, t->S, t->Sk);
  pw(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, t->neg, keep, y, -1);
  return y;
}

static cudnnBackendDescriptor_t index_of(gb *b, const sdpa_t *t, cudnnBackendDescriptor_t x, int64_t axis) {
  cudnnBackendDescriptor_t y = vt(b, CUDNN_DATA_INT32, t->B, t->H, t->S, t->Sk);
  pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, y, axis);
  return y;
}

/* Keys at or past lengths[b] (and, formally, rows past seq_len_q = S). */
static cudnnBackendDescriptor_t padding(gb *b, const sdpa_t *t, cudnnBackendDescriptor_t x) {
  cudnnBackendDescriptor_t row = index_of(b, t, x, 2), col = index_of(b, t, x, 3);
  cudnnBackendDescriptor_t rm = vt(b, CUDNN_DATA_BOOLEAN, t->B, t->H, t->S, t->Sk);
  cudnnBackendDescriptor_t cm = vt(b, CUDNN_DATA_BOOLEAN, t->B, t->H, t->S, t->Sk);
  cudnnBackendDescriptor_t both = vt(b, CUDNN_DATA_BOOLEAN, t->B, t->H, t->S, t->Sk);
  pw(b, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, t->seq_q, NULL, rm, -1);
  pw(b, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, t->seq_kv, NULL, cm, -1);
  pw(b, CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, rm, cm, NULL, both, -1);
  return select_masked(b, t, x, both);
}

/* Keeps key j for query i iff i + (Sk - S) >= j. */
static cudnnBackendDescriptor_t causal(gb *b, const sdpa_t *t, cudnnBackendDescriptor_t x) {
  cudnnBackendDescriptor_t row = index_of(b, t, x, 2), col = index_of(b, t, x, 3);
  if (t->shift) {
    cudnnBackendDescriptor_t r2 = vt(b, CUDNN_DATA_INT32, t->B, t->H, t->S, t->Sk);
    pw(b, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row, t->shift, NULL, r2, -1);
    row = r2;
  }
  cudnnBackendDescriptor_t keep = vt(b, CUDNN_DATA_BOOLEAN, t->B, t->H, t->S, t->Sk);
  pw(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
  return select_masked(b, t, x, keep);
}

/* scale * Q K^T, masked (the part forward and backward share; the backward
 * subtracts the stats between the two masks, as cudnn-frontend does). */
static cudnnBackendDescriptor_t scores(gb *b, const sdpa_t *t, const gpa__dnn_key *k) {
  cudnnBackendDescriptor_t s = vt(b, CUDNN_DATA_FLOAT, t->B, t->H, t->S, t->Sk);
  mm(b, t->q, t->kt, s);
  cudnnBackendDescriptor_t s1 = vt(b, CUDNN_DATA_FLOAT, t->B, t->H, t->S, t->Sk);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, t->scale, NULL, s1, -1);
  return k->lens ? padding(b, t, s1) : s1;
}

static void common(gb *b, sdpa_t *t, gpa__dnn *d, const gpa__dnn_key *k) {
  t->B = k->B, t->S = k->S, t->Sk = k->Sk, t->H = k->H, t->Hkv = k->Hkv, t->D = k->D;
  t->io = k->dtype == GPA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  t->q = bshd(b, GPA__DNN_UID_Q, t->io, t->B, t->S, t->H, t->D);
  t->kt = bshd_t(b, GPA__DNN_UID_K, t->io, t->B, t->Sk, t->Hkv, t->D);
  t->scale = scalar(b, GPA__DNN_UID_SCALE, CUDNN_DATA_FLOAT);
  t->neg = k->causal || k->lens ? scalar(b, GPA__DNN_UID_NEG, CUDNN_DATA_FLOAT) : NULL;
  t->shift = k->causal && k->Sk != k->S ? scalar(b, GPA__DNN_UID_SHIFT, CUDNN_DATA_INT32) : NULL;
  t->seq_q = t->seq_kv = NULL;
  if (k->lens) {
    const int64_t dim[4] = {t->B, 1, 1, 1}, str[4] = {1, 1, 1, 1};
    t->seq_q = gpa__dnn_tensor(b, GPA__DNN_UID_SEQ_Q, CUDNN_DATA_INT32, dim, str, 0);
    t->seq_kv = gpa__dnn_tensor(b, GPA__DNN_UID_SEQ_KV, CUDNN_DATA_INT32, dim, str, 0);
  }
  (void)d;
}

static void fwd_graph(gb *b, gpa__dnn *d, const gpa__dnn_key *k) {
  sdpa_t t;
  common(b, &t, d, k);
  const int64_t sdim[4] = {t.B, t.H, t.S, 1}, sstr[4] = {t.H * t.S, t.S, 1, 1};
  cudnnBackendDescriptor_t v = bshd(b, GPA__DNN_UID_V, t.io, t.B, t.Sk, t.Hkv, t.D);
  cudnnBackendDescriptor_t o = bshd(b, GPA__DNN_UID_O, t.io, t.B, t.S, t.H, t.D);
  cudnnBackendDescriptor_t stats = gpa__dnn_tensor(b, GPA__DNN_UID_STATS, CUDNN_DATA_FLOAT, sdim, sstr, 0);
  cudnnBackendDescriptor_t s = scores(b, &t, k);
  if (k->causal) s = causal(b, &t, s);
  /* softmax with its stats: m = max, e = exp(s - m), z = sum e, lse = m + log z, p = e / z */
  cudnnBackendDescriptor_t m = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, 1);
  red(b, CUDNN_REDUCE_TENSOR_MAX, s, m);
  cudnnBackendDescriptor_t sm = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, m, NULL, sm, -1);
  cudnnBackendDescriptor_t e = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sm, NULL, NULL, e, -1);
  cudnnBackendDescriptor_t z = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, 1);
  red(b, CUDNN_REDUCE_TENSOR_ADD, e, z);
  cudnnBackendDescriptor_t lz = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, 1);
  pw(b, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, z, NULL, NULL, lz, -1);
  pw(b, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, m, lz, NULL, stats, -1);
  cudnnBackendDescriptor_t p = vt(b, t.io, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, z, NULL, p, -1);
  mm(b, p, v, o);
}

/* dV (or dK) = X^T Y summed over each kv head's group of query heads:
 * straight into out for MHA, through a [B,H,Sk,D] product and a reduction
 * over the group for GQA/MQA. */
static void grad_kv(gb *b, const sdpa_t *t, cudnnBackendDescriptor_t xt, cudnnBackendDescriptor_t y,
                    cudnnBackendDescriptor_t out) {
  if (t->H == t->Hkv) {
    mm(b, xt, y, out);
    return;
  }
  /* in the storage type, as cudnn-frontend types it (the engines fuse the
   * group's sum; the pattern is what they match) */
  cudnnBackendDescriptor_t full = vt(b, t->io, t->B, t->H, t->Sk, t->D);
  mm(b, xt, y, full);
  red(b, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

/* p (or dS) [B,H,S,Sk] as [B,H,Sk,S] in the storage type (a view: strides
 * swapped; the type is the storage type whatever p's, as in cudnn-frontend). */
static cudnnBackendDescriptor_t transposed(gb *b, const sdpa_t *t, cudnnBackendDescriptor_t p) {
  const int64_t dim[4] = {t->B, t->H, t->Sk, t->S}, str[4] = {t->H * t->S * t->Sk, t->S * t->Sk, 1, t->Sk};
  cudnnBackendDescriptor_t y = gpa__dnn_tensor(b, 0, t->io, dim, str, GPA__DNN_VIRT);
  reshape(b, p, y);
  return y;
}

static void bwd_graph(gb *b, gpa__dnn *d, const gpa__dnn_key *k) {
  sdpa_t t;
  common(b, &t, d, k);
  const int64_t sdim[4] = {t.B, t.H, t.S, 1}, sstr[4] = {t.H * t.S, t.S, 1, 1};
  cudnnBackendDescriptor_t vtr = bshd_t(b, GPA__DNN_UID_V, t.io, t.B, t.Sk, t.Hkv, t.D);
  cudnnBackendDescriptor_t o = bshd(b, GPA__DNN_UID_O, t.io, t.B, t.S, t.H, t.D);
  cudnnBackendDescriptor_t dout = bshd(b, GPA__DNN_UID_DO, t.io, t.B, t.S, t.H, t.D);
  cudnnBackendDescriptor_t dq = bshd(b, GPA__DNN_UID_DQ, t.io, t.B, t.S, t.H, t.D);
  cudnnBackendDescriptor_t dk = bshd(b, GPA__DNN_UID_DK, t.io, t.B, t.Sk, t.Hkv, t.D);
  cudnnBackendDescriptor_t dv = bshd(b, GPA__DNN_UID_DV, t.io, t.B, t.Sk, t.Hkv, t.D);
  cudnnBackendDescriptor_t stats = gpa__dnn_tensor(b, GPA__DNN_UID_STATS, CUDNN_DATA_FLOAT, sdim, sstr, 0);
  cudnnBackendDescriptor_t delta = gpa__dnn_tensor(b, GPA__DNN_UID_DELTA, CUDNN_DATA_FLOAT, sdim, sstr, 0);
  cudnnBackendDescriptor_t one = scalar(b, GPA__DNN_UID_ONE, CUDNN_DATA_FLOAT);
  /* delta = rowsum(dO * O): the softmax's share of dP (in the workspace) */
  cudnnBackendDescriptor_t doo = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.D);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, NULL, doo, -1);
  cudnnBackendDescriptor_t rs = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, 1);
  red(b, CUDNN_REDUCE_TENSOR_ADD, doo, rs);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rs, one, NULL, delta, -1);
  /* P = exp(scale S - lse), masked */
  cudnnBackendDescriptor_t s = scores(b, &t, k);
  cudnnBackendDescriptor_t sl = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, stats, NULL, sl, -1);
  if (k->causal) sl = causal(b, &t, sl);
  cudnnBackendDescriptor_t p = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sl, NULL, NULL, p, -1);
  grad_kv(b, &t, transposed(b, &t, p), dout, dv);
  /* dS = scale P (dO V^T - delta) */
  cudnnBackendDescriptor_t dp = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  mm(b, dout, vtr, dp);
  cudnnBackendDescriptor_t dp1 = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, delta, NULL, dp1, -1);
  cudnnBackendDescriptor_t dp2 = vt(b, CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp1, p, NULL, dp2, -1);
  /* dS in fp32, as cudnn-frontend types it (PyTorch's graph): the dQ
   * product reads it so, and only dK's transposed view is in the storage
   * type. GPA_CUDNN_SDPA_DS=io types it in the storage type (our graph
   * before session 16), to measure whether the engines care. */
  cudnnBackendDescriptor_t ds = vt(b, d->tune.ds_io ? t.io : CUDNN_DATA_FLOAT, t.B, t.H, t.S, t.Sk);
  pw(b, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp2, t.scale, NULL, ds, -1);
  grad_kv(b, &t, transposed(b, &t, ds), t.q, dk);
  /* dQ = dS K, K read back out of the KT view */
  const int64_t kdim[4] = {t.B, t.Hkv, t.Sk, t.D}, kstr[4] = {t.Sk * t.Hkv * t.D, t.D, t.Hkv * t.D, 1};
  cudnnBackendDescriptor_t kk = gpa__dnn_tensor(b, 0, t.io, kdim, kstr, GPA__DNN_VIRT);
  reshape(b, t.kt, kk);
  /* What cudnn-frontend builds for is_deterministic_algorithm (its "dP
   * workspace" form, use_dp_workspace, for which it budgets B H S Sk 2
   * bytes of cuDNN workspace: 4 GiB at B4 S4096 H32; GPA_CUDNN_VERBOSE
   * prints the plan's). PyTorch never asks for it (MHA.cpp leaves the
   * attribute false): it runs the accumulator form below. */
  if (!k->nondet) {
    mm(b, ds, kk, dq);
    return;
  }
  /* Non-deterministic: dQ through an fp32 accumulator in the workspace,
   * then copied out. cudnn-frontend builds this pattern when determinism is
   * not asked for (PyTorch's default), and the engines match it with
   * their faster kernel, which sums dQ's partials by atomics; the direct
   * product above selects the deterministic kernel whatever engine notes
   * allow (an H100, session 11: 0.57-0.95x PyTorch's backward either way). */
  const int64_t adim[4] = {t.B, t.H, t.S, t.D}, astr[4] = {t.H * t.S * t.D, t.S * t.D, t.D, 1};
  cudnnBackendDescriptor_t acc = gpa__dnn_tensor(b, GPA__DNN_UID_DQ_ACCUM, CUDNN_DATA_FLOAT, adim, astr, 0);
  mm(b, ds, kk, acc);
  pw(b, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, acc, NULL, NULL, dq, -1);
}

int gpa__dnn_build_sdpa(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_descs *g, char *why, size_t n) {
  gb b = {&d->api, g, CUDNN_STATUS_SUCCESS, NULL, GPA__DNN_UID_VIRTUAL};
  memset(g, 0, sizeof *g);
  if (k->bwd) bwd_graph(&b, d, k);
  else fwd_graph(&b, d, k);
  /* The operations are every OPERATION_* descriptor made, in order. */
  cudnnBackendDescriptor_t ops[GPA__DNN_DESCS];
  int64_t n_ops = 0;
  for (int i = 0; i < g->n; i++)
    if (g->op[i]) ops[n_ops++] = g->d[i];
  cudnnBackendDescriptor_t graph = gpa__dnn_mk(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnHandle_t h = d->h;
  /* No handle: a graph checked against the real library on a machine
   * without a GPU (tests/test_cudnn_attention.c); never so in the backend. */
  if (h) gpa__dnn_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, NULL);
  gpa__dnn_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops, NULL);
  gpa__dnn_fin(&b, graph, "operation graph");
  if (b.s) {
    snprintf(why, n, "%s graph: %s: %s", k->bwd ? "backward" : "forward", b.what ? b.what : "?",
             d->api.cudnnGetErrorString(b.s));
    gpa__dnn_descs_free(&d->api, g);
    return 0;
  }
  g->graph = graph;
  return 1;
}
