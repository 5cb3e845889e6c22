/* Host time of one CUDA XLA handler call (gpa_xla_cuda_gelu_fwd on 16
 * floats), against the do-nothing handler: the median of many calls, each
 * timed alone. This program plays XLA (as test_xla_cuda_sim does): it makes
 * XLA's stream and buffers through the driver library it is given and
 * hands the handler call frames of its own, so what is timed is the
 * handler alone (its events, its round trip to the actor), without JAX.
 * The driver: the simulated one (GPA_DEVICE=sim, libgpa_sim_cuda.so) or,
 * on a GPU, the real one (GPA_DEVICE=cuda, libcuda.so.1, the default there).
 * GPA_XLA_WAIT_CALL=1 selects the queue's wait by a round trip (the handler
 * before the wait op), so that A/B runs alternate processes
 * (docs/benchmarks.md has the loop).
 *
 * Usage: GPA_DEVICE=sim bench_xla_cuda <libgpa_sim_cuda.so> [calls]
 *        GPA_DEVICE=cuda bench_xla_cuda [libcuda.so.1] [calls] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ffi_frame.h"
#include "gpuactor_xla.h"

typedef unsigned long long dptr;
static struct {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*primary_retain)(void **, int);
  int (*ctx_set)(void *);
  int (*alloc)(dptr *, size_t);
  int (*htod)(dptr, const void *, size_t);
  int (*stream_create)(void **, unsigned);
  int (*stream_sync)(void *);
} cu;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000ll + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *dev = getenv("GPA_DEVICE");
  int sim = dev && !strcmp(dev, "sim"), real = dev && !strcmp(dev, "cuda");
  /* The driver library: argv[1] unless it is the count (cuda's default). */
  int named = argc > 1 && !(real && strspn(argv[1], "0123456789") == strlen(argv[1]));
  const char *driver = named ? argv[1] : real ? "libcuda.so.1" : NULL;
  if ((!sim && !real) || !driver) {
    fprintf(stderr, "usage: GPA_DEVICE=sim %s <libgpa_sim_cuda.so> [calls]\n"
                    "       GPA_DEVICE=cuda %s [libcuda.so.1] [calls]\n", argv[0], argv[0]);
    return 2;
  }
  int calls = argc > 1 + named ? atoi(argv[1 + named]) : 2000;
  if (calls < 10) return fprintf(stderr, "calls: at least 10\n"), 2;
  /* The handlers' actor loads the same library (GPA_DEVICE=sim: the
   * simulator's, cuda: libcuda.so.1), so both sides share its context. */
  void *lib = dlopen(driver, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return fprintf(stderr, "%s\n", dlerror()), 1;
  *(void **)&cu.init = dlsym(lib, "cuInit");
  *(void **)&cu.device_get = dlsym(lib, "cuDeviceGet");
  *(void **)&cu.primary_retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.ctx_set = dlsym(lib, "cuCtxSetCurrent");
  *(void **)&cu.alloc = dlsym(lib, "cuMemAlloc_v2");
  *(void **)&cu.htod = dlsym(lib, "cuMemcpyHtoD_v2");
  *(void **)&cu.stream_create = dlsym(lib, "cuStreamCreate");
  *(void **)&cu.stream_sync = dlsym(lib, "cuStreamSynchronize");
  for (void **f = (void **)&cu; f < (void **)(&cu + 1); f++)
    if (!*f) return fprintf(stderr, "%s lacks a driver call this program uses\n", driver), 1;
  int d;
  void *ctx;
  static XLA_FFI_ExecutionContext xla;
  if (cu.init(0) || cu.device_get(&d, 0) || cu.primary_retain(&ctx, d) || cu.ctx_set(ctx) ||
      cu.stream_create(&xla.stream, 0))
    return fprintf(stderr, "the driver (%s) failed to give a device, context and stream\n", driver), 1;
  XLA_FFI_Api api = ff_api();
  float x[16] = {0.5f};
  dptr a, c;
  if (cu.alloc(&a, sizeof x) || cu.alloc(&c, sizeof x) || cu.htod(a, x, sizeof x) || cu.htod(c, x, sizeof x))
    return fprintf(stderr, "cuMemAlloc failed\n"), 1;
  int64_t n = 16, *t_call = malloc(calls * sizeof *t_call), *t_none = malloc(calls * sizeof *t_none);
  ff_frame b;
  for (int i = -100; i < calls; i++) { /* the first 100: the actor's creation and warm-up */
    ff_init(&b, &api, &xla);
    ff_buf(&b, 0, XLA_FFI_DataType_F32, i & 1 ? c : a, 1, &n);
    ff_buf(&b, 1, XLA_FFI_DataType_F32, i & 1 ? a : c, 1, &n);
    int64_t t0 = now_ns();
    XLA_FFI_Error *e = gpa_xla_cuda_gelu_fwd(&b.f);
    int64_t t1 = now_ns();
    if (e) return fprintf(stderr, "gelu_fwd: %s\n", e->msg), 1;
    ff_init(&b, &api, &xla);
    int64_t t2 = now_ns();
    if (gpa_xla_nothing(&b.f)) return 1;
    int64_t t3 = now_ns();
    if (i >= 0) t_call[i] = t1 - t0, t_none[i] = t3 - t2;
    if ((i & 63) == 63) cu.stream_sync(xla.stream); /* XLA's stream does not run away */
  }
  cu.stream_sync(xla.stream);
  qsort(t_call, calls, sizeof *t_call, cmp);
  qsort(t_none, calls, sizeof *t_none, cmp);
  const char *mode = getenv("GPA_XLA_WAIT_CALL");
  printf("cuda gelu_fwd handler on %s (%s): median %.1f us, p10 %.1f, p90 %.1f; nothing %.2f us; %d calls\n",
         sim ? "sim" : "cuda", mode && !strcmp(mode, "1") ? "two round trips" : "one round trip", t_call[calls / 2] / 1e3,
         t_call[calls / 10] / 1e3, t_call[calls * 9 / 10] / 1e3, t_none[calls / 2] / 1e3, calls);
  return 0;
}
