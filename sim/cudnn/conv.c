/* gpa-sim cuDNN subset: convolution graphs (what backends/cuda/cudnn_conv.c
 * builds), checked as cuDNN checks them and computed on the host.
 *
 * Operations: forward (W, X, Y), data gradient (W, DX, DY), filter gradient
 * (DW, X, DY) on 4-D NCHW tensors with two spatial dims; the subset
 * computes height-1 tensors and filters only (conv1d as cuDNN sees it) and
 * refuses the rest as an unsupported graph. At finalize an operation's
 * tensors must agree with its descriptor the way cuDNN requires: 4-D,
 * filter channels dividing the input's (groups), output channels a
 * multiple of the groups, output extent (L + pre + post - dil (R-1) - 1) /
 * stride + 1, and one storage type for the activations and the filter,
 * except that an fp32 output of a 16-bit convolution is allowed (a virtual
 * fp32 accumulator before a fused add, an fp32 filter gradient).
 *
 * Graphs: one convolution, the forward optionally followed by a pointwise
 * ADD of a real [1,C,1,1] tensor to its (virtual) output. Mode
 * cross-correlation only (CUDNN_CONVOLUTION: refused as a pattern).
 *
 * Execution: double sums in a fixed order (the same bits every time),
 * alpha and beta applied, each output rounded once to its type (the fused
 * forward: the accumulator to fp32, + bias in fp32, then to y's type).
 * Engine 2 (TF32) first rounds f32 inputs to 10-bit mantissas, as tensor
 * cores do: results an exact caller must not accept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpa_sim_hooks.h"
#include "half16.h"
#include "internal.h"

typedef const sdesc *T;

static int is_conv_op(T o) {
  return o->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         o->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         o->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

static int low(int dt) { return dt == CUDNN_DATA_BFLOAT16 || dt == CUDNN_DATA_HALF; }

cudnnStatus_t sim_conv_check_op(const sdesc *op) {
  T c = op->desc, x = op->x, w = op->b, y = op->y;
  if (x->nd != 4 || w->nd != 4 || y->nd != 4) return CUDNN_STATUS_BAD_PARAM;
  int64_t N = x->dim[0], C = x->dim[1], K = w->dim[0], Cg = w->dim[1];
  if (y->dim[0] != N || y->dim[1] != K || Cg < 1 || C % Cg || K % (C / Cg)) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < 2; i++) {
    int64_t ext = x->dim[2 + i] + c->pre[i] + c->post[i] - c->dil[i] * (w->dim[2 + i] - 1) - 1;
    if (ext < 0 || y->dim[2 + i] != ext / c->cstride[i] + 1) return CUDNN_STATUS_BAD_PARAM;
  }
  /* the output of the operation: y forward, x (dx) data gradient, w (dw) filter gradient */
  int fwd = op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      dgrad = op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
  T out = fwd ? y : dgrad ? x : w, in1 = fwd ? x : y, in2 = fwd || dgrad ? w : x;
  if (in1->dt != in2->dt) return CUDNN_STATUS_BAD_PARAM;
  if (out->dt != in1->dt && !(low(in1->dt) && out->dt == CUDNN_DATA_FLOAT)) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

