/* gpa-sim driver: cuGetProcAddress. The CUDA backend resolves every entry
 * point by its API name ("cuMemAlloc"); cuda.h maps those names to the
 * versioned exports (cuMemAlloc -> cuMemAlloc_v2), so `&name` below is the
 * newest version and #name the API name. Versioned names are accepted too.
 * Every version query gets the newest implementation, except where the
 * newest has another signature (cuCtxSynchronize from 13.0). */
#include <string.h>
#include "internal.h"

#define GPA_SIM_DRIVER_API(X)                                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                \
  X(cuDeviceTotalMem) X(cuDeviceGetUuid) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)           \
  X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset) X(cuDevicePrimaryCtxGetState)                \
  X(cuDevicePrimaryCtxSetFlags) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxGetDevice)                \
  X(cuCtxSynchronize) X(cuCtxGetLimit) X(cuGetErrorName) X(cuGetErrorString)                           \
  X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamSynchronize)            \
  X(cuStreamQuery) X(cuStreamGetFlags) X(cuStreamWaitEvent) X(cuLaunchHostFunc)                        \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventRecordWithFlags) X(cuEventQuery)        \
  X(cuEventSynchronize) X(cuEventElapsedTime)                                                          \
  X(cuMemAlloc) X(cuMemFree) X(cuMemAllocAsync) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync)           \
  X(cuMemGetInfo) X(cuDeviceGetDefaultMemPool) X(cuDeviceGetMemPool) X(cuMemPoolSetAttribute)          \
  X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuMemAllocHost) X(cuMemHostAlloc) X(cuMemFreeHost)     \
  X(cuMemHostRegister) X(cuMemHostUnregister)                                                          \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)            \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD16) X(cuMemsetD32) X(cuMemsetD8Async)                  \
  X(cuMemsetD16Async) X(cuMemsetD32Async)                                                              \
  X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleLoadFatBinary) X(cuModuleUnload)                 \
  X(cuModuleGetFunction) X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel)                 \
  X(cuLibraryGetModule) X(cuKernelGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute)             \
  X(cuKernelSetAttribute) X(cuKernelGetAttribute) X(cuLaunchKernel) X(cuGetProcAddress)                \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuStreamIsCapturing) X(cuGraphCreate)                \
  X(cuGraphDestroy) X(cuGraphGetNodes) X(cuGraphAddChildGraphNode) X(cuGraphInstantiateWithFlags)      \
  X(cuGraphExecDestroy) X(cuGraphExecChildGraphNodeSetParams) X(cuGraphLaunch)

#define GPA_SIM_STR2(x) #x
#define GPA_SIM_STR(x) GPA_SIM_STR2(x)

namespace {
struct Entry {
  const char *api, *symbol;
  void *fn;
};
#define X(name) {#name, GPA_SIM_STR(name), (void *)&name},
const Entry g_table[] = {GPA_SIM_DRIVER_API(X)};
#undef X
} // namespace

GPA_SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status) {
  return gpa_sim__guard("cuGetProcAddress", [&]() -> CUresult {
    (void)flags;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    /* The one name of this table whose signature changed: from 13.0 it means
     * cuCtxSynchronize_v2(CUcontext), as the driver maps it (cudaTypedefs.h:
     * PFN_cuCtxSynchronize_v13000), while cuda.h declares the (void) form. */
    if (!strcmp(symbol, "cuCtxSynchronize") && cuda_version >= 13000) {
      *pfn = (void *)&cuCtxSynchronize_v2;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
    for (const Entry &e : g_table) {
      if (strcmp(e.api, symbol) == 0 || strcmp(e.symbol, symbol) == 0) {
        *pfn = e.fn;
        if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
      }
    }
    *pfn = nullptr;
    if (status) *status = cuda_version > CUDA_VERSION ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                                       : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  });
}

/* The pre-12.0 export (no status argument) that loaders may still look up. */
#undef cuGetProcAddress
GPA_SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags) {
  return gpa_sim__guard("cuGetProcAddress", [&]() -> CUresult {
    return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, nullptr);
  });
}
