/* Metric ops (host). Each loss/metric writes one f32 scalar: the output is
 * [] (rank 0) or [1], as the caller passes it. Reductions are deterministic
 * (per-row partials in double, added in row order).
 *   cross_entropy_fwd  in: logits [N,V] f32, targets [N] i32     out: loss []
 *                      attr ignore_index (int, default -100): rows whose target equals it are
 *                      left out; loss = mean over the other rows of logsumexp - logit[target]
 *                      (0 when every row is ignored or N = 0).
 *   cross_entropy_bwd  in: logits, targets                        out: dlogits [N,V]
 *                      attrs ignore_index, scale (float, default 1: the upstream dloss):
 *                      dlogits = scale * (softmax - onehot) / count; ignored rows get 0.
 *   mse                in: y, t (f32, same shape, rank >= 1)      out: mean((y - t)^2) over all
 *                      elements (0 if empty)
 *   cosine             in: y, t (f32, same shape [.., D], rank >= 1)  attr eps (float, 1e-8)
 *                      out: mean over rows (all dims but the last) of dot(y,t) / max(|y||t|, eps)
 *                      (0 if there are no rows).
 * bf16 storage (docs/ops.md): logits may be bf16 (then dlogits is bf16, rounded once; the loss
 * stays f32). mse and cosine take f32 only.
 * A target outside [0, V) that is not ignore_index fails the op at execution with GPA_ERANGE:
 * "cross_entropy_fwd: targets[5] = 40000 out of range [0, 32000)". */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/host/metrics.h"
#include "ops/metrics/metrics.h"

typedef gpa__met_params met_params;

static const gpa_attr_spec ce_fwd_attrs[] = {
    {"ignore_index", GPA_ATTR_INT, 0, offsetof(met_params, ignore_index), -100, 0.0, 1, 0},
};
static const gpa_attr_spec ce_bwd_attrs[] = {
    {"ignore_index", GPA_ATTR_INT, 0, offsetof(met_params, ignore_index), -100, 0.0, 1, 0},
    {"scale", GPA_ATTR_FLOAT, 0, offsetof(met_params, scale), 0, 1.0, 1, 0},
};
static const gpa_attr_spec cos_attrs[] = {
    {"eps", GPA_ATTR_FLOAT, 0, offsetof(met_params, eps), 0, 1e-8, 0.0, 1.0},
};

static gpa_status ce_inputs(const char *op, const gpa_op_sig *s, char *msg, size_t ms) {
  const gpa_tensor *lg = &s->inputs[0], *t = &s->inputs[1];
  GPA__CHK(gpa__chk_float(op, "logits", lg, msg, ms));
  GPA__CHK(gpa__chk_rank(op, "logits", lg, 2, "([N,V])", msg, ms));
  GPA__CHK(gpa__chk_dtype(op, "targets", t, GPA_I32, 0, msg, ms));
  return gpa__chk_shape(op, "targets", t, 1, lg->shape, "N of logits", msg, ms);
}

static gpa_status ce_fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  GPA__CHK(ce_inputs("cross_entropy_fwd", s, msg, ms));
  gpa__chk_set_scalar(e, s->n_outputs ? &s->outputs[0] : NULL);
  return GPA_OK;
}

static gpa_status ce_bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  GPA__CHK(ce_inputs("cross_entropy_bwd", s, msg, ms));
  gpa__chk_set(e, s->inputs[0].dtype, 2, s->inputs[0].shape);
  return GPA_OK;
}

static gpa_status pair_shape(const char *op, const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  GPA__CHK(gpa__chk_dtype(op, "y", &s->inputs[0], GPA_F32, 0, msg, ms));
  if (s->inputs[0].rank < 1) return gpa__chk_rank(op, "y", &s->inputs[0], 2, "([N,D])", msg, ms);
  GPA__CHK(gpa__chk_f32_like(op, "t", &s->inputs[1], &s->inputs[0], "y", msg, ms));
  gpa__chk_set_scalar(e, s->n_outputs ? &s->outputs[0] : NULL);
  return GPA_OK;
}
static gpa_status mse_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return pair_shape("mse", s, e, msg, ms);
}
static gpa_status cos_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return pair_shape("cosine", s, e, msg, ms);
}

static gpa_status check_targets(const gpa_op_exec *x, const char *op, int64_t *count) {
  const met_params *p = x->params;
  const int32_t *t = x->in[1];
  int64_t N = x->inputs[0].shape[0], V = x->inputs[0].shape[1];
  int64_t bad = gpa__ce_first_bad_target(t, N, V, p->ignore_index, count);
  if (bad < 0) return GPA_OK;
  snprintf(x->msg, x->msg_size, "%s: targets[%lld] = %d out of range [0, %lld) (ignore_index %lld)", op,
           (long long)bad, t[bad], (long long)V, (long long)p->ignore_index);
  return GPA_ERANGE;
}

static double *rows_scratch(const gpa_op_exec *x, const char *op, int64_t rows, void **owned) {
  double *s = gpa__ops_scratch(x->env, (uint64_t)(rows > 0 ? rows : 1) * sizeof(double), owned);
  if (!s) snprintf(x->msg, x->msg_size, "%s: no scratch memory for %lld rows", op, (long long)rows);
  return s;
}

