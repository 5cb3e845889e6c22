/* The cast op (ops/cast, kernels/cuda/cast.cu) on the backend GPA_DEVICE
 * selects: every pair of f32, bf16 and f16 against a reference written here
 * in double arithmetic (round to nearest even by rint, not the library's
 * integer rounding), bit for bit, on hand-picked values (ties to even both
 * ways, just off a tie, the largest finite values and the first that
 * overflow, subnormals of both 16-bit formats, +-0, +-inf, NaN) and on
 * random ones; aligned views (the CUDA kernel's 16-byte path and its tail)
 * and views one element in (its scalar path). Then the errors (dtype,
 * shape, overlap), in place, and on the simulated device a refused launch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_cuda_util.h"
#include "util/nn_test.h"

enum { F32, BF16, F16 };
static const int dts[3] = {GPA_F32, GPA_BF16, GPA_F16};
static const char *names[3] = {"f32", "bf16", "f16"};

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* |v| rounded to p significand bits with minimum exponent emin, to nearest
 * even, in double (exact: v is a float, so |v| / ulp fits a double). */
static double ref_round(double v, int p, int emin, double max_finite) {
  if (isnan(v) || isinf(v) || v == 0) return v;
  double a = fabs(v);
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  e -= 1;
  if (e < emin) e = emin;
  double ulp = ldexp(1.0, e - (p - 1)), r = rint(a / ulp) * ulp; /* rint: ties to even */
  if (r > max_finite) r = INFINITY;
  return copysign(r, v);
}

static uint16_t ref_bf16(float f) {
  if (isnan(f)) return 0x7fc0; /* any NaN: compared as a class */
  float r = (float)ref_round(f, 8, -126, 0x1.fep127);
  return (uint16_t)(u_of(r) >> 16);
}

static uint16_t ref_f16(float f) {
  if (isnan(f)) return 0x7e00;
  double r = ref_round(f, 11, -14, 65504.0);
  uint16_t sign = signbit(r) ? 0x8000 : 0;
  double a = fabs(r);
  if (isinf(a)) return sign | 0x7c00;
  if (a < 0x1p-14) return sign | (uint16_t)(a * 0x1p24); /* subnormal: a multiple of 2^-24 */
  int e;
  double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024);
}

static float widen(int dt, uint16_t h) {
  if (dt == BF16) return f_of((uint32_t)h << 16);
  uint32_t e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
  return (float)((h & 0x8000) ? -v : v);
}

/* The reference of element v (as f32) in dtype `to`, as raw bits. */
static uint32_t ref_bits(int to, float v) {
  return to == F32 ? u_of(v) : to == BF16 ? ref_bf16(v) : ref_f16(v);
}

static int is_nan_bits(int dt, uint32_t b) {
  return dt == F32 ? (b & 0x7fffffffu) > 0x7f800000u : dt == BF16 ? (b & 0x7fff) > 0x7f80 : (b & 0x7fff) > 0x7c00;
}

static uint32_t get(int dt, const void *p, int64_t i) {
  return dt == F32 ? ((const uint32_t *)p)[i] : ((const uint16_t *)p)[i];
}
static void put(int dt, void *p, int64_t i, uint32_t b) {
  if (dt == F32) ((uint32_t *)p)[i] = b;
  else ((uint16_t *)p)[i] = (uint16_t)b;
}
static float value(int dt, uint32_t b) { return dt == F32 ? f_of(b) : widen(dt, (uint16_t)b); }

/* f32 values whose narrowing matters: ties, overflow, subnormals, specials */
static const uint32_t special32[] = {
    0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, /* bf16: 1 + 2^-8 tie down, tie up, just above, below */
    0x3f801000u, 0x3f803000u, 0x3f801001u,             /* f16: 1 + 2^-11 tie down, 1 + 3 2^-11 tie up, above */
    0x7f7fffffu, 0x7f7f7fffu, 0x7f7f8000u,             /* max float; largest staying finite in bf16; first to inf */
    0x477fefffu, 0x477ff000u, 0x477fe000u,             /* f16: 65519.99 -> 65504, 65520 -> inf, 65504 */
    0x33800000u, 0x33000000u, 0x33c00000u, 0x33400000u, /* 2^-24, 2^-25 (tie to 0), 1.5 2^-24, 0.75 2^-24 */
    0x387fc000u, 0x387fe000u, 0x38800000u,             /* near the f16 normal boundary (tie up to 2^-14) */
    0x00018000u, 0x00000001u, 0x80000001u,             /* f32 subnormals */
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u,
    0xc2c80000u, 0x40490fdbu, 0xbeaaaaabu};