int sim_conv_recognize(const sdesc *const *ops, int n, conv_spec *s, char *why, size_t wn) {
  T cv = NULL, add = NULL;
  int others = 0;
  for (int i = 0; i < n; i++) {
    if (is_conv_op(ops[i])) {
      if (cv) {
        snprintf(why, wn, "more than one convolution in a graph");
        return -1;
      }
      cv = ops[i];
    } else if (ops[i]->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR && !add) {
      add = ops[i];
    } else {
      others++;
    }
  }
  if (!cv) return 0;
  memset(s, 0, sizeof *s);
  if (others || (add && (cv->type != CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
                         add->desc->mode != CUDNN_POINTWISE_ADD || add->x != cv->y || !add->b || add->t))) {
    snprintf(why, wn, "a convolution with operations other than a forward's bias add");
    return -1;
  }
  s->kind = cv->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR        ? 1
            : cv->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ? 2
                                                                                       : 3;
  T c = cv->desc;
  s->x = cv->x, s->w = cv->b, s->y = cv->y, s->out = s->kind == 1 ? (add ? add->y : cv->y) : NULL;
  s->bias = add ? add->b : NULL;
  if (c->mode != CUDNN_CROSS_CORRELATION) {
    snprintf(why, wn, "convolution mode (the subset computes cross-correlation)");
    return -1;
  }
  if (s->x->dim[2] != 1 || s->w->dim[2] != 1 || c->pre[0] || c->post[0] || c->cstride[0] != 1 || c->dil[0] != 1) {
    snprintf(why, wn, "a convolution of height > 1 (the subset computes height-1 tensors)");
    return -1;
  }
  T outs[3] = {s->out, s->x, s->w}, o = outs[s->kind - 1];
  if (o->virt || o->byval || (s->kind == 1 && add && (!s->y->virt || s->bias->virt || s->bias->byval))) {
    snprintf(why, wn, "a virtual output, or a bias add not fed by the convolution's virtual output");
    return -1;
  }
  if (s->kind != 1 && (s->y->virt || (s->kind == 2 ? s->w : s->x)->virt)) {
    snprintf(why, wn, "a virtual input");
    return -1;
  }
  if (s->bias) {
    T b = s->bias;
    if (b->nd != 4 || b->dim[0] != 1 || b->dim[1] != s->y->dim[1] || b->dim[2] != 1 || b->dim[3] != 1 ||
        s->out->nd != 4 || memcmp(s->out->dim, s->y->dim, sizeof s->y->dim)) {
      snprintf(why, wn, "the bias add's tensors are not [1,C,1,1] and the convolution's output shape");
      return -1;
    }
  }
  s->N = s->x->dim[0], s->C = s->x->dim[1], s->L = s->x->dim[3], s->K = s->w->dim[0], s->R = s->w->dim[3];
  s->Lout = s->y->dim[3], s->G = s->C / s->w->dim[1];
  s->pre = c->pre[1], s->post = c->post[1], s->dil = c->dil[1], s->stride = c->cstride[1];
  s->io = s->kind == 3 ? s->x->dt : s->w->dt;
  s->alpha = cv->alpha, s->beta = cv->beta;
  if (s->io != CUDNN_DATA_FLOAT && s->io != CUDNN_DATA_BFLOAT16 && s->io != CUDNN_DATA_HALF) {
    snprintf(why, wn, "storage type not f32/bf16/fp16");
    return -1;
  }
  return 1;
}

/* ---- execution ------------------------------------------------------------------------------------ */

typedef struct job {
  conv_spec s;
  sdesc t[5]; /* x w y bias out, as at the call */
  void *x, *w, *y, *bias, *out;
  float alpha, beta;
  int engine;
} job;

static size_t at(T t, int64_t n, int64_t c, int64_t l) { return (size_t)(n * t->str[0] + c * t->str[1] + l * t->str[3]); }

static double tf32(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x1000u) & ~0x1fffu; /* round to 10 mantissa bits (ties away; enough for a test) */
  memcpy(&f, &u, 4);
  return f;
}

static double ld(const job *J, T t, const void *p, size_t i) {
  if (t->dt == CUDNN_DATA_FLOAT) {
    double v = ((const float *)p)[i];
    return J->engine == 2 ? tf32(v) : v;
  }
  uint16_t u = ((const uint16_t *)p)[i];
  return t->dt == CUDNN_DATA_BFLOAT16 ? bf16_to_float(u) : half_to_float(u);
}

/* out = alpha v + beta out, rounded once to the tensor's type */
static void st(const job *J, T t, void *p, size_t i, double v) {
  if (t->dt == CUDNN_DATA_FLOAT) {
    float *f = p;
    f[i] = (float)(J->alpha * v + (J->beta ? J->beta * (double)f[i] : 0.0));
    return;
  }
  uint16_t *h = p;
  double old = J->beta ? (t->dt == CUDNN_DATA_BFLOAT16 ? bf16_to_float(h[i]) : half_to_float(h[i])) : 0.0;
  float r = (float)(J->alpha * v + J->beta * old);
  h[i] = t->dt == CUDNN_DATA_BFLOAT16 ? float_to_bf16(r) : float_to_half(r);
}

/* Visits the terms of output position (n, k, t): input channel ci of k's
 * group, filter tap r, input position pos in [0, L). */
#define TERMS(s, n, k, t, body)                                               \
  do {                                                                        \
    int64_t cg_ = (s)->C / (s)->G, g_ = (k) / ((s)->K / (s)->G);              \
    for (int64_t cj = 0; cj < cg_; cj++)                                      \
      for (int64_t r = 0; r < (s)->R; r++) {                                  \
        int64_t pos = (t) * (s)->stride - (s)->pre + r * (s)->dil;            \
        if (pos < 0 || pos >= (s)->L) continue;                               \
        int64_t ci = g_ * cg_ + cj;                                           \
        body;                                                                 \
      }                                                                       \
  } while (0)

