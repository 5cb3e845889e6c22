/* Elementwise ops (host). Conventions (docs/ops.md, "elementwise"):
 *   add               in: a, b (f32, same shape)            out: y = a + b
 *                     (mixed: one of a, b bf16, the other and y f32)
 *   scale             in: x                                  out: y = alpha*x        attr alpha (1.0)
 *   axpy              in: x, y0 (same shape)                 out: y = alpha*x + y0   attr alpha (1.0)
 *                     (in place: pass the same tensor as y0 and y)
 *   mask_zero         in: x [B,L,D] or [B,L], mask [B,L] u8|i32   out: y = x where mask != 0, else 0
 *   masked_mean_fwd   in: x [B,L,D], mask [B,L]              out: y [B,D], mean over unmasked l;
 *                                                                 a row with no unmasked l gives 0
 *   masked_mean_bwd   in: dy [B,D], mask [B,L]               out: dx [B,L,D]
 *   add_broadcast_fwd in: x [B,L,D], v [B,D]                 out: y = x + v[:, None, :]
 *   add_broadcast_bwd in: dy [B,L,D]                          out: dv [B,D] = sum over L of dy
 *                     (dx = dy: no op needed)
 *   transpose         in: x [..., M, N] (any dtype)          out: y [..., N, M], the last two dims swapped
 *                     (y must not overlap x)
 * Storage f32 or bf16 (x, the other float operands and y alike; math in
 * fp32/double either way); transpose moves any dtype. Outputs may alias an
 * input of the same shape exactly, except transpose's. */
#include <stddef.h>
#include <stdio.h>

#include "kernels/host/elementwise.h"
#include "ops/elementwise/elementwise.h"
#include "ops/nn_util.h"

typedef gpa__ew_params ew_params;

static const gpa_attr_spec alpha_attr[] = {
    {"alpha", GPA_ATTR_FLOAT, 0, offsetof(ew_params, alpha), 0, 1.0, 1, 0},
};

static gpa_status same_f32(const char *op, const gpa_op_sig *s, const char *a0, const char *a1, gpa_tensor *e,
                           char *msg, size_t ms) {
  GPA__CHK(gpa__chk_float(op, a0, &s->inputs[0], msg, ms));
  if (a1) GPA__CHK(gpa__chk_like(op, a1, &s->inputs[1], &s->inputs[0], a0, msg, ms));
  gpa__chk_set(e, s->inputs[0].dtype, s->inputs[0].rank, s->inputs[0].shape);
  return GPA_OK;
}

/* One dtype, or the mixed form: one operand f32 and the other bf16, y f32
 * (a bf16 branch added into an fp32 residual stream; y may be the f32
 * operand itself, not the bf16 one). */
static gpa_status add_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *a = &s->inputs[0], *b = &s->inputs[1];
  int mix = (a->dtype == GPA_F32 && b->dtype == GPA_BF16) || (a->dtype == GPA_BF16 && b->dtype == GPA_F32);
  if (!mix) return same_f32("add", s, "a", "b", e, msg, ms);
  if (!gpa__chk_shape_is(b, a->rank, a->shape))
    return gpa__chk_shape("add", "b", b, a->rank, a->shape, "shape of a", msg, ms);
  const int lo_a = a->dtype == GPA_BF16;
  GPA__CHK(gpa__chk_disjoint("add", "y", &s->outputs[0], lo_a ? "a" : "b", lo_a ? a : b, msg, ms));
  gpa__chk_set(e, GPA_F32, a->rank, a->shape);
  return GPA_OK;
}
static gpa_status scale_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return same_f32("scale", s, "x", NULL, e, msg, ms);
}
static gpa_status axpy_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  return same_f32("axpy", s, "x", "y0", e, msg, ms);
}

/* mask [B,L] (u8|i32) matching the first two dims of t. */
static gpa_status check_mask(const char *op, const gpa_tensor *mask, const gpa_tensor *t, const char *targ,
                             char *msg, size_t ms) {
  GPA__CHK(gpa__chk_dtype(op, "mask", mask, GPA_U8, GPA_I32, msg, ms));
  if (gpa__chk_shape_is(mask, 2, t->shape)) return GPA_OK; /* the reason is formatted only for a message */
  char why[64];
  snprintf(why, sizeof why, "[B,L] of %s", targ);
  return gpa__chk_shape(op, "mask", mask, 2, t->shape, why, msg, ms);
}

