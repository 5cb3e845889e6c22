/* The CUDA handlers of libgpuactor_xla.so on the simulated device, called
 * the way XLA:GPU calls them: through XLA's FFI C API (ffi_frame.h), with
 * call frames whose buffers are device memory and whose stream is a
 * CUstream this test made through the simulated driver (it plays XLA).
 *
 * Checks: every op handler's results against references computed in double
 * (cuda_sim_ops.c); the order is
 * kept by events on the device (a late XLA stream does not let the actor
 * read its input early, and XLA's later work sees the op's output; no call
 * waits for either); two XLA streams do not wait for each other (a queue
 * each); bad input fails
 * naming the argument; an op failing after its call returned fails the
 * device's next call; the feed calls on a device session
 * (cuda_sim_feed.c); every op's handle completes once (the library's
 * counters); registration for the CUDA platform. Prints the host time a
 * call takes on the simulator.
 *
 * argv[1]: the simulated driver (libgpa_sim_cuda.so). Runs under
 * GPA_DEVICE=sim (the suite's sim pass); skips (77) elsewhere. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_sim.h"

sim_driver cu;
XLA_FFI_Api api;
XLA_FFI_ExecutionContext xla;
static float *pinned; /* staging for XLA's copies */
uint64_t calls_ok;
#define PINNED_FLOATS (1 << 16)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void load_driver(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "cannot open %s: %s\n", path, dlerror());
    exit(1);
  }
#define SYM(f, name) CHECK((*(void **)&cu.f = dlsym(lib, name)) != NULL)
  SYM(init, "cuInit");
  SYM(device_get, "cuDeviceGet");
  SYM(primary_retain, "cuDevicePrimaryCtxRetain");
  SYM(ctx_set, "cuCtxSetCurrent");
  SYM(alloc, "cuMemAlloc_v2");
  SYM(free, "cuMemFree_v2");
  SYM(htod, "cuMemcpyHtoD_v2");
  SYM(htod_async, "cuMemcpyHtoDAsync_v2");
  SYM(dtoh_async, "cuMemcpyDtoHAsync_v2");
  SYM(alloc_host, "cuMemAllocHost_v2");
  SYM(free_host, "cuMemFreeHost");
  SYM(stream_create, "cuStreamCreate");
  SYM(stream_sync, "cuStreamSynchronize");
  SYM(stream_destroy, "cuStreamDestroy_v2");
  SYM(delay, "gpa_sim_fault_stream_delay");
  SYM(fault_launch, "gpa_sim_fault_launch");
#undef SYM
}

dptr upload(const float *x, size_t n) {
  dptr p;
  CHECK(cu.alloc(&p, n * sizeof *x) == 0);
  CHECK(cu.htod(p, x, n * sizeof *x) == 0);
  return p;
}
dptr zeros(size_t n) {
  float *z = calloc(n, sizeof *z);
  dptr p = upload(z, n);
  free(z);
  return p;
}
/* As XLA does when it returns a result to the host. */
void xla_read(dptr p, float *out, size_t n) {
  CHECK(n <= PINNED_FLOATS);
  CHECK(cu.dtoh_async(pinned, p, n * sizeof *out, xla.stream) == 0);
  CHECK(cu.stream_sync(xla.stream) == 0);
  memcpy(out, pinned, n * sizeof *out);
}

void rnd(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) / 16777216.0 * 2.0 - 1.0);
  }
}

void close_to(const char *what, const float *got, const double *ref, size_t n, double rtol) {
  double mx = 0;
  for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
  for (size_t i = 0; i < n; i++)
    if (!(fabs(got[i] - ref[i]) <= rtol * fabs(ref[i]) + rtol * 1e-2 * mx)) {
      fprintf(stderr, "%s[%zu] = %.9g, reference %.9g\n", what, i, got[i], ref[i]);
      exit(1);
    }
}

