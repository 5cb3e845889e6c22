/* The fp32 tensor-core attention forward (kernels/cuda/attention_f32tc.cu,
 * 3xTF32 on mma.sync m16n8k8) launched directly on the simulated device,
 * whose emulation of the tf32 mma and of cvt.rna.tf32.f32 follows the PTX
 * ISA (sim/emu/gpa_sim_mma.h), against the double reference of
 * tests/util/attn_ref.c with the fp32 error bound (no low-precision term:
 * the bound the SIMT fp32 kernels meet in tests/test_attention.c). Each
 * case also checks that the bound is tight enough to tell fp32 from tf32:
 * the reference computed from q, k, v rounded to tf32 (what a single tf32
 * product sees, before its other roundings) must fail it. Shapes: S = 1,
 * Sk = 1, odd sizes, several tiles, key lengths (0 included), GQA 1/2/8,
 * causal with S != Sk, D = 16, 32, 48, 64, 96, 128.
 * The backward (attention_f32tc_bwd.cu) runs on each case after the
 * forward, as the op runs it: delta from the forward's o by
 * gpa_attn_bwd_delta, then the dK/dV and dQ kernels with the forward's lse,
 * twice (the same bits), its gradients against the reference's with the
 * same fp32 bound; the gradients of tf32-rounded inputs fail that bound. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "sim_test.h"
#include "gpa_cu_attn_fatbin.h"
#include "util/attn_ref.h"

static CUdeviceptr dev(const void *p, size_t n) {
  CUdeviceptr d;
  CK(cuMemAlloc(&d, n ? n : 16));
  if (p && n) CK(cuMemcpyHtoD(d, p, n));
  return d;
}

/* cvt.rna.tf32.f32 on the host (finite values) */
static double tf32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  memcpy(&f, &u, 4);
  return f;
}

/* |got - ref| within the fp32 bound of tests/test_attention.c: 1e-5
 * relative plus the reference's error magnitudes; returns the first element
 * out of it, or -1. */
static int64_t first_bad(const float *got, const double *ref, const double *mag, int64_t n) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(ref[i]) && fabs(ref[i]) > mx) mx = fabs(ref[i]);
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(ref[i])) {
      if (got[i] != ref[i]) return i;
      continue;
    }
    if (!(fabs(got[i] - ref[i]) <= 1e-5 * fabs(ref[i]) + 1e-7 * mx + FLT_EPSILON * mag[i])) return i;
  }
  return -1;
}
static void close_to(const char *what, const float *got, const double *ref, const double *mag, int64_t n) {
  const int64_t i = first_bad(got, ref, mag, n);
  if (i < 0) return;
  fprintf(stderr, "%s: element %lld is %.9g, expected %.9g\n", what, (long long)i, got[i], ref[i]);
  exit(1);
}

static int dclass(int D) { return D <= 64 ? 64 : D <= 96 ? 96 : 128; }