static gpa_status mask_zero_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0];
  GPA__CHK(gpa__chk_float("mask_zero", "x", x, msg, ms));
  if (x->rank != 2 && x->rank != 3) return gpa__chk_rank("mask_zero", "x", x, 3, "([B,L,D] or [B,L])", msg, ms);
  GPA__CHK(check_mask("mask_zero", &s->inputs[1], x, "x", msg, ms));
  gpa__chk_set(e, x->dtype, x->rank, x->shape);
  return GPA_OK;
}

static gpa_status mm_fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0];
  GPA__CHK(gpa__chk_float("masked_mean_fwd", "x", x, msg, ms));
  GPA__CHK(gpa__chk_rank("masked_mean_fwd", "x", x, 3, "([B,L,D])", msg, ms));
  GPA__CHK(check_mask("masked_mean_fwd", &s->inputs[1], x, "x", msg, ms));
  int64_t sh[2] = {x->shape[0], x->shape[2]};
  gpa__chk_set(e, x->dtype, 2, sh);
  return GPA_OK;
}

static gpa_status mm_bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *dy = &s->inputs[0], *mask = &s->inputs[1];
  GPA__CHK(gpa__chk_float("masked_mean_bwd", "dy", dy, msg, ms));
  GPA__CHK(gpa__chk_rank("masked_mean_bwd", "dy", dy, 2, "([B,D])", msg, ms));
  GPA__CHK(gpa__chk_dtype("masked_mean_bwd", "mask", mask, GPA_U8, GPA_I32, msg, ms));
  GPA__CHK(gpa__chk_rank("masked_mean_bwd", "mask", mask, 2, "([B,L])", msg, ms));
  if (dy->shape[0] != mask->shape[0]) {
    int64_t want[2] = {mask->shape[0], dy->shape[1]};
    return gpa__chk_shape("masked_mean_bwd", "dy", dy, 2, want, "B of mask", msg, ms);
  }
  int64_t sh[3] = {dy->shape[0], mask->shape[1], dy->shape[1]};
  gpa__chk_set(e, dy->dtype, 3, sh);
  return GPA_OK;
}

static gpa_status bc_fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0], *v = &s->inputs[1];
  GPA__CHK(gpa__chk_float("add_broadcast_fwd", "x", x, msg, ms));
  GPA__CHK(gpa__chk_rank("add_broadcast_fwd", "x", x, 3, "([B,L,D])", msg, ms));
  GPA__CHK(gpa__chk_dtype("add_broadcast_fwd", "v", v, x->dtype, 0, msg, ms));
  int64_t want[2] = {x->shape[0], x->shape[2]};
  GPA__CHK(gpa__chk_shape("add_broadcast_fwd", "v", v, 2, want, "[B,D] of x", msg, ms));
  gpa__chk_set(e, x->dtype, 3, x->shape);
  return GPA_OK;
}

static gpa_status bc_bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *dy = &s->inputs[0];
  GPA__CHK(gpa__chk_float("add_broadcast_bwd", "dy", dy, msg, ms));
  GPA__CHK(gpa__chk_rank("add_broadcast_bwd", "dy", dy, 3, "([B,L,D])", msg, ms));
  int64_t sh[2] = {dy->shape[0], dy->shape[2]};
  gpa__chk_set(e, dy->dtype, 2, sh);
  return GPA_OK;
}

static int mask_type(const gpa_tensor *m) { return m->dtype == GPA_I32 ? GPA__MASK_I32 : GPA__MASK_U8; }

static gpa_status add_host(const gpa_op_exec *x) {
  gpa__par par = gpa__ops_par(x->env);
  gpa__add_f32(&par, x->out[0], x->in[0], x->in[1], gpa__chk_numel(&x->inputs[0]));
  return GPA_OK;
}

