/* Optimizer ops (host). In-place convention: the updated tensors are both
 * inputs (read) and outputs (written); pass the same tensor in both places
 * to update in place, or other tensors of the same shape to keep the old
 * state (every output element depends only on the same element of the
 * inputs, so exact aliasing is safe; partial overlap is not supported).
 *   adamw  in: param, grad, m, v (f32, same shape)   out: param', m', v'
 *          [, param_bf16: param' rounded to bf16 as the cast op rounds, for
 *          an f32 param: a mixed-precision trainer's bf16 weight copy
 *          written in the update's pass instead of by a cast after it]
 *          attrs lr (required), beta1 (0.9), beta2 (0.999), eps (1e-8),
 *          weight_decay (0.01), step (int, required, >= 1: bias correction)
 *   sgd    in: param, grad, buf (f32, same shape)     out: param', buf'
 *          attrs lr (required), momentum (0), weight_decay (0), nesterov (int 0..1, 0)
 * Formulas in kernels/host/optim.h (torch.optim.AdamW / SGD, dampening 0).
 * bf16 storage (docs/ops.md): grad may be bf16 (the mixed-precision layout:
 * bf16 gradients, fp32 master parameters), and so may param (param' then
 * bf16 too, rounded once per step); the state (m, v, buf) stays f32. */
#include <stddef.h>
#include <stdio.h>

#include "kernels/host/bf16.h"
#include "kernels/host/optim.h"
#include "ops/optim/optim.h"

typedef gpa__opt_params opt_params;

#define OFF(f) offsetof(opt_params, f)
static const gpa_attr_spec adamw_attrs[] = {GPA__ADAMW_ATTR_SPECS(opt_params)};
static const gpa_attr_spec sgd_attrs[] = {
    {"lr", GPA_ATTR_FLOAT, 1, OFF(lr), 0, 0.0, 0.0, 1e6},
    {"momentum", GPA_ATTR_FLOAT, 0, OFF(momentum), 0, 0.0, 0.0, 1.0},
    {"weight_decay", GPA_ATTR_FLOAT, 0, OFF(weight_decay), 0, 0.0, 0.0, 1e6},
    {"nesterov", GPA_ATTR_INT, 0, OFF(nesterov), 0, 0.0, 0.0, 1.0},
};

/* param f32 or bf16, grad f32 or bf16 of param's shape, the state f32 of
 * param's shape; param' has param's dtype, the state's outputs f32. */
static gpa_status like_param(const char *op, const gpa_op_sig *s, const char *const *names, gpa_tensor *e,
                             uint32_t n_out, char *msg, size_t ms) {
  const gpa_tensor *p = &s->inputs[0];
  GPA__CHK(gpa__chk_float(op, names[0], p, msg, ms));
  GPA__CHK(gpa__chk_float(op, names[1], &s->inputs[1], msg, ms));
  GPA__CHK(gpa__chk_shape(op, names[1], &s->inputs[1], p->rank, p->shape, "shape of param", msg, ms));
  for (uint32_t i = 2; i < s->n_inputs; i++)
    GPA__CHK(gpa__chk_f32_like(op, names[i], &s->inputs[i], p, names[0], msg, ms));
  for (uint32_t i = 0; i < n_out; i++) gpa__chk_set(&e[i], i ? GPA_F32 : p->dtype, p->rank, p->shape);
  return GPA_OK;
}

/* adamw's optional 4th output: bf16 of an f32 param's shape, sharing no
 * memory with the call's other tensors (it is written beside them, in
 * another layout) */
