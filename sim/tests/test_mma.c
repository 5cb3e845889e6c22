/* The emulated mma.sync / ldmatrix / cp.async of kernels/cuda/gpa_mma.h
 * (sim/emu/gpa_sim_mma.h) against the PTX ISA's per-lane layouts and a
 * plain matrix product. Inputs are small multiples of 1/4, exact in bf16
 * and fp16, so every product and sum is exact and results compare equal. */
#include <math.h>
#include <stdint.h>
#include "sim_test.h"
#include "sim_mma_kernels_fatbin.h"

static uint16_t to16(float f, int half) { /* exact for the values used here */
  uint32_t u;
  memcpy(&u, &f, 4);
  if (!half) return (uint16_t)(u >> 16);
  if (!(u & 0x7fffffffu)) return (uint16_t)(u >> 16);
  return (uint16_t)(((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 112) << 10) | ((u >> 13) & 0x3ff));
}
static float val(int i, int mul, int mod) { return (float)((i * mul) % mod - mod / 2) / 4.0f; }

static CUdeviceptr up(const void *p, size_t n) {
  CUdeviceptr d;
  CK(cuMemAlloc(&d, n));
  CK(cuMemcpyHtoD(d, p, n));
  return d;
}

/* d = a b + c, fragments built by the documented formulas */
static int t_direct(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_mma_kernels));
  float a[256], b[128], c[128], d[128];
  uint16_t ha[256], hb[128];
  for (int i = 0; i < 256; i++) a[i] = val(i, 7, 11);
  for (int i = 0; i < 128; i++) b[i] = val(i, 5, 9), c[i] = (float)(i % 5);
  for (int half = 0; half < 2; half++) {
    for (int i = 0; i < 256; i++) ha[i] = to16(a[i], half);
    for (int i = 0; i < 128; i++) hb[i] = to16(b[i], half);
    CUdeviceptr da = up(ha, sizeof ha), db = up(hb, sizeof hb), dc = up(c, sizeof c), dd;
    CK(cuMemAlloc(&dd, sizeof d));
    void *args[] = {&da, &db, &dc, &dd};
    CK(cuLaunchKernel(sim_kernel(m, half ? "sim_mma_direct_f16" : "sim_mma_direct_bf16"), 1, 1, 1, 32, 1, 1, 0,
                      NULL, args, NULL));
    CK(cuMemcpyDtoH(d, dd, sizeof d));
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 8; j++) {
        float s = c[i * 8 + j];
        for (int k = 0; k < 16; k++) s += a[i * 16 + k] * b[k * 8 + j];
        CHECK(d[i * 8 + j] == s);
      }
    CUdeviceptr all[] = {da, db, dc, dd};
    for (int i = 0; i < 4; i++) CK(cuMemFree(all[i]));
  }
  sim_teardown();
  return 0;
}

/* ldmatrix .x4 and .x4.trans: register r of lane l is row l/4, elements
 * 2(l%4), 2(l%4)+1 of matrix r (of its transpose) */
static int t_ldmatrix(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_mma_kernels));
  uint16_t mat[256];
  unsigned out[128];
  for (int i = 0; i < 256; i++) mat[i] = (uint16_t)(i * 3 + 1);
  CUdeviceptr dm = up(mat, sizeof mat), dout;
  CK(cuMemAlloc(&dout, sizeof out));
  for (int trans = 0; trans < 2; trans++) {
    void *args[] = {&dm, &dout, &trans};
    CK(cuLaunchKernel(sim_kernel(m, "sim_ldmatrix"), 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(out, dout, sizeof out));
    for (int l = 0; l < 32; l++)
      for (int r = 0; r < 4; r++) {
        const int row = l / 4, col = 2 * (l % 4);
        const uint16_t *q = mat + r * 64; /* matrix r: [8][8] */
        const unsigned lo = trans ? q[col * 8 + row] : q[row * 8 + col];
        const unsigned hi = trans ? q[(col + 1) * 8 + row] : q[row * 8 + col + 1];
        CHECK(out[l * 4 + r] == (lo | hi << 16));
      }
  }
  CK(cuMemFree(dm));
  CK(cuMemFree(dout));
  sim_teardown();
  return 0;
}

