/* Every check of the simulated device triggers on a planted bug: barrier
 * divergence, deadlock, exited lanes in a collective, traps, out-of-bounds
 * writes (guard zones; ASan in sanitizer builds), launch limits, bad and
 * freed pointers, double free, async copies from pageable memory, calls
 * without a current context. Each case verifies the status code and the
 * message, and that the failure is sticky where a GPU makes it so. */
#define _GNU_SOURCE
#include <sys/wait.h>
#include <unistd.h>
#include "sim_test.h"
#include "sim_bug_kernels_fatbin.h"

static CUmodule g_mod;

static void load(void) {
  sim_setup();
  CK(cuModuleLoadData(&g_mod, gpa_fatbin_sim_bug_kernels));
}

/* Launches kernel(ptr-param, int) with a 1-D block and returns the status of
 * the following synchronization. */
static CUresult run1(const char *kernel, unsigned threads, unsigned shmem, CUdeviceptr p, int n) {
  void *args[] = {&p, &n};
  CUresult r = cuLaunchKernel(sim_kernel(g_mod, kernel), 1, 1, 1, threads, 1, 1, shmem, NULL, args, NULL);
  if (r != CUDA_SUCCESS) return r;
  return cuCtxSynchronize();
}

/* A failed kernel poisons the context until it is reset. */
static void expect_sticky_then_reset(CUresult code) {
  CUdeviceptr p;
  CHECK_RES(cuMemAlloc(&p, 16), code);
  CHECK_RES(cuCtxSynchronize(), code);
  CK(cuDevicePrimaryCtxReset(0));
  CK(cuMemAlloc(&p, 16));
  CK(cuMemFree(p));
  CK(cuModuleLoadData(&g_mod, gpa_fatbin_sim_bug_kernels)); /* modules died with the old context */
}

static int t_divergent_barrier(void) {
  load();
  CUdeviceptr out;
  CK(cuMemAlloc(&out, 64 * sizeof(int)));
  CHECK_RES(run1("bug_divergent_barrier", 64, 0, out, 0), CUDA_ERROR_LAUNCH_FAILED);
  CHECK(sim_msg_has("divergent __syncthreads"));
  CHECK(sim_msg_has("kernel 'bug_divergent_barrier' block (0,0,0)"));
  CHECK(sim_msg_has("thread (0,0,0)"));
  expect_sticky_then_reset(CUDA_ERROR_LAUNCH_FAILED);
  sim_teardown();
  return 0;
}

static int t_deadlock(void) {
  load();
  CUdeviceptr out;
  CK(cuMemAlloc(&out, 32 * sizeof(int)));
  CHECK_RES(run1("bug_deadlock", 32, 0, out, 0), CUDA_ERROR_LAUNCH_FAILED);
  CHECK(sim_msg_has("deadlock"));
  CHECK(sim_msg_has("threads 0-15 wait at __syncthreads"));
  CHECK(sim_msg_has("threads 16-31 wait at a warp collective"));
  expect_sticky_then_reset(CUDA_ERROR_LAUNCH_FAILED);
  sim_teardown();
  return 0;
}

static int t_exited_lane(void) {
  load();
  CUdeviceptr out;
  CK(cuMemAlloc(&out, 32 * sizeof(int)));
  CHECK_RES(run1("bug_exited_lane", 32, 0, out, 0), CUDA_ERROR_LAUNCH_FAILED);
  CHECK(sim_msg_has("exited"));
  CHECK(sim_msg_has("mask 0xffffffff"));
  expect_sticky_then_reset(CUDA_ERROR_LAUNCH_FAILED);
  sim_teardown();
  return 0;
}

static int t_trap(void) {
  load();
  CUdeviceptr out;
  CK(cuMemAlloc(&out, 32 * sizeof(int)));
  CHECK_RES(run1("bug_trap", 32, 0, out, 0), CUDA_ERROR_LAUNCH_FAILED);
  CHECK(sim_msg_has("thread (7,0,0): __trap() called"));
  expect_sticky_then_reset(CUDA_ERROR_LAUNCH_FAILED);
  sim_teardown();
  return 0;
}

