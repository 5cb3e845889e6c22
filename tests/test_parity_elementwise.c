/* Parity of the elementwise ops against double references; masked-mean and
 * add-broadcast backwards against finite differences; validation messages. */
#include <stdio.h>

#include "tests/parity/harness.h"

static void ref_add(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  for (int64_t i = 0; i < in[0].n; i++) out[0].d[i] = in[0].d[i] + in[1].d[i];
}
static void ref_scale(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  double a = gpa_pcase_get_f(c, "alpha", 1.0);
  for (int64_t i = 0; i < in[0].n; i++) out[0].d[i] = a * in[0].d[i];
}
static void ref_axpy(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  double a = gpa_pcase_get_f(c, "alpha", 1.0);
  for (int64_t i = 0; i < in[0].n; i++) out[0].d[i] = a * in[0].d[i] + in[1].d[i];
}
/* x [B,L(,D)], mask [B,L] */
static void ref_mask_zero(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  int64_t rows = in[1].n, D = rows ? in[0].n / rows : 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t d = 0; d < D; d++) out[0].d[r * D + d] = in[1].d[r] != 0 ? in[0].d[r * D + d] : 0.0;
}
/* y[b,d] = mean over unmasked l; 0 when none (mask NULL: plain sum, used by add_broadcast_bwd) */
static void sum_l(const double *x, const double *mask, int64_t B, int64_t L, int64_t D, int mean, double *y) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t d = 0; d < D; d++) {
      double s = 0;
      int64_t k = 0;
      for (int64_t l = 0; l < L; l++)
        if (!mask || mask[b * L + l] != 0) {
          s += x[(b * L + l) * D + d];
          k++;
        }
      y[b * D + d] = mean ? (k ? s / (double)k : 0.0) : s;
    }
}
static void ref_mm_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  const int64_t *s = in[0].t->shape;
  sum_l(in[0].d, in[1].d, s[0], s[1], s[2], 1, out[0].d);
}
/* dy [B,D], mask [B,L] -> dx [B,L,D] */
static void ref_mm_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  int64_t B = in[1].t->shape[0], L = in[1].t->shape[1], D = in[0].t->shape[1];
  for (int64_t b = 0; b < B; b++) {
    int64_t k = 0;
    for (int64_t l = 0; l < L; l++) k += in[1].d[b * L + l] != 0;
    for (int64_t l = 0; l < L; l++)
      for (int64_t d = 0; d < D; d++)
        out[0].d[(b * L + l) * D + d] = (k && in[1].d[b * L + l] != 0) ? in[0].d[b * D + d] / (double)k : 0.0;
  }
}
static void ref_bc_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  const int64_t *s = in[0].t->shape;
  for (int64_t b = 0; b < s[0]; b++)
    for (int64_t l = 0; l < s[1]; l++)
      for (int64_t d = 0; d < s[2]; d++)
        out[0].d[(b * s[1] + l) * s[2] + d] = in[0].d[(b * s[1] + l) * s[2] + d] + in[1].d[b * s[2] + d];
}
static void ref_bc_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  const int64_t *s = in[0].t->shape;
  sum_l(in[0].d, NULL, s[0], s[1], s[2], 0, out[0].d);
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static gpa_pcase binary(const char *op, gpa_pref_fn ref, uint32_t rank, const int64_t *shape) {
  gpa_pcase c = gpa_pcase_make(op, ref);
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, -3, 3));
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, -3, 3));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, rank, shape));
  return c;
}

static gpa_pcase masked(const char *op, gpa_pref_fn ref, int64_t B, int64_t L, int64_t D, int mdtype, double keep) {
  gpa_pcase c = gpa_pcase_make(op, ref);
  gpa_pcase_in(&c, gpa_pt_f32(3, SH(B, L, D), -2, 2));
  gpa_pcase_in(&c, gpa_pt_mask(mdtype, 2, SH(B, L), keep));
  return c;
}

/* The same case with bf16 storage: every f32 tensor becomes bf16 (masks stay). */
static gpa_pcase bf16_of(gpa_pcase c) {
  for (uint32_t i = 0; i < c.n_in; i++)
    if (c.in[i].dtype == GPA_F32) c.in[i].dtype = GPA_BF16;
  for (uint32_t i = 0; i < c.n_out; i++)
    if (c.out[i].dtype == GPA_F32) c.out[i].dtype = GPA_BF16;
  c.rtol = GPA_PARITY_BF16_RTOL;
  return c;
}

