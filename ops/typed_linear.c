/* Typed calls of the linear and conv1d ops (include/gpuactor/ops_linear.h):
 * each lays its struct out as a gpa_op_call and submits it. */
#include "gpuactor/ops_linear.h"

#include "actor/internal.h"

static gpa_status submit(gpa_queue *q, const char *op, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *outs,
                         uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs, gpa_handle **out) {
  gpa_op_call c = {op, in, n_in, outs, n_out, attrs, n_attrs};
  return gpa_submit(q, &c, out);
}

gpa_status gpa_linear_fwd(gpa_queue *q, const gpa_linear_fwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_linear_fwd: args is NULL");
  gpa_tensor in[3] = {a->x, a->W, a->b};
  uint32_t n_in = a->b.buffer ? 3 : 2;
  if (a->gelu && a->pre.buffer) {
    gpa_tensor o[2] = {a->y, a->pre};
    return submit(q, "linear_gelu_fwd", in, n_in, o, 2, NULL, 0, out);
  }
  gpa_attr g = {"gelu", GPA_ATTR_INT, a->gelu != 0, 0.0};
  return submit(q, "linear_fwd", in, n_in, &a->y, 1, &g, 1, out);
}

gpa_status gpa_linear_bwd(gpa_queue *q, const gpa_linear_bwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_linear_bwd: args is NULL");
  gpa_tensor in[4] = {a->dy, a->x, a->W, a->pre}, o[3] = {a->dx, a->dW, a->db};
  gpa_attr g = {"gelu", GPA_ATTR_INT, a->gelu != 0, 0.0};
  return submit(q, a->db.buffer ? "linear_bwd" : "linear_bwd_nobias", in, a->gelu ? 4 : 3, o,
                a->db.buffer ? 3 : 2, &g, 1, out);
}

static void geom_attrs(const gpa_conv1d_geometry *g, gpa_attr at[5]) {
  const char *names[5] = {"stride", "padding", "dilation", "groups", "causal"};
  int64_t v[5] = {g->stride ? g->stride : 1, g->padding, g->dilation ? g->dilation : 1, g->groups ? g->groups : 1,
                  g->causal != 0};
  for (int i = 0; i < 5; i++) {
    at[i].name = names[i];
    at[i].type = GPA_ATTR_INT;
    at[i].i = v[i];
    at[i].f = 0.0;
  }
}

gpa_status gpa_conv1d_fwd(gpa_queue *q, const gpa_conv1d_fwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_conv1d_fwd: args is NULL");
  gpa_tensor in[3] = {a->x, a->W, a->b};
  gpa_attr at[5];
  geom_attrs(&a->geom, at);
  return submit(q, "conv1d_fwd", in, a->b.buffer ? 3 : 2, &a->y, 1, at, 5, out);
}

gpa_status gpa_conv1d_bwd(gpa_queue *q, const gpa_conv1d_bwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_conv1d_bwd: args is NULL");
  gpa_tensor in[3] = {a->dy, a->x, a->W}, o[3] = {a->dx, a->dW, a->db};
  gpa_attr at[5];
  geom_attrs(&a->geom, at);
  return submit(q, a->db.buffer ? "conv1d_bwd" : "conv1d_bwd_nobias", in, 3, o, a->db.buffer ? 3 : 2, at, 5, out);
}
