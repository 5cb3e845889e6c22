/* Parity of layernorm_fwd / layernorm_bwd against a double reference, the
 * backward against finite differences, and validation messages. */
#include <math.h>
#include <stdio.h>

#include "tests/parity/harness.h"

static void ref_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  const double eps = gpa_pcase_get_f(c, "eps", 1e-5);
  const int64_t N = in[0].t->shape[0], D = in[0].t->shape[1];
  for (int64_t n = 0; n < N; n++) {
    const double *x = in[0].d + n * D;
    double s = 0, v = 0;
    for (int64_t d = 0; d < D; d++) s += x[d];
    double m = D ? s / (double)D : 0;
    for (int64_t d = 0; d < D; d++) v += (x[d] - m) * (x[d] - m);
    double r = 1.0 / sqrt((D ? v / (double)D : 0) + eps);
    for (int64_t d = 0; d < D; d++) out[0].d[n * D + d] = (x[d] - m) * r * in[1].d[d] + in[2].d[d];
    out[1].d[n] = m;
    out[2].d[n] = r;
  }
}

/* in: x, dy, gamma, mean, rstd; out: dx, dgamma, dbeta */
static void ref_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  const int64_t N = in[0].t->shape[0], D = in[0].t->shape[1];
  for (int64_t d = 0; d < D; d++) out[1].d[d] = out[2].d[d] = 0;
  for (int64_t n = 0; n < N; n++) {
    const double *x = in[0].d + n * D, *dy = in[1].d + n * D, m = in[3].d[n], r = in[4].d[n];
    double a = 0, b = 0;
    for (int64_t d = 0; d < D; d++) {
      a += dy[d] * in[2].d[d];
      b += dy[d] * in[2].d[d] * (x[d] - m) * r;
    }
    for (int64_t d = 0; d < D; d++) {
      double xh = (x[d] - m) * r;
      out[0].d[n * D + d] = r * (dy[d] * in[2].d[d] - a / (double)D - xh * b / (double)D);
      out[1].d[d] += dy[d] * xh;
      out[2].d[d] += dy[d];
    }
  }
}

/* the mixed form's dx_bf16 (outputs[3]): dx again, rounded once */
static void ref_bwd_copy(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  ref_bwd(c, in, out);
  for (int64_t i = 0; i < out[0].n; i++) out[3].d[i] = out[0].d[i];
}

/* layernorm_bwd on its own (no forward, no finite differences: cheap at
 * thousands of rows); dt: x, dy, dx storage */
static gpa_pcase bwd_case(int dt, int64_t N, int64_t D) {
  gpa_pcase b = gpa_pcase_make("layernorm_bwd", ref_bwd);
  gpa_pcase_in(&b, dt == GPA_BF16 ? gpa_pt_bf16(2, (int64_t[]){N, D}, -2, 2) : gpa_pt_f32(2, (int64_t[]){N, D}, -2, 2));
  gpa_pcase_in(&b, dt == GPA_BF16 ? gpa_pt_bf16(2, (int64_t[]){N, D}, -1, 1) : gpa_pt_f32(2, (int64_t[]){N, D}, -1, 1));
  gpa_pcase_in(&b, gpa_pt_f32(1, (int64_t[]){D}, 0.5, 1.5));
  gpa_pcase_in(&b, gpa_pt_f32(1, (int64_t[]){N}, -0.5, 0.5));
  gpa_pcase_in(&b, gpa_pt_f32(1, (int64_t[]){N}, 0.5, 2));
  gpa_pcase_out(&b, gpa_pt_spec(dt, 2, (int64_t[]){N, D}));
  gpa_pcase_out(&b, gpa_pt_spec(GPA_F32, 1, (int64_t[]){D}));
  gpa_pcase_out(&b, gpa_pt_spec(GPA_F32, 1, (int64_t[]){D}));
  if (dt == GPA_BF16) b.rtol = GPA_PARITY_BF16_RTOL;
  return b;
}

