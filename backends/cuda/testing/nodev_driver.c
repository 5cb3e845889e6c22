/* A fake CUDA driver for tests/test_cuda_driver.c: resolves every entry point
 * and answers cuInit with CUDA_ERROR_NO_DEVICE, as a real driver does on a
 * machine without a GPU. Built as tests/libgpa_cuda_nodev.so. */
#include <cuda.h>
#include <string.h>

static CUresult not_initialized(void) { return CUDA_ERROR_NOT_INITIALIZED; }
static CUresult no_device(unsigned flags) {
  (void)flags;
  return CUDA_ERROR_NO_DEVICE;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                                                    cuuint64_t flags,
                                                                    CUdriverProcAddressQueryResult *status) {
  (void)version;
  (void)flags;
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = !strcmp(symbol, "cuInit") ? (void *)no_device : (void *)not_initialized;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}
