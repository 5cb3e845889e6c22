/* Helpers of the CUDA backend's tests (tests/test_cuda_*.c). */
#ifndef GPA_TEST_CUDA_UTIL_H
#define GPA_TEST_CUDA_UTIL_H
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "util/testutil.h"

/* The suite's device (GPA_DEVICE); these tests are about the cuda backend
 * and skip on cpu. */
static inline const char *tcu_device_or_skip(void) {
  const char *d = getenv("GPA_DEVICE");
  if (!d || (strcmp(d, "sim") && strncmp(d, "cuda", 4))) {
    fprintf(stderr, "skipped: GPA_DEVICE=%s is not a cuda device\n", d ? d : "(unset)");
    exit(77);
  }
  return d;
}

/* An actor for conv1d on our kernels (GPA_CUDNN_CONV=0) with one kernel
 * knob, knob (GPA_CONV_TC or GPA_CONV_IG_SMALL) = val (NULL: unset), the
 * other knob unset, all read at its creation; knob is unset again after. */
static inline gpa_actor *tcu_conv_actor_with(const char *knob, const char *val) {
  setenv("GPA_CUDNN_CONV", "0", 1);
  unsetenv("GPA_CONV_TC");
  unsetenv("GPA_CONV_IG_SMALL");
  if (val) setenv(knob, val, 1);
  gpa_actor *a = tu_actor(NULL);
  unsetenv(knob);
  return a;
}

/* tcu_conv_actor_with for GPA_CONV_TC = tc */
static inline gpa_actor *tcu_conv_actor(const char *tc) { return tcu_conv_actor_with("GPA_CONV_TC", tc); }

/* Submits c and waits for it: the submit's status, else the await's. */
/* An f32 tensor of rank 1-3 (d0 [x d1 [x d2]]) in a new buffer of the actor
 * (at least 4 bytes, so an empty one still has a buffer). */
static inline gpa_tensor tcu_f32(gpa_actor *a, int rank, int64_t d0, int64_t d1, int64_t d2) {
  gpa_tensor t = {0};
  const int64_t n = d0 * (rank > 1 ? d1 : 1) * (rank > 2 ? d2 : 1);
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)(n ? n : 1) * 4, &t.buffer));
  t.dtype = GPA_F32;
  t.rank = rank;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  return t;
}

static inline gpa_status tcu_run(gpa_queue *q, const gpa_op_call *c, gpa_handle **h) {
  gpa_status st = gpa_submit(q, c, h);
  return st == GPA_OK ? gpa_await(*h, -1) : st;
}

/* An op (named `op`) whose nth launch the simulator refused
 * (tcu_sim.fault_launch) came back as st and h: GPA_EDEVICE, h's message
 * naming `kernel` and the driver's refusal. Releases h and collects the
 * queue's batch, which saw the failure. */
static inline void tcu_expect_refused(gpa_queue *q, gpa_status st, gpa_handle *h, const char *op, unsigned nth,
                                      const char *kernel) {
  CHECK_ST(st, GPA_EDEVICE);
  const char *m = gpa_handle_error_message(h);
  if (!strstr(m, kernel) || !strstr(m, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")) {
    fprintf(stderr, "launch %u of %s: '%s' does not name %s\n", nth, op, m, kernel);
    exit(1);
  }
  printf("ok: launch %u of %s refused: %s\n", nth, op, m);
  gpa_handle_release(h);
  gpa_sync_batch(q, NULL);
}

/* The simulator's control API (sim/include/gpa_sim.h), from the driver the
 * backend loaded; exits 77 when the device is not the simulator. */
typedef struct tcu_sim {
  void (*fault_alloc)(unsigned n);
  void (*fault_launch)(unsigned n);
  void (*fault_host_fn)(unsigned n);
  void (*fault_sticky)(unsigned n);
  void (*fault_stream_delay)(void *stream, unsigned us);
  void (*fault_clear)(void);
  size_t (*last_error_message)(char *buf, size_t n);
  void (*fault_oom)(unsigned n);
  void (*fault_host_fn_delay)(unsigned us);
  void (*fault_host_fns_after_sticky)(int run);
  size_t (*allocations)(void);
  size_t (*live_allocations)(void);
  size_t (*primary_resets)(void);
  size_t (*host_fns)(void);
  /* internal hook: 1 when [p, p+bytes) is inside one live device allocation */
  int (*device_range_ok)(unsigned long long p, size_t bytes, char *why, size_t n);
} tcu_sim;

static inline tcu_sim tcu_sim_api(gpa_actor *a) {
  tcu_sim s;
  memset(&s, 0, sizeof s);
  if (strcmp(gpa_actor_backend(a), "sim")) {
    fprintf(stderr, "skipped: needs the simulated device's fault injection\n");
    exit(77);
  }
  void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
#define TCU_SYM(f)                              \
  *(void **)&s.f = dlsym(lib, "gpa_sim_" #f); \
  CHECK(s.f)
  TCU_SYM(fault_alloc);
  TCU_SYM(fault_launch);
  TCU_SYM(fault_host_fn);
  TCU_SYM(fault_sticky);
  TCU_SYM(fault_stream_delay);
  TCU_SYM(fault_clear);
  TCU_SYM(last_error_message);
  TCU_SYM(fault_oom);
  TCU_SYM(fault_host_fn_delay);
  TCU_SYM(fault_host_fns_after_sticky);
  TCU_SYM(allocations);
  TCU_SYM(live_allocations);
  TCU_SYM(primary_resets);
  TCU_SYM(host_fns);
#undef TCU_SYM
  *(void **)&s.device_range_ok = dlsym(lib, "gpa_sim__device_range_ok");
  CHECK(s.device_range_ok);
  dlclose(lib);
  return s;
}

#endif
