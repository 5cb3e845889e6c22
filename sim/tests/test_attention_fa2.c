/* The FlashAttention-2-structured kernels (kernels/cuda/attention_fa2*.cu)
 * launched directly on the simulated device, against the double reference
 * of tests/util/attn_ref.c with its low-precision error bound (P and dS
 * rounded to the storage type): the forward's o in fp32 and in the storage
 * type (the rounding of the fp32 one), lse; the backward's dq, dk, dv from
 * the reference's o and lse, bitwise equal over two runs, and in the
 * storage type (the rounding of the fp32 ones); the delta kernel
 * on a bf16/fp16 o. Shapes: S = 1, Sk = 1, odd sizes, several tiles, key
 * lengths (0 included), GQA 1/2/8, causal with S != Sk, D = 64, 96, 128,
 * 160, 256. Small, because the emulation runs every mma on every lane. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include "sim_test.h"
#include "gpa_cu_attn_fatbin.h"
#include "util/attn_ref.h"
#include "util/half.h"

static uint16_t to16(float f, int half) { return half ? tu_to_f16(f) : tu_to_bf16(f); }
static float from16(uint16_t h, int half) { return half ? tu_from_f16(h) : tu_from_bf16(h); }

static CUdeviceptr dev(const void *p, size_t n) {
  CUdeviceptr d;
  CK(cuMemAlloc(&d, n ? n : 16));
  if (p && n) CK(cuMemcpyHtoD(d, p, n));
  return d;
}

/* |got - ref| within the fp32 tolerance plus the reference's magnitudes */
static void close_to(const char *what, const float *got, const double *ref, const double *mag, int64_t n) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(ref[i]) && fabs(ref[i]) > mx) mx = fabs(ref[i]);
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) {
      if (got[i] != ref[i]) goto bad;
      continue;
    }
    if (!(fabs(got[i] - ref[i]) <= 1e-5 * fabs(ref[i]) + 1e-7 * mx + FLT_EPSILON * mag[i])) goto bad;
    continue;
  bad:
    fprintf(stderr, "%s: element %lld is %.9g, expected %.9g (max|ref| %.3g)\n", what, (long long)i, got[i], ref[i],
            mx);
    exit(1);
  }
}

static int dclass(int D) { return D <= 64 ? 64 : D <= 96 ? 96 : D <= 128 ? 128 : 256; }

static CUfunction fn(CUmodule m, const char *kind, int half, int dm, unsigned smem) {
  char name[64];
  snprintf(name, sizeof name, "gpa_fa2_%s_%s_d%d", kind, half ? "f16" : "bf16", dm);
  CUfunction f = sim_kernel(m, name);
  CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
  return f;
}

