/* Plugins: the example plugin loads and its op runs through the registry
 * (including a GPA_SKIP fallback to an earlier registration); broken
 * plugins fail with a status and a message, never a crash. */
#include <math.h>

#include "util/testutil.h"

/* The earlier registration the plugin falls back to: marks its output. */
static gpa_status fallback(const gpa_op_exec *x) {
  float *y = x->out[0];
  int64_t n = gpa_tensor_numel(&x->outputs[0]);
  for (int64_t i = 0; i < n; i++) y[i] = -1000;
  return GPA_OK;
}
static gpa_status fb_shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  (void)msg;
  (void)cap;
  out[0] = s->inputs[0];
  return GPA_OK;
}
static const gpa_attr_spec fb_attrs[] = {{"max_d", GPA_ATTR_INT, 0, 0, 0, 0, 0, 1e12}};

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: test_plugin fused.so badabi.so noinit.so failinit.so\n");
    return 2;
  }
  gpa_actor *a = tu_actor(NULL);
  gpa_registry *reg = gpa_actor_registry(a);
  /* Host only: on cuda and sim it runs on the host fallback's staged copies.
   * As a .cuda implementation it would be handed device pointers, which only
   * the simulator lets the host dereference (a real GPU: SIGSEGV). */
  CHECK_OK(gpa_op_register(reg, &(gpa_op_desc){.name = "fused_bias_gelu", .min_inputs = 2, .max_inputs = 2,
                                               .n_outputs = 1, .attrs = fb_attrs, .n_attrs = 1, .params_size = 8,
                                               .shape = fb_shape, .host = fallback}));
  CHECK_OK(gpa_plugin_load(reg, argv[1]));

  gpa_queue *q = gpa_actor_default_queue(a);
  enum { N = 5, D = 7 };
  float x[N * D], b[D], y[N * D];
  for (int i = 0; i < N * D; i++) x[i] = (float)(i - 17) * 0.25f;
  for (int i = 0; i < D; i++) b[i] = 0.1f * i;
  gpa_tensor tx = {0, 0, GPA_F32, 2, {N, D}}, tb = tu_f32(a, D), ty = {0, 0, GPA_F32, 2, {N, D}};
  CHECK_OK(gpa_buffer_acquire(a, NULL, sizeof x, &tx.buffer));
  CHECK_OK(gpa_buffer_acquire(a, NULL, sizeof y, &ty.buffer));
  tu_put(q, &tx, x, N * D);
  tu_put(q, &tb, b, D);
  gpa_tensor in[2] = {tx, tb};
  gpa_handle *h;
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "fused_bias_gelu", .inputs = in, .n_inputs = 2, .outputs = &ty,
                                        .n_outputs = 1},
                      &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  gpa_tensor flat = ty;
  flat.rank = 1;
  flat.shape[0] = N * D;
  tu_get(q, &flat, y, N * D);
  for (int i = 0; i < N * D; i++) {
    double v = x[i] + b[i % D];
    double want = 0.5 * v * (1 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
    CHECK(fabs(y[i] - want) <= 1e-5 * (1 + fabs(want)));
  }
  /* max_d below D: the plugin declines, the earlier registration runs */
  gpa_attr lim = {"max_d", GPA_ATTR_INT, 4, 0};
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "fused_bias_gelu", .inputs = in, .n_inputs = 2, .outputs = &ty,
                                        .n_outputs = 1, .attrs = &lim, .n_attrs = 1},
                      NULL));
  tu_get(q, &flat, y, N * D);
  CHECK(y[0] == -1000 && y[N * D - 1] == -1000);
  /* shape validation comes from the plugin's (newest) registration */
  gpa_tensor bad = tb;
  bad.shape[0] = D - 1;
  in[1] = bad;
  CHECK_ST(gpa_submit(q, &(gpa_op_call){.op = "fused_bias_gelu", .inputs = in, .n_inputs = 2, .outputs = &ty,
                                        .n_outputs = 1},
                      NULL),
           GPA_ESHAPE);
  CHECK_MSG("fused_bias_gelu: expected x[N,D] and b[D]");

  /* failure paths */
  CHECK_ST(gpa_plugin_load(reg, "/nonexistent/libnothing.so"), GPA_ENOTFOUND);
  CHECK_MSG("libnothing.so");
  CHECK_ST(gpa_plugin_load(reg, argv[2]), GPA_EUNSUPPORTED);
  CHECK_MSG("ABI 42");
  CHECK_ST(gpa_plugin_load(reg, argv[3]), GPA_ENOTFOUND);
  CHECK_MSG("gpa_plugin_init");
  CHECK_ST(gpa_plugin_load(reg, argv[4]), GPA_EINVAL);
  CHECK_MSG("gpa_plugin_init failed");
  CHECK_MSG("name is empty");
  CHECK_ST(gpa_plugin_load(NULL, argv[1]), GPA_EINVAL);
  CHECK_ST(gpa_plugin_load(reg, NULL), GPA_EINVAL);
  /* the actor still works */
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_actor_destroy(a));
  printf("plugin: ok\n");
  return 0;
}