/* Runs fn in a child whose stderr we capture: under ASan the planted bug must
 * end the child with an AddressSanitizer report of `kind`; in plain builds
 * the child must return 0 (fn verified the sim's own report). */
static int in_child(int (*fn)(void), const char *kind) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    _exit(fn());
  }
  close(fds[1]);
  static char out[1 << 16];
  size_t n = 0;
  ssize_t k;
  while ((k = read(fds[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)k;
  out[n] = 0;
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  fputs(out, stderr);
  if (sim_under_asan()) {
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
    /* ASan, or UBSan's bounds check when the index is visible at compile time */
    CHECK(strstr(out, "AddressSanitizer") != NULL || strstr(out, "runtime error: index") != NULL);
    CHECK(strstr(out, kind) != NULL || strstr(out, "out of bounds for type") != NULL);
  } else {
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  return 0;
}

static int oob_global_child(void) {
  load();
  CUdeviceptr out;
  const int n = 100;
  CK(cuMemAlloc(&out, n * sizeof(float)));
  CHECK_RES(run1("bug_oob_global", 128, 0, out, n), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(sim_msg_has("out-of-bounds write"));
  CHECK(sim_msg_has("offset 400 (past the end)"));
  CHECK(sim_msg_has("after kernel 'bug_oob_global' (parameter 0)"));
  expect_sticky_then_reset(CUDA_ERROR_ILLEGAL_ADDRESS);
  sim_teardown();
  return 0;
}
static int t_oob_global(void) { return in_child(oob_global_child, "use-after-poison"); /* the guard zone is poisoned */ }

static int oob_dyn_child(void) {
  load();
  CUdeviceptr out;
  CK(cuMemAlloc(&out, sizeof(float)));
  CHECK_RES(run1("bug_oob_dyn_shared", 64, 64 * sizeof(float), out, 64), CUDA_ERROR_LAUNCH_FAILED);
  CHECK(sim_msg_has("write past the end of dynamic shared memory (256 bytes)"));
  expect_sticky_then_reset(CUDA_ERROR_LAUNCH_FAILED);
  sim_teardown();
  return 0;
}
static int t_oob_dyn_shared(void) { return in_child(oob_dyn_child, "heap-buffer-overflow"); }

static int oob_static_child(void) {
  load();
  CUdeviceptr out;
  CK(cuMemAlloc(&out, sizeof(float)));
  run1("bug_oob_static_shared", 32, 0, out, 1);
  return 1; /* only reached if ASan missed it */
}
static int t_oob_static_shared(void) {
  if (!sim_under_asan()) {
    printf("skipped: static __shared__ overruns are caught only by the ASan build (docs/sim.md)\n");
    return SKIP;
  }
  return in_child(oob_static_child, "global-buffer-overflow");
}

static int t_launch_limits(void) {
  load();
  CUdeviceptr out;
  int n = 0;
  CK(cuMemAlloc(&out, 4096));
  void *args[] = {&out, &n};
  CUfunction f = sim_kernel(g_mod, "bug_use_ptr");
  CHECK_RES(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("exceeds 1024 threads"));
  CHECK_RES(cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cuLaunchKernel(f, 1, 1, 1, 64, 32, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cuLaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("grid (1,65536,1)"));
  CHECK_RES(cuLaunchKernel(f, 0, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 48 * 1024 + 1, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("exceed the function's limit of 49152"));
  CK(cuLaunchKernel(f, 1, 1, 1, 32, 32, 1, 48 * 1024, NULL, args, NULL)); /* at the limits: fine */
  CK(cuCtxSynchronize());
  CK(cuMemFree(out));
  sim_teardown();
  return 0;
}

static int t_memcpy_bounds(void) {
  load();
  CUdeviceptr p;
  char host[512] = {0};
  CK(cuMemAlloc(&p, 100));
  CK(cuMemcpyHtoD(p, host, 100));
  CHECK_RES(cuMemcpyHtoD(p, host, 101), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("overruns allocation"));
  CHECK(sim_msg_has("by 1 bytes"));
  CHECK_RES(cuMemcpyDtoH(host, p + 96, 8), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cuMemcpyDtoH(host, p - 16, 8), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("guard zone"));
  CHECK_RES(cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)host, 8), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("is not device memory"));
  CHECK_RES(cuMemsetD32(p + 2, 0, 4), CUDA_ERROR_INVALID_VALUE); /* misaligned */
  CHECK_RES(cuMemsetD32(p, 0, 26), CUDA_ERROR_INVALID_VALUE);    /* 104 bytes */
  CK(cuMemsetD32(p, 0, 25));
  CK(cuMemFree(p));
  sim_teardown();
  return 0;
}

static int t_use_after_free(void) {
  load();
  CUdeviceptr p;
  char host[64] = {0};
  CK(cuMemAlloc(&p, 64));
  CK(cuMemFree(p));
  CHECK_RES(cuMemcpyHtoD(p, host, 8), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("use after free"));
  CHECK_RES(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("double free"));
  /* a kernel given the freed pointer faults (sticky) */
  CHECK_RES(run1("bug_use_ptr", 32, 0, p, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(sim_msg_has("kernel 'bug_use_ptr' parameter 0: use after free"));
  expect_sticky_then_reset(CUDA_ERROR_ILLEGAL_ADDRESS);
  /* a freed pointer freed again asynchronously on a stream */
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAllocAsync(&p, 64, s));
  CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
  CHECK_RES(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("use after free"));
  CK(cuStreamDestroy(s));
  sim_teardown();
  return 0;
}

static int t_bad_param_ptr(void) {
  load();
  float host[4];
  CHECK_RES(run1("bug_use_ptr", 32, 0, (CUdeviceptr)(uintptr_t)host, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(sim_msg_has("is not device memory"));
  expect_sticky_then_reset(CUDA_ERROR_ILLEGAL_ADDRESS);
  /* pinned host memory is accessible to kernels (mapped, UVA) */
  void *pinned;
  CK(cuMemAllocHost(&pinned, 64));
  CK(run1("bug_use_ptr", 32, 0, (CUdeviceptr)(uintptr_t)pinned, 0));
  CHECK(((float *)pinned)[0] == 1.0f);
  CK(cuMemFreeHost(pinned));
  sim_teardown();
  return 0;
}

static int t_pageable_async(void) {
  load();
  CUstream s;
  CUdeviceptr p;
  static char pageable[256];
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&p, 256));
  CHECK_RES(cuMemcpyHtoDAsync(p, pageable, 256, s), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("pageable memory"));
  CHECK_RES(cuMemcpyDtoHAsync(pageable, p, 256, s), CUDA_ERROR_INVALID_VALUE);
  void *pinned;
  CK(cuMemAllocHost(&pinned, 256));
  CK(cuMemcpyHtoDAsync(p, pinned, 256, s));
  CK(cuMemHostRegister(pageable, sizeof pageable, 0));
  CK(cuMemcpyDtoHAsync(pageable, p, 256, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemHostUnregister(pageable));
  CHECK_RES(cuMemFreeHost(pageable), CUDA_ERROR_INVALID_VALUE);
  CK(cuMemFreeHost(pinned));
  CK(cuMemFree(p));
  CK(cuStreamDestroy(s));
  sim_teardown();
  return 0;
}

static int t_no_context(void) {
  CUdeviceptr p;
  CHECK_RES(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
  CK(cuInit(0));
  CHECK_RES(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  CHECK(sim_msg_has("without a current context"));
  CUstream s;
  CHECK_RES(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(cuCtxSetCurrent(ctx));
  CK(cuMemAlloc(&p, 16));
  CK(cuCtxSetCurrent(NULL));
  CHECK_RES(cuMemFree(p), CUDA_ERROR_INVALID_CONTEXT);
  CK(cuCtxSetCurrent(ctx));
  CK(cuMemFree(p));
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"divergent_barrier", t_divergent_barrier}, {"deadlock", t_deadlock},
      {"exited_lane", t_exited_lane},             {"trap", t_trap},
      {"oob_global", t_oob_global},               {"oob_dyn_shared", t_oob_dyn_shared},
      {"oob_static_shared", t_oob_static_shared}, {"launch_limits", t_launch_limits},
      {"memcpy_bounds", t_memcpy_bounds},         {"use_after_free", t_use_after_free},
      {"bad_param_ptr", t_bad_param_ptr},         {"pageable_async", t_pageable_async},
      {"no_context", t_no_context},
  };
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