void expect_ok(XLA_FFI_Error *e, const char *what) {
  if (e) {
    fprintf(stderr, "%s: unexpected error: %s\n", what, e->msg);
    exit(1);
  }
  calls_ok++;
}
static void expect_error(XLA_FFI_Error *e, XLA_FFI_Error_Code code, const char *text) {
  if (!e || e->code != code || !strstr(e->msg, text)) {
    fprintf(stderr, "expected error %d containing '%s', got %s%s\n", code, text, e ? "" : "none",
            e ? e->msg : "");
    exit(1);
  }
  free(e);
}

static double gelu_ref(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

static XLA_FFI_Error *gelu(dptr x, dptr y, int64_t n) {
  ff_frame b;
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, x, 1, &n);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, y, 1, &n);
  return gpa_xla_cuda_gelu_fwd(&b.f);
}

enum { N = 4096 };

static void check_gelu(dptr y, const float *x) {
  static float got[N];
  static double ref[N];
  xla_read(y, got, N);
  for (int i = 0; i < N; i++) ref[i] = gelu_ref(x[i]);
  close_to("gelu y", got, ref, N, 1e-5);
}

/* A late XLA stream: its write of the input lands 300 ms after the call;
 * the op must read it (the queue waits for XLA's event on the device), and
 * the call must not wait for it. */
static void ordering_input(void) {
  static float x[N];
  rnd(x, N, 7);
  dptr dx = zeros(N), dy = zeros(N);
  cu.delay(xla.stream, 300000);
  memcpy(pinned, x, sizeof x);
  CHECK(cu.htod_async(dx, pinned, sizeof x, xla.stream) == 0);
  double t0 = now_ms();
  expect_ok(gelu(dx, dy, N), "gelu after a late write");
  double took = now_ms() - t0;
  printf("call with XLA's stream 300 ms behind returned in %.2f ms\n", took);
  CHECK(took < 150);
  cu.delay(xla.stream, 0);
  check_gelu(dy, x);
  cu.free(dx), cu.free(dy);
}

static gpa_xla_stats stats(void);

/* Two XLA streams, one 300 ms late: each has a queue of its own, so the
 * other stream's call runs at once. Its result is on its stream in well
 * under 300 ms and its handles complete (the completion thread does not
 * wait for the late stream's op first); the late stream's result, read on
 * that stream, is right once it has run. With one queue for both (the
 * mutant: every stream on the default queue), the second call's op waits
 * for the late stream and this fails. */
static void two_streams(void) {
  static float x[N], x2[N];
  rnd(x, N, 11), rnd(x2, N, 12);
  dptr dx = upload(x, N), dy = zeros(N), dx2 = upload(x2, N), dy2 = zeros(N);
  void *late;
  CHECK(cu.stream_create(&late, 0) == 0);
  cu.delay(late, 300000);
  XLA_FFI_ExecutionContext main_ctx = xla;
  xla.stream = late;
  double t0 = now_ms();
  expect_ok(gelu(dx2, dy2, N), "gelu on the late stream");
  xla = main_ctx;
  expect_ok(gelu(dx, dy, N), "gelu on the other stream");
  check_gelu(dy, x); /* XLA's copy on its own stream, after the op by the event */
  gpa_xla_stats s = stats();
  while (s.watched_done + 1 < s.watched && now_ms() - t0 < 5000) s = stats();
  double took = now_ms() - t0;
  printf("a call on a second XLA stream, the first 300 ms late: result and completion in %.2f ms\n", took);
  CHECK(took < 150);
  CHECK(s.watched_done + 1 == s.watched); /* only the late stream's call is pending */
  cu.delay(late, 0);
  xla.stream = late;
  check_gelu(dy2, x2);
  xla = main_ctx;
  CHECK(cu.stream_destroy(late) == 0);
  cu.free(dx), cu.free(dy), cu.free(dx2), cu.free(dy2);
}