static gpa_pcase fwd_case(int64_t N, int64_t D, double lo, double hi) {
  gpa_pcase c = gpa_pcase_make("layernorm_fwd", ref_fwd);
  gpa_pcase_in(&c, gpa_pt_f32(2, (int64_t[]){N, D}, lo, hi));
  gpa_pcase_in(&c, gpa_pt_f32(1, (int64_t[]){D}, 0.5, 1.5));
  gpa_pcase_in(&c, gpa_pt_f32(1, (int64_t[]){D}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, (int64_t[]){N, D}));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, (int64_t[]){N}));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, (int64_t[]){N}));
  return c;
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_layernorm");
  const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 5}, {7, 13}, {13, 1}, {2, 31}, {31, 97}, {0, 8}, {17, 256}, {33, 1000}, {64, 1024}, {5, 4100}};
  const gpa_pgrad grad = {.op = "layernorm_bwd", .n_dy = 1, .n_in = 5,
                          .in = {{GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 1}, {GPA_PSRC_FWD_OUT, 1}, {GPA_PSRC_FWD_OUT, 2}},
                          .n_out = 3, .grad_of = {0, 1, 2}, .ref = ref_bwd};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    gpa_pcase c = fwd_case(shapes[i][0], shapes[i][1], -2, 2);
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &grad);
  }
  /* eps attribute; a large mean (two-pass stability); D = 0 */
  gpa_pcase c = fwd_case(9, 300, -3, 3);
  gpa_pcase_attr_float(&c, "eps", 0.25);
  gpa_parity_check(p, &c);
  gpa_parity_grad(p, &c, &grad);
  c = fwd_case(16, 512, 1e4 - 1, 1e4 + 1);
  c.label = "mean 1e4, spread 1";
  gpa_parity_check(p, &c);
  c = fwd_case(4, 64, 3e6, 3e6 + 64);
  c.label = "mean 3e6";
  gpa_parity_check(p, &c);
  c = fwd_case(3, 2048, 1e4 - 1, 1e4 + 1);
  c.label = "mean 1e4, a block per row on CUDA";
  gpa_parity_check(p, &c);
  c = fwd_case(3, 0, -1, 1);
  gpa_parity_check(p, &c);
  /* dgamma/dbeta split over chunks of rows on CUDA (the tile's last block
   * adds them): the main job's 4096 x 96 (16-byte path), odd row counts,
   * D = 97 (scalar path, 4 column tiles), D = 1024 (the split's widest) */
  const int64_t split[][3] = {{GPA_F32, 4096, 96}, {GPA_F32, 4099, 96}, {GPA_F32, 1001, 97}, {GPA_F32, 300, 1024},
                              {GPA_BF16, 4096, 96}, {GPA_BF16, 4099, 104}, {GPA_BF16, 777, 97}};
  for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
    gpa_pcase bc = bwd_case((int)split[i][0], split[i][1], split[i][2]);
    gpa_parity_check(p, &bc);
  }
  if (gpa_parity_large(p)) {
    c = fwd_case(4096, 1024, -2, 2);
    gpa_parity_check(p, &c);
    c = fwd_case(1023, 769, -2, 2);
    gpa_parity_grad(p, &c, &grad);
  }
  /* bf16 storage of x/y (gamma, beta, mean, rstd stay f32) and of x/dy/dx in
   * the backward (dgamma, dbeta f32), against the double references */
  const int64_t bshapes[][2] = {{1, 1}, {3, 5}, {7, 13}, {2, 31}, {31, 97}, {0, 8}, {17, 256}, {33, 1000}, {64, 1024}, {5, 8}, {3, 4104}, {2, 2048}};
  for (size_t i = 0; i < sizeof bshapes / sizeof bshapes[0]; i++) {
    int64_t N = bshapes[i][0], D = bshapes[i][1];
    gpa_pcase bc = fwd_case(N, D, -2, 2);
    bc.in[0].dtype = bc.out[0].dtype = GPA_BF16;
    bc.rtol = GPA_PARITY_BF16_RTOL;
    gpa_parity_check(p, &bc);
    gpa_pcase bb = bwd_case(GPA_BF16, N, D);
    gpa_parity_check(p, &bb);
  }
  /* the mixed forms (gpa-train-lm --bf16: the fp32 layernorm beside bf16
   * GEMMs): x f32 with y bf16; x f32 with dy bf16 (dx f32 at the fp32
   * tolerance: the reference reads the same bf16 dy), and with the
   * dx_bf16 copy; 16-byte and scalar paths, lane groups and rows, the
   * split sums and the partials on CUDA */
  const int64_t mshapes[][2] = {{1, 1}, {3, 5}, {31, 97}, {0, 8}, {17, 256}, {4096, 96}, {1001, 97},
                                {64, 1024}, {3, 4100}, {5, 1100}, {2, 2048}};
  for (size_t i = 0; i < sizeof mshapes / sizeof mshapes[0]; i++) {
    int64_t N = mshapes[i][0], D = mshapes[i][1];
    gpa_pcase mc = fwd_case(N, D, -2, 2);
    mc.out[0].dtype = GPA_BF16;
    mc.rtol = GPA_PARITY_BF16_RTOL;
    mc.label = "mixed: x f32, y bf16";
    gpa_parity_check(p, &mc);
    gpa_pcase mb = bwd_case(GPA_F32, N, D);
    mb.in[1] = gpa_pt_bf16(2, (int64_t[]){N, D}, -1, 1);
    mb.label = "mixed: x f32, dy bf16";
    gpa_parity_check(p, &mb);
    mb.ref = ref_bwd_copy;
    gpa_pcase_out(&mb, gpa_pt_spec(GPA_BF16, 2, (int64_t[]){N, D}));
    mb.rtol = GPA_PARITY_BF16_RTOL;
    mb.label = "mixed: x f32, dy bf16, dx_bf16";
    gpa_parity_check(p, &mb);
  }
  {
    gpa_pcase mb = bwd_case(GPA_F32, 4, 8); /* dx follows x: f32 */
    mb.in[1] = gpa_pt_bf16(2, (int64_t[]){4, 8}, -1, 1);
    mb.out[0].dtype = GPA_BF16;
    gpa_parity_expect_error(p, &mb, 0, NULL); /* the message: test_mixed_dtypes */
    mb = bwd_case(GPA_F32, 4, 8);
    gpa_pcase_out(&mb, gpa_pt_spec(GPA_BF16, 2, (int64_t[]){4, 8}));
    gpa_parity_expect_error(p, &mb, GPA_EINVAL, "dx_bf16 (outputs[3]) is written only by the mixed form");
    mb = bwd_case(GPA_F32, 4, 8);
    mb.in[1] = gpa_pt_bf16(2, (int64_t[]){4, 9}, -1, 1);
    gpa_parity_expect_error(p, &mb, GPA_ESHAPE, "layernorm_bwd: dy has shape [4,9], expected [4,8] (shape of x)");
  }
  {
    gpa_pcase bc = fwd_case(4, 8, -1, 1);
    bc.in[0].dtype = bc.out[0].dtype = GPA_BF16;
    bc.in[1].dtype = GPA_BF16;
    gpa_parity_expect_error(p, &bc, GPA_EDTYPE, "layernorm_fwd: gamma has dtype bf16, expected f32");
  }
  /* validation: the message names the offending argument */
  c = fwd_case(4, 512, -1, 1);
  c.in[1].shape[0] = 511;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "gamma has shape [511], expected [512] (D of x)");
  c = fwd_case(4, 8, -1, 1);
  c.in[2].shape[0] = 9;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "beta");
  c = fwd_case(4, 8, -1, 1);
  c.in[0].dtype = GPA_I32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "x has dtype i32, expected f32");
  c = fwd_case(4, 8, -1, 1);
  c.in[0].rank = 3;
  c.in[0].shape[2] = 2;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "x has shape [4,8,2]");
  c = fwd_case(4, 8, -1, 1);
  gpa_pcase_attr_float(&c, "eps", -1.0);
  gpa_parity_expect_error(p, &c, 0, "eps");
  c = fwd_case(4, 8, -1, 1);
  c.out[1].shape[0] = 5;
  gpa_parity_expect_error(p, &c, 0, NULL);
  gpa_pcase b = gpa_pcase_make("layernorm_bwd", ref_bwd);
  gpa_pcase_in(&b, gpa_pt_f32(2, (int64_t[]){4, 8}, -1, 1));
  gpa_pcase_in(&b, gpa_pt_f32(2, (int64_t[]){4, 8}, -1, 1));
  gpa_pcase_in(&b, gpa_pt_f32(1, (int64_t[]){8}, -1, 1));
  gpa_pcase_in(&b, gpa_pt_f32(1, (int64_t[]){3}, -1, 1));
  gpa_pcase_in(&b, gpa_pt_f32(1, (int64_t[]){4}, 1, 2));
  gpa_pcase_out(&b, gpa_pt_spec(GPA_F32, 2, (int64_t[]){4, 8}));
  gpa_pcase_out(&b, gpa_pt_spec(GPA_F32, 1, (int64_t[]){8}));
  gpa_pcase_out(&b, gpa_pt_spec(GPA_F32, 1, (int64_t[]){8}));
  gpa_parity_expect_error(p, &b, GPA_ESHAPE, "mean has shape [3], expected [4] (N of x)");
  b.in[3].shape[0] = 4;
  b.in[1].shape[1] = 7;
  gpa_parity_expect_error(p, &b, GPA_ESHAPE, "dy has shape [4,7], expected [4,8]");
  return gpa_parity_close(p);
}
