/* gpa_exec_scratch in user ops: device memory for CUDA implementations
 * (stream ordered, reused by the stream's next op), host memory for host
 * implementations — on the host backend and on the CUDA backend's host
 * fallback alike.
 *   - "scr_fill" (host and CUDA implementations): fills its scratch with a
 *     value on the device (cuMemsetD32Async on x->stream), copies the scratch
 *     into its output; on sim the scratch must be a live device allocation;
 *   - "scr_host" (host only; the fallback on CUDA): writes its scratch with
 *     the CPU; on sim it must not be device memory;
 *   - scratch out of memory (sim): gpa_exec_scratch returns NULL, the op
 *     fails with GPA_ENOMEM, the next op runs.
 * Runs on cpu and sim; skipped on a real GPU (the driver calls are the
 * simulator's, looked up in it). */
#include <dlfcn.h>

#include "test_cuda_util.h"

typedef int (*memset32_fn)(unsigned long long dst, unsigned v, size_t n, void *stream);
typedef int (*copy_dd_fn)(unsigned long long dst, unsigned long long src, size_t n, void *stream);
static memset32_fn cu_memset32;
static copy_dd_fn cu_copy_dd;
static tcu_sim sim;
static int on_sim;
static int host_scratch_was_device = -1, cuda_scratch_was_device = -1;

static gpa_status fill_host(const gpa_op_exec *x) {
  uint64_t n = (uint64_t)gpa_tensor_numel(&x->outputs[0]);
  float *s = gpa_exec_scratch(x->env, n * 4);
  if (!s) {
    snprintf(x->msg, x->msg_size, "scr: no scratch");
    return GPA_ENOMEM;
  }
  if (on_sim) {
    char why[256];
    host_scratch_was_device = sim.device_range_ok((unsigned long long)(uintptr_t)s, n * 4, why, sizeof why);
  }
  for (uint64_t i = 0; i < n; i++) s[i] = 3.0f + (float)i;
  memcpy(x->out[0], s, n * 4);
  return GPA_OK;
}

static gpa_status fill_cuda(const gpa_op_exec *x) {
  uint64_t n = (uint64_t)gpa_tensor_numel(&x->outputs[0]);
  void *s = gpa_exec_scratch(x->env, n * 4);
  if (!s) return GPA_ENOMEM; /* the backend wrote the detail */
  unsigned long long d = (unsigned long long)(uintptr_t)s;
  char why[256];
  cuda_scratch_was_device = sim.device_range_ok(d, n * 4, why, sizeof why);
  union {
    float f;
    unsigned u;
  } v = {.f = 7.5f};
  if (cu_memset32(d, v.u, n, x->stream) || cu_copy_dd((unsigned long long)(uintptr_t)x->out[0], d, n * 4, x->stream)) {
    snprintf(x->msg, x->msg_size, "scr: driver call failed");
    return GPA_EDEVICE;
  }
  return GPA_OK;
}

static gpa_status shape1(const gpa_op_sig *sig, gpa_tensor *out, char *msg, size_t cap) {
  (void)msg;
  (void)cap;
  out[0] = sig->outputs[0];
  return GPA_OK;
}

static gpa_status run(gpa_queue *q, const char *op, const gpa_tensor *y) {
  gpa_op_call c = {op, NULL, 0, y, 1, NULL, 0};
  gpa_handle *h;
  CHECK_OK(gpa_submit(q, &c, &h));
  gpa_status st = gpa_await(h, -1);
  if (st != GPA_OK) printf("  %s: %s: %s\n", op, gpa_status_name(st), gpa_handle_error_message(h));
  gpa_handle_release(h);
  return st;
}

int main(void) {
  const char *dev = getenv("GPA_DEVICE");
  if (dev && !strncmp(dev, "cuda", 4)) {
    fprintf(stderr, "skipped: the test's driver calls are the simulator's\n");
    return 77;
  }
  gpa_actor *a = tu_actor(NULL);
  on_sim = !strcmp(gpa_actor_backend(a), "sim");
  if (on_sim) {
    sim = tcu_sim_api(a);
    void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib);
    *(void **)&cu_memset32 = dlsym(lib, "cuMemsetD32Async");
    *(void **)&cu_copy_dd = dlsym(lib, "cuMemcpyDtoDAsync_v2");
    CHECK(cu_memset32 && cu_copy_dd);
    dlclose(lib);
  }
  gpa_registry *reg = gpa_actor_registry(a);
  gpa_op_desc d = {.size = sizeof d, .name = "scr_fill", .n_outputs = 1, .shape = shape1, .host = fill_host,
                   .cuda = fill_cuda};
  CHECK_OK(gpa_op_register(reg, &d));
  gpa_op_desc dh = {.size = sizeof dh, .name = "scr_host", .n_outputs = 1, .shape = shape1, .host = fill_host};
  CHECK_OK(gpa_op_register(reg, &dh));

  gpa_queue *q = gpa_actor_default_queue(a);
  enum { N = 1000 };
  gpa_tensor y = tu_f32(a, N);
  float out[N];
  CHECK_OK(run(q, "scr_fill", &y));
  tu_get(q, &y, out, N);
  for (int i = 0; i < N; i++) CHECK(out[i] == (on_sim ? 7.5f : 3.0f + (float)i));
  if (on_sim) CHECK(cuda_scratch_was_device == 1);
  printf("ok: scr_fill: scratch is %s memory\n", on_sim ? "device" : "host");

  CHECK_OK(run(q, "scr_host", &y));
  tu_get(q, &y, out, N);
  for (int i = 0; i < N; i++) CHECK(out[i] == 3.0f + (float)i);
  if (on_sim) CHECK(host_scratch_was_device == 0);
  printf("ok: scr_host: scratch is host memory%s\n", on_sim ? " (host fallback)" : "");

  if (on_sim) {
    /* A fresh stream has no scratch: its first op allocates it. */
    gpa_queue *q2;
    CHECK_OK(gpa_queue_create(a, "fresh", &q2));
    sim.fault_oom(1);
    CHECK_ST(run(q2, "scr_fill", &y), GPA_ENOMEM);
    sim.fault_oom(0);
    CHECK_OK(run(q2, "scr_fill", &y));
    tu_get(q2, &y, out, N);
    for (int i = 0; i < N; i++) CHECK(out[i] == 7.5f);
    CHECK_OK(gpa_queue_destroy(q2));
    printf("ok: scratch out of memory: ENOMEM, then the next op runs\n");
  }
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