/* Bad input: an XLA error naming the argument; nothing enqueued. */
static void errors(void) {
  dptr dx = zeros(64), dy = zeros(64);
  int64_t n = 64, three[3] = {4, 4, 4}, two[2] = {8, 8}, one[1] = {8};
  ff_frame b;
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_S16, dx, 1, &n);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, &n);
  expect_error(gpa_xla_cuda_gelu_fwd(&b.f), XLA_FFI_Error_Code_INVALID_ARGUMENT, "gpuactor_gelu_fwd: x has dtype s16");

  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 3, three);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 1, one);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 1, one);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 3, three);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, one);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, one);
  expect_error(gpa_xla_cuda_layernorm_fwd(&b.f), XLA_FFI_Error_Code_INVALID_ARGUMENT, "x has rank 3, not 2");

  ff_init(&b, &api, &xla); /* the op's own validation, from gpa_submit */
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 2, two);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, &n);
  expect_error(gpa_xla_cuda_gelu_fwd(&b.f), XLA_FFI_Error_Code_INVALID_ARGUMENT, "gpuactor_gelu_fwd: gelu_fwd:");

  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 1, &n);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, &n);
  ff_attr_str(&b, "op", "no_such_op");
  expect_error(gpa_xla_cuda_op(&b.f), XLA_FFI_Error_Code_NOT_FOUND, "no_such_op");

  ff_init(&b, &api, &xla);
  int64_t q[4] = {1, 2, 2, 16};
  for (int i = 0; i < 3; i++) ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 4, q);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 4, q);
  int64_t l[3] = {1, 2, 2};
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 3, l);
  expect_error(gpa_xla_cuda_attention_fwd(&b.f), XLA_FFI_Error_Code_INVALID_ARGUMENT, "missing attribute 'causal'");

  static float host[64]; /* not device memory: the actor refuses to wrap it */
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, (dptr)(uintptr_t)host, 1, &n);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, &n);
  expect_error(gpa_xla_cuda_gelu_fwd(&b.f), XLA_FFI_Error_Code_UNIMPLEMENTED, "cannot use x in place");

  XLA_FFI_ExecutionContext none = {NULL, 0}; /* XLA gives no stream */
  ff_init(&b, &api, &none);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 1, &n);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, &n);
  expect_error(gpa_xla_cuda_gelu_fwd(&b.f), XLA_FFI_Error_Code_FAILED_PRECONDITION, "no stream");
  XLA_FFI_ExecutionContext far = {xla.stream, 3}; /* a device the simulator lacks */
  ff_init(&b, &api, &far);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 1, &n);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 1, &n);
  expect_error(gpa_xla_cuda_gelu_fwd(&b.f), XLA_FFI_Error_Code_UNAVAILABLE, "device 0 only");
  cu.free(dx), cu.free(dy);
}

static gpa_xla_stats stats(void) {
  gpa_xla_stats s;
  char msg[256];
  CHECK(gpa_xla_stats_get(&s, msg, sizeof msg) == 0);
  return s;
}
/* Every op handed to the completion thread has completed (its handle
 * awaited, its wraps given back). */
static gpa_xla_stats settle(void) {
  double t0 = now_ms();
  gpa_xla_stats s = stats();
  while (s.watched_done != s.watched && now_ms() - t0 < 20000) s = stats();
  CHECK(s.watched_done == s.watched);
  return s;
}

/* An op that fails on the actor after its call returned (a refused kernel
 * launch) fails the device's next call, once. */
static void deferred(void) {
  static float x[N];
  rnd(x, N, 31);
  dptr dx = upload(x, N), dy = zeros(N);
  uint64_t before = settle().deferred_errors;
  cu.fault_launch(1);
  expect_ok(gelu(dx, dy, N), "gelu whose launch fails later");
  CHECK(settle().deferred_errors == before + 1);
  expect_error(gelu(dx, dy, N), XLA_FFI_Error_Code_INTERNAL, "an earlier gpuactor call on device 0 failed");
  expect_ok(gelu(dx, dy, N), "gelu after the failure");
  check_gelu(dy, x);
  cu.free(dx), cu.free(dy);
}

/* Host time of a call: a chain of gelu calls on 16 floats, against the
 * do-nothing handler, best of 5 rounds. */