static void run_case(CUmodule m, const acase *c, uint64_t seed) {
  const int64_t B = c->B, S = c->S, Sk = c->Sk, H = c->H, Hk = c->Hkv, D = c->D;
  const int64_t nq = B * S * H * D, nk = B * Sk * Hk * D, nl = B * H * S;
  const int64_t n[4] = {nq, nk, nk, nq};
  float *f[4];
  double *x[4], *xt[4];
  for (int i = 0; i < 4; i++) { /* q, k, v, dout */
    f[i] = malloc(4 * (size_t)(n[i] + 1));
    x[i] = malloc(sizeof(double) * (size_t)(n[i] + 1));
    xt[i] = malloc(sizeof(double) * (size_t)(n[i] + 1));
    for (int64_t j = 0; j < n[i]; j++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      f[i][j] = (float)((double)(seed >> 11) / 9007199254740992.0 * 3.0 - 1.5);
      x[i][j] = f[i][j];
      xt[i][j] = tf32(f[i][j]);
    }
  }
  int32_t lens[8];
  for (int64_t b = 0; b < B; b++) lens[b] = (int32_t)(b == 0 ? Sk : b == 1 ? 0 : (b * 7919 + 13) % (Sk + 1));
  aref r = {c, 1.0 / sqrt((double)D), c->lens ? lens : NULL, x[0], x[1], x[2], NULL, 0, 0};
  double *o = malloc(sizeof(double) * (size_t)(nq + 1)), *lse = malloc(sizeof(double) * (size_t)(nl + 1));
  double *ot = malloc(sizeof(double) * (size_t)(nq + 1));
  double *g[3] = {malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nk + 1)),
                  malloc(sizeof(double) * (size_t)(nk + 1))};
  r.w = x[3];
  amag mg = {malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nl + 1)),
             malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nk + 1)),
             malloc(sizeof(double) * (size_t)(nk + 1))};
  gpa_attn_ref(&r, o, lse, g[0], g[1], g[2], &mg);

  CUdeviceptr dq = dev(f[0], 4 * nq), dk = dev(f[1], 4 * nk), dv = dev(f[2], 4 * nk);
  CUdeviceptr dl = c->lens ? dev(lens, 4 * B) : 0, d_o = dev(NULL, 4 * nq), dlse = dev(NULL, 4 * nl);
  int iS = (int)S, iSk = (int)Sk, iH = (int)H, iHk = (int)Hk, iD = (int)D, causal = c->causal;
  float scale = (float)r.scale;
  const int dm = dclass((int)D), kt = dm > 64 ? 32 : 64;
  const unsigned smem = (unsigned)(4 * (64 * (dm + 16) + 2 * kt * (dm + 16) + 2 * kt * (dm + 4)));
  char name[48], what[160], w2[200];
  snprintf(name, sizeof name, "gpa_tc32_fwd_d%d", dm);
  CUfunction fn = sim_kernel(m, name);
  CK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem));
  void *a[] = {&dq, &dk, &dv, &dl, &d_o, &dlse, &iS, &iSk, &iH, &iHk, &iD, &scale, &causal};
  CK(cuLaunchKernel(fn, (unsigned)((S + 63) / 64), (unsigned)H, (unsigned)B, 32, 4, 1, smem, NULL, a, NULL));
  float *fo = malloc(4 * (size_t)(nq + 1)), *fl = malloc(4 * (size_t)(nl + 1));
  CK(cuMemcpyDtoH(fo, d_o, 4 * nq));
  CK(cuMemcpyDtoH(fl, dlse, 4 * nl));
  snprintf(what, sizeof what, "f32tc B=%lld S=%lld Sk=%lld H=%lld Hkv=%lld D=%lld%s%s", (long long)B, (long long)S,
           (long long)Sk, (long long)H, (long long)Hk, (long long)D, c->causal ? " causal" : "",
           c->lens ? " lengths" : "");
  snprintf(w2, sizeof w2, "%s: o", what);
  close_to(w2, fo, o, mg.o, nq);
  snprintf(w2, sizeof w2, "%s: lse", what);
  close_to(w2, fl, lse, mg.lse, nl);

  /* the bound tells tf32 from fp32: o from tf32-rounded inputs fails it
   * (cases with a visible key and more than one; a single key gives o = v) */
  aref rt = r;
  rt.q = xt[0], rt.k = xt[1], rt.v = xt[2];
  gpa_attn_ref(&rt, ot, NULL, NULL, NULL, NULL, NULL);
  for (int64_t i = 0; i < nq; i++) fo[i] = (float)ot[i];
  if (Sk > 1 && nq > 0) CHECK(first_bad(fo, o, mg.o, nq) >= 0);
  CK(cuMemcpyDtoH(fo, d_o, 4 * nq));

  /* backward: delta from the forward's o, then dK/dV and dQ, twice */
  CUdeviceptr ddo = dev(f[3], 4 * nq), dlt = dev(NULL, 4 * nl);
  CUdeviceptr gq = dev(NULL, 4 * nq), gk = dev(NULL, 4 * nk), gv = dev(NULL, 4 * nk);
  long long rows = B * S * H;
  void *da[] = {&ddo, &d_o, &dlt, &rows, &iS, &iH, &iD};
  if (rows)
    CK(cuLaunchKernel(sim_kernel(m, "gpa_attn_bwd_delta"), (unsigned)((rows + 7) / 8), 1, 1, 32, 8, 1, 0, NULL, da,
                      NULL));
  /* tc32b_cfg: dK/dV blocks of 64 keys with query steps of qs rows, dQ
   * blocks of 64 rows with key tiles of kb */
  const int bm = D <= 32 ? 32 : dm; /* the backward's class 32 */
  const int qs = bm > 64 ? 16 : 32, kb = bm > 64 ? 16 : 32;
  const unsigned ksm = (unsigned)(4 * (2 * 64 * (bm + 16) + 4 * qs * (bm + 4) + 4 * qs));
  const unsigned qsm = (unsigned)(4 * (2 * 64 * (bm + 16) + 2 * kb * (bm + 4) + 2 * kb * (bm + 16)));
  snprintf(name, sizeof name, "gpa_tc32_dkv_d%d", bm);
  CUfunction fkv = sim_kernel(m, name);
  CK(cuFuncSetAttribute(fkv, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)ksm));
  snprintf(name, sizeof name, "gpa_tc32_dq_d%d", bm);
  CUfunction fq = sim_kernel(m, name);
  CK(cuFuncSetAttribute(fq, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)qsm));
  void *ba[] = {&ddo, &dq, &dk, &dv, &dlse, &dlt, &dl, &gq, &gk, &gv, &iS, &iSk, &iH, &iHk, &iD, &scale, &causal};
  const int64_t ng = nq + 2 * nk;
  float *got[2] = {malloc(4 * (size_t)(ng + 1)), malloc(4 * (size_t)(ng + 1))};
  for (int rep = 0; rep < 2; rep++) {
    CK(cuMemsetD8(gq, 0xff, 4 * (size_t)nq)); /* NaN: every element must be written */
    CK(cuMemsetD8(gk, 0xff, 4 * (size_t)nk));
    CK(cuMemsetD8(gv, 0xff, 4 * (size_t)nk));
    CK(cuLaunchKernel(fkv, (unsigned)((Sk + 63) / 64), (unsigned)Hk, (unsigned)B, 32, 4, 1, ksm, NULL, ba, NULL));
    CK(cuLaunchKernel(fq, (unsigned)((S + 63) / 64), (unsigned)H, (unsigned)B, 32, 4, 1, qsm, NULL, ba, NULL));
    CK(cuMemcpyDtoH(got[rep], gq, 4 * nq));
    CK(cuMemcpyDtoH(got[rep] + nq, gk, 4 * nk));
    CK(cuMemcpyDtoH(got[rep] + nq + nk, gv, 4 * nk));
  }
  CHECK(!memcmp(got[0], got[1], 4 * (size_t)ng)); /* deterministic */
  snprintf(w2, sizeof w2, "%s: dq", what);
  close_to(w2, got[0], g[0], mg.dq, nq);
  snprintf(w2, sizeof w2, "%s: dk", what);
  close_to(w2, got[0] + nq, g[1], mg.dk, nk);
  snprintf(w2, sizeof w2, "%s: dv", what);
  close_to(w2, got[0] + nq + nk, g[2], mg.dv, nk);
  /* the bound tells tf32 from fp32 here too: the gradients of the
   * tf32-rounded inputs fail it (cases with more than one visible key) */
  double *gt[3] = {malloc(sizeof(double) * (size_t)(nq + 1)), malloc(sizeof(double) * (size_t)(nk + 1)),
                   malloc(sizeof(double) * (size_t)(nk + 1))};
  rt.w = xt[3];
  gpa_attn_ref(&rt, ot, NULL, gt[0], gt[1], gt[2], NULL);
  int64_t bad = 0;
  const int64_t off[3] = {0, nq, nq + nk}, cnt[3] = {nq, nk, nk};
  double *gm[3] = {mg.dq, mg.dk, mg.dv};
  for (int i = 0; i < 3; i++) {
    for (int64_t j = 0; j < cnt[i]; j++) got[1][off[i] + j] = (float)gt[i][j];
    bad += first_bad(got[1] + off[i], g[i], gm[i], cnt[i]) >= 0;
  }
  if (Sk > 1 && nq > 0) CHECK(bad > 0);
  CUdeviceptr bwd[] = {ddo, dlt, gq, gk, gv};
  for (int i = 0; i < 5; i++) CK(cuMemFree(bwd[i]));
  for (int i = 0; i < 3; i++) free(gt[i]);
  free(got[0]), free(got[1]);

  CUdeviceptr all[] = {dq, dk, dv, d_o, dlse};
  for (int i = 0; i < 5; i++) CK(cuMemFree(all[i]));
  if (dl) CK(cuMemFree(dl));
  for (int i = 0; i < 4; i++) free(f[i]), free(x[i]), free(xt[i]);
  for (int i = 0; i < 3; i++) free(g[i]);
  free(o), free(ot), free(lse), free(fo), free(fl);
  free(mg.o), free(mg.lse), free(mg.dq), free(mg.dk), free(mg.dv);
}