static void run_case(CUmodule m, const acase *c, int half, uint64_t seed) {
  const int64_t B = c->B, S = c->S, Sk = c->Sk, H = c->H, Hk = c->Hkv, D = c->D;
  const int64_t nq = B * S * H * D, nk = B * Sk * Hk * D, nl = B * H * S;
  double *x[4];
  uint16_t *u[4];
  const int64_t n[4] = {nq, nk, nk, nq};
  for (int i = 0; i < 4; i++) {
    x[i] = malloc(sizeof(double) * (size_t)(n[i] + 1));
    u[i] = malloc(2 * (size_t)(n[i] + 1));
    for (int64_t j = 0; j < n[i]; j++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      const float f = (float)((double)(seed >> 11) / 9007199254740992.0 * 3.0 - 1.5);
      u[i][j] = to16(f, half);
      x[i][j] = from16(u[i][j], half);
    }
  }
  int32_t lens[8];
  for (int64_t b = 0; b < B; b++) lens[b] = (int32_t)(b == 0 ? Sk : b == 1 ? 0 : (b * 7919 + 13) % (Sk + 1));
  aref r = {c, 1.0 / sqrt((double)D), c->lens ? lens : NULL, x[0], x[1], x[2], x[3], half ? 0x1p-11 : 0x1p-8,
            half ? 0x1p-25 : 0x1p-134};
  double *o = malloc(sizeof(double) * (size_t)(nq + 1)), *lse = malloc(sizeof(double) * (size_t)(nl + 1));
  double *g[3] = {malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nk + 1)),
                  malloc(sizeof(double) * (size_t)(nk + 1))};
  amag mg = {malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nl + 1)),
             malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nk + 1)),
             malloc(sizeof(double) * (size_t)(nk + 1))};
  gpa_attn_ref(&r, o, lse, g[0], g[1], g[2], &mg);

  CUdeviceptr dq_ = dev(u[0], 2 * nq), dk_ = dev(u[1], 2 * nk), dv_ = dev(u[2], 2 * nk), ddo = dev(u[3], 2 * nq);
  CUdeviceptr dl = c->lens ? dev(lens, 4 * B) : 0, o32 = dev(NULL, 4 * nq), oT = dev(NULL, 2 * nq);
  CUdeviceptr dlse = dev(NULL, 4 * nl), dlt = dev(NULL, 4 * nl);
  int iS = (int)S, iSk = (int)Sk, iH = (int)H, iHk = (int)Hk, iD = (int)D, causal = c->causal;
  float scale = (float)r.scale;
  const int dm = dclass((int)D), ld = dm + 8;
  char what[160];
  snprintf(what, sizeof what, "%s B=%lld S=%lld Sk=%lld H=%lld Hkv=%lld D=%lld%s%s", half ? "f16" : "bf16",
           (long long)B, (long long)S, (long long)Sk, (long long)H, (long long)Hk, (long long)D,
           c->causal ? " causal" : "", c->lens ? " lengths" : "");

  /* forward: o in fp32 and in T */
  /* attention_fa2.cu's fa2_fwd_cfg: 4 warps of 32 rows (16 for D 256) */
  const int br = dm > 128 ? 64 : 128, bc = dm > 128 ? 32 : 64, warps = 4;
  const unsigned fsm = (unsigned)((br + 4 * bc) * ld * 2);
  void *fa[] = {&dq_, &dk_, &dv_, &dl, &o32, &oT, &dlse, &iS, &iSk, &iH, &iHk, &iD, &scale, &causal};
  CK(cuLaunchKernel(fn(m, "fwd", half, dm, fsm), (unsigned)((S + br - 1) / br), (unsigned)H, (unsigned)B, 32,
                    (unsigned)warps, 1, fsm, NULL, fa, NULL));
  float *fo = malloc(4 * (size_t)(nq + 1)), *fl = malloc(4 * (size_t)(nl + 1));
  uint16_t *ho = malloc(2 * (size_t)(nq + 1));
  CK(cuMemcpyDtoH(fo, o32, 4 * nq));
  CK(cuMemcpyDtoH(ho, oT, 2 * nq));
  CK(cuMemcpyDtoH(fl, dlse, 4 * nl));
  char w2[200];
  snprintf(w2, sizeof w2, "%s: o", what);
  close_to(w2, fo, o, mg.o, nq);
  snprintf(w2, sizeof w2, "%s: lse", what);
  close_to(w2, fl, lse, mg.lse, nl);
  for (int64_t i = 0; i < nq; i++) CHECK(ho[i] == to16(fo[i], half)); /* the same value, rounded once */

  /* backward from the reference's o and lse; delta from the T o by its kernel,
   * then replaced by the reference's (the gradients' check is not the delta's) */
  float *ro = malloc(4 * (size_t)(nq + 1)), *rl = malloc(4 * (size_t)(nl + 1)), *rd = malloc(4 * (size_t)(nl + 1));
  for (int64_t i = 0; i < nl; i++) rl[i] = (float)lse[i];
  long long rows = B * S * H;
  void *da[] = {&ddo, &oT, &dlt, &rows, &iS, &iH, &iD};
  if (rows)
    CK(cuLaunchKernel(sim_kernel(m, half ? "gpa_fa2_delta_f16" : "gpa_fa2_delta_bf16"), (unsigned)((rows + 7) / 8),
                      1, 1, 32, 8, 1, 0, NULL, da, NULL));
  CK(cuMemcpyDtoH(rd, dlt, 4 * nl));
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++)
      for (int64_t h = 0; h < H; h++) {
        double want = 0, mag = 0;
        for (int64_t d = 0; d < D; d++) {
          const int64_t i = ((b * S + s) * H + h) * D + d;
          want += x[3][i] * from16(ho[i], half);
          mag += fabs(x[3][i] * from16(ho[i], half));
        }
        const float got = rd[(b * H + h) * S + s];
        CHECK(fabs(got - want) <= 1e-5 * mag + 1e-30);
        /* the reference's delta for the gradients */
        double dref = 0;
        for (int64_t d = 0; d < D; d++) dref += x[3][((b * S + s) * H + h) * D + d] * o[((b * S + s) * H + h) * D + d];
        rd[(b * H + h) * S + s] = (float)dref;
      }
  for (int64_t i = 0; i < nq; i++) ro[i] = (float)o[i];
  CK(cuMemcpyHtoD(dlse, rl, 4 * nl));
  CK(cuMemcpyHtoD(dlt, rd, 4 * nl));
  CUdeviceptr gq = dev(NULL, 4 * nq), gk = dev(NULL, 4 * nk), gv = dev(NULL, 4 * nk);
  int grads_t = 0;
  void *ba[] = {&ddo, &dq_, &dk_, &dv_, &dlse, &dlt, &dl, &gq, &gk, &gv, &iS, &iSk, &iH, &iHk, &iD, &scale, &causal,
                &grads_t};
  /* fa2_bwd_cfg: dQ blocks of 128 query rows (32 a warp; D 256: 64) */
  const int bq = dm > 128 ? 16 : 32, bq2 = dm > 128 ? 64 : 128, bc2 = dm > 64 ? 32 : 64, halves = dm > 128 ? 2 : 1;
  const unsigned ksm = (unsigned)((2 * 64 + 4 * bq) * ld * 2 + 4 * bq * 4);
  const unsigned qsm = (unsigned)((2 * bq2 + 4 * bc2) * ld * 2);
  const int64_t ng = nq + 2 * nk;
  float *got[2] = {malloc(4 * (size_t)(ng + 1)), malloc(4 * (size_t)(ng + 1))};
  for (int rep = 0; rep < 3; rep++) { /* rep 2: the gradients in T, over the fp32 buffers */
    grads_t = rep == 2;
    if (Sk)
      CK(cuLaunchKernel(fn(m, "dkv", half, dm, ksm), (unsigned)((Sk + 63) / 64 * halves), (unsigned)Hk, (unsigned)B,
                        32, 4, 1, ksm, NULL, ba, NULL));
    CK(cuLaunchKernel(fn(m, "dq", half, dm, qsm), (unsigned)((S + bq2 - 1) / bq2), (unsigned)H, (unsigned)B, 32, 4,
                      1, qsm, NULL, ba, NULL));
    if (rep == 2) { /* each the fp32 result rounded once */
      uint16_t *h = malloc(2 * (size_t)(ng + 1));
      CK(cuMemcpyDtoH(h, gq, 2 * nq));
      if (Sk) {
        CK(cuMemcpyDtoH(h + nq, gk, 2 * nk));
        CK(cuMemcpyDtoH(h + nq + nk, gv, 2 * nk));
      }
      for (int64_t i = 0; i < ng; i++) CHECK(h[i] == to16(got[0][i], half));
      free(h);
      break;
    }
    CK(cuMemcpyDtoH(got[rep], gq, 4 * nq));
    if (Sk) {
      CK(cuMemcpyDtoH(got[rep] + nq, gk, 4 * nk));
      CK(cuMemcpyDtoH(got[rep] + nq + nk, gv, 4 * nk));
    }
  }
  CHECK(!memcmp(got[0], got[1], 4 * (size_t)ng)); /* deterministic */
  snprintf(w2, sizeof w2, "%s: dq", what);
  close_to(w2, got[0], g[0], mg.dq, nq);
  snprintf(w2, sizeof w2, "%s: dk", what);
  close_to(w2, got[0] + nq, g[1], mg.dk, nk);
  snprintf(w2, sizeof w2, "%s: dv", what);
  close_to(w2, got[0] + nq + nk, g[2], mg.dv, nk);

  CUdeviceptr all[] = {dq_, dk_, dv_, ddo, o32, oT, dlse, dlt, gq, gk, gv};
  for (int i = 0; i < 11; i++) CK(cuMemFree(all[i]));
  if (dl) CK(cuMemFree(dl));
  for (int i = 0; i < 4; i++) free(x[i]), free(u[i]);
  for (int i = 0; i < 3; i++) free(g[i]);
  free(got[0]), free(got[1]), free(o), free(lse), free(fo), free(fl), free(ho), free(ro), free(rl), free(rd);
  free(mg.o), free(mg.lse), free(mg.dq), free(mg.dk), free(mg.dv);
}