static gpa_status copy_ok(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *p = &s->inputs[0], *c = &s->outputs[3];
  if (p->dtype != GPA_F32) {
    snprintf(msg, ms, "adamw: param_bf16 (outputs[3]) is the bf16 copy of an f32 param'; param is %s already",
             gpa_dtype_name(p->dtype));
    return GPA_EDTYPE;
  }
  GPA__CHK(gpa__chk_dtype("adamw", "param_bf16 (outputs[3])", c, GPA_BF16, 0, msg, ms));
  GPA__CHK(gpa__chk_shape("adamw", "param_bf16 (outputs[3])", c, p->rank, p->shape, "param's", msg, ms));
  gpa__chk_set(&e[3], GPA_BF16, p->rank, p->shape);
  const uint64_t lo = c->offset, hi = lo + (uint64_t)gpa__chk_numel(c) * 2u;
  for (uint32_t i = 0; i < 7 && hi > lo; i++) {
    const gpa_tensor *t = i < 4 ? &s->inputs[i] : &s->outputs[i - 4];
    uint64_t b = (uint64_t)gpa__chk_numel(t) * gpa_dtype_size(t->dtype);
    if (t->buffer == c->buffer && t->offset < hi && lo < t->offset + b) {
      static const char *const names[7] = {"param", "grad", "m", "v", "param'", "m'", "v'"};
      snprintf(msg, ms, "adamw: param_bf16 (outputs[3]) overlaps %s (it is written beside the update: it needs "
               "memory of its own)", names[i]);
      return GPA_EINVAL;
    }
  }
  return GPA_OK;
}

static gpa_status adamw_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  static const char *const names[] = {"param", "grad", "m", "v"};
  GPA__CHK(like_param("adamw", s, names, e, 3, msg, ms));
  return s->n_outputs == 4 ? copy_ok(s, e, msg, ms) : GPA_OK;
}

static gpa_status sgd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  static const char *const names[] = {"param", "grad", "buf"};
  return like_param("sgd", s, names, e, 2, msg, ms);
}

static gpa_status adamw_host(const gpa_op_exec *x) {
  const opt_params *p = x->params;
  gpa__adamw_hp hp = {p->lr, p->beta1, p->beta2, p->eps, p->weight_decay, p->step};
  gpa__par par = gpa__ops_par(x->env);
  gpa__adamw_f32(&par, x->out[0], x->out[1], x->out[2], x->in[0], x->in[1], x->in[2], x->in[3],
                 gpa__chk_numel(&x->inputs[0]), &hp);
  return GPA_OK;
}

static gpa_status sgd_host(const gpa_op_exec *x) {
  const opt_params *p = x->params;
  gpa__sgd_hp hp = {p->lr, p->momentum, p->weight_decay, (int)p->nesterov};
  gpa__par par = gpa__ops_par(x->env);
  gpa__sgd_f32(&par, x->out[0], x->out[1], x->in[0], x->in[1], x->in[2], gpa__chk_numel(&x->inputs[0]), &hp);
  return GPA_OK;
}

/* bf16 grad and/or param on the host: the fp32 kernels run chunk by chunk
 * on fp32 copies of the chunk (widened on the stack, param' rounded after),
 * so the result is the widened op's, without fp32 copies of whole tensors
 * (per call, they would cost a parameter-sized allocation and two more
 * passes over memory each step). The state is f32 and used in place. */
enum { OPT_CHUNK = 2048 };

typedef struct bf_opt_job {
  const gpa_op_exec *x;
  int adam, p_bf, g_bf;
  uint16_t *copy; /* adamw's param_bf16, or NULL */
  gpa__adamw_hp ahp;
  gpa__sgd_hp shp;
} bf_opt_job;

static void bf_opt_range(int64_t b, int64_t e, void *ctx) {
  const bf_opt_job *j = ctx;
  const gpa_op_exec *x = j->x;
  float gb[OPT_CHUNK], pb[OPT_CHUNK];
  for (int64_t s = b; s < e; s += OPT_CHUNK) {
    int64_t n = e - s < OPT_CHUNK ? e - s : OPT_CHUNK;
    const float *g = (const float *)x->in[1] + s, *p = (const float *)x->in[0] + s;
    float *po = (float *)x->out[0] + s;
    if (j->g_bf) {
      gpa__bf16_widen(NULL, gb, (const uint16_t *)x->in[1] + s, n);
      g = gb;
    }
    if (j->p_bf) {
      gpa__bf16_widen(NULL, pb, (const uint16_t *)x->in[0] + s, n);
      p = po = pb;
    }
    if (j->adam)
      gpa__adamw_f32(NULL, po, (float *)x->out[1] + s, (float *)x->out[2] + s, p, g, (const float *)x->in[2] + s,
                     (const float *)x->in[3] + s, n, &j->ahp);
    else
      gpa__sgd_f32(NULL, po, (float *)x->out[1] + s, p, g, (const float *)x->in[2] + s, n, &j->shp);
    if (j->p_bf) gpa__bf16_narrow(NULL, (uint16_t *)x->out[0] + s, pb, n);
    if (j->copy) gpa__bf16_narrow(NULL, j->copy + s, po, n); /* the cast op's loop: its bits */
  }
}