/* B S Sk H Hkv D causal lengths */
static const acase small[] = {
    {1, 1, 1, 1, 1, 64, 0, 0, 0},   {2, 37, 53, 4, 2, 64, 1, 1, 0}, {1, 67, 1, 2, 2, 96, 1, 0, 0},
    {1, 20, 33, 8, 1, 64, 1, 0, 0}, {3, 9, 17, 2, 1, 32, 0, 1, 0},  {1, 5, 40, 1, 1, 128, 0, 0, 0},
    {1, 6, 11, 2, 1, 48, 1, 0, 0},  {2, 13, 7, 3, 3, 16, 1, 1, 0},
};
/* several tiles each way (64 query rows; 64 keys for D <= 64, else 32) */
static const acase big[] = {
    {1, 130, 70, 2, 1, 128, 1, 0, 0}, {2, 70, 140, 1, 1, 64, 0, 1, 0}, {1, 40, 100, 1, 1, 96, 1, 0, 0},
    {1, 100, 100, 3, 3, 32, 1, 0, 0}, /* the main job's heads */
};

static int run(const acase *cs, size_t n) {
  sim_setup();
  CUmodule m;
  CK(cuModuleLoadData(&m, gpa_fatbin_gpa_cu_attn));
  uint64_t seed = 2323;
  for (size_t i = 0; i < n; i++) run_case(m, &cs[i], seed++);
  sim_teardown();
  return 0;
}
static int t_small(void) { return run(small, sizeof small / sizeof small[0]); }
static int t_big(void) { return run(big, sizeof big / sizeof big[0]); }

int main(int argc, char **argv) {
  static const sim_case cases[] = {{"small", t_small}, {"big", t_big}};
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