/* The attention kernels' operand pattern through cp.async (zero fill,
 * two groups), ldmatrix and mma, against plain products. */
static int t_tiles(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_mma_kernels));
  enum { K = 48, NV = 11 };
  float a[16 * K], bt[16 * K], b[K * 16], c1[256], c2[256];
  uint16_t ha[16 * K], hbt[16 * K], hb[K * 16];
  for (int i = 0; i < 16 * K; i++) a[i] = val(i, 7, 13), bt[i] = val(i, 5, 9), b[i] = val(i, 3, 7);
  for (int half = 0; half < 2; half++) {
    for (int i = 0; i < 16 * K; i++) ha[i] = to16(a[i], half), hbt[i] = to16(bt[i], half), hb[i] = to16(b[i], half);
    CUdeviceptr da = up(ha, sizeof ha), dbt = up(hbt, sizeof hbt), db = up(hb, sizeof hb), d1, d2;
    CK(cuMemAlloc(&d1, sizeof c1));
    CK(cuMemAlloc(&d2, sizeof c2));
    int kk = K, nv = NV;
    void *args[] = {&da, &dbt, &db, &d1, &d2, &kk, &nv};
    CK(cuLaunchKernel(sim_kernel(m, half ? "sim_mma_tiles_f16" : "sim_mma_tiles_bf16"), 1, 1, 1, 32, 1, 1, 0, NULL,
                      args, NULL));
    CK(cuMemcpyDtoH(c1, d1, sizeof c1));
    CK(cuMemcpyDtoH(c2, d2, sizeof c2));
    for (int i = 0; i < 16; i++)
      for (int j = 0; j < 16; j++) {
        float s1 = 0, s2 = 0;
        for (int k = 0; k < K; k++) s1 += a[i * K + k] * bt[j * K + k], s2 += a[i * K + k] * b[k * 16 + j];
        CHECK(c1[i * 16 + j] == (i < NV ? s1 : 0.0f));
        CHECK(c2[i * 16 + j] == (i < NV ? s2 : 0.0f));
      }
    CUdeviceptr all[] = {da, dbt, db, d1, d2};
    for (int i = 0; i < 5; i++) CK(cuMemFree(all[i]));
  }
  sim_teardown();
  return 0;
}

/* tf32: cvt.rna.tf32.f32 (nearest, ties away from zero, 13 low bits zero),
 * the m16n8k8 layouts (values exact in tf32: the product equals the plain
 * one), and 3xTF32 on full fp32 mantissas: within 2^-20 of the exact sum of
 * |products| where the single tf32 product is not. */
