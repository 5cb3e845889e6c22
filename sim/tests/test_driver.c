/* Driver API tests: device properties, cuGetProcAddress through dlopen,
 * stream ordering, events, cross-stream waits, host functions, the memory
 * API and the module/library API. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
#include "sim_test.h"
#include "sim_simt_kernels_fatbin.h"

static int t_device(void) {
  CUdevice d;
  int v, n;
  char name[128];
  size_t mem;
  CK(cuInit(0));
  CK(cuDeviceGetCount(&n));
  CHECK(n == 1);
  CK(cuDeviceGet(&d, 0));
  CHECK_RES(cuDeviceGet(&d, 1), CUDA_ERROR_INVALID_DEVICE);
  CK(cuDeviceGetName(name, sizeof name, d));
  CHECK(strstr(name, "H100") != NULL);
  CK(cuDeviceTotalMem(&mem, d));
  CHECK(mem >= (80ull << 30));
  static const struct { CUdevice_attribute a; int want; } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 228 * 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 48 * 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 227 * 1024},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
      {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    CK(cuDeviceGetAttribute(&v, attrs[i].a, d));
    CHECK(v == attrs[i].want);
  }
  CHECK_RES(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, d), CUDA_ERROR_INVALID_VALUE);
  const char *s;
  CK(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  CHECK(strcmp(s, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  CK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  CHECK(strcmp(s, "out of memory") == 0);
  CHECK_RES(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  return 0;
}

/* The CUDA backend's way in: dlopen + cuGetProcAddress by API name. */
static int t_procaddress(void) {
  void *h = dlopen(GPA_SIM_DRIVER_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  gpa_fn gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
  CHECK(gpa != NULL);
  CHECK(dlsym(h, "cuGetProcAddress") != NULL);
  static const char *const names[][2] = {
      {"cuMemAlloc", "cuMemAlloc_v2"},           {"cuMemFree", "cuMemFree_v2"},
      {"cuStreamDestroy", "cuStreamDestroy_v2"}, {"cuEventElapsedTime", "cuEventElapsedTime_v2"},
      {"cuLaunchKernel", "cuLaunchKernel"},      {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2"},
      {"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2"}, {"cuLibraryLoadData", "cuLibraryLoadData"},
      {"cuGetProcAddress", "cuGetProcAddress_v2"},   {"cuMemAllocAsync", "cuMemAllocAsync"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    CK(gpa(names[i][0], &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    CHECK(q == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(fn != NULL && fn == dlsym(h, names[i][1]));
  }
  void *fn = (void *)1;
  CUdriverProcAddressQueryResult q;
  CHECK_RES(gpa("cuNoSuchCall", &fn, CUDA_VERSION, 0, &q), CUDA_ERROR_NOT_FOUND);
  CHECK(fn == NULL && q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  /* the resolved table works */
  CUresult (*init)(unsigned) = NULL;
  CUresult (*count)(int *) = NULL;
  CK(gpa("cuInit", (void **)&init, CUDA_VERSION, 0, NULL));
  CK(gpa("cuDeviceGetCount", (void **)&count, CUDA_VERSION, 0, NULL));
  int n = 0;
  CK(init(0));
  CK(count(&n));
  CHECK(n == 1);
  return 0;
}

typedef struct order_log {
  int seq[64];
  int n;
  volatile int *dev_value; /* device memory is host memory in the sim */
  int seen[64];
} order_log;
static order_log g_log;
static void host_fn(void *p) {
  int id = (int)(intptr_t)p;
  g_log.seen[g_log.n] = *g_log.dev_value;
  g_log.seq[g_log.n++] = id;
}

static int t_stream_order(void) {
  sim_setup();
  CUstream s;
  CUdeviceptr d;
  int *pinned;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&d, sizeof(int)));
  CK(cuMemAllocHost((void **)&pinned, 32 * sizeof(int)));
  g_log.dev_value = (volatile int *)(uintptr_t)d;
  gpa_sim_fault_stream_delay(s, 500); /* the host runs far ahead of the stream */
  for (int i = 0; i < 32; i++) {
    pinned[i] = i * 10;
    CK(cuMemcpyHtoDAsync(d, pinned + i, sizeof(int), s));
    CK(cuLaunchHostFunc(s, host_fn, (void *)(intptr_t)i));
  }
  CHECK_RES(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  CK(cuStreamSynchronize(s));
  CK(cuStreamQuery(s));
  CHECK(g_log.n == 32);
  for (int i = 0; i < 32; i++) {
    CHECK(g_log.seq[i] == i);
    CHECK(g_log.seen[i] == i * 10); /* each host function saw its own copy land, not a later one */
  }
  CK(cuMemFreeHost(pinned));
  CK(cuMemFree(d));
  CK(cuStreamDestroy(s));
  CHECK_RES(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  sim_teardown();
  return 0;
}

/* Synchronous copies wait for blocking streams (legacy default stream), not
 * for non-blocking ones. */
static int t_legacy_sync(void) {
  sim_setup();
  CUstream blocking, nonblocking;
  CUdeviceptr d;
  int *pin, out = 0;
  CK(cuStreamCreate(&blocking, 0));
  CK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&d, 2 * sizeof(int)));
  CK(cuMemAllocHost((void **)&pin, 2 * sizeof(int)));
  CK(cuMemsetD32(d, 0, 2));
  pin[0] = 42;
  pin[1] = 43;
  gpa_sim_fault_stream_delay(blocking, 20000);
  CK(cuMemcpyHtoDAsync(d, pin, sizeof(int), blocking));
  CK(cuMemcpyDtoH(&out, d, sizeof(int)));
  CHECK(out == 42);
  gpa_sim_fault_stream_delay(blocking, 0);
  /* a delayed non-blocking stream (writing elsewhere) does not hold up a synchronous copy */
  gpa_sim_fault_stream_delay(nonblocking, 300000);
  CK(cuMemcpyHtoDAsync(d + sizeof(int), pin + 1, sizeof(int), nonblocking));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CK(cuMemcpyDtoH(&out, d, sizeof(int)));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6 < 200.0);
  CK(cuStreamSynchronize(nonblocking));
  CK(cuMemcpyDtoH(&out, d + sizeof(int), sizeof(int)));
  CHECK(out == 43);
  gpa_sim_fault_stream_delay(nonblocking, 0);
  CK(cuStreamDestroy(blocking));
  CK(cuStreamDestroy(nonblocking));
  CK(cuMemFreeHost(pin));
  CK(cuMemFree(d));
  sim_teardown();
  return 0;
}

static int t_events(void) {
  sim_setup();
  CUstream s;
  CUevent a, b, nt;
  float ms;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&a, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&b, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
  CK(cuEventQuery(a)); /* never recorded: complete */
  CK(cuEventRecord(a, s));
  gpa_sim_fault_stream_delay(s, 30000);
  CK(cuEventRecord(b, s)); /* waits 30 ms in the stream */
  CK(cuEventRecord(nt, s));
  CHECK_RES(cuEventQuery(b), CUDA_ERROR_NOT_READY);
  CHECK_RES(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
  CK(cuEventSynchronize(b));
  CK(cuEventQuery(b));
  CK(cuEventElapsedTime(&ms, a, b));
  CHECK(ms >= 25.0f && ms < 5000.0f);
  CK(cuEventSynchronize(nt));
  CHECK_RES(cuEventElapsedTime(&ms, a, nt), CUDA_ERROR_INVALID_HANDLE);
  gpa_sim_fault_stream_delay(s, 0);
  CK(cuEventDestroy(a));
  CK(cuEventDestroy(b));
  CK(cuEventDestroy(nt));
  CK(cuStreamDestroy(s));
  sim_teardown();
  return 0;
}

/* Stream B copies what stream A produces; only the event wait orders them. */
static int t_cross_stream_wait(void) {
  sim_setup();
  CUstream sa, sb;
  CUevent e;
  CUdeviceptr buf, out;
  int *pin;
  const int n = 1024;
  CK(cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CK(cuMemAlloc(&buf, n * sizeof(int)));
  CK(cuMemAlloc(&out, n * sizeof(int)));
  CK(cuMemAllocHost((void **)&pin, 2 * n * sizeof(int)));
  CK(cuMemsetD32(buf, 7, n));
  for (int i = 0; i < n; i++) pin[i] = i;
  gpa_sim_fault_stream_delay(sa, 20000);
  CK(cuMemcpyHtoDAsync(buf, pin, n * sizeof(int), sa));
  CK(cuEventRecord(e, sa));
  CK(cuStreamWaitEvent(sb, e, 0));
  /* A later record of e on a stream that reaches it first does not release
   * the wait: it waits for the record that was the latest when it was made. */
  CUstream sc;
  CK(cuStreamCreate(&sc, CU_STREAM_NON_BLOCKING));
  CK(cuEventRecord(e, sc));
  CK(cuMemcpyDtoDAsync(out, buf, n * sizeof(int), sb));
  CK(cuMemcpyDtoHAsync(pin + n, out, n * sizeof(int), sb));
  CK(cuStreamSynchronize(sb));
  for (int i = 0; i < n; i++) CHECK(pin[n + i] == i);
  CK(cuStreamDestroy(sc));
  CK(cuEventDestroy(e)); /* right after a wait was queued: must stay valid for it */
  gpa_sim_fault_stream_delay(sa, 0);
  CK(cuStreamDestroy(sa));
  CK(cuStreamDestroy(sb));
  CK(cuMemFreeHost(pin));
  CK(cuMemFree(buf));
  CK(cuMemFree(out));
  sim_teardown();
  return 0;
}

static int t_memory(void) {
  sim_setup();
  CUstream s;
  CUmemoryPool pool;
  CUdeviceptr a, b;
  unsigned char *h;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuDeviceGetDefaultMemPool(&pool, 0));
  cuuint64_t thr = ~0ull, got = 0;
  CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
  CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
  CHECK(got == thr);
  CK(cuMemAllocAsync(&a, 1000, s));
  CK(cuMemAllocAsync(&b, 1000, s));
  CK(cuMemAllocHost((void **)&h, 1000));
  CK(cuMemsetD8Async(a, 0x11, 1000, s));
  CK(cuMemsetD16Async(a, 0x2233, 100, s));
  CK(cuMemsetD32Async(a + 200, 0x44556677u, 10, s));
  CK(cuMemcpyDtoDAsync(b, a, 1000, s));
  CK(cuMemcpyDtoHAsync(h, b, 1000, s));
  CK(cuMemFreeAsync(a, s));
  CK(cuMemFreeAsync(b, s));
  CK(cuStreamSynchronize(s));
  for (int i = 0; i < 200; i++) CHECK(h[i] == ((i & 1) ? 0x22 : 0x33));
  for (int i = 200; i < 240; i++) CHECK(h[i] == (unsigned char)(0x44556677u >> (8 * (i % 4))));
  for (int i = 240; i < 1000; i++) CHECK(h[i] == 0x11);
  CHECK(gpa_sim_live_allocations() == 0);
  size_t fr, tot;
  CK(cuMemGetInfo(&fr, &tot));
  CHECK(tot > 0 && fr <= tot);
  CUdeviceptr c;
  CHECK_RES(cuMemAlloc(&c, 0), CUDA_ERROR_INVALID_VALUE);
  CK(cuMemAlloc(&c, 64));
  CK(cuMemsetD8(c, 0xab, 64));
  CK(cuMemcpyDtoH(h, c, 64));
  CHECK(h[0] == 0xab && h[63] == 0xab);
  CK(cuMemFree(c));
  CK(cuMemFreeHost(h));
  CK(cuStreamDestroy(s));
  sim_teardown();
  return 0;
}

static int t_library(void) {
  sim_setup();
  CUlibrary lib;
  CUkernel k;
  CUfunction f;
  CUmodule m;
  CK(cuLibraryLoadData(&lib, gpa_fatbin_sim_simt_kernels, NULL, NULL, 0, NULL, NULL, 0));
  CK(cuLibraryGetKernel(&k, lib, "sim_reverse"));
  CK(cuKernelGetFunction(&f, k));
  int in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = i;
  CUdeviceptr din, dout;
  CK(cuMemAlloc(&din, sizeof in));
  CK(cuMemAlloc(&dout, sizeof out));
  CK(cuMemcpyHtoD(din, in, sizeof in));
  void *args[] = {&din, &dout};
  CK(cuLaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(out, dout, sizeof out));
  for (int i = 0; i < 64; i++) CHECK(out[i] == (i / 32) * 32 + 31 - i % 32);
  CHECK_RES(cuLibraryGetKernel(&k, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CK(cuLibraryUnload(lib));
  /* images the sim cannot map */
  CHECK_RES(cuModuleLoadData(&m, "not a fatbin"), CUDA_ERROR_INVALID_IMAGE);
  CHECK_RES(cuModuleLoadData(&m, ".version 8.0\n.target sm_90\n"), CUDA_ERROR_NOT_SUPPORTED);
  size_t size = (size_t)(gpa_fatbin_sim_simt_kernels_end - gpa_fatbin_sim_simt_kernels);
  unsigned char *copy = malloc(size);
  memcpy(copy, gpa_fatbin_sim_simt_kernels, size);
  CK(cuModuleLoadData(&m, copy)); /* a copy of the image maps to the same module */
  CK(cuModuleUnload(m));
  copy[size - 1] ^= 0x5a;
  CHECK_RES(cuModuleLoadData(&m, copy), CUDA_ERROR_NO_BINARY_FOR_GPU);
  CHECK(sim_msg_has("no emulated module for fatbin id"));
  free(copy);
  CK(cuMemFree(din));
  CK(cuMemFree(dout));
  sim_teardown();
  return 0;
}

/* A captured stream-ordered allocation or free is a memory node, which the
 * driver refuses inside a child graph (CUDA_ERROR_NOT_SUPPORTED, as an H100
 * answered for graphs holding cuBLAS's own workspace allocation); the same
 * capture without one nests. */
static int t_graph_mem_nodes(void) {
  sim_setup();
  CUstream s;
  CUdeviceptr a, p;
  CUgraph child, parent;
  CUgraphNode n;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&a, 256));
  for (int alloc = 0; alloc < 3; alloc++) {
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuMemsetD8Async(a, 1, 256, s));
    if (alloc == 1) CK(cuMemAllocAsync(&p, 64, s));
    if (alloc == 2) CK(cuMemFreeAsync(a, s));
    CK(cuStreamEndCapture(s, &child));
    CK(cuGraphCreate(&parent, 0));
    if (alloc) CHECK_RES(cuGraphAddChildGraphNode(&n, parent, NULL, 0, child), CUDA_ERROR_NOT_SUPPORTED);
    else CK(cuGraphAddChildGraphNode(&n, parent, NULL, 0, child));
    CK(cuGraphDestroy(parent));
    CK(cuGraphDestroy(child)); /* never launched: the free above did not run */
    if (alloc == 1) CK(cuMemFree(p));
  }
  CK(cuMemFree(a));
  CK(cuStreamDestroy(s));
  sim_teardown();
  return 0;
}

/* GPA_SIM_LAUNCH_LOG (set by the ctest): a line per launch at the call,
 * with its geometry, marked when the stream was capturing. */
static int t_launch_log(void) {
  const char *path = getenv("GPA_SIM_LAUNCH_LOG");
  if (!path) return 77;
  sim_setup();
  CUlibrary lib;
  CUkernel k;
  CUfunction f;
  CUstream s;
  CUgraph g;
  CK(cuLibraryLoadData(&lib, gpa_fatbin_sim_simt_kernels, NULL, NULL, 0, NULL, NULL, 0));
  CK(cuLibraryGetKernel(&k, lib, "sim_reverse"));
  CK(cuKernelGetFunction(&f, k));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr din, dout;
  CK(cuMemAlloc(&din, 256));
  CK(cuMemAlloc(&dout, 256));
  void *args[] = {&din, &dout};
  CK(cuLaunchKernel(f, 2, 1, 1, 32, 1, 1, 0, s, args, NULL));
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, NULL));
  CK(cuStreamEndCapture(s, &g));
  CK(cuStreamSynchronize(s));
  FILE *fp = fopen(path, "r");
  CHECK(fp != NULL);
  char a[256] = "", b[256] = "", c[8] = "";
  CHECK(fgets(a, sizeof a, fp) && fgets(b, sizeof b, fp) && !fgets(c, sizeof c, fp));
  fclose(fp);
  CHECK(!strcmp(a, "sim_reverse grid 2 1 1 block 32 1 1 smem 0\n"));
  CHECK(!strcmp(b, "sim_reverse grid 1 1 1 block 64 1 1 smem 0 captured\n"));
  CK(cuGraphDestroy(g));
  CK(cuMemFree(din));
  CK(cuMemFree(dout));
  CK(cuStreamDestroy(s));
  CK(cuLibraryUnload(lib));
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"graph_mem_nodes", t_graph_mem_nodes}, {"launch_log", t_launch_log},
      {"device", t_device},         {"procaddress", t_procaddress}, {"stream_order", t_stream_order},
      {"events", t_events},         {"cross_stream_wait", t_cross_stream_wait}, {"legacy_sync", t_legacy_sync},
      {"memory", t_memory},         {"library", t_library},
  };
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
