/* 1-D convolution ops (host): a direct kernel (forward, stride 1), one GEMM
 * per tap on shifted x, or im2col + GEMM (kernels/host/conv1d.c). f32, or
 * bf16 storage: x, W, b, y, dy and dx bf16 (one dtype, that of x), dW and db
 * f32 (as linear's bf16: they feed fp32 optimizer state); the host runs the
 * f32 kernels on widened copies and rounds y and dx once (ops/bf16_host.h).
 *   conv1d_fwd         in: x [B,Cin,L], W [Cout,Cin/groups,K], b [Cout] (optional, 3rd input)
 *                      out: y [B,Cout,Lout]
 *   conv1d_bwd         in: dy [B,Cout,Lout], x, W          out: dx [B,Cin,L], dW, db [Cout]
 *   conv1d_bwd_nobias  as conv1d_bwd without db: out dx, dW
 * attrs (int): stride (default 1, >= 1), padding (default 0, >= 0: that many
 * zeros on each side), dilation (default 1, >= 1), groups (default 1, >= 1,
 * divides Cin and Cout), causal (0/1, default 0: the left pad is
 * (K-1)*dilation and the right pad 0; padding must then be 0), layout (0
 * "ncl", the default: x [B,Cin,L], y [B,Cout,Lout]; 1 "nlc", channels last:
 * x [B,L,Cin], y [B,Lout,Cout], dy and dx likewise; W is [Cout,Cin/groups,K]
 * in both).
 *   Lout = (L + pad_left + pad_right - dilation*(K-1) - 1) / stride + 1 (must be >= 1).
 * Scratch (packed W, panels, column chunks): at most 16 MiB of backend scratch in all.
 * Sums run in a fixed order (bitwise reproducible). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/host/blas.h"
#include "kernels/host/conv1d.h"
#include "ops/conv1d/conv1d.h"
#include "ops/nn_util.h"

typedef gpa__conv_params conv_params;

static const gpa_attr_spec conv_attrs[] = {
    {"stride", GPA_ATTR_INT, 0, offsetof(conv_params, stride), 1, 0.0, 1, 1 << 30},
    {"padding", GPA_ATTR_INT, 0, offsetof(conv_params, padding), 0, 0.0, 0, 1 << 30},
    {"dilation", GPA_ATTR_INT, 0, offsetof(conv_params, dilation), 1, 0.0, 1, 1 << 30},
    {"groups", GPA_ATTR_INT, 0, offsetof(conv_params, groups), 1, 0.0, 1, 1 << 30},
    {"causal", GPA_ATTR_INT, 0, offsetof(conv_params, causal), 0, 0.0, 0, 1},
    /* unbounded here: check_geom names the layouts in its message */
    {"layout", GPA_ATTR_INT, 0, offsetof(conv_params, layout), GPA_CONV1D_NCL, 0.0, 1, 0},
};

/* Checks x [B,Cin,L] ([B,L,Cin] under layout nlc) and W [Cout,Cin/groups,K]
 * against the attrs; fills g. */
