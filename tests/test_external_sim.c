/* External device memory on the simulated device: an op reads and writes
 * the producer's allocation in place, the producer's stream and the
 * actor's are ordered by events (the wrap's ready event, wait and record),
 * pointers that are not device memory are refused, and the release
 * callback runs once. The producer here is this test, calling the
 * simulated driver as a CUDA program would. Skips (77) elsewhere. */
#include <stdatomic.h>

#include "test_cuda_util.h"

#ifndef GPA_HAVE_CUDA_BACKEND
int main(void) {
  fprintf(stderr, "skipped: built without the cuda backend\n");
  return 77;
}
#else
#include <cuda.h>

typedef struct drv {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*primary_retain)(CUcontext *, CUdevice);
  CUresult (*primary_release)(CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*memset32_async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*stream_sync)(CUstream);
  CUresult (*event_create)(CUevent *, unsigned);
  CUresult (*event_destroy)(CUevent);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_sync)(CUevent);
  void (*delay)(void *stream, unsigned us);
} drv;

static drv load(void) {
  drv d;
  void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
#define SYM(f, name)                   \
  *(void **)&d.f = dlsym(lib, name); \
  CHECK(d.f)
  SYM(init, "cuInit");
  SYM(device_get, "cuDeviceGet");
  SYM(primary_retain, "cuDevicePrimaryCtxRetain");
  SYM(primary_release, "cuDevicePrimaryCtxRelease_v2");
  SYM(ctx_set, "cuCtxSetCurrent");
  SYM(alloc, "cuMemAlloc_v2");
  SYM(free, "cuMemFree_v2");
  SYM(htod, "cuMemcpyHtoD_v2");
  SYM(dtoh, "cuMemcpyDtoH_v2");
  SYM(memset32_async, "cuMemsetD32Async");
  SYM(stream_create, "cuStreamCreate");
  SYM(stream_destroy, "cuStreamDestroy_v2");
  SYM(stream_sync, "cuStreamSynchronize");
  SYM(event_create, "cuEventCreate");
  SYM(event_destroy, "cuEventDestroy_v2");
  SYM(event_record, "cuEventRecord");
  SYM(event_sync, "cuEventSynchronize");
  SYM(delay, "gpa_sim_fault_stream_delay");
#undef SYM
  return d; /* lib stays open: the actor's destruction closes its own handle */
}

static _Atomic int released;
static void on_release(void *ptr, void *user_data) {
  CHECK(ptr == user_data);
  atomic_fetch_add(&released, 1);
}