static int run_fwd(const job *J) {
  const conv_spec *s = &J->s;
  T x = s->x, w = s->w, b = s->bias, o = s->out;
  for (int64_t n = 0; n < s->N; n++)
    for (int64_t k = 0; k < s->K; k++)
      for (int64_t t = 0; t < s->Lout; t++) {
        double acc = 0;
        TERMS(s, n, k, t, acc += ld(J, x, J->x, at(x, n, ci, pos)) * ld(J, w, J->w, at(w, k, cj, r)));
        /* fused: the virtual fp32 accumulator (alpha, beta of the convolution), + bias in fp32 */
        if (b) acc = (float)((float)(J->alpha * acc) + (float)ld(J, b, J->bias, (size_t)(k * b->str[1])));
        job plain = *J;
        if (b) plain.alpha = 1.0f, plain.beta = 0.0f;
        st(&plain, o, J->out, at(o, n, k, t), acc);
      }
  return 0;
}

static int run_dgrad(const job *J) {
  const conv_spec *s = &J->s;
  T dx = s->x, w = s->w, dy = s->y;
  size_t nx = (size_t)(s->N * s->C * s->L);
  double *acc = calloc(nx ? nx : 1, sizeof *acc);
  if (!acc) return 1;
  for (int64_t n = 0; n < s->N; n++)
    for (int64_t k = 0; k < s->K; k++)
      for (int64_t t = 0; t < s->Lout; t++) {
        double g = ld(J, dy, J->y, at(dy, n, k, t));
        TERMS(s, n, k, t, acc[((size_t)n * s->C + ci) * s->L + pos] += g * ld(J, w, J->w, at(w, k, cj, r)));
      }
  for (int64_t n = 0; n < s->N; n++)
    for (int64_t c = 0; c < s->C; c++)
      for (int64_t l = 0; l < s->L; l++) st(J, dx, J->x, at(dx, n, c, l), acc[((size_t)n * s->C + c) * s->L + l]);
  free(acc);
  return 0;
}

static int run_wgrad(const job *J) {
  const conv_spec *s = &J->s;
  T x = s->x, dw = s->w, dy = s->y;
  int64_t cg = s->C / s->G;
  size_t nw = (size_t)(s->K * cg * s->R);
  double *acc = calloc(nw ? nw : 1, sizeof *acc);
  if (!acc) return 1;
  for (int64_t n = 0; n < s->N; n++)
    for (int64_t k = 0; k < s->K; k++)
      for (int64_t t = 0; t < s->Lout; t++) {
        double g = ld(J, dy, J->y, at(dy, n, k, t));
        TERMS(s, n, k, t, acc[((size_t)k * cg + cj) * s->R + r] += g * ld(J, x, J->x, at(x, n, ci, pos)));
      }
  for (int64_t k = 0; k < s->K; k++)
    for (int64_t c = 0; c < cg; c++)
      for (int64_t r = 0; r < s->R; r++) st(J, dw, J->w, at(dw, k, c, r), acc[((size_t)k * cg + c) * s->R + r]);
  free(acc);
  return 0;
}

static int job_run(void *arg, char *why, size_t n) {
  const job *J = arg;
  int r = J->s.kind == 1 ? run_fwd(J) : J->s.kind == 2 ? run_dgrad(J) : run_wgrad(J);
  if (r) snprintf(why, n, "gpa-sim cudnn: no host memory for a convolution's sums");
  return r;
}

cudnnStatus_t sim_conv_execute(const conv_spec *s, int engine, const sdesc *vp, int64_t workspace, CUstream stream,
                               char *why, size_t wn) {
  job *J = calloc(1, sizeof *J);
  if (!J) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  J->s = *s;
  J->engine = engine;
  J->alpha = s->alpha, J->beta = s->beta;
  const sdesc **fields[5] = {&J->s.x, &J->s.w, &J->s.y, &J->s.bias, &J->s.out};
  void **dst[5] = {&J->x, &J->w, &J->y, &J->bias, &J->out};
  for (int i = 0; i < 5; i++) {
    T t = *fields[i];
    if (!t || t->virt) continue; /* the fused forward's accumulator has no memory */
    void *p = sd_find(vp, t);
    if (!sd_covers(t, p, why, wn)) {
      free(J);
      return CUDNN_STATUS_BAD_PARAM;
    }
    J->t[i] = *t;
    J->t[i].n_attrs = 0; /* the copy owns no attribute data */
    *fields[i] = &J->t[i];
    *dst[i] = p;
  }
  if (!sd_workspace_ok(vp, workspace, why, wn)) {
    free(J);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (gpa_sim__enqueue(stream, job_run, J, free) != CUDA_SUCCESS) {
    snprintf(why, wn, "the stream does not take work (sticky error or no context)");
    free(J);
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}
