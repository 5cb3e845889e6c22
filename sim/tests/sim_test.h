/* Helpers for the sim tests: checks that report file:line, context set-up,
 * module loading from an embedded fatbin, and running a planted-bug case in
 * a child process (ASan builds abort on the bug; plain builds report it). */
#ifndef GPA_SIM_TEST_H
#define GPA_SIM_TEST_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpa_sim.h"

#define SKIP 77
#define CHECK(c)                                                        \
  do {                                                                  \
    if (!(c)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)
#define CK(call)                                                                                   \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char *n_ = NULL;                                                                       \
      cuGetErrorName(r_, &n_);                                                                     \
      fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #call, (int)r_, n_ ? n_ : "?"); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define CHECK_RES(call, want)                                                                      \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != (want)) {                                                                            \
      fprintf(stderr, "%s:%d: %s = %d, expected %s (%d)\n", __FILE__, __LINE__, #call, (int)r_, #want, \
              (int)(want));                                                                        \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* The last sim diagnostic contains `needle`. */
static inline int sim_msg_has(const char *needle) {
  char buf[2048];
  gpa_sim_last_error_message(buf, sizeof buf);
  if (strstr(buf, needle)) return 1;
  fprintf(stderr, "expected the sim message to contain '%s', got: '%s'\n", needle, buf);
  return 0;
}

static inline CUcontext sim_setup(void) {
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  return ctx;
}

static inline void sim_teardown(void) {
  CK(cuCtxSynchronize());
  CHECK(gpa_sim_live_allocations() == 0);
  CK(cuDevicePrimaryCtxRelease(0));
}

static inline CUfunction sim_kernel(CUmodule m, const char *name) {
  CUfunction f;
  CK(cuModuleGetFunction(&f, m, name));
  return f;
}

static inline int sim_under_tsan(void) {
#if defined(GPA_TSAN)
  return 1;
#else
  return 0;
#endif
}

static inline int sim_under_asan(void) {
#if defined(GPA_ASAN)
  return 1;
#else
  return 0;
#endif
}

typedef int (*sim_case_fn)(void);
typedef struct sim_case {
  const char *name;
  sim_case_fn fn;
} sim_case;

/* main(): runs the case named by argv[1]. */
static inline int sim_run_case(const sim_case *cases, size_t n, int argc, char **argv) {
  if (argc < 2) {
    for (size_t i = 0; i < n; i++) printf("%s\n", cases[i].name);
    return 0;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(cases[i].name, argv[1]) == 0) {
      int r = cases[i].fn();
      if (r == 0) printf("%s: ok\n", argv[1]);
      return r;
    }
  fprintf(stderr, "unknown case %s\n", argv[1]);
  return 2;
}
#endif
