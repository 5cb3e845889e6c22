/* Built-in core ops: noop (a fence; the unit of overhead measurements),
 * copy (device to device) and fill. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/host/bf16.h"
#include "kernels/host/copy.h"
#include "kernels/host/f16.h"
#include "ops/core/core.h"

static gpa_status noop_host(const gpa_op_exec *x) {
  (void)x;
  return GPA_OK;
}

static gpa_status copy_shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  const gpa_tensor *src = &s->inputs[0], *dst = &s->outputs[0];
  if (gpa_tensor_numel(src) != gpa_tensor_numel(dst) || gpa_dtype_size(src->dtype) != gpa_dtype_size(dst->dtype)) {
    snprintf(msg, cap, "copy: outputs[0] must hold as many elements as inputs[0] (%lld %s), has %lld %s",
             (long long)gpa_tensor_numel(src), gpa_dtype_name(src->dtype), (long long)gpa_tensor_numel(dst),
             gpa_dtype_name(dst->dtype));
    return GPA_ESHAPE;
  }
  out[0] = *dst; /* any shape of the same element count: a reshape */
  out[0].dtype = src->dtype;
  return GPA_OK;
}

static gpa_status copy_host(const gpa_op_exec *x) {
  uint64_t n = (uint64_t)gpa_tensor_numel(&x->inputs[0]) * gpa_dtype_size(x->inputs[0].dtype);
  gpa__host_copy(x->env, x->out[0], x->in[0], n); /* views of one buffer may overlap */
  return GPA_OK;
}

static uint64_t copy_bytes(const gpa_op_sig *s) {
  return 2 * (uint64_t)gpa_tensor_numel(&s->inputs[0]) * gpa_dtype_size(s->inputs[0].dtype);
}

typedef gpa__fill_params fill_params;

static const gpa_attr_spec fill_attrs[] = {
    {"value", GPA_ATTR_FLOAT, 1, offsetof(fill_params, value), 0, 0, 1, 0},
};

static gpa_status fill_shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  const fill_params *p = s->params;
  int dt = s->outputs[0].dtype;
  if (dt == GPA_U8 && (p->value < 0 || p->value > 255 || p->value != floor(p->value))) {
    snprintf(msg, cap, "fill: value %g is not a u8", p->value);
    return GPA_ERANGE;
  }
  if ((dt == GPA_I32 && (p->value < INT32_MIN || p->value > INT32_MAX || p->value != floor(p->value))) ||
      (dt == GPA_I64 && p->value != floor(p->value))) {
    snprintf(msg, cap, "fill: value %g is not a %s", p->value, gpa_dtype_name(dt));
    return GPA_ERANGE;
  }
  out[0] = s->outputs[0];
  return GPA_OK;
}


typedef struct fill_job {
  unsigned char *dst;
  unsigned char pattern[8];
  uint32_t es;
} fill_job;

static void fill_range(int64_t b, int64_t e, void *ctx) {
  fill_job *j = ctx;
  for (int64_t i = b; i < e; i++) memcpy(j->dst + i * j->es, j->pattern, j->es);
}

static gpa_status fill_host(const gpa_op_exec *x) {
  const fill_params *p = x->params;
  fill_job j = {x->out[0], {0}, gpa_dtype_size(x->outputs[0].dtype)};
  float f = (float)p->value;
  int32_t i32 = (int32_t)p->value;
  int64_t i64 = (int64_t)p->value;
  uint16_t h;
  switch (x->outputs[0].dtype) {
    case GPA_F32: memcpy(j.pattern, &f, 4); break;
    case GPA_F16: h = gpa__f32_to_f16(f); memcpy(j.pattern, &h, 2); break;
    case GPA_BF16: h = gpa__f32_to_bf16(f); memcpy(j.pattern, &h, 2); break;
    case GPA_I32: memcpy(j.pattern, &i32, 4); break;
    case GPA_U8: j.pattern[0] = (unsigned char)p->value; break;
    case GPA_I64: memcpy(j.pattern, &i64, 8); break;
  }
  gpa_exec_parallel_for(x->env, gpa_tensor_numel(&x->outputs[0]), 1 << 18, fill_range, &j);
  return GPA_OK;
}

static uint64_t fill_bytes(const gpa_op_sig *s) {
  return (uint64_t)gpa_tensor_numel(&s->outputs[0]) * gpa_dtype_size(s->outputs[0].dtype);
}

static const gpa_op_desc core_ops[] = {
    {.name = "noop", .min_inputs = 0, .max_inputs = GPA__MAX_IN, .n_outputs = 0, .host = noop_host,
     .cuda = GPA__CUDA(gpa__noop_cu)},
    {.name = "copy", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .shape = copy_shape, .host = copy_host,
     .cuda = GPA__CUDA(gpa__copy_cu), .bytes_moved = copy_bytes},
    {.name = "fill", .min_inputs = 0, .max_inputs = 0, .n_outputs = 1, .attrs = fill_attrs, .n_attrs = 1,
     .params_size = sizeof(fill_params), .shape = fill_shape, .host = fill_host, .cuda = GPA__CUDA(gpa__fill_cu),
     .bytes_moved = fill_bytes},
};
GPA__FAMILY(core, core_ops);
