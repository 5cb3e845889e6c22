/* SIMT emulator tests: kernels with barriers, shuffles, votes, atomics,
 * dynamic shared memory and both parameter forms, against C references. */
#include "sim_test.h"
#include "sim_simt_kernels_fatbin.h"

static CUmodule load(void) {
  CUmodule m;
  sim_setup();
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_simt_kernels));
  return m;
}

static int t_barrier(void) {
  CUmodule m = load();
  enum { BX = 16, BY = 8, NB = 37, N = BX * BY * NB };
  int in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = i * 7 + 1;
  CUdeviceptr din, dout;
  CK(cuMemAlloc(&din, sizeof in));
  CK(cuMemAlloc(&dout, sizeof out));
  CK(cuMemcpyHtoD(din, in, sizeof in));
  void *args[] = {&din, &dout};
  CK(cuLaunchKernel(sim_kernel(m, "sim_reverse"), NB, 1, 1, BX, BY, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(out, dout, sizeof out));
  for (int b = 0; b < NB; b++)
    for (int t = 0; t < BX * BY; t++) CHECK(out[b * BX * BY + t] == in[b * BX * BY + BX * BY - 1 - t]);

  /* tree sum + barrier votes, 1024-thread blocks */
  enum { T = 1024, B = 6 };
  static float fin[T * B];
  float sums[B];
  int votes[B * 3];
  for (int i = 0; i < T * B; i++) fin[i] = (float)(i % 13);
  CUdeviceptr dfin, dsums, dvotes;
  CK(cuMemAlloc(&dfin, sizeof fin));
  CK(cuMemAlloc(&dsums, sizeof sums));
  CK(cuMemAlloc(&dvotes, sizeof votes));
  CK(cuMemcpyHtoD(dfin, fin, sizeof fin));
  void *a2[] = {&dfin, &dsums, &dvotes};
  CK(cuLaunchKernel(sim_kernel(m, "sim_block_sum"), B, 1, 1, T, 1, 1, 0, NULL, a2, NULL));
  CK(cuMemcpyDtoH(sums, dsums, sizeof sums));
  CK(cuMemcpyDtoH(votes, dvotes, sizeof votes));
  for (int b = 0; b < B; b++) {
    float ref = 0;
    for (int t = 0; t < T; t++) ref += fin[b * T + t];
    CHECK(sums[b] == ref);
    CHECK(votes[b * 3 + 0] == (T + 2) / 3);
    CHECK(votes[b * 3 + 1] == 1);
    CHECK(votes[b * 3 + 2] == 1);
  }
  CK(cuMemFree(din));
  CK(cuMemFree(dout));
  CK(cuMemFree(dfin));
  CK(cuMemFree(dsums));
  CK(cuMemFree(dvotes));
  CK(cuModuleUnload(m));
  sim_teardown();
  return 0;
}

static int t_shuffle(void) {
  CUmodule m = load();
  enum { T = 96, B = 3, N = T * B };
  int in[N], out[N * 10];
  for (int i = 0; i < N; i++) in[i] = (i * 37) % 101;
  CUdeviceptr din, dout;
  CK(cuMemAlloc(&din, sizeof in));
  CK(cuMemAlloc(&dout, sizeof out));
  CK(cuMemcpyHtoD(din, in, sizeof in));
  void *args[] = {&din, &dout};
  CK(cuLaunchKernel(sim_kernel(m, "sim_shuffles"), B, 1, 1, T, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(out, dout, sizeof out));
  for (int g = 0; g < N; g++) {
    int lane = g % 32, w0 = g - lane;
    const int *o = out + g * 10;
    CHECK(o[0] == in[w0 + 3]);
    CHECK(o[1] == (lane >= 2 ? in[g - 2] : in[g]));
    CHECK(o[2] == (lane + 5 < 32 ? in[g + 5] : in[g]));
    CHECK(o[3] == in[w0 + (lane ^ 7)]);
    CHECK(o[4] == in[w0 + (lane & ~7) + ((lane + 1) & 7)]);
    unsigned ballot = 0;
    int any = 0, sum = 0;
    for (int l = 0; l < 32; l++) {
      if (in[w0 + l] & 1) ballot |= 1u << l;
      any |= in[w0 + l] == 1000;
      sum += in[w0 + l];
    }
    CHECK((unsigned)o[5] == ballot);
    CHECK(o[6] == any);
    CHECK(o[7] == 1);
    CHECK(o[8] == sum);
    if (lane & 1) CHECK(o[9] == -1);
    else CHECK(o[9] == (lane + 2 < 32 ? in[g + 2] : in[g]));
  }
  CK(cuMemFree(din));
  CK(cuMemFree(dout));
  sim_teardown();
  return 0;
}

static int t_atomics(void) {
  CUmodule m = load();
  enum { T = 256, B = 64, N = T * B };
  struct {
    int i[2];
    unsigned u;
    float f;
    double d;
    unsigned long long ull;
    int mx;
  } h = {{0, 0}, 0, 0, 0, 0, -1};
  CUdeviceptr di, du, df, dd, dull, dmx;
  CK(cuMemAlloc(&di, 8));
  CK(cuMemAlloc(&du, 4));
  CK(cuMemAlloc(&df, 4));
  CK(cuMemAlloc(&dd, 8));
  CK(cuMemAlloc(&dull, 8));
  CK(cuMemAlloc(&dmx, 4));
  CK(cuMemsetD32(di, 0, 2));
  CK(cuMemsetD32(du, 0, 1));
  CK(cuMemsetD32(df, 0, 1));
  CK(cuMemsetD8(dd, 0, 8));
  CK(cuMemsetD8(dull, 0, 8));
  CK(cuMemsetD32(dmx, 0xffffffffu, 1));
  void *args[] = {&di, &du, &df, &dd, &dull, &dmx};
  for (int rep = 0; rep < 3; rep++)
    CK(cuLaunchKernel(sim_kernel(m, "sim_atomics"), B, 1, 1, T, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(h.i, di, 8));
  CK(cuMemcpyDtoH(&h.u, du, 4));
  CK(cuMemcpyDtoH(&h.f, df, 4));
  CK(cuMemcpyDtoH(&h.d, dd, 8));
  CK(cuMemcpyDtoH(&h.ull, dull, 8));
  CK(cuMemcpyDtoH(&h.mx, dmx, 4));
  CHECK(h.i[0] == 3 * N);
  CHECK(h.u == 6u * N);
  CHECK(h.f == 1.5f * N);
  CHECK(h.d == 0.75 * N);
  CHECK(h.ull == 9ull * N);
  CHECK(h.mx == N - 1);
  CHECK(h.i[1] >= 1 && h.i[1] <= N);
  CK(cuMemFree(di));
  CK(cuMemFree(du));
  CK(cuMemFree(df));
  CK(cuMemFree(dd));
  CK(cuMemFree(dull));
  CK(cuMemFree(dmx));
  sim_teardown();
  return 0;
}

static int t_dynshared(void) {
  CUmodule m = load();
  CUfunction f = sim_kernel(m, "sim_dyn_sum");
  enum { T = 128, B = 5, PER = 100, N = T * B * PER }; /* 51200 bytes per block: above 48 KiB */
  static float in[N];
  float out[B];
  for (int i = 0; i < N; i++) in[i] = (float)(i % 7);
  CUdeviceptr din, dout;
  CK(cuMemAlloc(&din, sizeof in));
  CK(cuMemAlloc(&dout, sizeof out));
  CK(cuMemcpyHtoD(din, in, sizeof in));
  int per = PER;
  void *args[] = {&din, &dout, &per};
  unsigned shmem = T * PER * sizeof(float);
  /* above the default 48 KiB: refused until the function opts in */
  CHECK_RES(cuLaunchKernel(f, B, 1, 1, T, 1, 1, shmem, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK(sim_msg_has("dynamic shared memory"));
  CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shmem));
  int got = 0;
  CK(cuFuncGetAttribute(&got, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
  CHECK(got == (int)shmem);
  CK(cuLaunchKernel(f, B, 1, 1, T, 1, 1, shmem, NULL, args, NULL));
  CK(cuMemcpyDtoH(out, dout, sizeof out));
  for (int b = 0; b < B; b++) {
    float ref = 0;
    for (int k = 0; k < T * PER; k++) ref += in[b * T * PER + k];
    CHECK(out[b] == ref);
  }
  CHECK_RES(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 228 * 1024), CUDA_ERROR_INVALID_VALUE);
  CK(cuMemFree(din));
  CK(cuMemFree(dout));
  /* every block starts with every word 0x7fbadbad (a NaN as f32), not
   * zeros nor the previous block's contents: reads before writes show */
  enum { PB = 9, WORDS = 1000 };
  static unsigned seen[PB * WORDS];
  CUdeviceptr dseen;
  CK(cuMemAlloc(&dseen, sizeof seen));
  int words = WORDS;
  void *pargs[] = {&dseen, &words};
  CK(cuLaunchKernel(sim_kernel(m, "sim_dyn_poison"), PB, 1, 1, 64, 1, 1, WORDS * 4, NULL, pargs, NULL));
  CK(cuMemcpyDtoH(seen, dseen, sizeof seen));
  int poisoned = 0;
  for (int i = 0; i < PB * WORDS; i++) poisoned += seen[i] == 0x7fbadbadu;
  CHECK(poisoned == PB * WORDS);
  CK(cuMemFree(dseen));
  sim_teardown();
  return 0;
}

/* Both parameter forms: kernelParams and the packed CU_LAUNCH_PARAM buffer. */
static int t_params(void) {
  CUmodule m = load();
  CUfunction f = sim_kernel(m, "sim_params");
  CUdeviceptr dout;
  int out[5];
  CK(cuMemAlloc(&dout, sizeof out));
  char c = 'x';
  double dv = 12345.0;
  short s = -7;
  float fv = 3.0f;
  long long ll = 5ll << 32;
  void *args[] = {&c, &dv, &s, &dout, &fv, &ll};
  CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CK(cuMemcpyDtoH(out, dout, sizeof out));
  CHECK(out[0] == 'x' && out[1] == 12345 && out[2] == -7 && out[3] == 3 && out[4] == 5);
  struct {
    char c;
    double dv;
    short s;
    CUdeviceptr out;
    float fv;
    long long ll;
  } packed = {'y', 99.0, 11, dout, 4.0f, 6ll << 32};
  size_t size = sizeof packed;
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
  CK(cuMemcpyDtoH(out, dout, sizeof out));
  CHECK(out[0] == 'y' && out[1] == 99 && out[2] == 11 && out[3] == 4 && out[4] == 6);
  size_t bad = 8;
  void *extra2[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &bad, CU_LAUNCH_PARAM_END};
  CHECK_RES(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra2), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  CK(cuMemFree(dout));
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"barrier", t_barrier}, {"shuffle", t_shuffle}, {"atomics", t_atomics},
      {"dynshared", t_dynshared}, {"params", t_params},
  };
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
