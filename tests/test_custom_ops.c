/* Custom ops: attribute schemas checked at submit (naming the attribute),
 * output inference, overrides of built-ins with GPA_SKIP falling through to
 * the built-in, chains of three, per-actor registries. */
#include "util/testutil.h"

typedef struct scale_params {
  double alpha;
  int64_t mode;
} scale_params;
static const gpa_attr_spec scale_attrs[] = {
    {"alpha", GPA_ATTR_FLOAT, 1, offsetof(scale_params, alpha), 0, 0, -100, 100},
    {"mode", GPA_ATTR_INT, 0, offsetof(scale_params, mode), 3, 0, 0, 7},
};

static gpa_status scale_shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  if (s->inputs[0].dtype != GPA_F32) {
    snprintf(msg, cap, "my_scale: x must be f32, got %s", gpa_dtype_name(s->inputs[0].dtype));
    return GPA_EDTYPE;
  }
  out[0] = s->inputs[0]; /* y like x */
  return GPA_OK;
}

static int64_t seen_mode;
static gpa_status scale_host(const gpa_op_exec *x) {
  const scale_params *p = x->params;
  seen_mode = p->mode;
  const float *a = x->in[0];
  float *y = x->out[0];
  for (int64_t i = 0; i < gpa_tensor_numel(&x->inputs[0]); i++) y[i] = (float)(a[i] * p->alpha);
  return GPA_OK;
}

/* An override of the built-in fill: handles f32 with value 7 by writing 77,
 * declines everything else (the built-in runs). */
typedef struct fill_p {
  double value;
} fill_p;
static const gpa_attr_spec fill_attrs[] = {{"value", GPA_ATTR_FLOAT, 1, 0, 0, 0, 1, 0}};
static int override_calls, override_skips;
static gpa_status fill_override(const gpa_op_exec *x) {
  const fill_p *p = x->params;
  override_calls++;
  if (x->outputs[0].dtype != GPA_F32 || p->value != 7) {
    override_skips++;
    return GPA_SKIP;
  }
  float *y = x->out[0];
  for (int64_t i = 0; i < gpa_tensor_numel(&x->outputs[0]); i++) y[i] = 77;
  return GPA_OK;
}
static gpa_status always_skip(const gpa_op_exec *x) {
  (void)x;
  override_skips++;
  return GPA_SKIP;
}

/* params_size without attributes: the op sees zeros, never what an earlier
 * message left in a pooled message's params. */
static int zero_calls, zero_dirty;
static gpa_status params_zero(const gpa_op_exec *x) {
  const unsigned char *p = x->params;
  for (int i = 0; i < 64; i++) zero_dirty += p[i] != 0;
  zero_calls++;
  return GPA_OK;
}

/* Variadic outputs (desc.max_outputs): copies input k into output k. */
static gpa_status copies_shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  if (s->n_outputs != s->n_inputs) {
    snprintf(msg, cap, "copies: one output per input");
    return GPA_EINVAL;
  }
  for (uint32_t i = 0; i < s->n_outputs; i++) out[i] = s->inputs[i];
  return GPA_OK;
}
static gpa_status copies_host(const gpa_op_exec *x) {
  for (uint32_t i = 0; i < x->n_outputs; i++)
    memcpy(x->out[i], x->in[i], (size_t)gpa_tensor_numel(&x->inputs[i]) * 4);
  return GPA_OK;
}

