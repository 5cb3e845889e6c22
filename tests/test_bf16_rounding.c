/* bf16 rounding: the host conversions (kernels/host/bf16.h) on the cases
 * that matter (ties to even, just above a tie, overflow to inf, NaN, signed
 * zero, subnormals), and the same bits from the `add` op with bf16 storage
 * on the backend GPA_DEVICE selects: through the CUDA kernel's 16-byte path
 * (aligned views), its scalar tail, and its scalar path (views at a 2-byte
 * offset), and through the host's widen/compute/narrow path on cpu. One fp32
 * add then one rounding: every backend must give exactly these bits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/host/bf16.h"
#include "util/nn_test.h"

static int fails;

static void expect16(const char *what, uint16_t got, uint16_t want) {
  int nan_g = (got & 0x7fff) > 0x7f80, nan_w = (want & 0x7fff) > 0x7f80;
  if (nan_g && nan_w) return;
  if (got != want) {
    printf("FAIL %s: got 0x%04x, want 0x%04x\n", what, got, want);
    fails++;
  }
}

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void host_cases(void) {
  /* 1 + 2^-8 is halfway between 0x3f80 and 0x3f81: to even */
  expect16("tie to even (down)", gpa__f32_to_bf16(f_of(0x3f808000u)), 0x3f80);
  expect16("tie to even (up)", gpa__f32_to_bf16(f_of(0x3f818000u)), 0x3f82);
  expect16("above a tie", gpa__f32_to_bf16(f_of(0x3f808001u)), 0x3f81);
  expect16("below a tie", gpa__f32_to_bf16(f_of(0x3f807fffu)), 0x3f80);
  expect16("max float to inf", gpa__f32_to_bf16(f_of(0x7f7fffffu)), 0x7f80);
  expect16("largest that stays finite", gpa__f32_to_bf16(f_of(0x7f7f7fffu)), 0x7f7f);
  expect16("-inf", gpa__f32_to_bf16(-INFINITY), 0xff80);
  expect16("-0", gpa__f32_to_bf16(-0.0f), 0x8000);
  expect16("subnormal", gpa__f32_to_bf16(f_of(0x00018000u)), 0x0002);
  uint16_t n = gpa__f32_to_bf16(f_of(0x7f800001u)); /* a NaN whose payload would round to inf */
  if ((n & 0x7fff) <= 0x7f80) {
    printf("FAIL NaN narrowed to 0x%04x (not a NaN)\n", n);
    fails++;
  }
  for (uint32_t h = 0; h < 0x10000; h += 7) { /* widening is exact: narrowing gives the bits back */
    uint16_t b = gpa__f32_to_bf16(gpa__bf16_to_f32((uint16_t)h));
    if ((h & 0x7fff) <= 0x7f80 && b != h) {
      printf("FAIL round trip of 0x%04x gives 0x%04x\n", h, b);
      fails++;
      break;
    }
  }
}

/* a + b pairs whose fp32 sum rounds in each interesting way */
static const uint16_t pa[] = {0x3f80, 0x3f81, 0x3f80, 0x7f7f, 0x7fc0, 0x8000, 0x0001, 0xc2c8, 0x4000};
static const uint16_t pb[] = {0x3b80, 0x3b80, 0x3b81, 0x7f7f, 0x3f80, 0x8000, 0x0001, 0x42c8, 0xbf80};
#define NP (sizeof pa / sizeof pa[0])
#define N 21 /* two 8-value chunks and a 5-value tail on the aligned views */

static void op_cases(gpa_nt *t) {
  uint16_t a[N + 1], b[N + 1], want[N + 1], got[N + 1];
  for (int i = 0; i <= N; i++) {
    a[i] = pa[i % NP];
    b[i] = pb[i % NP];
    want[i] = gpa__f32_to_bf16(gpa__bf16_to_f32(a[i]) + gpa__bf16_to_f32(b[i]));
  }
  for (int off = 0; off <= 1; off++) { /* off 1: views 2 bytes in (not 16-byte aligned) */
    int64_t nb = N + 1, n = N;
    gpa_tensor ta = gpa_nt_tensor(t, GPA_BF16, 1, &nb, a), tb = gpa_nt_tensor(t, GPA_BF16, 1, &nb, b);
    gpa_tensor ty = gpa_nt_tensor(t, GPA_BF16, 1, &nb, NULL);
    gpa_tensor in[2] = {ta, tb}, out = ty;
    for (int k = 0; k < 2; k++) {
      in[k].shape[0] = n;
      in[k].offset = 2u * (uint64_t)off;
    }
    out.shape[0] = n;
    out.offset = 2u * (uint64_t)off;
    if (gpa_nt_run(t, "add", in, 2, &out, 1, NULL, 0) != GPA_OK) {
      printf("FAIL add bf16 (offset %d): %s\n", off, gpa_nt_msg);
      fails++;
      continue;
    }
    gpa_nt_read(t, &out, got);
    for (int i = 0; i < N; i++) {
      char what[96];
      snprintf(what, sizeof what, "add bf16 offset %d [%d] 0x%04x + 0x%04x", off, i, a[i + off], b[i + off]);
      expect16(what, got[i], want[i + off]);
    }
  }
}

int main(void) {
  host_cases();
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc == 0) {
    printf("backend %s\n", gpa_actor_backend(t.a));
    op_cases(&t);
    rc = gpa_nt_close(&t);
  }
  printf("%s (%d failures)\n", fails ? "FAILED" : "ok", fails);
  return fails || rc == 1 ? 1 : 0;
}
