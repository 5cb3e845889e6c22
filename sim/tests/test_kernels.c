/* Kernels of kernels/cuda and the 16-bit/wmma emulation against C
 * references: layernorm forward (the bench kernel), wmma tiles in half and
 * bf16 with fp32 accumulate, fp16/bf16 intrinsics and math functions. */
#include <math.h>
#include "sim_test.h"
#include "gpa_sim_layernorm_fatbin.h"
#include "sim_wmma_kernels_fatbin.h"

static float rnd(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 65536.0f * 4.0f - 2.0f;
}

static int t_layernorm(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_gpa_sim_layernorm));
  CUfunction f = sim_kernel(m, "gpa_layernorm_fwd_f32");
  const int n = 37, d = 1000, rows_per_block = 4;
  size_t nx = (size_t)n * d;
  float *x = malloc(nx * 4), *y = malloc(nx * 4), *g = malloc(d * 4), *b = malloc(d * 4), mean[37], rstd[37];
  unsigned s = 1;
  for (size_t i = 0; i < nx; i++) x[i] = rnd(&s) + (float)(i / d) * 0.1f;
  for (int i = 0; i < d; i++) g[i] = 1.0f + rnd(&s) * 0.1f, b[i] = rnd(&s) * 0.1f;
  CUdeviceptr dx, dy, dg, db, dm, dr, null = 0;
  CK(cuMemAlloc(&dx, nx * 4));
  CK(cuMemAlloc(&dy, nx * 4));
  CK(cuMemAlloc(&dg, d * 4));
  CK(cuMemAlloc(&db, d * 4));
  CK(cuMemAlloc(&dm, n * 4));
  CK(cuMemAlloc(&dr, n * 4));
  CK(cuMemcpyHtoD(dx, x, nx * 4));
  CK(cuMemcpyHtoD(dg, g, d * 4));
  CK(cuMemcpyHtoD(db, b, d * 4));
  float eps = 1e-5f;
  int nn = n, dd = d;
  void *args[] = {&dx, &dg, &db, &dy, &dm, &dr, &nn, &dd, &eps};
  unsigned grid = (unsigned)((n + rows_per_block - 1) / rows_per_block);
  CK(cuLaunchKernel(f, grid, 1, 1, 32, rows_per_block, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(y, dy, nx * 4));
  CK(cuMemcpyDtoH(mean, dm, n * 4));
  CK(cuMemcpyDtoH(rstd, dr, n * 4));
  for (int r = 0; r < n; r++) {
    double mu = 0, var = 0;
    for (int i = 0; i < d; i++) mu += x[r * d + i];
    mu /= d;
    for (int i = 0; i < d; i++) var += (x[r * d + i] - mu) * (x[r * d + i] - mu);
    var /= d;
    double rs = 1.0 / sqrt(var + eps);
    CHECK(fabs(mean[r] - mu) < 1e-5 * (1 + fabs(mu)));
    CHECK(fabs(rstd[r] - rs) < 1e-5 * rs);
    for (int i = 0; i < d; i++) {
      double want = (x[r * d + i] - mu) * rs * g[i] + b[i];
      CHECK(fabs(y[r * d + i] - want) < 1e-4 * (1 + fabs(want)));
    }
  }
  void *args2[] = {&dx, &dg, &db, &dy, &null, &null, &nn, &dd, &eps}; /* mean/rstd are optional */
  CK(cuLaunchKernel(f, grid, 1, 1, 32, rows_per_block, 1, 0, NULL, args2, NULL));
  CK(cuCtxSynchronize());
  CUdeviceptr all[] = {dx, dy, dg, db, dm, dr};
  for (int i = 0; i < 6; i++) CK(cuMemFree(all[i]));
  free(x), free(y), free(g), free(b);
  sim_teardown();
  return 0;
}

