/* conv1d_fwd / conv1d_bwd(_nobias) with bf16 storage (x, W, b, y, dy, dx
 * bf16; dW, db f32; fp32 compute) against a double reference, on the
 * backend GPA_DEVICE selects and on the host implementation called
 * directly: padding, causal, dilation, stride, groups, K = 1, size 1, odd
 * lengths; channels last (layout nlc) on the same kinds of shapes. Then the
 * dtype errors: mixed storage is refused at submit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/parity/harness.h"

typedef struct geo {
  int64_t B, Cin, L, Cout, K, stride, pad, dil, groups;
  int causal;
  int nlc; /* layout nlc: x [B,L,Cin], y [B,Lout,Cout] */
} geo;

static geo geo_of(const gpa_pcase *c, const gpa_parr *xin, const gpa_parr *win) {
  const int nlc = (int)gpa_pcase_get_i(c, "layout", 0);
  geo g = {xin->t->shape[0], xin->t->shape[nlc ? 2 : 1], xin->t->shape[nlc ? 1 : 2], win->t->shape[0],
           win->t->shape[2], gpa_pcase_get_i(c, "stride", 1), gpa_pcase_get_i(c, "padding", 0),
           gpa_pcase_get_i(c, "dilation", 1), gpa_pcase_get_i(c, "groups", 1), (int)gpa_pcase_get_i(c, "causal", 0),
           nlc};
  return g;
}
/* channel of element i of y or dy */
static int64_t out_ch(const geo *g, int64_t i, int64_t lout) { return g->nlc ? i % g->Cout : (i / lout) % g->Cout; }

static int64_t pad_left(const geo *g) { return g->causal ? (g->K - 1) * g->dil : g->pad; }
static int64_t lout_of(const geo *g) {
  int64_t pr = g->causal ? 0 : g->pad;
  return (g->L + pad_left(g) + pr - g->dil * (g->K - 1) - 1) / g->stride + 1;
}

/* Visits every (b, co, t, ci, k) term whose input position lies in [0, L). */
#define FOR_TERMS(g, lout, body)                                                              \
  for (int64_t b = 0; b < (g).B; b++)                                                         \
    for (int64_t co = 0; co < (g).Cout; co++)                                                 \
      for (int64_t t = 0; t < (lout); t++)                                                    \
        for (int64_t ci = 0; ci < (g).Cin / (g).groups; ci++)                                 \
          for (int64_t k = 0; k < (g).K; k++) {                                               \
            const int64_t pos = t * (g).stride - pad_left(&(g)) + k * (g).dil;                \
            if (pos < 0 || pos >= (g).L) continue;                                            \
            const int64_t cg = (g).Cin / (g).groups, og = (g).Cout / (g).groups;              \
            const int64_t xi = (g).nlc ? (b * (g).L + pos) * (g).Cin + co / og * cg + ci              \
                                       : (b * (g).Cin + co / og * cg + ci) * (g).L + pos;             \
            const int64_t wi = (co * cg + ci) * (g).K + k;                                    \
            const int64_t yi = (g).nlc ? (b * (lout) + t) * (g).Cout + co : (b * (g).Cout + co) * (lout) + t; \
            body;                                                                             \
          }

/* in: x, W, b (optional); out: y */
static void ref_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  geo g = geo_of(c, &in[0], &in[1]);
  int64_t lout = lout_of(&g);
  for (int64_t i = 0; i < out[0].n; i++) out[0].d[i] = c->n_in > 2 ? in[2].d[out_ch(&g, i, lout)] : 0.0;
  FOR_TERMS(g, lout, out[0].d[yi] += in[1].d[wi] * in[0].d[xi]);
}

/* in: dy, x, W; out: dx, dW, db (optional) */
static void ref_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  geo g = geo_of(c, &in[1], &in[2]);
  int64_t lout = lout_of(&g);
  for (uint32_t o = 0; o < c->n_out; o++)
    for (int64_t i = 0; i < out[o].n; i++) out[o].d[i] = 0.0;
  FOR_TERMS(g, lout, {
    out[0].d[xi] += in[0].d[yi] * in[2].d[wi];
    out[1].d[wi] += in[0].d[yi] * in[1].d[xi];
  });
  if (c->n_out > 2)
    for (int64_t i = 0; i < in[0].n; i++) out[2].d[out_ch(&g, i, lout)] += in[0].d[i];
}

