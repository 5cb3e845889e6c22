/* gpa-bench cuda_actor (issue 24): the actor's own cost on a GPU, each
 * figure beside its floor measured in the same run by a bare driver loop of
 * the same kernel (gpa_ew_add_f32 over 1024 floats, one block of 256 threads, four floats
 * each, as the actor launches it, from the same embedded module) on a stream of its own:
 *
 *  cuda_actor_stream:    N adds submitted without handles, then one sync:
 *                        wall time per op. ref: N cuLaunchKernel then one
 *                        cuStreamSynchronize; extra: the same loop with two
 *                        events per launch, and PyTorch's figures.
 *  cuda_actor_roundtrip: gpa_submit + gpa_await of one add, p50 (p99 in
 *                        extra). ref: cuLaunchKernel + cuStreamSynchronize,
 *                        p50.
 *
 * PyTorch (bench/actor_torch.py, named by GPA_BENCH_ACTOR_TORCH, when python3
 * has torch with CUDA): eager per op, a CUDA graph of the same launches per
 * op, eager + synchronize p50/p99 - in extra as torch_*_us.
 * On sim both sides run emulated; the numbers mean nothing there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

#ifdef GPA_HAVE_CUDA_BACKEND
#include "backends/cuda/cu.h"
#include "ops/cuda_kernels.h"

enum { TINY = 1024, RT_ITERS = 2000 };

typedef struct bare {
  gpa__cu_api cu;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  CUstream s;
  CUevent ev[2];
  CUdeviceptr y, a, b;
  long long n;
  int vec; /* the kernel's 16-byte path, as the actor's add takes it on cuMemAlloc'd buffers */
  void *args[5];
  int ok;
} bare;

static int bare_fail(bare *b, const char *what, CUresult r) {
  fprintf(stderr, "gpa-bench cuda_actor: bare driver: %s failed (%d)\n", what, (int)r);
  b->ok = 0;
  return 0;
}

#define BARE_CALL(b, call)                              \
  do {                                                  \
    CUresult r_ = (b)->cu.call;                         \
    if (r_ != CUDA_SUCCESS) return bare_fail(b, #call, r_); \
  } while (0)

/* The driver the actor opened (the simulator's on sim), its primary
 * context, and the actor's own add kernel. */
static int bare_open(bare *b, int sim) {
  memset(b, 0, sizeof *b);
  char msg[256];
  const char *path = getenv("GPA_CUDA_DRIVER");
#ifdef GPA_BENCH_SIM_DRIVER
  if (sim) path = GPA_BENCH_SIM_DRIVER;
#else
  if (sim) return 0;
#endif
  if (gpa__cu_open(&b->cu, path && *path ? path : NULL, msg, sizeof msg) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_actor: bare driver: %s\n", msg);
    return 0;
  }
  b->ok = 1;
  BARE_CALL(b, cuDeviceGet(&b->dev, 0));
  BARE_CALL(b, cuDevicePrimaryCtxRetain(&b->ctx, b->dev));
  BARE_CALL(b, cuCtxSetCurrent(b->ctx));
  BARE_CALL(b, cuModuleLoadData(&b->mod, gpa__cu_mod_images[GPA__CU_MOD_ew]));
  BARE_CALL(b, cuModuleGetFunction(&b->f, b->mod, "gpa_ew_add_f32"));
  BARE_CALL(b, cuStreamCreate(&b->s, CU_STREAM_NON_BLOCKING));
  BARE_CALL(b, cuEventCreate(&b->ev[0], CU_EVENT_DEFAULT));
  BARE_CALL(b, cuEventCreate(&b->ev[1], CU_EVENT_DEFAULT));
  BARE_CALL(b, cuMemAlloc(&b->y, TINY * 4));
  BARE_CALL(b, cuMemAlloc(&b->a, TINY * 4));
  BARE_CALL(b, cuMemAlloc(&b->b, TINY * 4));
  BARE_CALL(b, cuMemsetD32Async(b->a, 0x3e800000u, TINY, b->s)); /* 0.25f: never time on zeros */
  BARE_CALL(b, cuMemsetD32Async(b->b, 0x3f000000u, TINY, b->s));
  BARE_CALL(b, cuStreamSynchronize(b->s));
  b->n = TINY;
  b->vec = 1;
  b->args[0] = &b->y, b->args[1] = &b->a, b->args[2] = &b->b, b->args[3] = &b->n, b->args[4] = &b->vec;
  return 1;
}

static void bare_close(bare *b) {
  if (!b->cu.lib) return;
  if (b->ctx) {
    b->cu.cuCtxSetCurrent(b->ctx);
    if (b->s) b->cu.cuStreamSynchronize(b->s);
    if (b->y) b->cu.cuMemFree(b->y);
    if (b->a) b->cu.cuMemFree(b->a);
    if (b->b) b->cu.cuMemFree(b->b);
    for (int i = 0; i < 2; i++)
      if (b->ev[i]) b->cu.cuEventDestroy(b->ev[i]);
    if (b->s) b->cu.cuStreamDestroy(b->s);
    if (b->mod) b->cu.cuModuleUnload(b->mod);
    b->cu.cuDevicePrimaryCtxRelease(b->dev);
  }
  gpa__cu_close(&b->cu);
}

static int launch(bare *b) {
  BARE_CALL(b, cuLaunchKernel(b->f, 1, 1, 1, 256, 1, 1, 0, b->s, b->args, NULL));
  return 1;
}

/* ns per launch of n launches and one synchronize; events: two per launch */
static double bare_stream(bare *b, int n, int events) {
  double t0 = gpa_bench_now_ns();
  for (int i = 0; i < n && b->ok; i++) {
    if (events && b->cu.cuEventRecord(b->ev[0], b->s) != CUDA_SUCCESS) return bare_fail(b, "cuEventRecord", 1);
    if (!launch(b)) return 0;
    if (events && b->cu.cuEventRecord(b->ev[1], b->s) != CUDA_SUCCESS) return bare_fail(b, "cuEventRecord", 1);
  }
  if (b->ok && b->cu.cuStreamSynchronize(b->s) != CUDA_SUCCESS) return bare_fail(b, "cuStreamSynchronize", 1);
  return b->ok ? (gpa_bench_now_ns() - t0) / n : 0;
}

/* launch + synchronize, n samples sorted into v */
static int bare_roundtrip(bare *b, double *v, int n) {
  for (int i = 0; i < n; i++) {
    double t0 = gpa_bench_now_ns();
    if (!launch(b)) return 0;
    if (b->cu.cuStreamSynchronize(b->s) != CUDA_SUCCESS) return bare_fail(b, "cuStreamSynchronize", 1);
    v[i] = gpa_bench_now_ns() - t0;
  }
  gpa_bench_sort(v, (size_t)n);
  return 1;
}

/* PyTorch's figures: "name value" lines of bench/actor_torch.py */
typedef struct torch_figs {
  double eager_us, graph_us, sync_p50_us, sync_p99_us;
  int n;
} torch_figs;

static void torch_run(int ops, torch_figs *t) {
  memset(t, 0, sizeof *t);
  char args[64], line[256], name[64];
  snprintf(args, sizeof args, "%d %d %d", TINY, ops, RT_ITERS);
  FILE *f = gpa_bench_script("GPA_BENCH_ACTOR_TORCH", args);
  if (!f) return;
  double v;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%63s %lf", name, &v) == 2) {
      double *dst = !strcmp(name, "eager_us")      ? &t->eager_us
                    : !strcmp(name, "graph_us")    ? &t->graph_us
                    : !strcmp(name, "sync_p50_us") ? &t->sync_p50_us
                    : !strcmp(name, "sync_p99_us") ? &t->sync_p99_us
                                                   : NULL;
      if (dst) *dst = v, t->n++;
    }
  pclose(f);
}