static gpa_status check_geom(const char *op, const gpa_tensor *x, const gpa_tensor *W, const conv_params *p,
                             gpa__conv1d_geom *g, char *msg, size_t ms) {
  if (p->layout != GPA_CONV1D_NCL && p->layout != GPA_CONV1D_NLC) {
    snprintf(msg, ms, "%s: layout = %lld is not a layout: 0 (ncl: x [B,Cin,L]) or 1 (nlc: x [B,L,Cin])", op,
             (long long)p->layout);
    return GPA_EINVAL;
  }
  const int nlc = p->layout == GPA_CONV1D_NLC;
  GPA__CHK(gpa__chk_float(op, "x", x, msg, ms));
  GPA__CHK(gpa__chk_rank(op, "x", x, 3, nlc ? "([B,L,Cin], layout nlc)" : "([B,Cin,L])", msg, ms));
  GPA__CHK(gpa__chk_dtype(op, "W", W, x->dtype, 0, msg, ms));
  GPA__CHK(gpa__chk_rank(op, "W", W, 3, "([Cout,Cin/groups,K])", msg, ms));
  int64_t Cin = x->shape[nlc ? 2 : 1], Cout = W->shape[0], G = p->groups;
  if (Cin < 1 || Cout < 1 || W->shape[2] < 1) {
    snprintf(msg, ms, "%s: Cin (x.shape[%d]), Cout (W.shape[0]) and K (W.shape[2]) must be >= 1", op, nlc ? 2 : 1);
    return GPA_ESHAPE;
  }
  if (Cin % G || Cout % G) {
    snprintf(msg, ms, "%s: groups = %lld does not divide Cin = %lld and Cout = %lld", op, (long long)G,
             (long long)Cin, (long long)Cout);
    return GPA_EINVAL;
  }
  if (W->shape[1] != Cin / G) {
    snprintf(msg, ms, "%s: W has shape [%lld,%lld,%lld], expected [Cout,%lld,K] (Cin/groups = %lld/%lld, Cin = x.shape[%d]%s)",
             op, (long long)W->shape[0], (long long)W->shape[1], (long long)W->shape[2], (long long)(Cin / G),
             (long long)Cin, (long long)G, nlc ? 2 : 1, nlc ? ", layout nlc" : "");
    return GPA_ESHAPE;
  }
  if (p->causal && p->padding) {
    snprintf(msg, ms, "%s: padding must be 0 with causal=1 (the left pad is (K-1)*dilation)", op);
    return GPA_EINVAL;
  }
  g->B = x->shape[0];
  g->Cin = Cin;
  g->L = x->shape[nlc ? 1 : 2];
  g->nlc = nlc;
  g->Cout = Cout;
  g->K = W->shape[2];
  g->stride = p->stride;
  g->dilation = p->dilation;
  g->groups = G;
  g->im2col = 0;
  g->no_direct = 0;
  if (g->K > (1 << 30) || g->dilation * (g->K - 1) > ((int64_t)1 << 40)) {
    snprintf(msg, ms, "%s: K * dilation too large", op);
    return GPA_EOVERFLOW;
  }
  g->pad_l = p->causal ? (g->K - 1) * g->dilation : p->padding;
  g->pad_r = p->causal ? 0 : p->padding;
  if (!gpa__conv1d_geom_init(g)) {
    snprintf(msg, ms,
             "%s: no output: L = %lld with padding %lld+%lld is shorter than the dilated kernel "
             "(dilation*(K-1)+1 = %lld)",
             op, (long long)g->L, (long long)g->pad_l, (long long)g->pad_r, (long long)(g->dilation * (g->K - 1) + 1));
    return GPA_ESHAPE;
  }
  int64_t rows = Cin / G * g->K;
  if (!gpa__blas_dim_ok(rows) || !gpa__blas_dim_ok(g->Lout) || !gpa__blas_dim_ok(g->L) ||
      !gpa__blas_dim_ok(Cout)) {
    snprintf(msg, ms, "%s: dimensions past 2^31-1 are not supported (BLAS int)", op);
    return GPA_EOVERFLOW;
  }
  return GPA_OK;
}

static gpa_status fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  gpa__conv1d_geom g;
  const gpa_tensor *W = &s->inputs[1];
  GPA__CHK(check_geom("conv1d_fwd", &s->inputs[0], W, s->params, &g, msg, ms));
  if (s->n_inputs > 2) {
    GPA__CHK(gpa__chk_dtype("conv1d_fwd", "b", &s->inputs[2], W->dtype, 0, msg, ms));
    GPA__CHK(gpa__chk_shape("conv1d_fwd", "b", &s->inputs[2], 1, &W->shape[0], "Cout of W", msg, ms));
  }
  int64_t y[3] = {g.B, g.nlc ? g.Lout : g.Cout, g.nlc ? g.Cout : g.Lout};
  gpa__chk_set(&e[0], W->dtype, 3, y);
  return GPA_OK;
}

static gpa_status bwd_shape_common(const char *op, const gpa_op_sig *s, gpa_tensor *e, int with_db, char *msg,
                                   size_t ms) {
  gpa__conv1d_geom g;
  const gpa_tensor *x = &s->inputs[1], *W = &s->inputs[2];
  GPA__CHK(check_geom(op, x, W, s->params, &g, msg, ms));
  int64_t y[3] = {g.B, g.nlc ? g.Lout : g.Cout, g.nlc ? g.Cout : g.Lout};
  GPA__CHK(gpa__chk_dtype(op, "dy", &s->inputs[0], x->dtype, 0, msg, ms));
  GPA__CHK(gpa__chk_shape(op, "dy", &s->inputs[0], 3, y,
                          g.nlc ? "[B,Lout,Cout] of the forward (layout nlc)" : "[B,Cout,Lout] of the forward", msg,
                          ms));
  gpa__chk_set(&e[0], x->dtype, 3, x->shape); /* dW, db: f32 for either storage */
  gpa__chk_set(&e[1], GPA_F32, 3, W->shape);
  if (with_db) gpa__chk_set(&e[2], GPA_F32, 1, W->shape);
  return GPA_OK;
}

