/* External memory on the CUDA backend (include/gpuactor/external.h): which
 * caller-owned memory a buffer may wrap, and the events that order the
 * actor's streams with the producer's.
 *
 * Implementation notes
 * - cuPointerGetAttribute and cuStreamWaitEvent are not in the backend's
 *   required driver table (cu.h): the simulator has no pointer attributes,
 *   and adding required entry points would make older drivers fail to open.
 *   cuPointerGetAttribute is resolved here, once per wrap (rare), through
 *   the driver's own cuGetProcAddress; cuStreamWaitEvent, which sits in
 *   every event call's round trip, once when the driver opens (cu.h's
 *   optional entries).
 * - Where the driver answers pointer queries, a pointer that is not of the
 *   kind the caller claims is refused. The simulator answers through its
 *   device-range hook instead (the same check its kernels' accesses get).
 *   With neither, device memory is taken on the caller's word. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>

#include "backends/cuda/graph.h"
#include "gpuactor/external.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*ptr_attr_fn)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*wait_event_fn)(CUstream, CUevent, unsigned int);
typedef int (*sim_range_fn)(CUdeviceptr, size_t, char *, size_t);

static void *driver_fn(gpa__cu_ctx *C, const char *name) {
  get_proc_fn gp = (get_proc_fn)dlsym(C->cu.lib, "cuGetProcAddress_v2");
  void *fn = NULL;
  CUdriverProcAddressQueryResult q;
  if (!gp || gp(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS) return NULL;
  return fn;
}

/* Device memory: one live allocation must hold [p, p + bytes). */
static gpa_status check_device(gpa__cu_ctx *C, CUdeviceptr p, uint64_t bytes, char *msg, size_t cap) {
  ptr_attr_fn attr = (ptr_attr_fn)driver_fn(C, "cuPointerGetAttribute");
  if (attr) {
    unsigned type = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUresult r = attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
    if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE) {
      snprintf(msg, cap, "gpa_buffer_wrap: %#" PRIx64 " is not device memory of this context (%s)", (uint64_t)p,
               r != CUDA_SUCCESS ? "the driver does not know the pointer" : "the driver reports host memory");
      return GPA_EUNSUPPORTED;
    }
    if (attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) == CUDA_SUCCESS &&
        attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS && p - start + bytes > size) {
      snprintf(msg, cap, "gpa_buffer_wrap: %" PRIu64 " bytes at %#" PRIx64 " run past the end of its allocation (%zu bytes "
               "at %#" PRIx64 ")", bytes, (uint64_t)p, size, (uint64_t)start);
      return GPA_ERANGE;
    }
    return GPA_OK;
  }
  sim_range_fn range = (sim_range_fn)dlsym(C->cu.lib, "gpa_sim__device_range_ok");
  if (range) {
    char why[128] = "";
    if (!range(p, bytes, why, sizeof why)) {
      snprintf(msg, cap, "gpa_buffer_wrap: %" PRIu64 " bytes at %#" PRIx64 " are not device memory of the simulated "
               "device (%s)", bytes, (uint64_t)p, why);
      return GPA_EUNSUPPORTED;
    }
  }
  return GPA_OK;
}

/* Page-locked host memory: kernels reach it only where it is mapped at the
 * same address on the device (unified addressing). */
static gpa_status check_pinned(gpa__cu_ctx *C, CUdeviceptr p, char *msg, size_t cap) {
  ptr_attr_fn attr = (ptr_attr_fn)driver_fn(C, "cuPointerGetAttribute");
  if (!attr) {
    snprintf(msg, cap, "gpa_buffer_wrap: the %s driver cannot say whether %#" PRIx64 " is mapped pinned memory; "
             "upload it instead", C->sim ? "simulated" : "CUDA", (uint64_t)p);
    return GPA_EUNSUPPORTED;
  }
  unsigned type = 0;
  CUdeviceptr dev = 0;
  if (attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS || type != CU_MEMORYTYPE_HOST ||
      attr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p) != CUDA_SUCCESS || dev != p) {
    snprintf(msg, cap, "gpa_buffer_wrap: %#" PRIx64 " is not page-locked host memory mapped at the same device "
             "address", (uint64_t)p);
    return GPA_EUNSUPPORTED;
  }
  return GPA_OK;
}

gpa_status gpa__cu_external_check(void *bctx, int kind, const void *ptr, uint64_t bytes, char *msg, size_t cap) {
  gpa__cu_ctx *C = bctx;
  if (C->failed) {
    snprintf(msg, cap, "device failed earlier: %s", C->fail_msg);
    return GPA_EDEVICE;
  }
  C->cu.cuCtxSetCurrent(C->ctx);
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  switch (kind) {
    case GPA_MEM_DEVICE: return check_device(C, p, bytes, msg, cap);
    case GPA_MEM_HOST_PINNED: return check_pinned(C, p, msg, cap);
    default:
      snprintf(msg, cap, "gpa_buffer_wrap: the %s backend's kernels cannot read pageable host memory (%p): pin it "
               "(GPA_MEM_HOST_PINNED) or upload it", C->sim ? "sim" : "cuda", ptr);
      return GPA_EUNSUPPORTED;
  }
}

gpa_status gpa__cu_external_event(void *bctx, void *bq, void *event, bool wait, char *msg, size_t cap) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = bq;
  if (C->failed) {
    snprintf(msg, cap, "device failed earlier: %s", C->fail_msg);
    return GPA_EDEVICE;
  }
  /* The event orders against the queue's earlier work: held work starts. */
  gpa__cu_release(C, q, GPA__RELEASE_OTHER);
  if (!wait) return gpa__cu_check(C, C->cu.cuEventRecord((CUevent)event, q->s), "cuEventRecord", msg, cap);
  wait_event_fn fn = C->cu.opt_cuStreamWaitEvent;
  if (!fn) {
    snprintf(msg, cap, "the CUDA driver has no cuStreamWaitEvent");
    return GPA_EUNSUPPORTED;
  }
  return gpa__cu_check(C, fn(q->s, (CUevent)event, 0), "cuStreamWaitEvent", msg, cap);
}
