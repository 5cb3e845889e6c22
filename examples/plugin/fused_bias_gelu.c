/* An example plugin: "fused_bias_gelu", y = gelu_tanh(x + b) over rows of
 * x[N,D] with b[D], in one pass instead of an add and a GELU. Built as a
 * shared library and loaded with gpa_plugin_load(registry, path).
 *
 * It also shows an override with a fallback: it registers a host
 * "fused_bias_gelu" that declines (GPA_SKIP) rows wider than a limit given as
 * an attribute, so the earlier registration of the name takes those. */
#include <gpuactor.h>
#include <math.h>
#include <stdio.h>

const uint32_t gpa_plugin_abi = GPA_PLUGIN_ABI;

typedef struct params {
  int64_t max_d; /* 0 = no limit */
} params;

static const gpa_attr_spec attrs[] = {
    {"max_d", GPA_ATTR_INT, 0, 0, 0, 0, 0, 1e12},
};

static gpa_status shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  const gpa_tensor *x = &s->inputs[0], *b = &s->inputs[1];
  if (x->dtype != GPA_F32 || b->dtype != GPA_F32) {
    snprintf(msg, cap, "fused_bias_gelu: x and b must be f32");
    return GPA_EDTYPE;
  }
  if (x->rank != 2 || b->rank != 1 || b->shape[0] != x->shape[1]) {
    snprintf(msg, cap, "fused_bias_gelu: expected x[N,D] and b[D]");
    return GPA_ESHAPE;
  }
  out[0] = *x;
  return GPA_OK;
}

typedef struct job {
  const float *x, *b;
  float *y;
  int64_t d;
} job;

static void rows(int64_t r0, int64_t r1, void *ctx) {
  const job *j = ctx;
  for (int64_t r = r0; r < r1; r++)
    for (int64_t i = 0; i < j->d; i++) {
      float v = j->x[r * j->d + i] + j->b[i];
      float u = 0.7978845608f * (v + 0.044715f * v * v * v);
      j->y[r * j->d + i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

static gpa_status host(const gpa_op_exec *x) {
  const params *p = x->params;
  int64_t n = x->inputs[0].shape[0], d = x->inputs[0].shape[1];
  if (p->max_d && d > p->max_d) return GPA_SKIP; /* the next registration takes it */
  job j = {x->in[0], x->in[1], x->out[0], d};
  gpa_exec_parallel_for(x->env, n, 16, rows, &j);
  return GPA_OK;
}

gpa_status gpa_plugin_init(gpa_registry *reg) {
  gpa_op_desc d = {.size = sizeof d,
                   .name = "fused_bias_gelu",
                   .min_inputs = 2,
                   .max_inputs = 2,
                   .n_outputs = 1,
                   .attrs = attrs,
                   .n_attrs = 1,
                   .params_size = sizeof(params),
                   .shape = shape,
                   .host = host};
  return gpa_op_register(reg, &d);
}