static void attrs(gpa_pcase *c, const geo *g) {
  gpa_pcase_attr_int(c, "stride", g->stride);
  gpa_pcase_attr_int(c, "padding", g->pad);
  gpa_pcase_attr_int(c, "dilation", g->dil);
  gpa_pcase_attr_int(c, "groups", g->groups);
  gpa_pcase_attr_int(c, "causal", g->causal);
  if (g->nlc) gpa_pcase_attr_int(c, "layout", 1);
}

/* an activation's shape in g's layout */
static int64_t *act_shape(const geo *g, int64_t C, int64_t len, int64_t s[3]) {
  s[0] = g->B, s[1] = g->nlc ? len : C, s[2] = g->nlc ? C : len;
  return s;
}

static gpa_pcase fwd_case(const geo *g, int bias) {
  gpa_pcase c = gpa_pcase_make("conv1d_fwd", ref_fwd);
  int64_t lout = lout_of(g), sh[3];
  gpa_pcase_in(&c, gpa_pt_bf16(3, act_shape(g, g->Cin, g->L, sh), -1, 1));
  gpa_pcase_in(&c, gpa_pt_bf16(3, (int64_t[]){g->Cout, g->Cin / g->groups, g->K}, -1, 1));
  if (bias) gpa_pcase_in(&c, gpa_pt_bf16(1, (int64_t[]){g->Cout}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_BF16, 3, act_shape(g, g->Cout, lout, sh)));
  attrs(&c, g);
  /* fp32 sums of (Cin/groups) K exact products of size <= 1 (their rounding),
   * plus y's one rounding to bf16 (GPA_PARITY_BF16_RTOL) */
  c.atol = 2e-7 * (double)(g->Cin / g->groups * g->K + 1);
  c.rtol = GPA_PARITY_BF16_RTOL;
  return c;
}

