/* gpa-bench cuda_allreduce (issue 27): allreduce through the actor against
 * NCCL's own call of the same size, in the same run: f32 sums in place, one
 * rank (one card cannot host two NCCL ranks), 4 KiB to GPA_BENCH_MAX_MIB
 * (256 MiB on cuda, 1 MiB on sim) by factors of 4.
 *
 *  ours: a round of k gpa_allreduce calls on the actor's default queue,
 *        submitted without handles, then one gpa_sync_batch (as a trainer
 *        submits its buckets);
 *  ref:  k ncclAllReduce calls of the same NCCL (GPA_NCCL, else
 *        libnccl.so.2, the simulator's subset on sim) on a communicator and a
 *        stream of its own, then one cuStreamSynchronize.
 * Each side's time per call is the median of GPA_BENCH_REPS rounds (5).
 * With one rank NCCL moves no data between devices, so this measures the
 * path of a collective through the actor (submit, order, the NCCL call,
 * the fence) against the bare call, not a bus. On sim both sides run
 * emulated: plumbing only, the numbers mean nothing. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

#ifdef GPA_HAVE_CUDA_BACKEND
#include "backends/cuda/cu.h"
#include "comm/nccl_abi.h"

typedef struct bare_nccl {
  gpa__cu_api cu;
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  CUdeviceptr x;
  void *lib;
  gpa__ncclComm_t nc;
  gpa__ncclResult_t (*get_id)(gpa__ncclUniqueId *);
  gpa__ncclResult_t (*init)(gpa__ncclComm_t *, int, gpa__ncclUniqueId, int);
  gpa__ncclResult_t (*allreduce)(const void *, void *, size_t, int, int, gpa__ncclComm_t, gpa__cudaStream_t);
  gpa__ncclResult_t (*destroy)(gpa__ncclComm_t);
} bare_nccl;

static int bare_fail(const char *what, int r) {
  fprintf(stderr, "gpa-bench cuda_allreduce: NCCL's side: %s failed (%d)\n", what, r);
  return 0;
}

/* The driver and NCCL the actor uses, a stream and a buffer of max_bytes
 * zeros (sums of zeros: no overflow however many calls). */
static int bare_open(bare_nccl *b, int sim, size_t max_bytes) {
  memset(b, 0, sizeof *b);
  char msg[256];
  const char *drv = getenv("GPA_CUDA_DRIVER"), *nccl = getenv("GPA_NCCL");
#if defined(GPA_BENCH_SIM_DRIVER) && defined(GPA_BENCH_SIM_NCCL)
  if (sim) drv = GPA_BENCH_SIM_DRIVER;
  if (sim && !(nccl && *nccl)) nccl = GPA_BENCH_SIM_NCCL;
#else
  if (sim) return 0;
#endif
  if (!(nccl && *nccl)) nccl = "libnccl.so.2";
  if (gpa__cu_open(&b->cu, drv && *drv ? drv : NULL, msg, sizeof msg) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_allreduce: driver: %s\n", msg);
    return 0;
  }
  CUresult r;
  if ((r = b->cu.cuDeviceGet(&b->dev, 0)) || (r = b->cu.cuDevicePrimaryCtxRetain(&b->ctx, b->dev)) ||
      (r = b->cu.cuCtxSetCurrent(b->ctx)) || (r = b->cu.cuStreamCreate(&b->s, CU_STREAM_NON_BLOCKING)) ||
      (r = b->cu.cuMemAlloc(&b->x, max_bytes)) || (r = b->cu.cuMemsetD32Async(b->x, 0, max_bytes / 4, b->s)) ||
      (r = b->cu.cuStreamSynchronize(b->s)))
    return bare_fail("the driver's setup", (int)r);
  if (!(b->lib = dlopen(nccl, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE))) {
    fprintf(stderr, "gpa-bench cuda_allreduce: cannot load %s (%s)\n", nccl, dlerror());
    return 0;
  }
  void *f[4] = {dlsym(b->lib, "ncclGetUniqueId"), dlsym(b->lib, "ncclCommInitRank"), dlsym(b->lib, "ncclAllReduce"),
                dlsym(b->lib, "ncclCommDestroy")};
  if (!f[0] || !f[1] || !f[2] || !f[3]) return bare_fail("resolving NCCL's calls", 0);
  memcpy(&b->get_id, &f[0], sizeof f[0]);
  memcpy(&b->init, &f[1], sizeof f[1]);
  memcpy(&b->allreduce, &f[2], sizeof f[2]);
  memcpy(&b->destroy, &f[3], sizeof f[3]);
  gpa__ncclUniqueId uid;
  int nr;
  if ((nr = b->get_id(&uid)) || (nr = b->init(&b->nc, 1, uid, 0))) return bare_fail("ncclCommInitRank", nr);
  return 1;
}

