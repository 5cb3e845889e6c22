/* The CUDA backend's exact path: the driver is not linked but dlopened, every
 * entry point comes from cuGetProcAddress, the fatbin embedded by
 * gpa_cuda_kernels() is loaded and its kernel launched. This also proves the
 * driver's static TLS and the emulated module's dependency on the driver
 * work when both arrive through dlopen. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sim_simt_kernels_fatbin.h"

#define CHECK(c)                                                            \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static gpa_t g_gpa;
static void *get_at(const char *name, int version) {
  void *p = NULL;
  CHECK(g_gpa(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, NULL) == CUDA_SUCCESS && p);
  return p;
}
static void *get(const char *name) { return get_at(name, CUDA_VERSION); }

int main(void) {
  const char *path = getenv("GPA_CUDA_DRIVER");
  void *h = dlopen(path ? path : GPA_SIM_DRIVER_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  g_gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
  CHECK(g_gpa != NULL);
  CUresult (*init)(unsigned) = get("cuInit");
  CUresult (*retain)(CUcontext *, CUdevice) = get("cuDevicePrimaryCtxRetain");
  CUresult (*release)(CUdevice) = get("cuDevicePrimaryCtxRelease");
  CUresult (*set_current)(CUcontext) = get("cuCtxSetCurrent");
  CUresult (*load)(CUmodule *, const void *) = get("cuModuleLoadData");
  CUresult (*get_fn)(CUfunction *, CUmodule, const char *) = get("cuModuleGetFunction");
  CUresult (*alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc");
  CUresult (*mfree)(CUdeviceptr) = get("cuMemFree");
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD");
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = get("cuMemcpyDtoH");
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void **, void **) = get("cuLaunchKernel");
  /* The name's ABI changed in 13.0: asked at 13.0 it takes the context
   * (cuCtxSynchronize_v2), asked at 2.0 it is the (void) form. */
  CUresult (*sync)(CUcontext) = get_at("cuCtxSynchronize", 13000);
  CUresult (*sync0)(void) = get_at("cuCtxSynchronize", 2000);
  CUcontext ctx;
  CUmodule m;
  CUfunction f;
  CHECK(init(0) == CUDA_SUCCESS);
  CHECK(retain(&ctx, 0) == CUDA_SUCCESS);
  CHECK(set_current(ctx) == CUDA_SUCCESS);
  CHECK(load(&m, gpa_fatbin_sim_simt_kernels) == CUDA_SUCCESS);
  CHECK(get_fn(&f, m, "sim_block_sum") == CUDA_SUCCESS);
  enum { T = 256, B = 8 };
  float in[T * B], sums[B];
  int votes[B * 3];
  for (int i = 0; i < T * B; i++) in[i] = (float)(i % 10);
  CUdeviceptr din, dsums, dvotes;
  CHECK(alloc(&din, sizeof in) == 0 && alloc(&dsums, sizeof sums) == 0 && alloc(&dvotes, sizeof votes) == 0);
  CHECK(htod(din, in, sizeof in) == CUDA_SUCCESS);
  void *args[] = {&din, &dsums, &dvotes};
  CHECK(launch(f, B, 1, 1, T, 1, 1, 0, NULL, args, NULL) == CUDA_SUCCESS);
  CHECK(sync(ctx) == CUDA_SUCCESS && sync0() == CUDA_SUCCESS);
  CHECK(sync((CUcontext)&ctx) == CUDA_ERROR_CONTEXT_IS_DESTROYED); /* not a context */
  CHECK(dtoh(sums, dsums, sizeof sums) == CUDA_SUCCESS);
  for (int b = 0; b < B; b++) {
    float ref = 0;
    for (int t = 0; t < T; t++) ref += in[b * T + t];
    CHECK(sums[b] == ref);
  }
  CHECK(mfree(din) == 0 && mfree(dsums) == 0 && mfree(dvotes) == 0);
  CHECK(release(0) == CUDA_SUCCESS);
  printf("dlopen: ok\n");
  return 0;
}