static float bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static int t_tf32(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_mma_kernels));
  float x[32];
  uint32_t want[32], got[32];
  for (int i = 0; i < 32; i++) {
    /* 1.0 + i ulps of fp32 around the tf32 half ulp (0x1000), both signs */
    const uint32_t u = 0x3f800000u + (uint32_t)(i % 16) * 0x200u, sign = i >= 16 ? 0x80000000u : 0;
    x[i] = bits(u | sign);
    const uint32_t low = u & 0x1fffu;
    want[i] = ((u & ~0x1fffu) + (low >= 0x1000u ? 0x2000u : 0)) | sign; /* a tie (0x1000) goes away from zero */
  }
  float a[128], b[64], c[128], d[128];
  for (int split = 0; split < 2; split++)
    for (int exact = 0; exact < 2; exact++) {
      uint64_t seed = 77;
      for (int i = 0; i < 128; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = exact ? val(i, 7, 11) : (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        c[i] = exact ? (float)(i % 5) : 0.0f;
      }
      for (int i = 0; i < 64; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = exact ? val(i, 5, 9) : (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
      }
      CUdeviceptr da = up(a, sizeof a), db = up(b, sizeof b), dc = up(c, sizeof c), dx = up(x, sizeof x), dd, dout;
      CK(cuMemAlloc(&dd, sizeof d));
      CK(cuMemAlloc(&dout, sizeof got));
      void *args[] = {&da, &db, &dc, &dd, &split, &dx, &dout};
      CK(cuLaunchKernel(sim_kernel(m, "sim_mma_direct_tf32"), 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
      CK(cuMemcpyDtoH(d, dd, sizeof d));
      CK(cuMemcpyDtoH(got, dout, sizeof got));
      for (int i = 0; i < 32; i++) CHECK(got[i] == want[i]);
      double worst = 0;
      for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
          double s = c[i * 8 + j], mag = fabs(s);
          for (int k = 0; k < 8; k++) {
            const double p = (double)a[i * 8 + k] * b[k * 8 + j];
            s += p;
            mag += fabs(p);
          }
          if (exact) CHECK(d[i * 8 + j] == (float)s);
          const double err = fabs(d[i * 8 + j] - s) / mag;
          if (err > worst) worst = err;
        }
      if (!exact) CHECK(split ? worst <= 0x1p-20 : worst > 0x1p-16); /* 3xTF32 near fp32; 1xTF32 near 2^-11 */
      CUdeviceptr all[] = {da, db, dc, dd, dx, dout};
      for (int i = 0; i < 6; i++) CK(cuMemFree(all[i]));
    }
  sim_teardown();
  return 0;
}

/* tf32 sums as the tensor core adds them (gpa_sim_tc_dot8): the
 * accumulator and the products aligned to the largest, what falls 3 bits
 * below its fp32 ulp dropped, the sum truncated toward zero. Rounding to
 * nearest (fp32 FMAs, and sim before session 16) gives c + ulp in both
 * cases: (1) c = +-1 plus one product of 3/4 of an ulp of 1, same sign;
 * (2) c = 1 plus eight products of 3/32 of an ulp each (3/4 ulp in all,
 * each below the kept 1/8 ulp). The tensor core returns c in both. */
static int t_tf32_sums(void) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_sim_mma_kernels));
  float a[128], b[64], c[128], d[128], x[32] = {0};
  for (int cs = 0; cs < 2; cs++) {
    for (int i = 0; i < 128; i++) {
      const float sg = cs == 0 && (i / 8) % 2 ? -1.0f : 1.0f; /* row sign in case 1 */
      c[i] = sg;
      a[i] = cs == 0 ? (i % 8 == 0 ? sg * 0x3p-13f : 0.0f) : 0x3p-15f;
    }
    for (int i = 0; i < 64; i++) b[i] = cs == 0 ? (i < 8 ? 0x1p-12f : 0.0f) : 0x1p-13f;
    CUdeviceptr da = up(a, sizeof a), db = up(b, sizeof b), dc = up(c, sizeof c), dx = up(x, sizeof x), dd, dout;
    CK(cuMemAlloc(&dd, sizeof d));
    CK(cuMemAlloc(&dout, 32 * 4));
    int split = 0;
    void *args[] = {&da, &db, &dc, &dd, &split, &dx, &dout};
    CK(cuLaunchKernel(sim_kernel(m, "sim_mma_direct_tf32"), 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(d, dd, sizeof d));
    for (int i = 0; i < 128; i++) CHECK(d[i] == c[i]);
    CUdeviceptr all[] = {da, db, dc, dd, dx, dout};
    for (int i = 0; i < 6; i++) CK(cuMemFree(all[i]));
  }
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"direct", t_direct}, {"ldmatrix", t_ldmatrix}, {"tiles", t_tiles}, {"tf32", t_tf32}, {"tf32_sums", t_tf32_sums}};
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