static gpa_pcase bwd_case(const geo *g, int bias) {
  gpa_pcase c = gpa_pcase_make(bias ? "conv1d_bwd" : "conv1d_bwd_nobias", ref_bwd);
  int64_t lout = lout_of(g), sh[3];
  gpa_pcase_in(&c, gpa_pt_bf16(3, act_shape(g, g->Cout, lout, sh), -1, 1));
  gpa_pcase_in(&c, gpa_pt_bf16(3, act_shape(g, g->Cin, g->L, sh), -1, 1));
  gpa_pcase_in(&c, gpa_pt_bf16(3, (int64_t[]){g->Cout, g->Cin / g->groups, g->K}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_BF16, 3, act_shape(g, g->Cin, g->L, sh)));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, (int64_t[]){g->Cout, g->Cin / g->groups, g->K}));
  if (bias) gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 1, (int64_t[]){g->Cout}));
  attrs(&c, g);
  /* dx: fp32 sums of (Cout/groups) K terms, rounded to bf16; dW, db: fp32
   * sums of B Lout terms (f32 outputs: within the same bounds) */
  int64_t terms = g->Cout / g->groups * g->K > g->B * lout ? g->Cout / g->groups * g->K : g->B * lout;
  c.atol = 2e-7 * (double)(terms + 1);
  c.rtol = GPA_PARITY_BF16_RTOL;
  return c;
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_conv1d_bf16");
  /* B Cin L Cout K stride pad dil groups causal nlc */
  const geo cases[] = {
      {1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0},      {2, 3, 17, 5, 3, 1, 1, 1, 1, 0, 0},  {3, 4, 33, 6, 3, 1, 0, 2, 1, 1, 0},
      {2, 6, 20, 4, 2, 2, 1, 1, 2, 0, 0},     {4, 8, 64, 8, 3, 1, 0, 4, 1, 1, 0},  {2, 5, 7, 3, 5, 1, 2, 1, 1, 0, 0},
      {3, 4, 9, 4, 1, 1, 0, 1, 1, 0, 0},      {2, 8, 31, 12, 3, 3, 2, 2, 4, 0, 0}, {1, 3, 5, 2, 3, 1, 0, 3, 1, 1, 0},
      {32, 12, 128, 12, 3, 1, 0, 8, 1, 1, 0}, /* the main job's shape, fewer channels: causal, dilation 8 */
      /* CUDA's implicit-GEMM tiles (64 x 64, 16 channels a stage): sizes past one tile and not
       * multiples of it; stride, groups, padding; a kernel extent the kernels decline (cuBLAS) */
      {3, 70, 131, 67, 3, 1, 0, 8, 1, 1, 0},  {2, 12, 97, 18, 5, 2, 3, 3, 3, 0, 0}, {2, 34, 77, 36, 4, 3, 0, 2, 2, 1, 0},
      {1, 2, 13010, 2, 2, 1, 0, 13000, 1, 0, 0},
      /* the tensor-core kernels' tiles (128 x 64 outputs, 32 channels or timesteps a stage;
       * channels padded to 8 in their channels-last copies): two row tiles and two column
       * tiles with ragged ends, 5 channel stages the last partial, dW in 6 splits; channels
       * per group not multiples of 8, stride 2 with groups 3 (dx: taps whose t s misses);
       * dW with several slices per split (K 31: 31 tiles, 19 slices in 10 splits of 2) */
      {2, 136, 70, 130, 3, 1, 0, 4, 1, 1, 0}, {3, 18, 101, 27, 3, 2, 1, 3, 3, 0, 0}, {1, 8, 600, 8, 31, 1, 0, 1, 1, 1, 0},
      /* db split into chunks of B Lout on CUDA: the main job's B32 L128 Cout 96, an odd B x Lout */
      {32, 4, 128, 96, 3, 1, 0, 1, 1, 1, 0},  {33, 3, 127, 60, 3, 1, 0, 2, 1, 1, 0},
      /* channels last: the tensor-core kernels reading x and dy in place (channels per group
       * multiples of 8: L past a tile and not a multiple of it with dilation 4; two dx row
       * tiles; groups 3 with stride 2; dW in splits of several slices; the main job's C96
       * with dilation 8), the SIMT kernels (channels not multiples of 8, groups and stride),
       * and the shape every kernel declines (the host's implementation) */
      {2, 16, 77, 24, 3, 1, 0, 4, 1, 1, 1}, {2, 136, 70, 128, 3, 1, 0, 4, 1, 1, 1}, {3, 48, 101, 24, 3, 2, 1, 3, 3, 0, 1},
      {1, 8, 600, 8, 31, 1, 0, 1, 1, 1, 1}, {4, 96, 128, 96, 3, 1, 0, 8, 1, 1, 1}, {3, 70, 131, 67, 3, 1, 0, 8, 1, 1, 1},
      {2, 12, 97, 18, 5, 2, 3, 3, 3, 0, 1}, {1, 2, 13010, 2, 2, 1, 0, 13000, 1, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int bias = 0; bias < 2; bias++) {
      gpa_pcase c = fwd_case(&cases[i], bias);
      gpa_parity_check(p, &c);
      c = bwd_case(&cases[i], bias);
      gpa_parity_check(p, &c);
    }
  /* mixed storage is refused at submit, naming the argument */
  const geo g = {2, 3, 17, 5, 3, 1, 1, 1, 1, 0, 0};
  gpa_pcase c = fwd_case(&g, 1);
  c.in[1].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "conv1d_fwd: W has dtype f32, expected bf16");
  c = fwd_case(&g, 1);
  c.in[2].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "conv1d_fwd: b has dtype f32, expected bf16");
  c = fwd_case(&g, 0);
  c.out[0].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, 0, NULL); /* y has the storage dtype */
  c = bwd_case(&g, 1);
  c.in[0].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "conv1d_bwd: dy has dtype f32, expected bf16");
  c = bwd_case(&g, 1);
  c.in[2].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "conv1d_bwd: W has dtype f32, expected bf16");
  c = bwd_case(&g, 1);
  c.out[1].dtype = GPA_BF16;
  gpa_parity_expect_error(p, &c, 0, NULL); /* dW stays f32 */
  c = bwd_case(&g, 0);
  c.out[0].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, 0, NULL); /* dx has x's dtype */
  c = fwd_case(&g, 0);
  c.in[0].dtype = GPA_I32;
  c.in[1].dtype = GPA_I32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "conv1d_fwd: x has dtype i32");
  return gpa_parity_close(p);
}
