/* A custom op whose CUDA implementation is a kernel from the user's own
 * image (cuda_image / cuda_kernel / cuda_launch_shape). On cpu the host
 * implementation runs; on cuda/sim the kernel must run (the host one is
 * counted and must not be called), with the parameters and element counts
 * the convention promises. A wrong kernel name fails the op cleanly. */
#include <stdatomic.h>
#include <stdbool.h>

#include "util/testutil.h"

#ifndef GPA_TEST_USER_KERNELS
int main(void) {
  fprintf(stderr, "skipped: built without the CUDA toolkit\n");
  return 77;
}
#else
#include "gpa_test_user_fatbin.h"

typedef struct scale_params {
  double alpha, beta;
} scale_params;
static const gpa_attr_spec attrs[] = {
    {"alpha", GPA_ATTR_FLOAT, 1, offsetof(scale_params, alpha), 0, 0, 1, 0},
    {"beta", GPA_ATTR_FLOAT, 0, offsetof(scale_params, beta), 0, 0, 1, 0},
};

static atomic_int host_calls;
static gpa_status host(const gpa_op_exec *x) {
  atomic_fetch_add(&host_calls, 1);
  const scale_params *p = x->params;
  const float *a = x->in[0];
  float *y = x->out[0];
  for (int64_t i = 0; i < gpa_tensor_numel(&x->outputs[0]); i++) y[i] = (float)(p->alpha * a[i] + p->beta);
  return GPA_OK;
}
static gpa_status shape(const gpa_op_sig *s, gpa_tensor *out, char *msg, size_t cap) {
  (void)msg;
  (void)cap;
  out[0] = s->inputs[0];
  return GPA_OK;
}
static gpa_status launch(const gpa_op_sig *s, uint32_t grid[3], uint32_t block[3], uint32_t *smem) {
  int64_t n = gpa_tensor_numel(&s->outputs[0]);
  block[0] = 128;
  grid[0] = (uint32_t)((n + 127) / 128);
  if (!grid[0]) grid[0] = 1;
  *smem = 0;
  return GPA_OK;
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  bool device = strcmp(gpa_actor_backend(a), "cpu") != 0;
  gpa_op_desc d = {.name = "user_scale", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .attrs = attrs,
                   .n_attrs = 2, .params_size = sizeof(scale_params), .shape = shape, .host = host,
                   .cuda_image = gpa_fatbin_gpa_test_user, .cuda_kernel = "user_scale",
                   .cuda_launch_shape = launch};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  d.name = "user_scale_badname";
  d.cuda_kernel = "no_such_kernel";
  d.host = NULL;
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  d.cuda_launch_shape = NULL; /* the three fields go together */
  CHECK_ST(gpa_op_register(gpa_actor_registry(a), &d), GPA_EINVAL);

  gpa_queue *q = gpa_actor_default_queue(a);
  enum { N = 1000 };
  gpa_tensor x = tu_f32(a, N), y = tu_f32(a, N);
  float v[N];
  for (int i = 0; i < N; i++) v[i] = (float)i;
  tu_put(q, &x, v, N);
  gpa_attr at[2] = {{"alpha", GPA_ATTR_FLOAT, 0, 0.5}, {"beta", GPA_ATTR_FLOAT, 0, 3}};
  gpa_op_call c = {.op = "user_scale", .inputs = &x, .n_inputs = 1, .outputs = &y, .n_outputs = 1, .attrs = at,
                   .n_attrs = 2};
  for (int rep = 0; rep < 3; rep++) CHECK_OK(gpa_submit(q, &c, NULL)); /* the module is loaded once */
  tu_get(q, &y, v, N);
  for (int i = 0; i < N; i++) CHECK(v[i] == (float)(0.5 * i + 3));
  CHECK(atomic_load(&host_calls) == (device ? 0 : 3));

  gpa_handle *h;
  c.op = "user_scale_badname";
  CHECK_OK(gpa_submit(q, &c, &h));
  gpa_status st = gpa_await(h, -1);
  if (device) {
    CHECK(st == GPA_EINVAL);
    CHECK(strstr(gpa_handle_error_message(h), "no kernel 'no_such_kernel'"));
  } else {
    CHECK(st == GPA_EUNSUPPORTED); /* no host implementation */
  }
  gpa_handle_release(h);
  gpa_sync_batch(q, NULL);
  /* the actor goes on */
  c.op = "user_scale";
  CHECK_OK(gpa_submit(q, &c, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_actor_destroy(a));
  printf("custom_kernel: ok on %s\n", device ? "the device" : "cpu");
  return 0;
}
#endif