static float get1(gpa_queue *q, gpa_buffer_id id, uint64_t offset) {
  float v;
  tu_get(q, &(gpa_tensor){id, offset, GPA_F32, 1, {1}}, &v, 1);
  return v;
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  (void)tcu_sim_api(a); /* skips unless the device is the simulator */
  drv d = load();
  gpa_queue *q = gpa_actor_default_queue(a);
  CUdevice dev;
  CUcontext ctx;
  CHECK(d.init(0) == CUDA_SUCCESS && d.device_get(&dev, 0) == CUDA_SUCCESS);
  CHECK(d.primary_retain(&ctx, dev) == CUDA_SUCCESS && d.ctx_set(ctx) == CUDA_SUCCESS);
  enum { N = 1024 };
  CUdeviceptr p;
  CHECK(d.alloc(&p, N * sizeof(float)) == CUDA_SUCCESS);
  float host[N];
  for (int i = 0; i < N; i++) host[i] = (float)i;
  CHECK(d.htod(p, host, sizeof host) == CUDA_SUCCESS);

  /* In place: the op reads the producer's data and its write lands there. */
  gpa_external_desc desc = {.kind = GPA_MEM_DEVICE, .ptr = (void *)(uintptr_t)p, .bytes = N * sizeof(float),
                            .release = on_release, .user_data = (void *)(uintptr_t)p};
  gpa_buffer_id id;
  CHECK_OK(gpa_buffer_wrap(a, &desc, &id));
  gpa_tensor x = {id, 0, GPA_F32, 1, {N / 2}}, y = {id, N / 2 * sizeof(float), GPA_F32, 1, {N / 2}};
  gpa_attr alpha = {"alpha", GPA_ATTR_FLOAT, 0, 3.0};
  gpa_batch_begin(q, "external");
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "scale", .inputs = &x, .n_inputs = 1, .outputs = &y, .n_outputs = 1,
                                         .attrs = &alpha, .n_attrs = 1}, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK(d.dtoh(host, p, sizeof host) == CUDA_SUCCESS);
  for (int i = 0; i < N / 2; i++) CHECK(host[N / 2 + i] == 3.0f * (float)i);

  /* gpa_queue_record_event: the producer waits for the actor's write. Every
   * stream runs 20 ms late, so without the event the value would be old. */
  CUevent ev;
  CHECK(d.event_create(&ev, 0) == CUDA_SUCCESS);
  d.delay(NULL, 20000);
  CHECK_OK(tu_fill(q, &x, 7.0, NULL));
  CHECK_OK(gpa_queue_record_event(q, ev));
  CHECK(d.event_sync(ev) == CUDA_SUCCESS);
  float v;
  CHECK(d.dtoh(&v, p, sizeof v) == CUDA_SUCCESS && v == 7.0f);
  d.delay(NULL, 0);

  /* gpa_queue_wait_event: the actor's next read waits for the producer's
   * late write on its own stream. */
  CUstream s;
  CHECK(d.stream_create(&s, 0) == CUDA_SUCCESS);
  d.delay(s, 20000);
  union { float f; unsigned u; } five = {.f = 5.0f}, nine = {.f = 9.0f};
  CHECK(d.memset32_async(p, five.u, N / 2, s) == CUDA_SUCCESS);
  CHECK(d.event_record(ev, s) == CUDA_SUCCESS);
  CHECK_OK(gpa_queue_wait_event(q, ev));
  CHECK(get1(q, id, (N / 2 - 1) * sizeof(float)) == 5.0f);
  /* The posted wait orders the same: it returns before the actor ran it, and
   * the read after it still sees the producer's late write. */
  union { float f; unsigned u; } six = {.f = 6.0f};
  CHECK(d.memset32_async(p, six.u, N / 2, s) == CUDA_SUCCESS);
  CHECK(d.event_record(ev, s) == CUDA_SUCCESS);
  CHECK_OK(gpa_queue_wait_event_async(q, ev));
  CHECK(get1(q, id, (N / 2 - 1) * sizeof(float)) == 6.0f);

  /* The wrap's ready event: every queue waits before the buffer's first use. */
  CUdeviceptr p2;
  CHECK(d.alloc(&p2, 256) == CUDA_SUCCESS);
  CHECK(d.memset32_async(p2, nine.u, 64, s) == CUDA_SUCCESS);
  CHECK(d.event_record(ev, s) == CUDA_SUCCESS);
  gpa_external_desc desc2 = {.kind = GPA_MEM_DEVICE, .ptr = (void *)(uintptr_t)p2, .bytes = 256,
                             .release = on_release, .user_data = (void *)(uintptr_t)p2, .ready_event = ev};
  gpa_buffer_id id2;
  CHECK_OK(gpa_buffer_wrap(a, &desc2, &id2));
  CHECK(get1(q, id2, 63 * sizeof(float)) == 9.0f);
  d.delay(s, 0);
  CHECK(d.stream_sync(s) == CUDA_SUCCESS);

  /* Not device memory, or past the allocation's end: refused, nothing taken. */
  static _Alignas(64) float stack_mem[64];
  gpa_external_desc bad = {.kind = GPA_MEM_DEVICE, .ptr = stack_mem, .bytes = sizeof stack_mem,
                           .release = on_release, .user_data = stack_mem};
  gpa_buffer_id none;
  CHECK_ST(gpa_buffer_wrap(a, &bad, &none), GPA_EUNSUPPORTED);
  CHECK_MSG("not device memory");
  bad = (gpa_external_desc){.kind = GPA_MEM_DEVICE, .ptr = (void *)(uintptr_t)p2, .bytes = 512};
  CHECK_ST(gpa_buffer_wrap(a, &bad, &none), GPA_EUNSUPPORTED);
  bad.kind = GPA_MEM_HOST_PINNED; /* the simulator cannot say whether it is mapped */
  CHECK_ST(gpa_buffer_wrap(a, &bad, &none), GPA_EUNSUPPORTED);
  CHECK(atomic_load(&released) == 0);

  /* Released with work in flight: the callback comes after that work. */
  d.delay(NULL, 20000);
  CHECK_OK(tu_fill(q, &y, 2.0, NULL));
  CHECK_OK(gpa_buffer_release(a, id));
  CHECK_OK(gpa_sync_batch(q, NULL));
  d.delay(NULL, 0);
  CHECK(atomic_load(&released) == 1);
  CHECK(d.dtoh(&v, p + N / 2 * sizeof(float), sizeof v) == CUDA_SUCCESS && v == 2.0f);
  CHECK_ST(gpa_buffer_release(a, id), GPA_ESTALE);
  CHECK(d.event_destroy(ev) == CUDA_SUCCESS && d.stream_destroy(s) == CUDA_SUCCESS);
  CHECK(d.free(p) == CUDA_SUCCESS);
  /* id2 is never released: the actor's destruction hands it back, once. */
  CHECK_OK(gpa_actor_destroy(a));
  CHECK(atomic_load(&released) == 2);
  d.free(p2); /* gone already if the context was reset with the actor */
  d.primary_release(dev);
  printf("external device memory: ok\n");
  return 0;
}
#endif