/* B S Sk H Hkv D causal lengths */
static const acase small[] = {
    {1, 1, 1, 1, 1, 64, 0, 0, 0},  {2, 37, 53, 4, 2, 64, 1, 1, 0}, {1, 67, 1, 2, 2, 96, 1, 0, 0},
    {1, 20, 33, 8, 1, 64, 1, 0, 0}, {1, 3, 2, 2, 1, 256, 1, 1, 0}, {3, 9, 17, 2, 1, 32, 0, 1, 0},
    {1, 5, 200, 1, 1, 64, 0, 0, 0},
};
/* several tiles each way (forward 128 / 64 rows, backward 64 keys) */
static const acase big[] = {
    {1, 130, 70, 2, 1, 128, 1, 0, 0}, {2, 70, 140, 1, 1, 64, 0, 1, 0}, {1, 40, 70, 1, 1, 160, 1, 0, 0},
};

static int run(const acase *cs, size_t n, int halves) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_gpa_cu_attn));
  uint64_t seed = 99;
  for (int half = 0; half < halves; half++)
    for (size_t i = 0; i < n; i++) run_case(m, &cs[i], half, seed++);
  sim_teardown();
  return 0;
}
static int t_small(void) { return run(small, sizeof small / sizeof small[0], 2); }
static int t_big(void) { return run(big, sizeof big / sizeof big[0], 1); }

int main(int argc, char **argv) {
  static const sim_case cases[] = {{"small", t_small}, {"big", t_big}};
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
