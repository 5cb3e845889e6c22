/* GELU ops (host).
 *   gelu_fwd  in: x (f32, any shape)            out: y (shape of x)
 *   gelu_bwd  in: x, dy (f32, same shape)       out: dx = dy * gelu'(x)
 *   attr approximate (int, 0..1, default 0): 0 = exact erf form, 1 = tanh form.
 * Storage f32 or bf16 (x, dy, y, dx alike; fp32 math either way), and
 * the mixed gelu_bwd: x and dx bf16, dy f32 (the fp32 residual stream's
 * gradient meeting a bf16 branch; dy is not rounded before the product).
 * y may alias x, dx may alias x or dy (the mixed form's dx not dy). */
#include <stddef.h>

#include "kernels/host/gelu.h"
#include "ops/gelu/gelu.h"

typedef gpa__gelu_params gelu_params;

static const gpa_attr_spec gelu_attrs[] = {
    {"approximate", GPA_ATTR_INT, 0, offsetof(gelu_params, approximate), 0, 0.0, 0, 1},
};

static gpa_status fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  GPA__CHK(gpa__chk_float("gelu_fwd", "x", &s->inputs[0], msg, ms));
  gpa__chk_set(e, s->inputs[0].dtype, s->inputs[0].rank, s->inputs[0].shape);
  return GPA_OK;
}

static gpa_status bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0], *dy = &s->inputs[1];
  GPA__CHK(gpa__chk_float("gelu_bwd", "x", x, msg, ms));
  if (x->dtype == GPA_BF16 && dy->dtype == GPA_F32) { /* the mixed form: dx bf16, not over dy */
    if (!gpa__chk_shape_is(dy, x->rank, x->shape))
      return gpa__chk_shape("gelu_bwd", "dy", dy, x->rank, x->shape, "shape of x", msg, ms);
    GPA__CHK(gpa__chk_disjoint("gelu_bwd", "dx", &s->outputs[0], "dy", dy, msg, ms));
  } else {
    GPA__CHK(gpa__chk_like("gelu_bwd", "dy", dy, x, "x", msg, ms));
  }
  gpa__chk_set(e, s->inputs[0].dtype, s->inputs[0].rank, s->inputs[0].shape);
  return GPA_OK;
}

static gpa_status fwd_host(const gpa_op_exec *x) {
  const gelu_params *p = x->params;
  gpa__par par = gpa__ops_par(x->env);
  gpa__gelu_fwd_f32(&par, x->out[0], x->in[0], gpa__chk_numel(&x->inputs[0]), (int)p->approximate);
  return GPA_OK;
}

static gpa_status bwd_host(const gpa_op_exec *x) {
  const gelu_params *p = x->params;
  gpa__par par = gpa__ops_par(x->env);
  gpa__gelu_bwd_f32(&par, x->out[0], x->in[0], x->in[1], gpa__chk_numel(&x->inputs[0]), (int)p->approximate);
  return GPA_OK;
}

GPA__BF16_HOST(fwd_host)
GPA__BF16_HOST(bwd_host)

static uint64_t fwd_bytes(const gpa_op_sig *s) {
  return 2u * gpa_dtype_size(s->inputs[0].dtype) * (uint64_t)gpa__chk_numel(&s->inputs[0]);
}
static uint64_t bwd_bytes(const gpa_op_sig *s) {
  return (2u * gpa_dtype_size(s->inputs[0].dtype) + gpa_dtype_size(s->inputs[1].dtype)) *
         (uint64_t)gpa__chk_numel(&s->inputs[0]);
}

static const gpa_op_desc gelu_ops[] = {
    {.size = sizeof(gpa_op_desc), .name = "gelu_fwd", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .attrs = gelu_attrs, .n_attrs = 1,
     .params_size = sizeof(gelu_params),
     .shape = fwd_shape, .host = fwd_host_any, .cuda = GPA__CUDA(gpa__gelu_fwd_cu), .bytes_moved = fwd_bytes},
    {.size = sizeof(gpa_op_desc), .name = "gelu_bwd", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
     .attrs = gelu_attrs, .n_attrs = 1,
     .params_size = sizeof(gelu_params),
     .shape = bwd_shape, .host = bwd_host_any, .cuda = GPA__CUDA(gpa__gelu_bwd_cu), .bytes_moved = bwd_bytes},
};
GPA__FAMILY(gelu, gelu_ops);

gpa_status gpa_gelu_fwd(gpa_queue *q, const gpa_gelu_fwd_args *args, gpa_handle **out) {
  return GPA__CALL("gelu_fwd", GPA__T(args->x), 1, GPA__T(args->y), 1,
                   GPA__A(GPA__AI("approximate", args->approximate)), 1);
}

gpa_status gpa_gelu_bwd(gpa_queue *q, const gpa_gelu_bwd_args *args, gpa_handle **out) {
  return GPA__CALL("gelu_bwd", GPA__T(args->x, args->dy), 2, GPA__T(args->dx), 1,
                   GPA__A(GPA__AI("approximate", args->approximate)), 1);
}
