/* Linear ops (host). Row-major; f32 or bf16 storage: the forward's x, W, b,
 * y, pre are of one dtype; the backward's dy, x, W, pre and dx have the
 * dtype of x while dW and db stay f32 (they feed fp32 optimizer state). bf16
 * runs the fp32 kernels on widened copies and rounds the bf16 outputs once.
 * x may have any rank >= 2, its leading dims flattened into N ("[..., in]").
 *   linear_fwd         in: x [...,in], W [out,in], b [out] (optional, 3rd input)
 *                      attr gelu (int 0..1, default 0): y = gelu_tanh(x W^T + b)
 *                      out: y [...,out]
 *   linear_gelu_fwd    in: x, W, b (optional)   out: y = gelu_tanh(pre), pre = x W^T + b
 *                      (the training form of the fused GELU: linear_bwd needs pre)
 *   linear_bwd         in: dy [...,out], x [...,in], W [out,in], pre [...,out] (only with gelu=1)
 *                      attr gelu (int 0..1, default 0): dy is the gradient of gelu(pre)
 *                      out: dx [...,in], dW [out,in], db [out]
 *                      attr g_bf16 (int 0..1, default 0; bf16 storage with gelu=1 only):
 *                      the GEMMs take g = dy gelu'(pre) rounded to bf16 once (PyTorch's
 *                      bf16 autograd does so) instead of exactly; db still sums the fp32 g
 *   linear_bwd_nobias  as linear_bwd without db: out dx, dW
 * GELU is the tanh form, the same kernel as gelu_fwd/gelu_bwd with
 * approximate=1. GEMMs run through OpenBLAS on the actor thread. db is summed
 * in a fixed order (bitwise reproducible). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/host/bf16.h"
#include "kernels/host/blas.h"
#include "kernels/host/linear.h"
#include "ops/linear/linear.h"
#include "ops/nn_util.h"

typedef gpa__lin_params linear_params;

static const gpa_attr_spec linear_attrs[] = {
    {"gelu", GPA_ATTR_INT, 0, offsetof(linear_params, gelu), 0, 0.0, 0, 1},
};
static const gpa_attr_spec linear_bwd_attrs[] = {
    {"gelu", GPA_ATTR_INT, 0, offsetof(linear_params, gelu), 0, 0.0, 0, 1},
    {"g_bf16", GPA_ATTR_INT, 0, offsetof(linear_params, g_bf16), 0, 0.0, 0, 1},
};

/* Rows of a [..., n] tensor. */
static int64_t rows_of(const gpa_tensor *t) {
  int64_t n = 1;
  for (uint32_t i = 0; i + 1 < t->rank; i++) n *= t->shape[i];
  return n;
}

/* t: [..., last] of dtype `dtype` with the leading dims of `like` (nullable: any). */
static gpa_status check_rows(const char *op, const char *arg, const gpa_tensor *t, int dtype,
                             const gpa_tensor *like, const char *like_arg, int64_t last, const char *why, char *msg,
                             size_t ms) {
  GPA__CHK(gpa__chk_dtype(op, arg, t, dtype, 0, msg, ms));
  if (!like) {
    if (t->rank < 2) {
      char s[96];
      gpa__chk_fmt_shape(s, sizeof s, t->rank, t->shape);
      snprintf(msg, ms, "%s: %s has shape %s, expected rank >= 2 ([N,in] or [...,in])", op, arg, s);
      return GPA_ESHAPE;
    }
    return GPA_OK;
  }
  int64_t want[GPA_MAX_RANK];
  for (uint32_t i = 0; i + 1 < like->rank; i++) want[i] = like->shape[i];
  want[like->rank - 1] = last;
  if (gpa__chk_shape_is(t, like->rank, want)) return GPA_OK; /* the reason is formatted only for a message */
  char w[128];
  snprintf(w, sizeof w, "leading dims of %s, %s", like_arg, why);
  return gpa__chk_shape(op, arg, t, like->rank, want, w, msg, ms);
}

/* x [...,in], W [out,in], optional b [out], one dtype (f32 or bf16); sizes
 * fit BLAS. */
