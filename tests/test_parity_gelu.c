/* Parity of gelu_fwd / gelu_bwd (erf and tanh forms) against double
 * references, the backward against finite differences, validation. */
#include <math.h>
#include <stdio.h>

#include "tests/parity/harness.h"

static double gelu(double x, int tanh_form) {
  if (tanh_form) return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * erfc(-x / sqrt(2.0));
}

static double dgelu(double x, int tanh_form) {
  if (tanh_form) {
    double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
  }
  return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}

static void ref_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int t = (int)gpa_pcase_get_i(c, "approximate", 0);
  for (int64_t i = 0; i < in[0].n; i++) out[0].d[i] = gelu(in[0].d[i], t);
}

static void ref_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int t = (int)gpa_pcase_get_i(c, "approximate", 0);
  for (int64_t i = 0; i < in[0].n; i++) out[0].d[i] = in[1].d[i] * dgelu(in[0].d[i], t);
}

static gpa_pcase fwd(uint32_t rank, const int64_t *shape, double lo, double hi, int form) {
  gpa_pcase c = gpa_pcase_make("gelu_fwd", ref_fwd);
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, lo, hi));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, rank, shape));
  if (form >= 0) gpa_pcase_attr_int(&c, "approximate", form);
  return c;
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_gelu");
  const int64_t lens[] = {0, 1, 5, 16, 17, 1023, 1025, 4099, 65536 + 3};
  for (int form = -1; form <= 1; form++) { /* -1: attribute left out (erf) */
    gpa_pgrad g = {.op = "gelu_bwd", .n_dy = 1, .n_in = 2, .in = {{GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_DY, 0}},
                   .n_out = 1, .grad_of = {0}, .ref = ref_bwd};
    if (form >= 0) {
      g.attrs[0] = (gpa_attr){"approximate", GPA_ATTR_INT, form, 0};
      g.n_attrs = 1;
    }
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
      gpa_pcase c = fwd(1, &lens[i], -6, 6, form);
      gpa_parity_check(p, &c);
      gpa_parity_grad(p, &c, &g);
    }
    gpa_pcase c = fwd(3, (const int64_t[]){3, 7, 11}, -30, 30, form);
    c.label = "tails";
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &g);
    c = fwd(2, (const int64_t[]){64, 100}, -1e-3, 1e-3, form);
    c.label = "near 0";
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &g);
    if (gpa_parity_large(p)) {
      int64_t n = (1 << 20) + 7;
      c = fwd(1, &n, -8, 8, form);
      gpa_parity_check(p, &c);
      gpa_parity_grad(p, &c, &g);
    }
  }
  /* bf16 storage (fp32 math, one rounding): forward and backward against the
   * double references; the FD gradient checks above stay fp32 */
  const int64_t blens[] = {0, 1, 7, 8, 17, 1023, 4099, 65536 + 3};
  for (int form = 0; form <= 1; form++)
    for (size_t i = 0; i < sizeof blens / sizeof blens[0]; i++) {
      gpa_pcase c = fwd(1, &blens[i], -6, 6, form);
      c.in[0].dtype = c.out[0].dtype = GPA_BF16;
      c.rtol = GPA_PARITY_BF16_RTOL;
      gpa_parity_check(p, &c);
      c = gpa_pcase_make("gelu_bwd", ref_bwd);
      gpa_pcase_in(&c, gpa_pt_bf16(1, &blens[i], -6, 6));
      gpa_pcase_in(&c, gpa_pt_bf16(1, &blens[i], -2, 2));
      gpa_pcase_out(&c, gpa_pt_spec(GPA_BF16, 1, &blens[i]));
      gpa_pcase_attr_int(&c, "approximate", form);
      c.rtol = GPA_PARITY_BF16_RTOL;
      gpa_parity_check(p, &c);
    }
  gpa_pcase c = fwd(3, (const int64_t[]){3, 7, 11}, -30, 30, 1);
  c.in[0].dtype = c.out[0].dtype = GPA_BF16;
  c.rtol = GPA_PARITY_BF16_RTOL;
  c.label = "bf16 tails";
  gpa_parity_check(p, &c);
  /* the mixed backward (x and dx bf16, dy f32: the fp32 residual gradient
   * meeting a bf16 branch in gpa-train-lm --bf16), 16-byte and scalar paths */
  const int64_t mlens[] = {0, 1, 7, 8, 17, 1023, 4099, 65536 + 3};
  for (int form = 0; form <= 1; form++)
    for (size_t i = 0; i < sizeof mlens / sizeof mlens[0]; i++) {
      c = gpa_pcase_make("gelu_bwd", ref_bwd);
      gpa_pcase_in(&c, gpa_pt_bf16(1, &mlens[i], -6, 6));
      gpa_pcase_in(&c, gpa_pt_f32(1, &mlens[i], -2, 2));
      gpa_pcase_out(&c, gpa_pt_spec(GPA_BF16, 1, &mlens[i]));
      gpa_pcase_attr_int(&c, "approximate", form);
      c.rtol = GPA_PARITY_BF16_RTOL;
      c.label = "mixed: x bf16, dy f32";
      gpa_parity_check(p, &c);
    }
  c = gpa_pcase_make("gelu_bwd", ref_bwd); /* in place over x (bf16) */
  gpa_pcase_in(&c, gpa_pt_bf16(2, (const int64_t[]){33, 96}, -6, 6));
  gpa_pcase_in(&c, gpa_pt_f32(2, (const int64_t[]){33, 96}, -2, 2));
  gpa_pcase_out_alias(&c, 0);
  c.rtol = GPA_PARITY_BF16_RTOL;
  c.label = "mixed, dx over x";
  gpa_parity_check(p, &c);
  c = gpa_pcase_make("gelu_bwd", ref_bwd); /* the other mix is refused */
  gpa_pcase_in(&c, gpa_pt_f32(1, (const int64_t[]){8}, -1, 1));
  gpa_pcase_in(&c, gpa_pt_bf16(1, (const int64_t[]){8}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, (const int64_t[]){8}));
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "gelu_bwd: dy has dtype bf16, expected f32 (the dtype of x)");
  c = gpa_pcase_make("gelu_bwd", ref_bwd); /* dx follows x: bf16 */
  gpa_pcase_in(&c, gpa_pt_bf16(1, (const int64_t[]){8}, -1, 1));
  gpa_pcase_in(&c, gpa_pt_f32(1, (const int64_t[]){8}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, (const int64_t[]){8}));
  gpa_parity_expect_error(p, &c, 0, NULL); /* the message: test_mixed_dtypes */
  c = gpa_pcase_make("gelu_bwd", ref_bwd);
  gpa_pcase_in(&c, gpa_pt_bf16(1, (const int64_t[]){8}, -1, 1));
  gpa_pcase_in(&c, gpa_pt_f32(1, (const int64_t[]){9}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_BF16, 1, (const int64_t[]){8}));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "gelu_bwd: dy has shape [9], expected [8] (shape of x)");

  c = fwd(1, (const int64_t[]){8}, -1, 1, 2);
  gpa_parity_expect_error(p, &c, 0, "approximate");
  c = fwd(1, (const int64_t[]){8}, -1, 1, 0);
  c.in[0].dtype = GPA_U8;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "gelu_fwd: x has dtype u8, expected f32");
  c = gpa_pcase_make("gelu_bwd", ref_bwd);
  gpa_pcase_in(&c, gpa_pt_f32(2, (const int64_t[]){4, 5}, -1, 1));
  gpa_pcase_in(&c, gpa_pt_f32(2, (const int64_t[]){5, 4}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, (const int64_t[]){4, 5}));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "gelu_bwd: dy has shape [5,4], expected [4,5] (shape of x)");
  return gpa_parity_close(p);
}
