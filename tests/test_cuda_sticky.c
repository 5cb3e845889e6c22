/* CUDA backend on the simulated device: a sticky device error (a kernel that
 * faults) fails every pending and every later handle with GPA_EDEVICE and
 * the driver's message, batch sync reports it, nothing hangs, and the actor
 * shuts down cleanly. Its own process: the sim's context stays failed. */
#include "test_cuda_util.h"

static gpa_status add(gpa_queue *q, const gpa_tensor *a, const gpa_tensor *b, const gpa_tensor *y, gpa_handle **h) {
  gpa_tensor in[2] = {*a, *b};
  gpa_op_call c = {"add", in, 2, y, 1, NULL, 0};
  return gpa_submit(q, &c, h);
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  tcu_sim sim = tcu_sim_api(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 256), y = tu_f32(a, 256);
  float v[256];
  for (int i = 0; i < 256; i++) v[i] = (float)i;
  tu_put(q, &x, v, 256);
  CHECK_OK(gpa_sync_batch(q, NULL));

  sim.fault_stream_delay(NULL, 20000); /* keep the later ops pending when the fault hits */
  sim.fault_sticky(1);                 /* the next launch faults on the device */
  CHECK_OK(gpa_batch_begin(q, "faulting"));
  enum { H = 5 };
  gpa_handle *h[H];
  CHECK_OK(add(q, &x, &x, &y, &h[0]));
  CHECK_OK(tu_fill(q, &y, 1.0, &h[1]));
  CHECK_OK(add(q, &y, &x, &y, &h[2]));
  CHECK_OK(gpa_upload(q, &x, v, sizeof v, 0, &h[3]));
  CHECK_OK(gpa_readback(q, &y, &h[4]));
  for (int i = 0; i < H; i++) {
    CHECK_ST(gpa_await(h[i], 10 * 1000000000ll), GPA_EDEVICE);
    CHECK(strstr(gpa_handle_error_message(h[i]), "CUDA_ERROR_ILLEGAL_ADDRESS"));
  }
  printf("ok: pending handles failed: %s\n", gpa_handle_error_message(h[0]));
  gpa_batch_stats st = {.size = sizeof st};
  CHECK_ST(gpa_sync_batch(q, &st), GPA_EDEVICE);
  CHECK(st.errors == H && st.first_error == GPA_EDEVICE);
  const void *data;
  uint64_t size;
  CHECK_ST(gpa_handle_data(h[4], &data, &size), GPA_EDEVICE);
  for (int i = 0; i < H; i++) gpa_handle_release(h[i]);

  /* Later work fails at once; so does creating a stream. */
  gpa_queue *q2;
  CHECK_ST(gpa_queue_create(a, "later", &q2), GPA_EDEVICE);
  gpa_handle *l[3];
  CHECK_OK(tu_fill(q, &y, 2.0, &l[0]));
  CHECK_OK(add(q, &x, &x, &y, &l[1]));
  CHECK_OK(gpa_readback(q, &x, &l[2]));
  for (int i = 0; i < 3; i++) {
    CHECK_ST(gpa_await(l[i], 10 * 1000000000ll), GPA_EDEVICE);
    CHECK(strstr(gpa_handle_error_message(l[i]), "device failed"));
    CHECK(strstr(gpa_handle_error_message(l[i]), "CUDA_ERROR_ILLEGAL_ADDRESS"));
    if (i == 0) printf("ok: later handles failed: %s\n", gpa_handle_error_message(l[i]));
    gpa_handle_release(l[i]);
  }
  sim.fault_clear();
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