static gpa_status bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return bwd_shape_common("conv1d_bwd", s, e, 1, msg, ms);
}
static gpa_status bwd_nb_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return bwd_shape_common("conv1d_bwd_nobias", s, e, 0, msg, ms);
}

/* Geometry at execution (already validated at submit). */
static void exec_geom(const gpa_op_exec *x, const gpa_tensor *xt, const gpa_tensor *W, gpa__conv1d_geom *g) {
  char msg[8];
  (void)check_geom("", xt, W, x->params, g, msg, sizeof msg);
}

static gpa_status run(const gpa_op_exec *x, int bwd) {
  gpa__conv1d_geom g;
  exec_geom(x, &x->inputs[bwd ? 1 : 0], &x->inputs[bwd ? 2 : 1], &g);
  gpa__par par = gpa__ops_par(x->env);
  uint64_t bytes = gpa__conv1d_scratch_bytes(&g, bwd, &par);
  void *owned = NULL;
  float *scratch = gpa__ops_scratch(x->env, bytes, &owned);
  if (!scratch) {
    snprintf(x->msg, x->msg_size, "%s: no scratch memory (%llu bytes) for the column matrix",
             bwd ? "conv1d_bwd" : "conv1d_fwd", (unsigned long long)bytes);
    return GPA_ENOMEM;
  }
  if (bwd)
    gpa__conv1d_bwd(&par, &g, x->in[0], x->in[1], x->in[2], x->out[0], x->out[1],
                    x->n_outputs > 2 ? x->out[2] : NULL, scratch);
  else
    gpa__conv1d_fwd(&par, &g, x->in[0], x->in[1], x->n_inputs > 2 ? x->in[2] : NULL, x->out[0], scratch);
  free(owned);
  return GPA_OK;
}

static gpa_status fwd_host(const gpa_op_exec *x) { return run(x, 0); }
static gpa_status bwd_host(const gpa_op_exec *x) { return run(x, 1); }
GPA__BF16_HOST(fwd_host)
GPA__BF16_HOST(bwd_host)

#define N_CONV_ATTRS (uint32_t)(sizeof conv_attrs / sizeof conv_attrs[0])

static const gpa_op_desc conv1d_ops[] = {
    {sizeof(gpa_op_desc), "conv1d_fwd", 2, 3, 1, conv_attrs, N_CONV_ATTRS, sizeof(conv_params), fwd_shape,
     fwd_host_any, GPA__CUDA(gpa__conv_fwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
    {sizeof(gpa_op_desc), "conv1d_bwd", 3, 3, 3, conv_attrs, N_CONV_ATTRS, sizeof(conv_params), bwd_shape,
     bwd_host_any, GPA__CUDA(gpa__conv_bwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
    {sizeof(gpa_op_desc), "conv1d_bwd_nobias", 3, 3, 2, conv_attrs, N_CONV_ATTRS, sizeof(conv_params),
     bwd_nb_shape, bwd_host_any, GPA__CUDA(gpa__conv_bwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
};
GPA__FAMILY(conv1d, conv1d_ops);

static void geom_attrs(const gpa_conv1d_geometry *g, gpa_attr at[6]) {
  const char *names[6] = {"stride", "padding", "dilation", "groups", "causal", "layout"};
  int64_t v[6] = {g->stride ? g->stride : 1, g->padding, g->dilation ? g->dilation : 1, g->groups ? g->groups : 1,
                  g->causal != 0, g->layout};
  for (int i = 0; i < 6; i++) {
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
  gpa_attr at[6];
  geom_attrs(&a->geom, at);
  gpa_op_call c = {"conv1d_fwd", in, a->b.buffer ? 3u : 2u, &a->y, 1, at, 6};
  return gpa_submit(q, &c, out);
}

gpa_status gpa_conv1d_bwd(gpa_queue *q, const gpa_conv1d_bwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_conv1d_bwd: args is NULL");
  gpa_tensor in[3] = {a->dy, a->x, a->W}, o[3] = {a->dx, a->dW, a->db};
  gpa_attr at[6];
  geom_attrs(&a->geom, at);
  gpa_op_call c = {a->db.buffer ? "conv1d_bwd" : "conv1d_bwd_nobias", in, 3, o, a->db.buffer ? 3u : 2u, at, 6};
  return gpa_submit(q, &c, out);
}