static void bare_close(bare_nccl *b) {
  if (b->nc) b->destroy(b->nc);
  if (b->lib) dlclose(b->lib);
  if (b->ctx) {
    b->cu.cuCtxSetCurrent(b->ctx);
    if (b->x) b->cu.cuMemFree(b->x);
    if (b->s) b->cu.cuStreamDestroy(b->s);
    b->cu.cuDevicePrimaryCtxRelease(b->dev);
  }
  if (b->cu.lib) gpa__cu_close(&b->cu);
}

/* ns per call of k in-place sums of n floats and one synchronize; 0 on failure */
static double bare_round(bare_nccl *b, long n, int k) {
  double t0 = gpa_bench_now_ns();
  for (int i = 0; i < k; i++) {
    int r = b->allreduce((void *)b->x, (void *)b->x, (size_t)n, GPA__NCCL_F32, GPA__NCCL_SUM, b->nc, b->s);
    if (r) return bare_fail("ncclAllReduce", r);
  }
  CUresult r = b->cu.cuStreamSynchronize(b->s);
  if (r) return bare_fail("cuStreamSynchronize", (int)r);
  return (gpa_bench_now_ns() - t0) / k;
}

static double ours_round(gpa_queue *q, gpa_comm *c, gpa_tensor *t, int k) {
  double t0 = gpa_bench_now_ns();
  for (int i = 0; i < k; i++) gpa_allreduce(q, c, t, t, GPA_REDUCE_SUM, NULL);
  if (gpa_sync_batch(q, NULL) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_allreduce: through the actor: %s\n", gpa_last_error_message());
    return 0;
  }
  return (gpa_bench_now_ns() - t0) / k;
}

static double median5(double *v, int n) {
  gpa_bench_sort(v, (size_t)n);
  return v[n / 2];
}

void gpa_bench_cuda_allreduce(void) {
  int sim;
  gpa_actor *a = gpa_bench_cuda_actor("cuda_allreduce", &sim);
  if (!a) return;
  const char *mx = getenv("GPA_BENCH_MAX_MIB");
  long max_bytes = (mx && atol(mx) > 0 ? atol(mx) : sim ? 1 : 256) << 20;
  gpa_comm *c = NULL;
  bare_nccl b;
  if (gpa_comm_init_all(&a, 1, NULL, &c) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_allreduce: skipped: %s\n", gpa_last_error_message());
    gpa_actor_destroy(a);
    return;
  }
  if (!bare_open(&b, sim, (size_t)max_bytes)) {
    bare_close(&b);
    gpa_comm_destroy(c);
    gpa_actor_destroy(a);
    return;
  }
  gpa_queue *q = gpa_actor_default_queue(a);
  int reps = gpa_bench_reps(5);
  if (reps > 64) reps = 64;
  for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    long n = bytes / 4;
    int k = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 4;
    if (sim) k = 5;
    gpa_tensor t = {0, 0, GPA_F32, 1, {n}};
    if (gpa_buffer_acquire(a, NULL, (uint64_t)bytes, &t.buffer) != GPA_OK) {
      fprintf(stderr, "gpa-bench cuda_allreduce: %s\n", gpa_last_error_message());
      break;
    }
    float *zeros = calloc((size_t)n, sizeof *zeros);
    gpa_upload(q, &t, zeros, (uint64_t)bytes, 0, NULL);
    gpa_sync_batch(q, NULL);
    free(zeros);
    double ours[64], ref[64];
    int ok = ours_round(q, c, &t, k) > 0 && bare_round(&b, n, k) > 0; /* warm-up */
    for (int r = 0; r < reps && ok; r++) {
      ref[r] = bare_round(&b, n, k);
      ours[r] = ours_round(q, c, &t, k);
      ok = ref[r] > 0 && ours[r] > 0;
    }
    gpa_buffer_release(a, t.buffer);
    if (!ok) break;
    char shape[48], extra[96];
    snprintf(shape, sizeof shape, "1rank_%ldB", bytes);
    snprintf(extra, sizeof extra, "\"calls_per_round\":%d,\"rounds\":%d", k, reps);
    gpa_bench_result res = {.name = "allreduce_nccl",
                            .backend = sim ? "sim" : "cuda",
                            .shape = shape,
                            .ref = "ncclAllReduce",
                            .ns = median5(ours, reps),
                            .ref_ns = median5(ref, reps),
                            .bytes = (double)bytes,
                            .extra = extra};
    gpa_bench_emit(&res);
  }
  bare_close(&b);
  gpa_comm_destroy(c);
  gpa_actor_destroy(a);
}
#else
void gpa_bench_cuda_allreduce(void) {}
#endif