static void variadic_outputs(gpa_registry *reg, gpa_queue *q, gpa_actor *a) {
  gpa_op_desc d = {.size = sizeof d, .name = "copies", .min_inputs = 1, .max_inputs = 4, .n_outputs = 1,
                   .max_outputs = 4, .shape = copies_shape, .host = copies_host};
  CHECK_OK(gpa_op_register(reg, &d));
  gpa_tensor x[4], y[4];
  for (int i = 0; i < 4; i++) {
    x[i] = tu_f32(a, 3), y[i] = tu_f32(a, 3);
    float v[3] = {(float)i, (float)i + 0.5f, -1.0f};
    tu_put(q, &x[i], v, 3);
  }
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "copies", .inputs = x, .n_inputs = 3, .outputs = y, .n_outputs = 3},
                      NULL));
  float got[3];
  tu_get(q, &y[2], got, 3);
  CHECK(got[0] == 2.0f && got[1] == 2.5f);
  CHECK_ST(gpa_submit(q, &(gpa_op_call){.op = "copies", .inputs = x, .n_inputs = 4, .outputs = y, .n_outputs = 5},
                      NULL), GPA_EINVAL);
  CHECK_MSG("takes 1 to 4 outputs, got 5");
  CHECK_ST(gpa_submit(q, &(gpa_op_call){.op = "copies", .inputs = x, .n_inputs = 1, .outputs = y, .n_outputs = 0},
                      NULL), GPA_EINVAL);
  /* n_outputs <= max_outputs <= GPA_MAX_OUTPUTS at registration */
  gpa_op_desc bad = d;
  bad.name = "copies_bad", bad.n_outputs = 3, bad.max_outputs = 2;
  CHECK_ST(gpa_op_register(reg, &bad), GPA_EINVAL);
  CHECK_MSG("max_outputs");
  bad.n_outputs = 1, bad.max_outputs = GPA_MAX_OUTPUTS + 1;
  CHECK_ST(gpa_op_register(reg, &bad), GPA_EINVAL);
  /* a desc from before max_outputs (its size ends earlier): the field is
   * not read, the op takes exactly n_outputs */
  bad.size = (uint32_t)offsetof(gpa_op_desc, max_outputs);
  bad.max_outputs = 1000;
  CHECK_OK(gpa_op_register(reg, &bad));
  CHECK_ST(gpa_submit(q, &(gpa_op_call){.op = "copies_bad", .inputs = x, .n_inputs = 2, .outputs = y, .n_outputs = 2},
                      NULL), GPA_EINVAL);
  CHECK_MSG("takes 1 outputs, got 2");
  CHECK_OK(gpa_sync_batch(q, NULL));
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_registry *reg = gpa_actor_registry(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  /* Host only: on cuda and sim it runs on the host fallback's staged copies.
   * As a .cuda implementation it would be handed device pointers, which only
   * the simulator lets the host dereference (a real GPU: SIGSEGV). */
  gpa_op_desc d = {.name = "my_scale", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .attrs = scale_attrs,
                   .n_attrs = 2, .params_size = sizeof(scale_params), .shape = scale_shape, .host = scale_host};
  CHECK_OK(gpa_op_register(reg, &d));
  gpa_tensor x = tu_f32(a, 10), y = tu_f32(a, 10);
  float v[10];
  for (int i = 0; i < 10; i++) v[i] = (float)i;
  tu_put(q, &x, v, 10);
  gpa_attr at[3] = {{"alpha", GPA_ATTR_FLOAT, 0, 2.5}, {"mode", GPA_ATTR_INT, 5, 0}};
  gpa_op_call c = {.op = "my_scale", .inputs = &x, .n_inputs = 1, .outputs = &y, .n_outputs = 1, .attrs = at,
                   .n_attrs = 2};
  CHECK_OK(gpa_submit(q, &c, NULL));
  tu_get(q, &y, v, 10);
  CHECK(v[9] == 22.5f && seen_mode == 5);
  c.n_attrs = 1; /* mode defaults to 3 */
  CHECK_OK(gpa_submit(q, &c, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK(seen_mode == 3);
  /* an int where a float is expected widens */
  at[0] = (gpa_attr){"alpha", GPA_ATTR_INT, 3, 0};
  CHECK_OK(gpa_submit(q, &c, NULL));
  tu_get(q, &y, v, 10);
  CHECK(v[1] == 3.0f);
  /* schema errors name the attribute */
  c.n_attrs = 0;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_EINVAL);
  CHECK_MSG("missing required attribute 'alpha'");
  at[0] = (gpa_attr){"alpha", GPA_ATTR_FLOAT, 0, 1};
  at[1] = (gpa_attr){"mode", GPA_ATTR_FLOAT, 0, 1.5};
  c.n_attrs = 2;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_EINVAL);
  CHECK_MSG("'mode' must be an int");
  at[1] = (gpa_attr){"mode", GPA_ATTR_INT, 8, 0};
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_ERANGE);
  CHECK_MSG("'mode' = 8 outside [0, 7]");
  at[1] = (gpa_attr){"speed", GPA_ATTR_INT, 1, 0};
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_EINVAL);
  CHECK_MSG("unknown attribute 'speed'");
  /* given in any order: each goes to its own spec (submit.c looks for the
   * next name after the last one matched first, then wraps) */
  at[0] = (gpa_attr){"mode", GPA_ATTR_INT, 6, 0};
  at[1] = (gpa_attr){"alpha", GPA_ATTR_FLOAT, 0, 0.5};
  CHECK_OK(gpa_submit(q, &c, NULL));
  tu_get(q, &y, v, 10);
  CHECK(v[4] == 2.0f && seen_mode == 6);
  at[0] = (gpa_attr){"alpha", GPA_ATTR_FLOAT, 0, 1};
  at[1] = (gpa_attr){"mode", GPA_ATTR_INT, 1, 0};
  at[2] = (gpa_attr){"alpha", GPA_ATTR_FLOAT, 0, 2};
  c.n_attrs = 3;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_EINVAL);
  CHECK_MSG("attribute 'alpha' given twice");
  at[0] = (gpa_attr){"alpha", GPA_ATTR_FLOAT, 0, 1e9};
  c.n_attrs = 1;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_ERANGE);
  CHECK_MSG("'alpha'");
  /* inference: outputs are compared with what shape() expects */
  at[0] = (gpa_attr){"alpha", GPA_ATTR_FLOAT, 0, 1};
  gpa_tensor y2 = y;
  y2.shape[0] = 9;
  c.outputs = &y2;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_ESHAPE);
  CHECK_MSG("outputs[0] has shape [9], expected [10]");
  c.outputs = &y;
  gpa_tensor xi = x;
  xi.dtype = GPA_I32;
  c.inputs = &xi;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_EDTYPE);
  CHECK_MSG("my_scale: x must be f32");
  c.inputs = &x;
  /* arity */
  c.n_outputs = 0;
  CHECK_ST(gpa_submit(q, &c, NULL), GPA_EINVAL);
  CHECK_MSG("takes 1 outputs");

  /* override a built-in; the built-in stays next in line */
  gpa_op_desc f = {.name = "fill", .n_outputs = 1, .attrs = fill_attrs, .n_attrs = 1, .params_size = 8,
                   .host = fill_override};
  CHECK_OK(gpa_op_register(reg, &f));
  CHECK_OK(tu_fill(q, &y, 7, NULL));
  tu_get(q, &y, v, 10);
  CHECK(v[0] == 77 && override_calls == 1 && override_skips == 0);
  CHECK_OK(tu_fill(q, &y, 5, NULL)); /* declined: the built-in fills */
  tu_get(q, &y, v, 10);
  CHECK(v[0] == 5 && override_calls == 2 && override_skips == 1);
  /* a chain of three: newest always skips, the middle takes f32 7 */
  f.host = f.cuda = always_skip;
  CHECK_OK(gpa_op_register(reg, &f));
  CHECK_OK(tu_fill(q, &y, 7, NULL));
  tu_get(q, &y, v, 10);
  CHECK(v[0] == 77 && override_skips == 2);
  /* an op whose every implementation declines fails cleanly */
  gpa_op_desc lone = {.name = "declines", .n_outputs = 0, .host = always_skip, .cuda = always_skip};
  CHECK_OK(gpa_op_register(reg, &lone));
  gpa_handle *h;
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "declines"}, &h));
  CHECK_ST(gpa_await(h, -1), GPA_EUNSUPPORTED);
  CHECK(strstr(gpa_handle_error_message(h), "no implementation"));
  gpa_handle_release(h);
  gpa_sync_batch(q, NULL);

  gpa_op_desc zp = {.name = "params_zero", .params_size = 64, .host = params_zero, .cuda = params_zero};
  CHECK_OK(gpa_op_register(reg, &zp));
  for (int round = 0; round < 3; round++) { /* fills leave a nonzero value in the pool's messages */
    for (int i = 0; i < 40; i++) CHECK_OK(tu_fill(q, &y, 7, NULL));
    CHECK_OK(gpa_sync_batch(q, NULL));
    for (int i = 0; i < 40; i++) CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "params_zero"}, NULL));
    CHECK_OK(gpa_sync_batch(q, NULL));
  }
  CHECK(zero_calls == 120 && zero_dirty == 0);
  variadic_outputs(reg, q, a);

  /* registries are per actor: another actor does not see my_scale */
  gpa_actor *b = tu_actor(NULL);
  CHECK_ST(gpa_submit(gpa_actor_default_queue(b), &(gpa_op_call){.op = "my_scale"}, NULL), GPA_ENOTFOUND);
  CHECK_OK(gpa_actor_destroy(b));
  CHECK_OK(gpa_actor_destroy(a));
  printf("custom_ops: ok\n");
  return 0;
}
