/* Fault injection: the gpa_sim_fault_* API and the GPA_SIM_FAULT variable
 * (the `env` case runs with GPA_SIM_FAULT=alloc=2,launch=1,delay_us=2000). */
#define _GNU_SOURCE
#include <time.h>
#include "sim_test.h"
#include "sim_simt_kernels_fatbin.h"

static CUfunction g_rev;
static CUdeviceptr g_in, g_out;

static void setup(void) {
  CUmodule m;
  sim_setup();
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_simt_kernels));
  g_rev = sim_kernel(m, "sim_reverse");
}

static CUresult launch(void) {
  void *args[] = {&g_in, &g_out};
  return cuLaunchKernel(g_rev, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL);
}

static int t_alloc(void) {
  setup();
  CUdeviceptr p[4];
  gpa_sim_fault_alloc(3);
  CK(cuMemAlloc(&p[0], 64));
  CK(cuMemAlloc(&p[1], 64));
  CHECK_RES(cuMemAlloc(&p[2], 64), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(sim_msg_has("injected allocation failure"));
  CK(cuMemAlloc(&p[2], 64)); /* one-shot */
  gpa_sim_fault_alloc(1);
  void *h;
  CHECK_RES(cuMemAllocHost(&h, 64), CUDA_ERROR_OUT_OF_MEMORY);
  gpa_sim_fault_alloc(1);
  CHECK_RES(cuMemAllocAsync(&p[3], 64, NULL), CUDA_ERROR_OUT_OF_MEMORY);
  for (int i = 0; i < 3; i++) CK(cuMemFree(p[i]));
  sim_teardown();
  return 0;
}

static int t_launch(void) {
  setup();
  CK(cuMemAlloc(&g_in, 128));
  CK(cuMemAlloc(&g_out, 128));
  gpa_sim_fault_launch(2);
  CK(launch());
  CHECK_RES(launch(), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  CHECK(sim_msg_has("injected launch failure"));
  CK(launch()); /* not sticky */
  CK(cuCtxSynchronize());
  CK(cuMemFree(g_in));
  CK(cuMemFree(g_out));
  sim_teardown();
  return 0;
}

static int g_host_ran;
static void host_fn(void *p) {
  (void)p;
  __atomic_store_n(&g_host_ran, 1, __ATOMIC_SEQ_CST); /* streams may run it concurrently */
}

static int t_sticky(void) {
  setup();
  CK(cuMemAlloc(&g_in, 128));
  CK(cuMemAlloc(&g_out, 128));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  gpa_sim_fault_sticky(1);
  gpa_sim_fault_stream_delay(s, 20000); /* the host function is queued before the fault happens */
  void *args[] = {&g_in, &g_out};
  CK(cuLaunchKernel(g_rev, 1, 1, 1, 32, 1, 1, 0, s, args, NULL)); /* the fault shows later, as on a GPU */
  CK(cuLaunchHostFunc(s, host_fn, NULL));
  CHECK_RES(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(sim_msg_has("injected device fault"));
  CHECK(__atomic_load_n(&g_host_ran, __ATOMIC_SEQ_CST) == 1); /* completion callbacks still run: nothing hangs */
  gpa_sim_fault_stream_delay(s, 0);
  CUdeviceptr p;
  CHECK_RES(cuMemAlloc(&p, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(launch(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CK(cuDevicePrimaryCtxReset(0)); /* frees everything of the old context */
  CK(cuMemAlloc(&p, 16));
  CK(cuMemFree(p));
  sim_teardown();
  return 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int t_delay(void) {
  setup();
  CUstream a, b;
  CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  gpa_sim_fault_stream_delay(a, 40000);
  /* Timed from before the launches: the delay runs from there, and on a
   * loaded machine the launches themselves may take milliseconds. */
  double t0 = now_ms();
  CK(cuLaunchHostFunc(a, host_fn, NULL));
  CK(cuLaunchHostFunc(b, host_fn, NULL));
  CK(cuStreamSynchronize(b));
  double tb = now_ms() - t0;
  CK(cuStreamSynchronize(a));
  double ta = now_ms() - t0;
  CHECK(tb < 30.0); /* only stream a is slow */
  CHECK(ta >= 35.0);
  gpa_sim_fault_stream_delay(a, 0);
  gpa_sim_fault_stream_delay(NULL, 20000); /* every stream */
  t0 = now_ms();
  CK(cuLaunchHostFunc(b, host_fn, NULL));
  CK(cuStreamSynchronize(b));
  CHECK(now_ms() - t0 >= 15.0);
  gpa_sim_fault_clear();
  CK(cuStreamDestroy(a));
  CK(cuStreamDestroy(b));
  sim_teardown();
  return 0;
}

/* GPA_SIM_FAULT=alloc=2,launch=1,delay_us=2000 set by ctest. */
static int t_env(void) {
  setup();
  CK(cuMemAlloc(&g_in, 128));
  CHECK_RES(cuMemAlloc(&g_out, 128), CUDA_ERROR_OUT_OF_MEMORY);
  CK(cuMemAlloc(&g_out, 128));
  CHECK_RES(launch(), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  double t0 = now_ms();
  CK(launch());
  CK(cuCtxSynchronize());
  CHECK(now_ms() - t0 >= 1.5);
  gpa_sim_fault_clear();
  gpa_sim_fault_alloc(1);
  gpa_sim_fault_clear(); /* disarms API faults too */
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 8));
  CK(cuMemFree(p));
  CK(cuMemFree(g_in));
  CK(cuMemFree(g_out));
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"alloc", t_alloc}, {"launch", t_launch}, {"sticky", t_sticky}, {"delay", t_delay}, {"env", t_env},
  };
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
