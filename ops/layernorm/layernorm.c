/* LayerNorm ops (host).
 *   layernorm_fwd  in: x [N,D], gamma [D], beta [D]          attr eps (float, default 1e-5, >= 0)
 *                  out: y [N,D], mean [N], rstd [N] (1/sqrt(var + eps), biased variance)
 *   layernorm_bwd  in: x [N,D], dy [N,D], gamma [D], mean [N], rstd [N] (as the forward wrote them)
 *                  out: dx [N,D], dgamma [D], dbeta [D], optional dx_bf16 [N,D]
 * x, dy, y, dx: f32 or bf16 (one dtype); gamma, beta, mean, rstd, dgamma,
 * dbeta: always f32 (parameters and statistics keep full precision; fp32
 * math either way). Mixed precision (an fp32 layernorm beside bf16 GEMMs):
 * with x f32, y may be bf16, and dy may be bf16 (dx stays f32, and
 * dx_bf16, allowed only then, gets dx rounded to bf16 too): the fp32
 * results rounded once, the bits of the op beside a cast. A bf16 output
 * or input of another dtype may not overlap the tensors it differs from.
 * N = 0 is legal (dgamma = dbeta = 0); D = 0 is legal (rstd = 1/sqrt(eps)).
 * The backward's column sums are deterministic (fixed row blocks, fixed order). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/layernorm.h"
#include "ops/layernorm/layernorm.h"

typedef gpa__ln_params ln_params;

static const gpa_attr_spec ln_attrs[] = {
    {"eps", GPA_ATTR_FLOAT, 0, offsetof(ln_params, eps), 0, 1e-5, 0.0, 1.0},
};

/* vector `arg` of length n (f32), n being `what` */
static gpa_status vec(const char *op, const char *arg, const gpa_tensor *t, int64_t n, const char *what,
                      char *msg, size_t ms) {
  GPA__CHK(gpa__chk_dtype(op, arg, t, GPA_F32, 0, msg, ms));
  return gpa__chk_shape(op, arg, t, 1, &n, what, msg, ms);
}

static gpa_status fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0];
  GPA__CHK(gpa__chk_float("layernorm_fwd", "x", x, msg, ms));
  GPA__CHK(gpa__chk_rank("layernorm_fwd", "x", x, 2, "([N,D])", msg, ms));
  GPA__CHK(vec("layernorm_fwd", "gamma", &s->inputs[1], x->shape[1], "D of x", msg, ms));
  GPA__CHK(vec("layernorm_fwd", "beta", &s->inputs[2], x->shape[1], "D of x", msg, ms));
  const gpa_tensor *y = &s->outputs[0];
  int ydt = x->dtype; /* the mixed form: x f32, y bf16 */
  if (x->dtype == GPA_F32 && y->dtype == GPA_BF16) {
    GPA__CHK(gpa__chk_disjoint("layernorm_fwd", "y", y, "x", x, msg, ms));
    ydt = GPA_BF16;
  }
  gpa__chk_set(&e[0], ydt, 2, x->shape);
  gpa__chk_set(&e[1], GPA_F32, 1, x->shape);
  gpa__chk_set(&e[2], GPA_F32, 1, x->shape);
  return GPA_OK;
}

static gpa_status bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0];
  GPA__CHK(gpa__chk_float("layernorm_bwd", "x", x, msg, ms));
  GPA__CHK(gpa__chk_rank("layernorm_bwd", "x", x, 2, "([N,D])", msg, ms));
  const gpa_tensor *dy = &s->inputs[1];
  int mix = x->dtype == GPA_F32 && dy->dtype == GPA_BF16; /* the mixed form: dx f32 (and a bf16 copy) */
  if (mix) GPA__CHK(gpa__chk_shape("layernorm_bwd", "dy", dy, 2, x->shape, "shape of x", msg, ms));
  else GPA__CHK(gpa__chk_like("layernorm_bwd", "dy", dy, x, "x", msg, ms));
  if (s->n_outputs > 3 && !mix) {
    snprintf(msg, ms, "layernorm_bwd: dx_bf16 (outputs[3]) is written only by the mixed form (x f32, dy bf16), "
             "not with x %s and dy %s", gpa_dtype_name(x->dtype), gpa_dtype_name(dy->dtype));
    return GPA_EINVAL;
  }
  GPA__CHK(vec("layernorm_bwd", "gamma", &s->inputs[2], x->shape[1], "D of x", msg, ms));
  GPA__CHK(vec("layernorm_bwd", "mean", &s->inputs[3], x->shape[0], "N of x", msg, ms));
  GPA__CHK(vec("layernorm_bwd", "rstd", &s->inputs[4], x->shape[0], "N of x", msg, ms));
  if (mix) {
    const gpa_tensor *dx = &s->outputs[0];
    GPA__CHK(gpa__chk_disjoint("layernorm_bwd", "dx", dx, "dy", dy, msg, ms));
    if (s->n_outputs > 3) {
      const gpa_tensor *c = &s->outputs[3];
      GPA__CHK(gpa__chk_disjoint("layernorm_bwd", "dx_bf16", c, "x", x, msg, ms));
      GPA__CHK(gpa__chk_disjoint("layernorm_bwd", "dx_bf16", c, "dy", dy, msg, ms));
      GPA__CHK(gpa__chk_disjoint("layernorm_bwd", "dx_bf16", c, "dx", dx, msg, ms));
      gpa__chk_set(&e[3], GPA_BF16, 2, x->shape);
    }
  }
  gpa__chk_set(&e[0], x->dtype, 2, x->shape);
  gpa__chk_set(&e[1], GPA_F32, 1, &x->shape[1]);
  gpa__chk_set(&e[2], GPA_F32, 1, &x->shape[1]);
  return GPA_OK;
}

