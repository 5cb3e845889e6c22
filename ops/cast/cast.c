/* cast (host): y = x converted to y's dtype.
 *   cast  in: x (f32, bf16 or f16, any shape)  out: y (x's shape; f32, bf16 or f16)
 * Widening is exact; narrowing rounds to nearest even, keeps NaN a quiet
 * NaN and sends overflow to +-inf (kernels/host/bf16.h, f16.h), the same
 * bits as the CUDA kernels. bf16 <-> f16 goes through f32 (exact), so it is
 * rounded once. One dtype to itself is a copy. y may be x itself (same
 * memory, one element size); any other overlap is refused. */
#include <stdio.h>
#include <string.h>

#include "kernels/host/bf16.h"
#include "kernels/host/f16.h"
#include "ops/cast/cast.h"

static int castable(int dt) { return dt == GPA_F32 || dt == GPA_BF16 || dt == GPA_F16; }

static gpa_status cast_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *x = &s->inputs[0], *y = &s->outputs[0];
  const char *which = !castable(x->dtype) ? "x" : !castable(y->dtype) ? "y" : NULL;
  if (which) {
    snprintf(msg, ms, "cast: %s has dtype %s, expected f32, bf16 or f16", which,
             gpa_dtype_name(which[0] == 'x' ? x->dtype : y->dtype));
    return GPA_EDTYPE;
  }
  uint64_t xs = gpa_dtype_size(x->dtype), ys = gpa_dtype_size(y->dtype);
  uint64_t xb = (uint64_t)gpa__chk_numel(x) * xs, yb = (uint64_t)gpa__chk_numel(y) * ys;
  int same = x->offset == y->offset && xs == ys;
  if (x->buffer == y->buffer && xb && yb && x->offset < y->offset + yb && y->offset < x->offset + xb && !same) {
    snprintf(msg, ms, "cast: y overlaps x (in place only as the same memory with one element size: %s -> %s is not)",
             gpa_dtype_name(x->dtype), gpa_dtype_name(y->dtype));
    return GPA_EINVAL;
  }
  gpa__chk_set(e, y->dtype, x->rank, x->shape);
  return GPA_OK;
}

typedef struct cast_job {
  void *y;
  const void *x;
  int from, to;
} cast_job;

static float load(int dt, const void *p, int64_t i) {
  if (dt == GPA_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == GPA_BF16 ? gpa__bf16_to_f32(h) : gpa__f16_to_f32(h);
}

static void store(int dt, void *p, int64_t i, float v) {
  if (dt == GPA_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == GPA_BF16 ? gpa__f32_to_bf16(v) : gpa__f32_to_f16(v);
}

static void cast_range(int64_t b, int64_t e, void *ctx) {
  const cast_job *j = ctx;
  if (j->from == GPA_F32 && j->to == GPA_BF16) { /* the hot pair (gpa-train-lm --bf16): a plain loop */
    gpa__bf16_narrow(NULL, (uint16_t *)j->y + b, (const float *)j->x + b, e - b);
    return;
  }
  if (j->from == GPA_BF16 && j->to == GPA_F32) {
    gpa__bf16_widen(NULL, (float *)j->y + b, (const uint16_t *)j->x + b, e - b);
    return;
  }
  for (int64_t i = b; i < e; i++) store(j->to, j->y, i, load(j->from, j->x, i));
}

static gpa_status cast_host(const gpa_op_exec *x) {
  int64_t n = gpa__chk_numel(&x->inputs[0]);
  int from = x->inputs[0].dtype, to = x->outputs[0].dtype;
  if (from == to) {
    if (x->out[0] != x->in[0]) memmove(x->out[0], x->in[0], (size_t)n * gpa_dtype_size(from));
    return GPA_OK;
  }
  cast_job j = {x->out[0], x->in[0], from, to};
  gpa__par par = gpa__ops_par(x->env);
  gpa__pfor(&par, n, 1 << 15, cast_range, &j);
  return GPA_OK;
}

static uint64_t cast_bytes(const gpa_op_sig *s) {
  uint64_t n = (uint64_t)gpa__chk_numel(&s->inputs[0]);
  return n * (gpa_dtype_size(s->inputs[0].dtype) + gpa_dtype_size(s->outputs[0].dtype));
}

static const gpa_op_desc cast_ops[] = {
    {.size = sizeof(gpa_op_desc), .name = "cast", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
     .shape = cast_shape, .host = cast_host, .cuda = GPA__CUDA(gpa__cast_cu), .bytes_moved = cast_bytes},
};
GPA__FAMILY(cast, cast_ops);