static gpa_status check_xwb(const char *op, const gpa_tensor *x, const gpa_tensor *W, const gpa_tensor *b,
                            char *msg, size_t ms) {
  GPA__CHK(gpa__chk_float(op, "x", x, msg, ms));
  GPA__CHK(check_rows(op, "x", x, x->dtype, NULL, NULL, 0, NULL, msg, ms));
  GPA__CHK(gpa__chk_dtype(op, "W", W, x->dtype, 0, msg, ms));
  GPA__CHK(gpa__chk_rank(op, "W", W, 2, "([out,in])", msg, ms));
  int64_t in = x->shape[x->rank - 1];
  if (W->shape[1] != in) {
    snprintf(msg, ms, "%s: W has shape [%lld,%lld], expected [out,%lld] (in = last dim of x)", op,
             (long long)W->shape[0], (long long)W->shape[1], (long long)in);
    return GPA_ESHAPE;
  }
  if (b) {
    GPA__CHK(gpa__chk_dtype(op, "b", b, x->dtype, 0, msg, ms));
    GPA__CHK(gpa__chk_shape(op, "b", b, 1, &W->shape[0], "out of W", msg, ms));
  }
  if (!gpa__blas_dim_ok(rows_of(x)) || !gpa__blas_dim_ok(in) || !gpa__blas_dim_ok(W->shape[0])) {
    snprintf(msg, ms, "%s: dimensions past 2^31-1 are not supported (BLAS int)", op);
    return GPA_EOVERFLOW;
  }
  return GPA_OK;
}

static void set_rows(gpa_tensor *e, const gpa_tensor *like, int64_t last) {
  int64_t s[GPA_MAX_RANK];
  for (uint32_t i = 0; i < like->rank; i++) s[i] = like->shape[i];
  s[like->rank - 1] = last;
  gpa__chk_set(e, like->dtype, like->rank, s);
}

static gpa_status fwd_shape_common(const char *op, const gpa_op_sig *s, gpa_tensor *e, uint32_t n_out,
                                   char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0], *W = &s->inputs[1];
  GPA__CHK(check_xwb(op, x, W, s->n_inputs > 2 ? &s->inputs[2] : NULL, msg, ms));
  for (uint32_t i = 0; i < n_out; i++) set_rows(&e[i], x, W->shape[0]);
  return GPA_OK;
}

static gpa_status fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return fwd_shape_common("linear_fwd", s, e, 1, msg, ms);
}
static gpa_status gelu_fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return fwd_shape_common("linear_gelu_fwd", s, e, 2, msg, ms);
}

static gpa_status bwd_shape_common(const char *op, const gpa_op_sig *s, gpa_tensor *e, int with_db, char *msg,
                                   size_t ms) {
  const linear_params *p = s->params;
  const gpa_tensor *dy = &s->inputs[0], *x = &s->inputs[1], *W = &s->inputs[2];
  GPA__CHK(check_xwb(op, x, W, NULL, msg, ms));
  GPA__CHK(check_rows(op, "dy", dy, x->dtype, x, "x", W->shape[0], "out of W", msg, ms));
  if (p->gelu && s->n_inputs < 4) {
    snprintf(msg, ms, "%s: gelu=1 needs the pre-activation as 4th input (pre, from linear_gelu_fwd)", op);
    return GPA_EINVAL;
  }
  if (!p->gelu && s->n_inputs > 3) {
    snprintf(msg, ms, "%s: a 4th input (pre) is only taken with gelu=1", op);
    return GPA_EINVAL;
  }
  if (p->gelu) GPA__CHK(gpa__chk_like(op, "pre", &s->inputs[3], dy, "dy", msg, ms));
  if (p->g_bf16 && (!p->gelu || x->dtype != GPA_BF16)) {
    snprintf(msg, ms, "%s: g_bf16=1 needs gelu=1 and bf16 storage (x is %s, gelu=%d)", op,
             x->dtype == GPA_BF16 ? "bf16" : "f32", (int)p->gelu);
    return GPA_EINVAL;
  }
  set_rows(&e[0], x, x->shape[x->rank - 1]);
  gpa__chk_set(&e[1], GPA_F32, 2, W->shape);
  if (with_db) gpa__chk_set(&e[2], GPA_F32, 1, W->shape);
  return GPA_OK;
}

static gpa_status bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return bwd_shape_common("linear_bwd", s, e, 1, msg, ms);
}
static gpa_status bwd_nb_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return bwd_shape_common("linear_bwd_nobias", s, e, 0, msg, ms);
}

static gpa_status fwd_run(const gpa_op_exec *x, int gelu, float *pre) {
  const gpa_tensor *xt = &x->inputs[0], *W = &x->inputs[1];
  gpa__par par = gpa__ops_par(x->env);
  gpa__linear_fwd(&par, x->in[0], x->in[1], x->n_inputs > 2 ? x->in[2] : NULL, x->out[0], pre, rows_of(xt),
                  xt->shape[xt->rank - 1], W->shape[0], gelu);
  return GPA_OK;
}

