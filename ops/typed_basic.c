/* Typed calls of the basic op library (include/gpuactor/ops_basic.h): each
 * one lays its struct out as a gpa_op_call and submits it. */
#include "gpuactor/ops_basic.h"

#include <stdint.h>

#include "actor/internal.h"

#define T(...) ((const gpa_tensor[]){__VA_ARGS__})
#define A(...) ((const gpa_attr[]){__VA_ARGS__})
#define AF(n, v) {n, GPA_ATTR_FLOAT, 0, v}
#define AI(n, v) {n, GPA_ATTR_INT, v, 0.0}
#define NO_IGNORE INT64_MIN /* an ignore_index no int32 target can equal */

static gpa_status call(gpa_queue *q, const void *args, const char *op, const gpa_tensor *in, uint32_t n_in,
                       const gpa_tensor *outs, uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs,
                       gpa_handle **out) {
  if (out) *out = NULL;
  if (!args) return gpa__fail(GPA_EINVAL, "%s: args is NULL", op);
  gpa_op_call c = {op, in, n_in, outs, n_out, attrs, n_attrs};
  return gpa_submit(q, &c, out);
}

#define CALL(op, in, n_in, outs, n_out, attrs, n_attrs) \
  call(q, args, op, args ? in : NULL, n_in, args ? outs : NULL, n_out, args ? attrs : NULL, n_attrs, out)
#define OR(v, d) ((v) != 0 ? (v) : (d))

gpa_status gpa_add(gpa_queue *q, const gpa_add_args *args, gpa_handle **out) {
  return CALL("add", T(args->a, args->b), 2, T(args->y), 1, NULL, 0);
}

gpa_status gpa_scale(gpa_queue *q, const gpa_scale_args *args, gpa_handle **out) {
  return CALL("scale", T(args->x), 1, T(args->y), 1, A(AF("alpha", args->alpha)), 1);
}

gpa_status gpa_axpy(gpa_queue *q, const gpa_axpy_args *args, gpa_handle **out) {
  return CALL("axpy", T(args->x, args->y0), 2, T(args->y), 1, A(AF("alpha", args->alpha)), 1);
}

gpa_status gpa_mask_zero(gpa_queue *q, const gpa_mask_zero_args *args, gpa_handle **out) {
  return CALL("mask_zero", T(args->x, args->mask), 2, T(args->y), 1, NULL, 0);
}

gpa_status gpa_masked_mean_fwd(gpa_queue *q, const gpa_masked_mean_fwd_args *args, gpa_handle **out) {
  return CALL("masked_mean_fwd", T(args->x, args->mask), 2, T(args->y), 1, NULL, 0);
}

gpa_status gpa_masked_mean_bwd(gpa_queue *q, const gpa_masked_mean_bwd_args *args, gpa_handle **out) {
  return CALL("masked_mean_bwd", T(args->dy, args->mask), 2, T(args->dx), 1, NULL, 0);
}

gpa_status gpa_add_broadcast_fwd(gpa_queue *q, const gpa_add_broadcast_fwd_args *args, gpa_handle **out) {
  return CALL("add_broadcast_fwd", T(args->x, args->v), 2, T(args->y), 1, NULL, 0);
}

gpa_status gpa_add_broadcast_bwd(gpa_queue *q, const gpa_add_broadcast_bwd_args *args, gpa_handle **out) {
  return CALL("add_broadcast_bwd", T(args->dy), 1, T(args->dv), 1, NULL, 0);
}

gpa_status gpa_gelu_fwd(gpa_queue *q, const gpa_gelu_fwd_args *args, gpa_handle **out) {
  return CALL("gelu_fwd", T(args->x), 1, T(args->y), 1, A(AI("approximate", args->approximate)), 1);
}

gpa_status gpa_gelu_bwd(gpa_queue *q, const gpa_gelu_bwd_args *args, gpa_handle **out) {
  return CALL("gelu_bwd", T(args->x, args->dy), 2, T(args->dx), 1, A(AI("approximate", args->approximate)), 1);
}

gpa_status gpa_layernorm_fwd(gpa_queue *q, const gpa_layernorm_fwd_args *args, gpa_handle **out) {
  return CALL("layernorm_fwd", T(args->x, args->gamma, args->beta), 3, T(args->y, args->mean, args->rstd), 3,
              A(AF("eps", OR(args->eps, 1e-5))), 1);
}

gpa_status gpa_layernorm_bwd(gpa_queue *q, const gpa_layernorm_bwd_args *args, gpa_handle **out) {
  return CALL("layernorm_bwd", T(args->x, args->dy, args->gamma, args->mean, args->rstd), 5,
              T(args->dx, args->dgamma, args->dbeta), 3, NULL, 0);
}

gpa_status gpa_embedding_fwd(gpa_queue *q, const gpa_embedding_fwd_args *args, gpa_handle **out) {
  return CALL("embedding_fwd", T(args->ids, args->table), 2, T(args->y), 1, NULL, 0);
}

gpa_status gpa_embedding_bwd(gpa_queue *q, const gpa_embedding_bwd_args *args, gpa_handle **out) {
  return CALL("embedding_bwd", T(args->dy, args->ids), 2, T(args->dtable), 1,
              A(AI("accumulate", args->accumulate != 0)), 1);
}

gpa_status gpa_cross_entropy_fwd(gpa_queue *q, const gpa_cross_entropy_fwd_args *args, gpa_handle **out) {
  return CALL("cross_entropy_fwd", T(args->logits, args->targets), 2, T(args->loss), 1,
              A(AI("ignore_index", args->use_ignore_index ? args->ignore_index : NO_IGNORE)), 1);
}

gpa_status gpa_cross_entropy_bwd(gpa_queue *q, const gpa_cross_entropy_bwd_args *args, gpa_handle **out) {
  return CALL("cross_entropy_bwd", T(args->logits, args->targets), 2, T(args->dlogits), 1,
              A(AI("ignore_index", args->use_ignore_index ? args->ignore_index : NO_IGNORE),
                AF("scale", OR(args->scale, 1.0))),
              2);
}

gpa_status gpa_mse(gpa_queue *q, const gpa_mse_args *args, gpa_handle **out) {
  return CALL("mse", T(args->y, args->t), 2, T(args->out), 1, NULL, 0);
}

gpa_status gpa_cosine(gpa_queue *q, const gpa_cosine_args *args, gpa_handle **out) {
  return CALL("cosine", T(args->y, args->t), 2, T(args->out), 1, A(AF("eps", OR(args->eps, 1e-8))), 1);
}

gpa_status gpa_adamw(gpa_queue *q, const gpa_adamw_args *args, gpa_handle **out) {
  return CALL("adamw", T(args->param, args->grad, args->m, args->v), 4, T(args->param, args->m, args->v), 3,
              A(AF("lr", args->lr), AF("beta1", args->beta1), AF("beta2", args->beta2),
                AF("eps", OR(args->eps, 1e-8)), AF("weight_decay", args->weight_decay), AI("step", args->step)),
              6);
}

gpa_status gpa_sgd(gpa_queue *q, const gpa_sgd_args *args, gpa_handle **out) {
  return CALL("sgd", T(args->param, args->grad, args->buf), 3, T(args->param, args->buf), 2,
              A(AF("lr", args->lr), AF("momentum", args->momentum), AF("weight_decay", args->weight_decay),
                AI("nesterov", args->nesterov != 0)),
              4);
}