#define NSPECIAL (sizeof special32 / sizeof special32[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 32);
}

/* n source values of dtype `from`: the specials (narrowed where needed),
 * then random bit patterns of every exponent and random values in +-70000. */
static void source(int from, void *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t b;
    if (i < (int64_t)NSPECIAL) b = special32[i];
    else if (i % 2) b = next32();
    else b = u_of((float)(((double)next32() / 4294967296.0 - 0.5) * 140000.0 / (1 << (next32() % 24))));
    if (from == BF16) b = (b >> 16) ^ (i >= (int64_t)NSPECIAL && i % 3 == 0 ? 0x3f00 : 0); /* raw bit patterns */
    if (from == F16) b = i < (int64_t)NSPECIAL ? ref_f16(f_of(b)) : (b & 0xffff);
    put(from, p, i, b);
  }
}

static void check_pair(gpa_nt *t, int from, int to, int64_t n, int off) {
  size_t fs = gpa_dtype_size(dts[from]), ts = gpa_dtype_size(dts[to]);
  int64_t nb = n + off;
  unsigned char *src = calloc((size_t)nb + 1, fs), *got = calloc((size_t)n + 1, ts);
  source(from, src, nb);
  gpa_tensor x = gpa_nt_tensor(t, dts[from], 1, &nb, src), y = gpa_nt_tensor(t, dts[to], 1, &nb, NULL);
  x.shape[0] = y.shape[0] = n;
  x.offset = fs * (uint64_t)off, y.offset = ts * (uint64_t)off;
  char what[700];
  gpa_status st = gpa_nt_run(t, "cast", &x, 1, &y, 1, NULL, 0);
  if (st != GPA_OK) {
    snprintf(what, sizeof what, "cast %s -> %s n %lld off %d: %s %s", names[from], names[to], (long long)n, off,
             gpa_status_name(st), gpa_nt_msg);
    gpa_nt_fail(t, what);
  } else {
    if (n) gpa_nt_read(t, &y, got);
    for (int64_t i = 0; i < n; i++) {
      uint32_t sb = get(from, src, i + off), g = get(to, got, i), w = ref_bits(to, value(from, sb));
      int ok = is_nan_bits(to, w) ? is_nan_bits(to, g) : g == w;
      if (!ok) {
        snprintf(what, sizeof what, "cast %s -> %s n %lld off %d [%lld]: 0x%x gave 0x%x, want 0x%x", names[from],
                 names[to], (long long)n, off, (long long)i, sb, g, w);
        gpa_nt_fail(t, what);
        break;
      }
    }
  }
  free(src);
  free(got);
}

