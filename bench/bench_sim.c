/* gpa-bench sim_layernorm: the layernorm-forward CUDA kernel
 * (sim/tests/kernels/layernorm_fixture.cu) run by the simulated device's SIMT emulator,
 * against a plain single-threaded C layernorm on the same shape. It measures
 * what the emulation costs (ratio = host time / emulated time, so a value of
 * 0.02 means 50x slower); the target is a slowdown under 100x, which keeps
 * the sim test suite fast on 2 cores. */
#ifdef GPA_BENCH_SIM
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "gpa_sim_layernorm_fatbin.h"

enum { LN_N = 1024, LN_D = 1024, LN_ROWS_PER_BLOCK = 8 };

typedef struct sim_ln {
  CUfunction f;
  CUdeviceptr x, g, b, y, mean, rstd;
  int n, d;
  float eps;
  int failed;
} sim_ln;

static void sim_run(void *p) {
  sim_ln *s = p;
  void *args[] = {&s->x, &s->g, &s->b, &s->y, &s->mean, &s->rstd, &s->n, &s->d, &s->eps};
  unsigned grid = (unsigned)((s->n + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK);
  if (cuLaunchKernel(s->f, grid, 1, 1, 32, LN_ROWS_PER_BLOCK, 1, 0, NULL, args, NULL) != CUDA_SUCCESS ||
      cuCtxSynchronize() != CUDA_SUCCESS)
    s->failed = 1;
}

typedef struct host_ln {
  const float *x, *g, *b;
  float *y, *mean, *rstd;
  int n, d;
  float eps;
} host_ln;

/* The plain C reference: two passes per row, like the kernel. */
static void host_run(void *p) {
  host_ln *h = p;
  for (int r = 0; r < h->n; r++) {
    const float *xr = h->x + (size_t)r * h->d;
    float *yr = h->y + (size_t)r * h->d;
    float s = 0;
    for (int i = 0; i < h->d; i++) s += xr[i];
    const float mu = s / (float)h->d;
    float v = 0;
    for (int i = 0; i < h->d; i++) v += (xr[i] - mu) * (xr[i] - mu);
    const float rs = 1.0f / sqrtf(v / (float)h->d + h->eps);
    for (int i = 0; i < h->d; i++) yr[i] = (xr[i] - mu) * rs * h->g[i] + h->b[i];
    h->mean[r] = mu;
    h->rstd[r] = rs;
  }
}

void gpa_bench_sim_layernorm(void) {
  const size_t nx = (size_t)LN_N * LN_D;
  float *x = malloc(nx * 4), *y = malloc(nx * 4), *ys = malloc(nx * 4), *g = malloc(LN_D * 4), *b = malloc(LN_D * 4);
  float *mean = malloc(LN_N * 4), *rstd = malloc(LN_N * 4);
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  sim_ln s = {0};
  if (!x || !y || !ys || !g || !b || !mean || !rstd) goto out;
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 2654435761u) % 1000) / 250.0f - 2.0f;
  for (int i = 0; i < LN_D; i++) g[i] = 1.0f + (float)(i % 7) / 70.0f, b[i] = (float)(i % 5) / 50.0f;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuModuleLoadData(&mod, gpa_fatbin_gpa_sim_layernorm) ||
      cuModuleGetFunction(&s.f, mod, "gpa_layernorm_fwd_f32")) {
    fprintf(stderr, "sim_layernorm: cannot set up the simulated device\n");
    goto out;
  }
  s.n = LN_N, s.d = LN_D, s.eps = 1e-5f;
  if (cuMemAlloc(&s.x, nx * 4) || cuMemAlloc(&s.y, nx * 4) || cuMemAlloc(&s.g, LN_D * 4) ||
      cuMemAlloc(&s.b, LN_D * 4) || cuMemAlloc(&s.mean, LN_N * 4) || cuMemAlloc(&s.rstd, LN_N * 4) ||
      cuMemcpyHtoD(s.x, x, nx * 4) || cuMemcpyHtoD(s.g, g, LN_D * 4) || cuMemcpyHtoD(s.b, b, LN_D * 4)) {
    fprintf(stderr, "sim_layernorm: device memory set-up failed\n");
    goto release;
  }
  host_ln h = {x, g, b, y, mean, rstd, LN_N, LN_D, 1e-5f};
  int reps = gpa_bench_reps(5);
  double ns = gpa_bench_best_ns(reps, sim_run, &s);
  double ref_ns = gpa_bench_best_ns(reps, host_run, &h);
  double maxdiff = 0;
  if (!s.failed && cuMemcpyDtoH(ys, s.y, nx * 4) == CUDA_SUCCESS)
    for (size_t i = 0; i < nx; i++) maxdiff = fmax(maxdiff, fabs((double)ys[i] - y[i]));
  else
    s.failed = 1;
  char extra[96];
  snprintf(extra, sizeof extra, "\"slowdown\":%.1f,\"max_abs_diff\":%.2g,\"ok\":%s", ns / ref_ns, maxdiff,
           !s.failed && maxdiff < 1e-4 ? "true" : "false");
  gpa_bench_result r = {.name = "sim_layernorm", .backend = "sim", .shape = "1024x1024", .ref = "host_layernorm",
                        .ns = ns, .ref_ns = ref_ns, .bytes = (double)(2 * nx + 2 * LN_D + 2 * LN_N) * 4,
                        .extra = extra};
  gpa_bench_emit(&r);
release:
  cuDevicePrimaryCtxRelease(dev);
out:
  free(x), free(y), free(ys), free(g), free(b), free(mean), free(rstd);
}
#endif
