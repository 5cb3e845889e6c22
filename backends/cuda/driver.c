/* Loading the driver and cuBLAS at run time (design in cu.h).
 *
 * Failure modes the caller tells apart by the message:
 *   - no driver: dlopen fails (no libcuda.so.1 on this machine);
 *   - not a driver: the library has no cuGetProcAddress;
 *   - the toolkit's stub (lib64/stubs/libcuda.so): every call answers
 *     CUDA_ERROR_STUB_LIBRARY (34);
 *   - no device: cuInit answers CUDA_ERROR_NO_DEVICE or the count is 0. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cu.h"

#define GPA__STR2(x) #x
#define GPA__STR(x) GPA__STR2(x)


const char *gpa__cu_errstr(const gpa__cu_api *api, CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (api && api->cuGetErrorName) api->cuGetErrorName(r, &name);
  if (api && api->cuGetErrorString) api->cuGetErrorString(r, &text);
  snprintf(buf, cap, "%s (%d): %s", name ? name : "CUDA error", (int)r, text ? text : "no description");
  return buf;
}

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* The ABI a name is resolved at: the one cuda.h declares. cuGetProcAddress
 * gives the newest version up to the one asked for, and from 13.0 the name
 * cuCtxSynchronize means cuCtxSynchronize_v2(CUcontext) (cudaTypedefs.h:
 * PFN_cuCtxSynchronize_v13000) while cuda.h still declares the (void) form.
 * Called as that, it synchronized whatever the argument register held: on an
 * H100 the actor's shutdown saw CUDA_ERROR_CONTEXT_IS_DESTROYED and reset the
 * context. Every other name of the table keeps its signature up to 13.0. */
static int abi_version(const char *name) { return strcmp(name, "cuCtxSynchronize") ? CUDA_VERSION : 2000; }

gpa_status gpa__cu_open(gpa__cu_api *api, const char *path, char *msg, size_t cap) {
  memset(api, 0, sizeof *api);
  const char *lib = path ? path : "libcuda.so.1";
  api->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char *e = dlerror();
    snprintf(msg, cap, "no CUDA driver: cannot open %s (%s)", lib, e ? e : "dlopen failed");
    return GPA_ENODEVICE;
  }
  get_proc_fn gp = (get_proc_fn)dlsym(api->lib, "cuGetProcAddress_v2");
  if (!gp) {
    snprintf(msg, cap, "%s is not a CUDA driver (no cuGetProcAddress_v2)", lib);
    goto fail;
  }
  CUdriverProcAddressQueryResult q;
  void *fn;
  CUresult r;
#define GPA__CU_RESOLVE(name)                                                                                   \
  fn = NULL;                                                                                                    \
  r = gp(#name, &fn, abi_version(#name), CU_GET_PROC_ADDRESS_DEFAULT, &q);                                    \
  if (r == CUDA_ERROR_STUB_LIBRARY) {                                                                           \
    snprintf(msg, cap, "no CUDA driver: %s is the CUDA toolkit's stub library (CUDA_ERROR_STUB_LIBRARY), not a " \
             "driver", lib);                                                                                    \
    goto fail;                                                                                                  \
  }                                                                                                             \
  if (r != CUDA_SUCCESS || !fn) {                                                                               \
    snprintf(msg, cap, "CUDA driver %s lacks %s (error %d, query %d): driver too old?", lib, #name, (int)r,      \
             (int)q);                                                                                           \
    goto fail;                                                                                                  \
  }                                                                                                             \
  memcpy(&api->name, &fn, sizeof fn);
  GPA__CU_API(GPA__CU_RESOLVE)
#undef GPA__CU_RESOLVE
  fn = NULL;
  if (gp("cuStreamWaitEvent", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS && fn)
    memcpy(&api->opt_cuStreamWaitEvent, &fn, sizeof fn);
  r = api->cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE) {
    snprintf(msg, cap, "no CUDA device: cuInit reports CUDA_ERROR_NO_DEVICE (driver %s)", lib);
    goto fail;
  }
  if (r != CUDA_SUCCESS) {
    char e[160];
    snprintf(msg, cap, "CUDA driver %s: cuInit failed: %s", lib, gpa__cu_errstr(api, r, e, sizeof e));
    goto fail;
  }
  int n = 0;
  r = api->cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS || n <= 0) {
    snprintf(msg, cap, "no CUDA device: the driver %s reports %d devices", lib, r == CUDA_SUCCESS ? n : 0);
    goto fail;
  }
  return GPA_OK;
fail:
  dlclose(api->lib);
  memset(api, 0, sizeof *api);
  return GPA_ENODEVICE;
}

void gpa__cu_close(gpa__cu_api *api) {
  if (api->lib) dlclose(api->lib);
  memset(api, 0, sizeof *api);
}

gpa_status gpa__cublas_open(gpa__cublas_api *api, const char *path, char *msg, size_t cap) {
  memset(api, 0, sizeof *api);
  const char *lib = path ? path : "libcublas.so.13";
  api->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char *e = dlerror();
    snprintf(msg, cap, "cuBLAS unavailable: cannot open %s (%s); set GPA_CUBLAS", lib, e ? e : "dlopen failed");
    return GPA_EUNSUPPORTED;
  }
  void *fn;
#define GPA__CUBLAS_RESOLVE(name)                                                                   \
  fn = dlsym(api->lib, GPA__STR(name));                                                             \
  if (!fn) {                                                                                        \
    snprintf(msg, cap, "cuBLAS %s lacks %s (%s)", lib, GPA__STR(name), #name);                      \
    dlclose(api->lib);                                                                              \
    memset(api, 0, sizeof *api);                                                                    \
    return GPA_EUNSUPPORTED;                                                                        \
  }                                                                                                 \
  memcpy(&api->name, &fn, sizeof fn);
  GPA__CUBLAS_API(GPA__CUBLAS_RESOLVE)
#undef GPA__CUBLAS_RESOLVE
  return GPA_OK;
}

void gpa__cublas_close(gpa__cublas_api *api) {
  if (api->lib) dlclose(api->lib);
  memset(api, 0, sizeof *api);
}