void gpa_bench_cuda_actor_cost(void) {
  int sim;
  gpa_actor *a = gpa_bench_cuda_actor("cuda_actor", &sim);
  if (!a) return;
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(5), ops = sim ? 200 : 20000, rt = sim ? 50 : RT_ITERS;
  uint64_t seed = 24;
  const int64_t n1[1] = {TINY};
  gpa_tensor x = gpa_bench_device_tensor(a, q, GPA_F32, 1, n1, &seed);
  gpa_tensor y = gpa_bench_device_tensor(a, q, GPA_F32, 1, n1, &seed);
  gpa_tensor z = gpa_bench_device_tensor(a, q, GPA_F32, 1, n1, &seed);
  gpa_tensor in[2] = {x, y};
  gpa_op_call add = {"add", in, 2, &z, 1, NULL, 0};
  char err[256] = "";
  gpa_batch_stats st = {.size = sizeof st};
  if (gpa_sync_batch(q, &st) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_actor: %s\n", st.first_error_message);
    gpa_actor_destroy(a);
    return;
  }
  double *v = malloc(sizeof(double) * RT_ITERS);
  bare b;
  int have_bare = bare_open(&b, sim);
  /* ours and the floor alternate, rep by rep: drift hits both alike */
  double ours = 1e300, floor_ns = 1e300, floor_ev = 1e300;
  for (int r = 0; r <= reps && !err[0]; r++) {
    double t0 = gpa_bench_now_ns();
    for (int i = 0; i < ops; i++) gpa_submit(q, &add, NULL);
    if (gpa_sync_batch(q, &st) != GPA_OK) snprintf(err, sizeof err, "%s", st.first_error_message);
    double ns = (gpa_bench_now_ns() - t0) / ops;
    double fl = have_bare ? bare_stream(&b, ops, 0) : 0, fe = have_bare ? bare_stream(&b, ops, 1) : 0;
    if (!r) continue; /* warm-up: module loads, pools */
    if (ns < ours) ours = ns;
    if (fl > 0 && fl < floor_ns) floor_ns = fl;
    if (fe > 0 && fe < floor_ev) floor_ev = fe;
  }
  have_bare = have_bare && b.ok;
  torch_figs tf;
  torch_run(ops, &tf);
  const char *note = sim ? "simulated device: both sides emulated, the numbers mean nothing"
                         : "host wall time per op; floor: the same kernel by bare cuLaunchKernel";
  char extra[512], shape[32];
  snprintf(shape, sizeof shape, "add f32 %d x%d", TINY, ops);
  if (err[0]) {
    fprintf(stderr, "gpa-bench cuda_actor: stream: %s\n", err);
  } else {
    int len = snprintf(extra, sizeof extra, "\"note\":\"%s\",\"bare_with_events_ns\":%.0f", note,
                       have_bare ? floor_ev : 0.0);
    if (tf.n)
      snprintf(extra + len, sizeof extra - (size_t)len, ",\"torch_eager_us\":%.2f,\"torch_graph_us\":%.2f",
               tf.eager_us, tf.graph_us);
    gpa_bench_result res = {.name = "cuda_actor_stream", .backend = sim ? "sim" : "cuda", .shape = shape,
                            .ref = have_bare ? "bare_cuLaunchKernel" : "itself", .ns = ours,
                            .ref_ns = have_bare ? floor_ns : ours, .extra = extra};
    gpa_bench_emit(&res);
  }
  /* the same stream as a batch replayed as one CUDA graph (docs/graphs.md):
   * the host cost of matching and holding each message, then one launch */
  double graphed = 1e300;
  uint32_t how = 0;
  for (int r = 0; r <= reps + 1 && !err[0]; r++) {
    double t0 = gpa_bench_now_ns();
    gpa_batch_options bo = {.size = sizeof bo, .graph = GPA_GRAPH_ON};
    if (gpa_batch_begin_opts(q, "tiny", &bo) != GPA_OK) snprintf(err, sizeof err, "%s", gpa_last_error_message());
    for (int i = 0; i < ops && !err[0]; i++) gpa_submit(q, &add, NULL);
    if (gpa_sync_batch(q, &st) != GPA_OK) snprintf(err, sizeof err, "%s", st.first_error_message);
    double ns = (gpa_bench_now_ns() - t0) / ops;
    how = st.graph;
    if (r < 2) continue; /* the recording and the first replay */
    if (ns < graphed) graphed = ns;
  }
  if (err[0]) {
    fprintf(stderr, "gpa-bench cuda_actor: graph stream: %s\n", err);
  } else {
    int len = snprintf(extra, sizeof extra, "\"note\":\"%s\",\"graph\":%u", note, how);
    if (tf.n) snprintf(extra + len, sizeof extra - (size_t)len, ",\"torch_graph_us\":%.2f", tf.graph_us);
    gpa_bench_result res = {.name = "cuda_actor_stream_graph", .backend = sim ? "sim" : "cuda", .shape = shape,
                            .ref = have_bare ? "bare_cuLaunchKernel" : "itself", .ns = graphed,
                            .ref_ns = have_bare ? floor_ns : graphed, .extra = extra};
    gpa_bench_emit(&res);
  }
  /* round trip: one add submitted with a handle and awaited */
  double p50 = 0, p99 = 0, f50 = 0, f99 = 0;
  int ok = 1;
  for (int i = 0; i < rt + 50 && ok; i++) { /* 50 warm-up */
    gpa_handle *h = NULL;
    double t0 = gpa_bench_now_ns();
    gpa_status s = gpa_submit(q, &add, &h);
    if (s == GPA_OK) s = gpa_await(h, -1);
    double t = gpa_bench_now_ns() - t0;
    if (h) gpa_handle_release(h);
    if (s != GPA_OK) {
      fprintf(stderr, "gpa-bench cuda_actor: roundtrip: %s\n", gpa_last_error_message());
      ok = 0;
    }
    if (i >= 50) v[i - 50] = t;
  }
  if (ok) {
    gpa_bench_sort(v, (size_t)rt);
    p50 = v[rt / 2], p99 = v[rt * 99 / 100];
    if (have_bare && bare_roundtrip(&b, v, rt)) f50 = v[rt / 2], f99 = v[rt * 99 / 100];
    int len = snprintf(extra, sizeof extra, "\"note\":\"%s\",\"p99_ns\":%.0f,\"bare_p99_ns\":%.0f", note, p99, f99);
    if (tf.n)
      snprintf(extra + len, sizeof extra - (size_t)len, ",\"torch_sync_p50_us\":%.2f,\"torch_sync_p99_us\":%.2f",
               tf.sync_p50_us, tf.sync_p99_us);
    gpa_bench_result res = {.name = "cuda_actor_roundtrip", .backend = sim ? "sim" : "cuda", .shape = "add f32 1024",
                            .ref = f50 > 0 ? "bare_launch_sync" : "itself", .ns = p50, .ref_ns = f50 > 0 ? f50 : p50,
                            .extra = extra};
    gpa_bench_emit(&res);
  }
  free(v);
  bare_close(&b);
  gpa_buffer_release(a, x.buffer);
  gpa_buffer_release(a, y.buffer);
  gpa_buffer_release(a, z.buffer);
  gpa_actor_destroy(a);
}
#else
void gpa_bench_cuda_actor_cost(void) {}
#endif