static gpa_status scale_host(const gpa_op_exec *x) {
  const ew_params *p = x->params;
  gpa__par par = gpa__ops_par(x->env);
  gpa__scale_f32(&par, x->out[0], x->in[0], (float)p->alpha, gpa__chk_numel(&x->inputs[0]));
  return GPA_OK;
}

static gpa_status axpy_host(const gpa_op_exec *x) {
  const ew_params *p = x->params;
  gpa__par par = gpa__ops_par(x->env);
  gpa__axpy_f32(&par, x->out[0], x->in[0], x->in[1], (float)p->alpha, gpa__chk_numel(&x->inputs[0]));
  return GPA_OK;
}

static gpa_status mask_zero_host(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  gpa__par par = gpa__ops_par(x->env);
  gpa__mask_zero_f32(&par, x->out[0], x->in[0], x->in[1], mask_type(&x->inputs[1]), t->shape[0] * t->shape[1],
                     t->rank == 3 ? t->shape[2] : 1);
  return GPA_OK;
}

static gpa_status mm_fwd_host(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  gpa__par par = gpa__ops_par(x->env);
  gpa__sum_over_l_f32(&par, x->out[0], x->in[0], x->in[1], mask_type(&x->inputs[1]), t->shape[0], t->shape[1],
                      t->shape[2], 1);
  return GPA_OK;
}

static gpa_status mm_bwd_host(const gpa_op_exec *x) {
  const gpa_tensor *dy = &x->inputs[0], *m = &x->inputs[1];
  gpa__par par = gpa__ops_par(x->env);
  gpa__masked_mean_bwd_f32(&par, x->out[0], x->in[0], x->in[1], mask_type(m), m->shape[0], m->shape[1],
                           dy->shape[1]);
  return GPA_OK;
}

static gpa_status bc_fwd_host(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  gpa__par par = gpa__ops_par(x->env);
  gpa__add_broadcast_fwd_f32(&par, x->out[0], x->in[0], x->in[1], t->shape[0], t->shape[1], t->shape[2]);
  return GPA_OK;
}

static gpa_status bc_bwd_host(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  gpa__par par = gpa__ops_par(x->env);
  gpa__sum_over_l_f32(&par, x->out[0], x->in[0], NULL, 0, t->shape[0], t->shape[1], t->shape[2], 0);
  return GPA_OK;
}

GPA__BF16_HOST(add_host)
GPA__BF16_HOST(scale_host)
GPA__BF16_HOST(axpy_host)
GPA__BF16_HOST(mask_zero_host)
GPA__BF16_HOST(mm_fwd_host)
GPA__BF16_HOST(mm_bwd_host)
GPA__BF16_HOST(bc_fwd_host)
GPA__BF16_HOST(bc_bwd_host)

/* A transpose needs rank >= 2; leading dims are batches. */
static gpa_status transpose_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0], *y = &s->outputs[0];
  if (x->rank < 2) return gpa__chk_rank("transpose", "x", x, 2, "(at least [M,N])", msg, ms);
  uint64_t es = gpa_dtype_size(x->dtype), xb = (uint64_t)gpa__chk_numel(x) * es;
  if (x->buffer == y->buffer && xb && x->offset < y->offset + xb && y->offset < x->offset + xb) {
    snprintf(msg, ms, "transpose: y overlaps x (a transpose does not run in place)");
    return GPA_EINVAL;
  }
  gpa__chk_set(e, x->dtype, x->rank, x->shape);
  e->shape[x->rank - 2] = x->shape[x->rank - 1];
  e->shape[x->rank - 1] = x->shape[x->rank - 2];
  return GPA_OK;
}

static gpa_status transpose_host(const gpa_op_exec *x) {
  int64_t b, m, n;
  gpa__transpose_dims(&x->inputs[0], &b, &m, &n);
  gpa__par par = gpa__ops_par(x->env);
  gpa__transpose_batched(&par, x->out[0], x->in[0], b, m, n, gpa_dtype_size(x->inputs[0].dtype));
  return GPA_OK;
}