static void host_time(void) {
  enum { CALLS = 300 };
  float x[16];
  rnd(x, 16, 41);
  dptr a = upload(x, 16), c = zeros(16);
  double best = 1e9, base = 1e9;
  for (int round = 0; round < 5; round++) {
    double t0 = now_ms();
    for (int i = 0; i < CALLS; i++) expect_ok(gelu(i & 1 ? c : a, i & 1 ? a : c, 16), "timed gelu");
    best = fmin(best, (now_ms() - t0) * 1e3 / CALLS);
    CHECK(cu.stream_sync(xla.stream) == 0);
    ff_frame b;
    ff_init(&b, &api, &xla);
    t0 = now_ms();
    for (int i = 0; i < CALLS; i++) CHECK(gpa_xla_nothing(&b.f) == NULL);
    base = fmin(base, (now_ms() - t0) * 1e3 / CALLS);
  }
  printf("host time per CUDA handler call on the simulator: gelu_fwd %.1f us, nothing %.2f us\n", best, base);
  settle();
  cu.free(a), cu.free(c);
}

static void registration(void) {
  char msg[256] = "";
  CHECK(gpa_xla_register(&api, "CUDA", NULL, msg, sizeof msg) == 0);
  int n = 0;
  for (const gpa_xla_target *t = gpa_xla_cuda_targets(); t->name; t++, n++) {
    CHECK(!strcmp(ff_reg[n].name, t->name) && !strcmp(ff_reg[n].platform, "CUDA"));
    CHECK(ff_reg[n].execute == t->handler);
  }
  CHECK(n == 12 && ff_n_reg == n);
  CHECK(ff_reg[4].execute == gpa_xla_cuda_gelu_fwd);
  /* The metadata query XLA sends at registration. */
  XLA_FFI_Metadata m;
  memset(&m, 0, sizeof m);
  m.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  XLA_FFI_Metadata_Extension ext = {{XLA_FFI_Metadata_Extension_STRUCT_SIZE, XLA_FFI_Extension_Metadata, NULL}, &m};
  XLA_FFI_CallFrame f;
  memset(&f, 0, sizeof f);
  f.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE, f.extension_start = &ext.extension_base;
  CHECK(gpa_xla_cuda_attention_fwd(&f) == NULL);
  CHECK(m.api_version.major_version == XLA_FFI_API_MAJOR && m.api_version.minor_version == XLA_FFI_API_MINOR);
}

int main(int argc, char **argv) {
  const char *dev = getenv("GPA_DEVICE");
  if (!dev || strcmp(dev, "sim")) {
    fprintf(stderr, "skipped: the CUDA handlers' test runs on the simulated device (GPA_DEVICE=sim)\n");
    return 77;
  }
  CHECK(argc == 2);
  load_driver(argv[1]);
  api = ff_api();
  int d;
  void *ctx;
  CHECK(cu.init(0) == 0 && cu.device_get(&d, 0) == 0 && cu.primary_retain(&ctx, d) == 0 && cu.ctx_set(ctx) == 0);
  CHECK(cu.stream_create(&xla.stream, 0) == 0);
  CHECK(cu.alloc_host((void **)&pinned, PINNED_FLOATS * sizeof(float)) == 0);

  /* The first call makes the device's actor: not part of the timings. */
  static float x[N];
  rnd(x, N, 3);
  dptr dx = upload(x, N), dy = zeros(N);
  expect_ok(gelu(dx, dy, N), "first gelu");
  check_gelu(dy, x);
  cu.free(dx), cu.free(dy);
  ordering_input();
  two_streams();
  ops();
  ops_backward();
  errors();
  feeds();
  deferred();
  host_time();
  registration(); /* its metadata query, as XLA's, passes no api: the last one a call saw stays */
  CHECK(gpa_xla_api() == &api);
  gpa_xla_stats s = settle();
  printf("calls %llu, handed to the completion thread %llu, completed %llu, deferred errors %llu, "
         "bytes uploaded %llu\n", (unsigned long long)s.calls, (unsigned long long)s.watched,
         (unsigned long long)s.watched_done, (unsigned long long)s.deferred_errors,
         (unsigned long long)s.bytes_uploaded);
  CHECK(s.watched == calls_ok && s.calls == calls_ok);
  CHECK(cu.stream_destroy(xla.stream) == 0);
  cu.free_host(pinned);
  printf("xla cuda handlers on sim: ok\n");
  return 0;
}