static void check_both(gpa_parity *p, gpa_pcase c) {
  gpa_parity_check(p, &c);
  c = bf16_of(c);
  gpa_parity_check(p, &c);
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_elementwise");
  int large = gpa_parity_large(p);
  /* add / scale / axpy over ranks 0..3 */
  const int64_t lens[] = {0, 1, 7, 13, 97, 1000, 65537, large ? 1000003 : 4099};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    gpa_pcase c = binary("add", ref_add, 1, &lens[i]);
    check_both(p, c);
    c = binary("axpy", ref_axpy, 1, &lens[i]);
    gpa_pcase_attr_float(&c, "alpha", -0.75);
    check_both(p, c);
    c = gpa_pcase_make("scale", ref_scale);
    gpa_pcase_in(&c, gpa_pt_f32(1, &lens[i], -3, 3));
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, &lens[i]));
    gpa_pcase_attr_float(&c, "alpha", 2.5);
    check_both(p, c);
  }
  /* the mixed add (f32 + bf16 -> f32: a bf16 branch into the fp32 residual
   * stream), either order, in place over the f32 operand; fp32 tolerance
   * (the reference reads the same bf16 values) */
  const int64_t mlens[] = {0, 1, 7, 8, 97, 4099, 65537};
  for (size_t i = 0; i < sizeof mlens / sizeof mlens[0]; i++)
    for (int k = 0; k < 3; k++) {
      gpa_pcase c = gpa_pcase_make("add", ref_add);
      gpa_pcase_in(&c, k == 1 ? gpa_pt_bf16(1, &mlens[i], -3, 3) : gpa_pt_f32(1, &mlens[i], -3, 3));
      gpa_pcase_in(&c, k == 1 ? gpa_pt_f32(1, &mlens[i], -3, 3) : gpa_pt_bf16(1, &mlens[i], -3, 3));
      if (k == 2) gpa_pcase_out_alias(&c, 0);
      else gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, &mlens[i]));
      c.label = k == 0 ? "mixed: f32 + bf16" : k == 1 ? "mixed: bf16 + f32" : "mixed, in place over a";
      gpa_parity_check(p, &c);
    }
  gpa_pcase c = binary("add", ref_add, 0, NULL);
  check_both(p, c);
  c = binary("add", ref_add, 3, SH(3, 5, 7));
  check_both(p, c);
  c = gpa_pcase_make("axpy", ref_axpy); /* in place: y is y0 */
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(33, 65), -1, 1));
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(33, 65), -1, 1));
  gpa_pcase_out_alias(&c, 1);
  gpa_pcase_attr_float(&c, "alpha", 0.5);
  c.label = "in place";
  check_both(p, c);
  c = gpa_pcase_make("scale", ref_scale); /* defaults: alpha 1 */
  gpa_pcase_in(&c, gpa_pt_f32(1, SH(10), -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, SH(10)));
  gpa_parity_check(p, &c);

  /* masked ops over [B,L,D] */
  const int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 5}, {3, 7, 13}, {0, 4, 3}, {2, 0, 5}, {4, 5, 0},
                               {5, 17, 300}, {2, 9, 600}, {8, 64, 257}, {3, 31, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int64_t B = shapes[i][0], L = shapes[i][1], D = shapes[i][2];
    int md = i % 2 ? GPA_I32 : GPA_U8;
    c = masked("mask_zero", ref_mask_zero, B, L, D, md, 0.6);
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, SH(B, L, D)));
    check_both(p, c);
    c = gpa_pcase_make("mask_zero", ref_mask_zero); /* [B,L] form */
    gpa_pcase_in(&c, gpa_pt_f32(2, SH(B, L), -2, 2));
    gpa_pcase_in(&c, gpa_pt_mask(md, 2, SH(B, L), 0.5));
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(B, L)));
    check_both(p, c);
    c = masked("masked_mean_fwd", ref_mm_fwd, B, L, D, md, i == 2 ? 0.0 : 0.6);
    if (i == 2) c.label = "all rows masked: 0";
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(B, D)));
    check_both(p, c);
    /* bf16 backward ops: against their analytic references (the FD checks are fp32) */
    gpa_pcase bw = gpa_pcase_make("masked_mean_bwd", ref_mm_bwd);
    gpa_pcase_in(&bw, gpa_pt_f32(2, SH(B, D), -2, 2));
    gpa_pcase_in(&bw, gpa_pt_mask(md, 2, SH(B, L), 0.6));
    gpa_pcase_out(&bw, gpa_pt_spec(GPA_F32, 3, SH(B, L, D)));
    bw = bf16_of(bw);
    gpa_parity_check(p, &bw);
    bw = gpa_pcase_make("add_broadcast_bwd", ref_bc_bwd);
    gpa_pcase_in(&bw, gpa_pt_f32(3, SH(B, L, D), -2, 2));
    gpa_pcase_out(&bw, gpa_pt_spec(GPA_F32, 2, SH(B, D)));
    bw = bf16_of(bw);
    gpa_parity_check(p, &bw);
    gpa_pgrad g = {.op = "masked_mean_bwd", .n_dy = 1, .n_in = 2, .in = {{GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 1}},
                   .n_out = 1, .grad_of = {0}, .ref = ref_mm_bwd};
    gpa_parity_grad(p, &c, &g);
    c = gpa_pcase_make("add_broadcast_fwd", ref_bc_fwd);
    gpa_pcase_in(&c, gpa_pt_f32(3, SH(B, L, D), -2, 2));
    gpa_pcase_in(&c, gpa_pt_f32(2, SH(B, D), -2, 2));
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, SH(B, L, D)));
    check_both(p, c);
    gpa_pgrad gb = {.op = "add_broadcast_bwd", .n_dy = 1, .n_in = 1, .in = {{GPA_PSRC_DY, 0}}, .n_out = 1,
                    .grad_of = {1}, .ref = ref_bc_bwd};
    gpa_parity_grad(p, &c, &gb);
  }
  if (large) {
    c = masked("masked_mean_fwd", ref_mm_fwd, 8, 512, 512, GPA_U8, 0.7);
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(8, 512)));
    gpa_parity_check(p, &c);
  }

  /* validation */
  c = binary("add", ref_add, 2, SH(3, 4));
  c.in[1].shape[1] = 5;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "add: b has shape [3,5], expected [3,4]");
  c = binary("add", ref_add, 1, SH(4));
  c.in[0].dtype = GPA_I32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "add: a has dtype i32");
  c = masked("masked_mean_fwd", ref_mm_fwd, 2, 3, 4, GPA_U8, 0.5);
  c.in[1].dtype = GPA_F32;
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(2, 4)));
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "mask has dtype f32, expected u8 or i32");
  c = masked("masked_mean_fwd", ref_mm_fwd, 2, 3, 4, GPA_U8, 0.5);
  c.in[1].shape[1] = 4;
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(2, 4)));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "mask has shape [2,4], expected [2,3]");
  c = masked("mask_zero", ref_mask_zero, 2, 3, 4, GPA_I32, 0.5);
  c.in[0].rank = 1;
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, SH(2)));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "mask_zero: x has shape [2]");
  c = gpa_pcase_make("add_broadcast_fwd", ref_bc_fwd);
  gpa_pcase_in(&c, gpa_pt_f32(3, SH(2, 3, 4), -2, 2));
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(2, 3), -2, 2));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, SH(2, 3, 4)));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "v has shape [2,3], expected [2,4]");
  c = gpa_pcase_make("masked_mean_bwd", ref_mm_bwd);
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(3, 4), -2, 2));
  gpa_pcase_in(&c, gpa_pt_mask(GPA_U8, 2, SH(2, 5), 0.5));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, SH(2, 5, 4)));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "dy has shape [3,4], expected [2,4] (B of mask)");
  c = bf16_of(binary("add", ref_add, 1, SH(4))); /* a mixed pair writes f32 */
  c.in[1].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, 0, NULL); /* the message: test_mixed_dtypes */
  c = bf16_of(binary("add", ref_add, 1, SH(4)));
  c.in[1].dtype = GPA_F16;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "add: b has dtype f16, expected bf16 (the dtype of a)");
  c = binary("add", ref_add, 2, SH(3, 4));
  c.in[1].dtype = GPA_BF16;
  c.in[1].shape[1] = 5;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "add: b has shape [3,5], expected [3,4] (shape of a)");
  c = gpa_pcase_make("add_broadcast_fwd", ref_bc_fwd);
  gpa_pcase_in(&c, gpa_pt_bf16(3, SH(2, 3, 4), -2, 2));
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(2, 4), -2, 2));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_BF16, 3, SH(2, 3, 4)));
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "add_broadcast_fwd: v has dtype f32, expected bf16");
  c = binary("add", ref_add, 1, SH(4));
  c.out[0].dtype = GPA_BF16;
  gpa_parity_expect_error(p, &c, 0, NULL); /* the output's dtype follows the inputs' */
  c = binary("add", ref_add, 1, SH(4));
  c.in[0].dtype = c.in[1].dtype = c.out[0].dtype = GPA_F16;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "add: a has dtype f16, expected f32 or bf16");
  c = binary("axpy", ref_axpy, 1, SH(4));
  gpa_pcase_attr_float(&c, "alpah", 2);
  gpa_parity_expect_error(p, &c, 0, "alpah");
  return gpa_parity_close(p);
}