#define EW(name_, nin_, attrs_, nattrs_, shape_, host_, cuda_)                                              \
  {.size = sizeof(gpa_op_desc), .name = name_, .min_inputs = nin_, .max_inputs = nin_, .n_outputs = 1,       \
   .attrs = attrs_, .n_attrs = nattrs_, .params_size = sizeof(ew_params), .shape = shape_, .host = host_, \
   .cuda = GPA__CUDA(cuda_), .bytes_moved = gpa__nn_io_bytes}

static const gpa_op_desc ew_ops[] = {
    EW("add", 2, NULL, 0, add_shape, add_host_any, gpa__ew_add_cu),
    EW("scale", 1, alpha_attr, 1, scale_shape, scale_host_any, gpa__ew_scale_cu),
    EW("axpy", 2, alpha_attr, 1, axpy_shape, axpy_host_any, gpa__ew_axpy_cu),
    EW("mask_zero", 2, NULL, 0, mask_zero_shape, mask_zero_host_any, gpa__ew_mask_zero_cu),
    EW("masked_mean_fwd", 2, NULL, 0, mm_fwd_shape, mm_fwd_host_any, gpa__ew_mm_fwd_cu),
    EW("masked_mean_bwd", 2, NULL, 0, mm_bwd_shape, mm_bwd_host_any, gpa__ew_mm_bwd_cu),
    EW("add_broadcast_fwd", 2, NULL, 0, bc_fwd_shape, bc_fwd_host_any, gpa__ew_bc_fwd_cu),
    EW("add_broadcast_bwd", 1, NULL, 0, bc_bwd_shape, bc_bwd_host_any, gpa__ew_bc_bwd_cu),
    EW("transpose", 1, NULL, 0, transpose_shape, transpose_host, gpa__ew_transpose_cu),
};
GPA__FAMILY(elementwise, ew_ops);

gpa_status gpa_add(gpa_queue *q, const gpa_add_args *args, gpa_handle **out) {
  return GPA__CALL("add", GPA__T(args->a, args->b), 2, GPA__T(args->y), 1, NULL, 0);
}

gpa_status gpa_scale(gpa_queue *q, const gpa_scale_args *args, gpa_handle **out) {
  return GPA__CALL("scale", GPA__T(args->x), 1, GPA__T(args->y), 1, GPA__A(GPA__AF("alpha", args->alpha)), 1);
}

gpa_status gpa_axpy(gpa_queue *q, const gpa_axpy_args *args, gpa_handle **out) {
  return GPA__CALL("axpy", GPA__T(args->x, args->y0), 2, GPA__T(args->y), 1, GPA__A(GPA__AF("alpha", args->alpha)), 1);
}

gpa_status gpa_mask_zero(gpa_queue *q, const gpa_mask_zero_args *args, gpa_handle **out) {
  return GPA__CALL("mask_zero", GPA__T(args->x, args->mask), 2, GPA__T(args->y), 1, NULL, 0);
}

gpa_status gpa_masked_mean_fwd(gpa_queue *q, const gpa_masked_mean_fwd_args *args, gpa_handle **out) {
  return GPA__CALL("masked_mean_fwd", GPA__T(args->x, args->mask), 2, GPA__T(args->y), 1, NULL, 0);
}

gpa_status gpa_masked_mean_bwd(gpa_queue *q, const gpa_masked_mean_bwd_args *args, gpa_handle **out) {
  return GPA__CALL("masked_mean_bwd", GPA__T(args->dy, args->mask), 2, GPA__T(args->dx), 1, NULL, 0);
}

gpa_status gpa_add_broadcast_fwd(gpa_queue *q, const gpa_add_broadcast_fwd_args *args, gpa_handle **out) {
  return GPA__CALL("add_broadcast_fwd", GPA__T(args->x, args->v), 2, GPA__T(args->y), 1, NULL, 0);
}

gpa_status gpa_add_broadcast_bwd(gpa_queue *q, const gpa_add_broadcast_bwd_args *args, gpa_handle **out) {
  return GPA__CALL("add_broadcast_bwd", GPA__T(args->dy), 1, GPA__T(args->dv), 1, NULL, 0);
}

gpa_status gpa_transpose(gpa_queue *q, const gpa_transpose_args *args, gpa_handle **out) {
  return GPA__CALL("transpose", GPA__T(args->x), 1, GPA__T(args->y), 1, NULL, 0);
}