static void errors(gpa_nt *t) {
  int64_t s6[1] = {6}, s23[2] = {2, 3}, s5[1] = {5}, s12[1] = {12};
  gpa_tensor xf = gpa_nt_tensor(t, GPA_F32, 1, s6, NULL), xi = gpa_nt_tensor(t, GPA_I32, 1, s6, NULL);
  gpa_tensor yb = gpa_nt_tensor(t, GPA_BF16, 1, s6, NULL), yu = gpa_nt_tensor(t, GPA_U8, 1, s6, NULL);
  gpa_tensor y5 = gpa_nt_tensor(t, GPA_BF16, 1, s5, NULL), y23 = gpa_nt_tensor(t, GPA_BF16, 2, s23, NULL);
  gpa_nt_expect_error(t, "cast", &xi, 1, &yb, 1, NULL, 0, GPA_EDTYPE, "cast: x has dtype i32, expected f32, bf16");
  gpa_nt_expect_error(t, "cast", &xf, 1, &yu, 1, NULL, 0, GPA_EDTYPE, "cast: y has dtype u8");
  gpa_nt_expect_error(t, "cast", &xf, 1, &y5, 1, NULL, 0, GPA_ESHAPE, NULL);
  gpa_nt_expect_error(t, "cast", &xf, 1, &y23, 1, NULL, 0, GPA_ESHAPE, NULL); /* same count, other shape */
  gpa_nt_expect_error(t, "cast", NULL, 0, &yb, 1, NULL, 0, 0, NULL);
  /* f32 -> bf16 into its own first half: would overwrite values not yet read */
  gpa_tensor big = gpa_nt_tensor(t, GPA_F32, 1, s12, NULL), half = big;
  half.dtype = GPA_BF16;
  gpa_nt_expect_error(t, "cast", &big, 1, &half, 1, NULL, 0, GPA_EINVAL, "cast: y overlaps x");
  /* bf16 -> f16 in place (one element size, the same memory) is allowed */
  uint16_t v[6] = {0x3f80, 0x3f81, 0x4780, 0x7f80, 0x3380, 0x8000}, got[6];
  gpa_tensor b = gpa_nt_tensor(t, GPA_BF16, 1, s6, v), h = b;
  h.dtype = GPA_F16;
  if (gpa_nt_run(t, "cast", &b, 1, &h, 1, NULL, 0) != GPA_OK) {
    gpa_nt_fail(t, "cast bf16 -> f16 in place refused");
  } else {
    gpa_nt_read(t, &h, got);
    for (int i = 0; i < 6; i++)
      if (got[i] != ref_f16(widen(BF16, v[i]))) gpa_nt_fail(t, "cast bf16 -> f16 in place: wrong bits");
  }
}

/* The simulated device refuses the cast's launch once: that op fails with
 * the driver's error (its handle completes once), the next one runs. */
static void refused_launch(gpa_nt *t) {
  tcu_sim sim = tcu_sim_api(t->a);
  int64_t n = 40;
  float src[40];
  for (int i = 0; i < 40; i++) src[i] = 0.5f + (float)i;
  gpa_tensor x = gpa_nt_tensor(t, GPA_F32, 1, &n, src), y = gpa_nt_tensor(t, GPA_BF16, 1, &n, NULL);
  sim.fault_launch(1);
  gpa_status st = gpa_nt_run(t, "cast", &x, 1, &y, 1, NULL, 0);
  if (st != GPA_EDEVICE || !strstr(gpa_nt_msg, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")) {
    char what[700];
    snprintf(what, sizeof what, "refused launch: got %s '%s'", gpa_status_name(st), gpa_nt_msg);
    gpa_nt_fail(t, what);
  }
  sim.fault_clear();
  uint16_t got[40];
  if (gpa_nt_run(t, "cast", &x, 1, &y, 1, NULL, 0) != GPA_OK) {
    gpa_nt_fail(t, "cast after the refused launch failed");
    return;
  }
  gpa_nt_read(t, &y, got);
  for (int i = 0; i < 40; i++)
    if (got[i] != ref_bf16(src[i])) gpa_nt_fail(t, "cast after the refused launch: wrong bits");
  printf("ok: refused launch failed the op once, the next cast ran\n");
}

int main(void) {
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  printf("backend %s\n", gpa_actor_backend(t.a));
  /* 0, 1, a tail only, one chunk, chunks + tail, many chunks, past a block */
  const int64_t sizes[] = {0, 1, 7, 8, 37, 1000, 70001};
  int cases = 0;
  for (int from = 0; from < 3; from++)
    for (int to = 0; to < 3; to++)
      for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int off = 0; off <= 1; off++, cases++) check_pair(&t, from, to, sizes[s], off);
  errors(&t);
  if (!strcmp(gpa_actor_backend(t.a), "sim")) refused_launch(&t);
  printf("cast: %d conversions checked bit for bit\n", cases);
  return gpa_nt_close(&t);
}
