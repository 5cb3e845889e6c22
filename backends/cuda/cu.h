/* The CUDA backend's view of the driver and of cuBLAS: function tables
 * resolved at run time, never linked.
 *
 * The driver (libcuda.so.1, GPA_CUDA_DRIVER, or the simulator for
 * GPA_DEVICE=sim) is dlopened once per actor and every entry point is
 * resolved through cuGetProcAddress into gpa__cu_api. cuBLAS (libcublas.so.13,
 * GPA_CUBLAS, or the simulator's subset) is dlopened lazily by the first op
 * that needs it and resolved with dlsym (its exports carry the versioned names
 * that cublas_v2.h maps the API names to). Tables are per actor: there is no
 * process-global state here. */
#ifndef GPA_BACKENDS_CUDA_CU_H
#define GPA_BACKENDS_CUDA_CU_H
#include <cublas_v2.h>
#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>

#include "gpuactor/status.h"

/* Every driver entry point the backend uses. X(name) gets the API name;
 * cuda.h turns it into the versioned symbol (cuMemAlloc -> cuMemAlloc_v2)
 * wherever it is expanded, which is also the member's name. */
#define GPA__CU_API(X)                                                                                            \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem)     \
  X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset) X(cuCtxSetCurrent)           \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuGetErrorName) X(cuGetErrorString) X(cuStreamCreate)                \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamQuery) X(cuLaunchHostFunc) X(cuEventCreate)               \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventElapsedTime) X(cuEventSynchronize) X(cuEventQuery) X(cuMemAlloc) X(cuMemFree)     \
  X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemGetInfo) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                  \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD16Async) X(cuMemsetD32Async) X(cuModuleLoadData)           \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel)                         \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphGetNodes)         \
  X(cuGraphAddChildGraphNode) X(cuGraphInstantiateWithFlags) X(cuGraphExecDestroy)                          \
  X(cuGraphExecChildGraphNodeSetParams) X(cuGraphLaunch)

typedef struct gpa__cu_api {
  void *lib;
#define GPA__CU_MEMBER(name) __typeof__(name) *name;
  GPA__CU_API(GPA__CU_MEMBER)
#undef GPA__CU_MEMBER
  /* Optional (NULL where the driver lacks it; never a reason to refuse the
   * driver): external events (extmem.c), in every gpuactor.torch and XLA
   * call's round trip, so resolved once here rather than per call. */
  __typeof__(cuStreamWaitEvent) *opt_cuStreamWaitEvent;
} gpa__cu_api;

/* Opens the driver at `path` (NULL: libcuda.so.1) and resolves the table.
 * GPA_ENODEVICE with a message saying which: the library cannot be opened,
 * it is not a driver, it is the toolkit's stub, an entry point is missing,
 * cuInit fails, or there is no device. */
gpa_status gpa__cu_open(gpa__cu_api *api, const char *path, char *msg, size_t cap);
void gpa__cu_close(gpa__cu_api *api);
/* "CUDA_ERROR_X: text" of a driver status (never NULL). */
const char *gpa__cu_errstr(const gpa__cu_api *api, CUresult r, char *buf, size_t cap);

/* cuBLAS: only the calls the backend makes. */
#define GPA__CUBLAS_API(X)                                                                                        \
  X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace) X(cublasSetMathMode) X(cublasSgemm)   \
  X(cublasSgemmStridedBatched) X(cublasGemmEx) X(cublasGetStatusString)

typedef struct gpa__cublas_api {
  void *lib;
#define GPA__CUBLAS_MEMBER(name) __typeof__(name) *name;
  GPA__CUBLAS_API(GPA__CUBLAS_MEMBER)
#undef GPA__CUBLAS_MEMBER
} gpa__cublas_api;

gpa_status gpa__cublas_open(gpa__cublas_api *api, const char *path, char *msg, size_t cap);
void gpa__cublas_close(gpa__cublas_api *api);

#endif