static gpa_status bf_opt_host(const gpa_op_exec *x, int adam) {
  const opt_params *p = x->params;
  bf_opt_job j = {x, adam, x->inputs[0].dtype == GPA_BF16, x->inputs[1].dtype == GPA_BF16,
                  adam && x->n_outputs == 4 ? x->out[3] : NULL, {p->lr, p->beta1, p->beta2, p->eps, p->weight_decay, p->step},
                  {p->lr, p->momentum, p->weight_decay, (int)p->nesterov}};
  gpa__par par = gpa__ops_par(x->env);
  gpa__pfor(&par, gpa__chk_numel(&x->inputs[0]), 8 * OPT_CHUNK, bf_opt_range, &j);
  return GPA_OK;
}

static gpa_status adamw_host_any(const gpa_op_exec *x) {
  return gpa__has_bf16(x) ? bf_opt_host(x, 1) : adamw_host(x);
}
static gpa_status sgd_host_any(const gpa_op_exec *x) { return gpa__has_bf16(x) ? bf_opt_host(x, 0) : sgd_host(x); }

/* f32 sizes less 2 bytes per element for each bf16 param (read, written) or
 * grad, plus 2 for adamw's bf16 copy */
static uint64_t bf16_saving(const gpa_op_sig *s) {
  uint64_t n = (uint64_t)gpa__chk_numel(&s->inputs[0]);
  return n * ((s->inputs[0].dtype == GPA_BF16 ? 4u : 0u) + (s->inputs[1].dtype == GPA_BF16 ? 2u : 0u));
}

static uint64_t adamw_bytes(const gpa_op_sig *s) {
  return (s->n_outputs == 4 ? 30u : 28u) * (uint64_t)gpa__chk_numel(&s->inputs[0]) - bf16_saving(s);
}
static uint64_t sgd_bytes(const gpa_op_sig *s) {
  return 20u * (uint64_t)gpa__chk_numel(&s->inputs[0]) - bf16_saving(s);
}

static const gpa_op_desc optim_ops[] = {
    {.size = sizeof(gpa_op_desc), .name = "adamw", .min_inputs = 4, .max_inputs = 4, .n_outputs = 3, .max_outputs = 4,
     .attrs = adamw_attrs, .n_attrs = 6,
     .params_size = sizeof(opt_params),
     .shape = adamw_shape, .host = adamw_host_any, .cuda = GPA__CUDA(gpa__adamw_cu), .bytes_moved = adamw_bytes},
    {.size = sizeof(gpa_op_desc), .name = "sgd", .min_inputs = 3, .max_inputs = 3, .n_outputs = 2,
     .attrs = sgd_attrs, .n_attrs = 4,
     .params_size = sizeof(opt_params),
     .shape = sgd_shape, .host = sgd_host_any, .cuda = GPA__CUDA(gpa__sgd_cu), .bytes_moved = sgd_bytes},
};
GPA__FAMILY(optim, optim_ops);

gpa_status gpa_adamw(gpa_queue *q, const gpa_adamw_args *args, gpa_handle **out) {
  return GPA__CALL("adamw", GPA__T(args->param, args->grad, args->m, args->v), 4,
                   GPA__T(args->param, args->m, args->v), 3,
                   GPA__A(GPA__AF("lr", args->lr), GPA__AF("beta1", args->beta1), GPA__AF("beta2", args->beta2),
                          GPA__AF("eps", GPA__OR(args->eps, 1e-8)), GPA__AF("weight_decay", args->weight_decay),
                          GPA__AI("step", args->step)),
                   6);
}

gpa_status gpa_sgd(gpa_queue *q, const gpa_sgd_args *args, gpa_handle **out) {
  return GPA__CALL("sgd", GPA__T(args->param, args->grad, args->buf), 3, GPA__T(args->param, args->buf), 2,
                   GPA__A(GPA__AF("lr", args->lr), GPA__AF("momentum", args->momentum),
                          GPA__AF("weight_decay", args->weight_decay), GPA__AI("nesterov", args->nesterov != 0)),
                   4);
}