static gpa_status fwd_host(const gpa_op_exec *x) {
  const ln_params *p = x->params;
  const gpa_tensor *t = &x->inputs[0];
  gpa__par par = gpa__ops_par(x->env);
  gpa__layernorm_fwd_f32(&par, x->out[0], x->out[1], x->out[2], x->in[0], x->in[1], x->in[2], t->shape[0],
                         t->shape[1], p->eps);
  return GPA_OK;
}

static gpa_status bwd_host(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  int64_t N = t->shape[0], D = t->shape[1];
  void *owned;
  void *scratch = gpa__ops_scratch(x->env, gpa__layernorm_bwd_scratch(N, D), &owned);
  if (!scratch) {
    snprintf(x->msg, x->msg_size, "layernorm_bwd: no scratch memory for %lld x %lld", (long long)N, (long long)D);
    return GPA_ENOMEM;
  }
  gpa__par par = gpa__ops_par(x->env);
  gpa__layernorm_bwd_f32(&par, x->out[0], x->out[1], x->out[2], x->in[0], x->in[1], x->in[2], x->in[3],
                         x->in[4], N, D, scratch);
  free(owned);
  if (x->n_outputs > 3 && N * D > 0) /* dx_bf16: dx again (an fp32 copy here; the bf16 host path rounds it) */
    memcpy(x->out[3], x->out[0], (size_t)(N * D) * sizeof(float));
  return GPA_OK;
}

GPA__BF16_HOST(fwd_host)
GPA__BF16_HOST(bwd_host)

/* x and y (fwd), x, dy, dx and the optional dx_bf16 (bwd) at their own dtypes */
static uint64_t fwd_bytes(const gpa_op_sig *s) {
  const gpa_tensor *t = &s->inputs[0];
  return (gpa_dtype_size(t->dtype) + gpa_dtype_size(s->outputs[0].dtype)) * (uint64_t)(t->shape[0] * t->shape[1]) +
         4u * (uint64_t)(2 * t->shape[1] + 2 * t->shape[0]);
}
static uint64_t bwd_bytes(const gpa_op_sig *s) {
  const gpa_tensor *t = &s->inputs[0];
  uint64_t row = gpa_dtype_size(t->dtype) + gpa_dtype_size(s->inputs[1].dtype) + gpa_dtype_size(s->outputs[0].dtype);
  if (s->n_outputs > 3) row += gpa_dtype_size(s->outputs[3].dtype);
  return row * (uint64_t)(t->shape[0] * t->shape[1]) + 4u * (uint64_t)(3 * t->shape[1] + 2 * t->shape[0]);
}

static const gpa_op_desc layernorm_ops[] = {
    {.size = sizeof(gpa_op_desc), .name = "layernorm_fwd", .min_inputs = 3, .max_inputs = 3, .n_outputs = 3,
     .attrs = ln_attrs, .n_attrs = 1,
     .params_size = sizeof(ln_params),
     .shape = fwd_shape, .host = fwd_host_any, .cuda = GPA__CUDA(gpa__ln_fwd_cu), .bytes_moved = fwd_bytes},
    {.size = sizeof(gpa_op_desc), .name = "layernorm_bwd", .min_inputs = 5, .max_inputs = 5, .n_outputs = 3,
     .max_outputs = 4,
     .params_size = sizeof(ln_params),
     .shape = bwd_shape, .host = bwd_host_any, .cuda = GPA__CUDA(gpa__ln_bwd_cu), .bytes_moved = bwd_bytes},
};
GPA__FAMILY(layernorm, layernorm_ops);

gpa_status gpa_layernorm_fwd(gpa_queue *q, const gpa_layernorm_fwd_args *args, gpa_handle **out) {
  return GPA__CALL("layernorm_fwd", GPA__T(args->x, args->gamma, args->beta), 3, GPA__T(args->y, args->mean, args->rstd),
                   3, GPA__A(GPA__AF("eps", GPA__OR(args->eps, 1e-5))), 1);
}

gpa_status gpa_layernorm_bwd(gpa_queue *q, const gpa_layernorm_bwd_args *args, gpa_handle **out) {
  /* dx_bf16 read only where the caller's struct has it */
  const bool copy = args && (!args->size || args->size >= offsetof(gpa_layernorm_bwd_args, dx_bf16) + sizeof(gpa_tensor)) &&
                    args->dx_bf16.buffer;
  return GPA__CALL("layernorm_bwd", GPA__T(args->x, args->dy, args->gamma, args->mean, args->rstd), 5,
                   GPA__T(args->dx, args->dgamma, args->dbeta, copy ? args->dx_bf16 : args->dx), copy ? 4 : 3, NULL,
                   0);
}