static uint16_t f2h(float f) { /* exact for the small values used here */
  uint32_t u;
  memcpy(&u, &f, 4);
  if (!(u & 0x7fffffffu)) return (uint16_t)(u >> 16);
  return (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 112) << 10) | ((u >> 13) & 0x3ff));
}
static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static int t_wmma(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_wmma_kernels));
  enum { M = 32, N = 48, K = 64 };
  float a[M * K], b[K * N], c[M * N], ref[M * N];
  uint16_t ha[M * K], hb[K * N];
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 9 - 4) / 4.0f; /* exact in half and bf16 */
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 7 - 3) / 2.0f;
  CUdeviceptr da, db, dc;
  CK(cuMemAlloc(&da, sizeof ha));
  CK(cuMemAlloc(&db, sizeof hb));
  CK(cuMemAlloc(&dc, sizeof c));
  int mm = M, nn = N, kk = K;
  void *args[] = {&da, &db, &dc, &mm, &nn, &kk};
  unsigned warps = (M / 16) * (N / 16);
  /* half: A row-major [M][K], B col-major (column j at b + j*K), C row-major, scaled by 2 */
  for (int i = 0; i < M * K; i++) ha[i] = f2h(a[i]);
  for (int i = 0; i < K * N; i++) hb[i] = f2h(b[i]);
  CK(cuMemcpyHtoD(da, ha, sizeof ha));
  CK(cuMemcpyHtoD(db, hb, sizeof hb));
  CK(cuLaunchKernel(sim_kernel(m, "sim_wmma_f16"), warps, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(c, dc, sizeof c));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = 0;
      for (int l = 0; l < K; l++) s += a[i * K + l] * b[j * K + l];
      CHECK(c[i * N + j] == 2.0f * s);
    }
  /* bf16: A col-major (a[l*M+i]), B row-major (b[l*N+j]), C col-major accumulated */
  for (int i = 0; i < M * K; i++) ha[i] = f2bf(a[i]);
  for (int i = 0; i < K * N; i++) hb[i] = f2bf(b[i]);
  for (int i = 0; i < M * N; i++) c[i] = ref[i] = (float)(i % 3);
  CK(cuMemcpyHtoD(da, ha, sizeof ha));
  CK(cuMemcpyHtoD(db, hb, sizeof hb));
  CK(cuMemcpyHtoD(dc, c, sizeof c));
  CK(cuLaunchKernel(sim_kernel(m, "sim_wmma_bf16"), warps, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(c, dc, sizeof c));
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = ref[j * M + i];
      for (int l = 0; l < K; l++) s += a[l * M + i] * b[l * N + j];
      CHECK(c[j * M + i] == s);
    }
  CK(cuMemFree(da));
  CK(cuMemFree(db));
  CK(cuMemFree(dc));
  sim_teardown();
  return 0;
}

static int t_half_math(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_wmma_kernels));
  enum { N = 64 };
  float x[N], o[N * 8];
  for (int i = 0; i < N; i++) x[i] = (float)(i - 32) / 16.0f;
  CUdeviceptr dx, dout;
  CK(cuMemAlloc(&dx, sizeof x));
  CK(cuMemAlloc(&dout, sizeof o));
  CK(cuMemcpyHtoD(dx, x, sizeof x));
  int n = N;
  void *args[] = {&dx, &dout, &n};
  CK(cuLaunchKernel(sim_kernel(m, "sim_half_math"), 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(o, dout, sizeof o));
  for (int i = 0; i < N; i++) {
    float v = x[i], *r = o + i * 8;
    CHECK(fabsf(r[0] - (v * v + 1)) < 2e-3f * (1 + v * v));
    CHECK(fabsf(r[1] - (v * v + 1)) < 1e-2f * (1 + v * v));
    CHECK(fabsf(r[2] - expf(v)) < 2e-3f * expf(v));
    CHECK(fabsf(r[3] - sqrtf(fabsf(v))) < 1e-2f);
    CHECK(r[4] == x[i ^ 1]);
    CHECK(fabsf(r[5] - (expf(v) + 1 / sqrtf(fabsf(v) + 1))) < 1e-5f * (1 + expf(v)));
    CHECK(fabsf(r[6] - (tanhf(v) + erff(v) + v / 3)) < 1e-5f);
    CHECK(fabsf(r[7] - (v + 4 * v * v)) < 1e-2f * (1 + 4 * v * v));
  }
  CK(cuMemFree(dx));
  CK(cuMemFree(dout));
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"layernorm", t_layernorm}, {"wmma", t_wmma}, {"half_math", t_half_math},
  };
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
