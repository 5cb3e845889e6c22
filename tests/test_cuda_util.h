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

/* The simulator's control API (sim/include/gpa_sim.h), from the driver the
 * backend loaded; exits 77 when the device is not the simulator. */
typedef struct tcu_sim {
  void (*fault_alloc)(unsigned n);
  void (*fault_launch)(unsigned n);
  void (*fault_sticky)(unsigned n);
  void (*fault_stream_delay)(void *stream, unsigned us);
  void (*fault_clear)(void);
  size_t (*last_error_message)(char *buf, size_t n);
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
  TCU_SYM(fault_sticky);
  TCU_SYM(fault_stream_delay);
  TCU_SYM(fault_clear);
  TCU_SYM(last_error_message);
#undef TCU_SYM
  dlclose(lib);
  return s;
}

#endif