static gpa_status fwd_host(const gpa_op_exec *x) {
  const linear_params *p = x->params;
  return fwd_run(x, (int)p->gelu, NULL);
}
static gpa_status gelu_fwd_host(const gpa_op_exec *x) { return fwd_run(x, 1, x->out[1]); }
GPA__BF16_HOST(fwd_host)
GPA__BF16_HOST(gelu_fwd_host)

/* v[i] = the bf16 value nearest v[i] (the host's rounding: kernels/host/bf16.h) */
static void round_bf16(float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) v[i] = gpa__bf16_to_f32(gpa__f32_to_bf16(v[i]));
}

static gpa_status bwd_host(const gpa_op_exec *x) {
  const linear_params *p = x->params;
  const gpa_tensor *xt = &x->inputs[1], *W = &x->inputs[2];
  int64_t N = rows_of(xt), in = xt->shape[xt->rank - 1], out = W->shape[0];
  void *owned = NULL, *g = NULL;
  if (p->gelu) {
    g = gpa__ops_scratch(x->env, (uint64_t)N * (uint64_t)out * sizeof(float), &owned);
    if (!g) {
      snprintf(x->msg, x->msg_size, "linear_bwd: no scratch memory for the GELU gradient [%lld,%lld]",
               (long long)N, (long long)out);
      return GPA_ENOMEM;
    }
  }
  gpa__par par = gpa__ops_par(x->env);
  float *db = x->n_outputs > 2 ? x->out[2] : NULL;
  if (p->g_bf16 && N * out > 0) {
    /* g and db from the fp32 g, then the GEMMs on g rounded to bf16 values */
    gpa__linear_bwd(&par, x->in[0], x->in[1], x->in[2], x->in[3], NULL, NULL, db, N, in, out, 1, g);
    round_bf16(g, N * out);
    gpa__linear_bwd(&par, g, x->in[1], x->in[2], NULL, x->out[0], x->out[1], NULL, N, in, out, 0, NULL);
  } else {
    gpa__linear_bwd(&par, x->in[0], x->in[1], x->in[2], p->gelu ? x->in[3] : NULL, x->out[0], x->out[1], db, N, in,
                    out, (int)p->gelu, g);
  }
  free(owned);
  return GPA_OK;
}
GPA__BF16_HOST(bwd_host)

static const gpa_op_desc linear_ops[] = {
    {sizeof(gpa_op_desc), "linear_fwd", 2, 3, 1, linear_attrs, 1, sizeof(linear_params), fwd_shape, fwd_host_any,
     GPA__CUDA(gpa__lin_fwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
    {sizeof(gpa_op_desc), "linear_gelu_fwd", 2, 3, 2, NULL, 0, sizeof(linear_params), gelu_fwd_shape,
     gelu_fwd_host_any, GPA__CUDA(gpa__lin_gelu_fwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
    {sizeof(gpa_op_desc), "linear_bwd", 3, 4, 3, linear_bwd_attrs, 2, sizeof(linear_params), bwd_shape, bwd_host_any,
     GPA__CUDA(gpa__lin_bwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
    {sizeof(gpa_op_desc), "linear_bwd_nobias", 3, 4, 2, linear_bwd_attrs, 2, sizeof(linear_params), bwd_nb_shape,
     bwd_host_any, GPA__CUDA(gpa__lin_bwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
};
GPA__FAMILY(linear, linear_ops);

gpa_status gpa_linear_fwd(gpa_queue *q, const gpa_linear_fwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_linear_fwd: args is NULL");
  gpa_tensor in[3] = {a->x, a->W, a->b};
  uint32_t n_in = a->b.buffer ? 3 : 2;
  if (a->gelu && a->pre.buffer) {
    gpa_tensor o[2] = {a->y, a->pre};
    gpa_op_call c = {"linear_gelu_fwd", in, n_in, o, 2, NULL, 0};
    return gpa_submit(q, &c, out);
  }
  gpa_attr g = {"gelu", GPA_ATTR_INT, a->gelu != 0, 0.0};
  gpa_op_call c = {"linear_fwd", in, n_in, &a->y, 1, &g, 1};
  return gpa_submit(q, &c, out);
}

gpa_status gpa_linear_bwd(gpa_queue *q, const gpa_linear_bwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_linear_bwd: args is NULL");
  gpa_tensor in[4] = {a->dy, a->x, a->W, a->pre}, o[3] = {a->dx, a->dW, a->db};
  gpa_attr g = {"gelu", GPA_ATTR_INT, a->gelu != 0, 0.0};
  gpa_op_call c = {a->db.buffer ? "linear_bwd" : "linear_bwd_nobias", in, a->gelu ? 4u : 3u, o,
                   a->db.buffer ? 3u : 2u, &g, 1};
  return gpa_submit(q, &c, out);
}