static gpa_status ce_fwd_host(const gpa_op_exec *x) {
  const met_params *p = x->params;
  int64_t count, N = x->inputs[0].shape[0], V = x->inputs[0].shape[1];
  GPA__CHK(check_targets(x, "cross_entropy_fwd", &count));
  void *owned;
  double *scr = rows_scratch(x, "cross_entropy_fwd", N, &owned);
  if (!scr) return GPA_ENOMEM;
  gpa__par par = gpa__ops_par(x->env);
  gpa__cross_entropy_fwd_f32(&par, x->out[0], x->in[0], x->in[1], N, V, p->ignore_index, scr);
  free(owned);
  return GPA_OK;
}

static gpa_status ce_bwd_host(const gpa_op_exec *x) {
  const met_params *p = x->params;
  int64_t count, N = x->inputs[0].shape[0], V = x->inputs[0].shape[1];
  GPA__CHK(check_targets(x, "cross_entropy_bwd", &count));
  gpa__par par = gpa__ops_par(x->env);
  gpa__cross_entropy_bwd_f32(&par, x->out[0], x->in[0], x->in[1], N, V, p->ignore_index, count, p->scale);
  return GPA_OK;
}

GPA__BF16_HOST(ce_fwd_host)
GPA__BF16_HOST(ce_bwd_host)

static gpa_status pair_host(const gpa_op_exec *x, int cosine) {
  const met_params *p = x->params;
  const gpa_tensor *y = &x->inputs[0];
  int64_t D = y->shape[y->rank - 1], rows = 1;
  for (uint32_t i = 0; i + 1 < y->rank; i++) rows *= y->shape[i];
  void *owned;
  double *scr = rows_scratch(x, cosine ? "cosine" : "mse", rows, &owned);
  if (!scr) return GPA_ENOMEM;
  gpa__par par = gpa__ops_par(x->env);
  if (cosine)
    gpa__cosine_f32(&par, x->out[0], x->in[0], x->in[1], rows, D, p->eps, scr);
  else
    gpa__mse_f32(&par, x->out[0], x->in[0], x->in[1], rows, D, scr);
  free(owned);
  return GPA_OK;
}
static gpa_status mse_host(const gpa_op_exec *x) { return pair_host(x, 0); }
static gpa_status cos_host(const gpa_op_exec *x) { return pair_host(x, 1); }

static uint64_t elem(const gpa_tensor *t) { return t->dtype == GPA_BF16 ? 2u : 4u; }
static uint64_t in_bytes(const gpa_op_sig *s) {
  return elem(&s->inputs[0]) * (uint64_t)gpa__chk_numel(&s->inputs[0]) +
         elem(&s->inputs[1]) * (uint64_t)gpa__chk_numel(&s->inputs[1]);
}
static uint64_t ce_bwd_bytes(const gpa_op_sig *s) {
  return in_bytes(s) + elem(&s->inputs[0]) * (uint64_t)gpa__chk_numel(&s->inputs[0]);
}

#define MET(name_, nin_, attrs_, nattrs_, shape_, host_, cuda_, bytes_)                                      \
  {.size = sizeof(gpa_op_desc), .name = name_, .min_inputs = nin_, .max_inputs = nin_, .n_outputs = 1,        \
   .attrs = attrs_, .n_attrs = nattrs_, .params_size = sizeof(met_params), .shape = shape_, .host = host_, \
   .cuda = GPA__CUDA(cuda_), .bytes_moved = bytes_}

static const gpa_op_desc metrics_ops[] = {
    MET("cross_entropy_fwd", 2, ce_fwd_attrs, 1, ce_fwd_shape, ce_fwd_host_any, gpa__ce_fwd_cu, in_bytes),
    MET("cross_entropy_bwd", 2, ce_bwd_attrs, 2, ce_bwd_shape, ce_bwd_host_any, gpa__ce_bwd_cu, ce_bwd_bytes),
    MET("mse", 2, NULL, 0, mse_shape, mse_host, gpa__mse_cu, in_bytes),
    MET("cosine", 2, cos_attrs, 1, cos_shape, cos_host, gpa__cosine_cu, in_bytes),
};
GPA__FAMILY(metrics, metrics_ops);

#define NO_IGNORE INT64_MIN /* an ignore_index no int32 target can equal */

gpa_status gpa_cross_entropy_fwd(gpa_queue *q, const gpa_cross_entropy_fwd_args *args, gpa_handle **out) {
  return GPA__CALL("cross_entropy_fwd", GPA__T(args->logits, args->targets), 2, GPA__T(args->loss), 1,
                   GPA__A(GPA__AI("ignore_index", args->use_ignore_index ? args->ignore_index : NO_IGNORE)), 1);
}

gpa_status gpa_cross_entropy_bwd(gpa_queue *q, const gpa_cross_entropy_bwd_args *args, gpa_handle **out) {
  return GPA__CALL("cross_entropy_bwd", GPA__T(args->logits, args->targets), 2, GPA__T(args->dlogits), 1,
                   GPA__A(GPA__AI("ignore_index", args->use_ignore_index ? args->ignore_index : NO_IGNORE),
                          GPA__AF("scale", GPA__OR(args->scale, 1.0))),
                   2);
}

gpa_status gpa_mse(gpa_queue *q, const gpa_mse_args *args, gpa_handle **out) {
  return GPA__CALL("mse", GPA__T(args->y, args->t), 2, GPA__T(args->out), 1, NULL, 0);
}

gpa_status gpa_cosine(gpa_queue *q, const gpa_cosine_args *args, gpa_handle **out) {
  return GPA__CALL("cosine", GPA__T(args->y, args->t), 2, GPA__T(args->out), 1,
                   GPA__A(GPA__AF("eps", GPA__OR(args->eps, 1e-8))), 1);
}
