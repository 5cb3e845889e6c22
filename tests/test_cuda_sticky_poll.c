/* CUDA backend on the simulated device, modelling a real GPU's behaviour
 * after a sticky error: no host function (cuLaunchHostFunc) is called any
 * more. Handles pending at the fault must still complete, exactly once, with
 * GPA_EDEVICE and the driver's message, without any later driver call to
 * notice the error (the actor's poll finds it), and the actor must shut down
 * without hanging. Without the poll the awaits below time out.
 * Its own process: the sim's context stays failed until the actor's reset. */
#include <stdatomic.h>
#include <time.h>

#include "test_cuda_util.h"

static _Atomic uint64_t finished; /* messages the actor finished (profiler) */
static void on_op(const gpa_prof_op *op, void *ud) {
  (void)op;
  (void)ud;
  atomic_fetch_add(&finished, 1);
}

static gpa_status add(gpa_queue *q, const gpa_tensor *a, const gpa_tensor *b, const gpa_tensor *y, gpa_handle **h) {
  gpa_tensor in[2] = {*a, *b};
  gpa_op_call c = {"add", in, 2, y, 1, NULL, 0};
  return gpa_submit(q, &c, h);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  tcu_sim sim = tcu_sim_api(a);
  gpa_profiler prof = {.size = sizeof prof, .on_op = on_op};
  CHECK_OK(gpa_actor_add_profiler(a, &prof));
  gpa_queue *q = gpa_actor_default_queue(a), *q2;
  CHECK_OK(gpa_queue_create(a, "second", &q2));
  gpa_tensor x = tu_f32(a, 256), y = tu_f32(a, 256), z = tu_f32(a, 256);
  float v[256];
  for (int i = 0; i < 256; i++) v[i] = (float)i;
  tu_put(q, &x, v, 256);
  tu_put(q2, &z, v, 256);
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_sync_batch(q2, NULL));
  uint64_t submitted = atomic_load(&finished);

  sim.fault_host_fns_after_sticky(0); /* as on a GPU */
  sim.fault_stream_delay(NULL, 20000); /* the later ops are still queued when the fault hits */
  sim.fault_sticky(1);                 /* the next launch faults on the device */
  enum { H = 7 };
  gpa_handle *h[H];
  CHECK_OK(add(q, &x, &x, &y, &h[0]));
  CHECK_OK(tu_fill(q, &y, 1.0, &h[1]));
  CHECK_OK(add(q, &y, &x, &y, &h[2]));
  CHECK_OK(gpa_upload(q, &x, v, sizeof v, 0, &h[3]));
  CHECK_OK(gpa_readback(q, &y, &h[4]));
  CHECK_OK(tu_fill(q2, &z, 3.0, &h[5])); /* another stream: no host function runs there either */
  CHECK_OK(gpa_readback(q2, &z, &h[6]));
  submitted += H;
  double t0 = now_s();
  /* No further call: only the actor's poll can see the error now. */
  for (int i = 0; i < H; i++) {
    gpa_status st = gpa_await(h[i], 10 * 1000000000ll);
    if (st != GPA_EDEVICE)
      fprintf(stderr, "handle %d: %s (%s)%s\n", i, gpa_status_name(st), gpa_handle_error_message(h[i]),
              st == GPA_ETIMEDOUT ? ": pending after a sticky error (no poll?)" : "");
    CHECK(st == GPA_EDEVICE);
    CHECK(strstr(gpa_handle_error_message(h[i]), "CUDA_ERROR_ILLEGAL_ADDRESS"));
  }
  double waited = now_s() - t0;
  printf("ok: %d pending handles failed in %.3f s without host functions: %s\n", H, waited,
         gpa_handle_error_message(h[2]));
  CHECK(waited < 5.0);
  gpa_batch_stats bs = {.size = sizeof bs};
  CHECK_ST(gpa_sync_batch(q, &bs), GPA_EDEVICE);
  CHECK(bs.first_error == GPA_EDEVICE);
  const void *data;
  uint64_t size;
  CHECK_ST(gpa_handle_data(h[4], &data, &size), GPA_EDEVICE);
  for (int i = 0; i < H; i++) gpa_handle_release(h[i]);

  /* Later work fails at once; the actor keeps answering. */
  gpa_handle *l;
  CHECK_OK(add(q, &x, &x, &y, &l));
  CHECK_ST(gpa_await(l, 10 * 1000000000ll), GPA_EDEVICE);
  CHECK(strstr(gpa_handle_error_message(l), "device failed"));
  gpa_handle_release(l);
  submitted++;

  /* Work in flight at shutdown: destroy drains it (the poll fails it). */
  CHECK_OK(tu_fill(q2, &z, 4.0, NULL));
  submitted++;
  CHECK_OK(gpa_actor_shutdown(a));
  printf("ok: every message finished exactly once: %llu of %llu\n", (unsigned long long)atomic_load(&finished),
         (unsigned long long)submitted);
  CHECK(atomic_load(&finished) == submitted);
  sim.fault_clear();
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
