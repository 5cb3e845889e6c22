/* conv1d_fwd / conv1d_bwd / conv1d_bwd_nobias through the actor against a
 * double reference: padding, causal, dilation, groups, stride, K = 1 (the
 * direct path), size 1, primes, tiles of the CUDA kernels and the
 * shape they decline, a column matrix past the 16 MiB chunk;
 * finite differences, backward determinism, and the shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/parity/harness.h"
#include "util/nn_test.h"

typedef struct ccase {
  int64_t B, Cin, L, Cout, K, stride, padding, dilation, groups;
  int causal, bias;
} ccase;

typedef struct cref {
  const ccase *c;
  int64_t Lout, pl;
  double *x, *W, *b, *w;
} cref;

/* y (and mag, the sum of |terms|, nullable) */
static void ref_fwd(const cref *r, double *y, double *mag) {
  const ccase *c = r->c;
  int64_t cg = c->Cin / c->groups, og = c->Cout / c->groups;
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t co = 0; co < c->Cout; co++)
      for (int64_t t = 0; t < r->Lout; t++) {
        double s = c->bias ? r->b[co] : 0, m = fabs(s);
        for (int64_t ci = 0; ci < cg; ci++)
          for (int64_t k = 0; k < c->K; k++) {
            int64_t pos = t * c->stride - r->pl + k * c->dilation;
            if (pos < 0 || pos >= c->L) continue;
            double v = r->W[(co * cg + ci) * c->K + k] * r->x[(b * c->Cin + co / og * cg + ci) * c->L + pos];
            s += v;
            m += fabs(v);
          }
        y[(b * c->Cout + co) * r->Lout + t] = s;
        if (mag) mag[(b * c->Cout + co) * r->Lout + t] = 1.5 * m;
      }
}

static double ref_loss(void *p) {
  cref *r = p;
  int64_t n = r->c->B * r->c->Cout * r->Lout;
  double *y = malloc(sizeof(double) * (size_t)n), l = 0;
  ref_fwd(r, y, NULL);
  for (int64_t i = 0; i < n; i++) l += r->w[i] * y[i];
  free(y);
  return l;
}

/* nlc: the op runs channels last (layout 1) on the same values: x and dy
 * re-laid before, y and dx back after, the reference unchanged. */
static void run_case(gpa_nt *t, const ccase *c, uint64_t seed, int nlc) {
  cref r = {c, 0, c->causal ? (c->K - 1) * c->dilation : c->padding, 0, 0, 0, 0};
  int64_t pr = c->causal ? 0 : c->padding;
  r.Lout = (c->L + r.pl + pr - c->dilation * (c->K - 1) - 1) / c->stride + 1;
  int64_t cg = c->Cin / c->groups, nx = c->B * c->Cin * c->L, nw = c->Cout * cg * c->K;
  int64_t ny = c->B * c->Cout * r.Lout;
  char what[256], w2[1024];
  snprintf(what, sizeof what, "conv1d B=%lld Cin=%lld L=%lld Cout=%lld K=%lld stride=%lld pad=%lld dil=%lld g=%lld%s%s",
           (long long)c->B, (long long)c->Cin, (long long)c->L, (long long)c->Cout, (long long)c->K,
           (long long)c->stride, (long long)c->padding, (long long)c->dilation, (long long)c->groups,
           c->causal ? " causal" : "", c->bias ? " bias" : "");
  if (nlc) strncat(what, " nlc", sizeof what - strlen(what) - 1);
  float *x = malloc(sizeof(float) * (size_t)nx), *W = malloc(sizeof(float) * (size_t)nw);
  float *b = malloc(sizeof(float) * (size_t)c->Cout), *dy = malloc(sizeof(float) * (size_t)ny);
  gpa_nt_fill(x, nx, -1, 1, &seed);
  gpa_nt_fill(W, nw, -1, 1, &seed);
  gpa_nt_fill(b, c->Cout, -1, 1, &seed);
  gpa_nt_fill(dy, ny, -1, 1, &seed);
  r.x = gpa_nt_to_double(x, nx);
  r.W = gpa_nt_to_double(W, nw);
  r.b = gpa_nt_to_double(b, c->Cout);
  r.w = gpa_nt_to_double(dy, ny);
  double *y = malloc(sizeof(double) * (size_t)ny), *mag = malloc(sizeof(double) * (size_t)ny);
  ref_fwd(&r, y, mag);

  int64_t xs[3] = {c->B, c->Cin, c->L}, ws[3] = {c->Cout, cg, c->K}, ys[3] = {c->B, c->Cout, r.Lout};
  if (nlc) {
    xs[1] = c->L, xs[2] = c->Cin, ys[1] = r.Lout, ys[2] = c->Cout;
    float *xt = malloc(sizeof(float) * (size_t)(nx + 1)), *dyt = malloc(sizeof(float) * (size_t)(ny + 1));
    gpa_nt_relayout(xt, x, c->B, c->Cin, c->L, 1);
    gpa_nt_relayout(dyt, dy, c->B, c->Cout, r.Lout, 1);
    free(x), free(dy);
    x = xt, dy = dyt;
  }
  gpa_attr at[6] = {{"stride", GPA_ATTR_INT, c->stride, 0},
                    {"padding", GPA_ATTR_INT, c->padding, 0},
                    {"dilation", GPA_ATTR_INT, c->dilation, 0},
                    {"groups", GPA_ATTR_INT, c->groups, 0},
                    {"causal", GPA_ATTR_INT, c->causal, 0},
                    {"layout", GPA_ATTR_INT, nlc, 0}};
  gpa_tensor tin[3] = {gpa_nt_tensor(t, GPA_F32, 3, xs, x), gpa_nt_tensor(t, GPA_F32, 3, ws, W),
                       gpa_nt_tensor(t, GPA_F32, 1, &c->Cout, b)};
  gpa_tensor ty = gpa_nt_out(t, 3, ys);
  float *got = malloc(sizeof(float) * (size_t)(ny + nx + nw + c->Cout));
  float *got2 = malloc(sizeof(float) * (size_t)(ny + nx + nw + c->Cout));
  gpa_status st = gpa_nt_run(t, "conv1d_fwd", tin, c->bias ? 3 : 2, &ty, 1, at, 6);
  if (st != GPA_OK) {
    snprintf(w2, sizeof w2, "%s: conv1d_fwd %s: %s", what, gpa_status_name(st), gpa_nt_msg);
    gpa_nt_fail(t, w2);
  }
  gpa_nt_read(t, &ty, got);
  if (nlc) {
    gpa_nt_relayout(got2, got, c->B, c->Cout, r.Lout, 0);
    memcpy(got, got2, sizeof(float) * (size_t)ny);
  }
  snprintf(w2, sizeof w2, "%s: y", what);
  gpa_nt_close_to(t, w2, got, y, mag, ny, 1e-5);

  gpa_tensor bin[3] = {gpa_nt_tensor(t, GPA_F32, 3, ys, dy), tin[0], tin[1]};
  const char *bop = c->bias ? "conv1d_bwd" : "conv1d_bwd_nobias";
  float *runs[2] = {got, got2};
  for (int rep = 0; rep < 2; rep++) {
    gpa_tensor tout[3] = {gpa_nt_out(t, 3, xs), gpa_nt_out(t, 3, ws), gpa_nt_out(t, 1, &c->Cout)};
    st = gpa_nt_run(t, bop, bin, 3, tout, c->bias ? 3 : 2, at, 6);
    if (st != GPA_OK) {
      snprintf(w2, sizeof w2, "%s: %s %s: %s", what, bop, gpa_status_name(st), gpa_nt_msg);
      gpa_nt_fail(t, w2);
    }
    gpa_nt_read(t, &tout[0], runs[rep]);
    if (nlc) { /* dx back to [B,Cin,L] through the tail of the buffer */
      float *tmp = malloc(sizeof(float) * (size_t)(nx + 1));
      gpa_nt_relayout(tmp, runs[rep], c->B, c->Cin, c->L, 0);
      memcpy(runs[rep], tmp, sizeof(float) * (size_t)nx);
      free(tmp);
    }
    gpa_nt_read(t, &tout[1], runs[rep] + nx);
    if (c->bias) gpa_nt_read(t, &tout[2], runs[rep] + nx + nw);
  }
  int64_t ng = nx + nw + (c->bias ? c->Cout : 0);
  snprintf(w2, sizeof w2, "%s: backward determinism", what);
  gpa_nt_same_bits(t, w2, got, got2, ng);
  /* analytic reference */
  double *ref = calloc((size_t)(ng + 1), sizeof(double)), *rm = calloc((size_t)(ng + 1), sizeof(double));
  int64_t og = c->Cout / c->groups;
  for (int64_t bb = 0; bb < c->B; bb++)
    for (int64_t co = 0; co < c->Cout; co++)
      for (int64_t tt = 0; tt < r.Lout; tt++) {
        double d = r.w[(bb * c->Cout + co) * r.Lout + tt];
        for (int64_t ci = 0; ci < cg; ci++)
          for (int64_t k = 0; k < c->K; k++) {
            int64_t pos = tt * c->stride - r.pl + k * c->dilation;
            if (pos < 0 || pos >= c->L) continue;
            int64_t xi = (bb * c->Cin + co / og * cg + ci) * c->L + pos, wi = (co * cg + ci) * c->K + k;
            ref[xi] += d * r.W[wi];
            rm[xi] += fabs(d * r.W[wi]);
            ref[nx + wi] += d * r.x[xi];
            rm[nx + wi] += fabs(d * r.x[xi]);
          }
        if (c->bias) {
          ref[nx + nw + co] += d;
          rm[nx + nw + co] += fabs(d);
        }
      }
  for (int64_t i = 0; i < ng; i++) rm[i] *= 1.5;
  snprintf(w2, sizeof w2, "%s: dx", what);
  gpa_nt_close_to(t, w2, got, ref, rm, nx, 1e-5);
  snprintf(w2, sizeof w2, "%s: dW", what);
  gpa_nt_close_to(t, w2, got + nx, ref + nx, rm + nx, nw, 1e-5);
  if (c->bias) {
    snprintf(w2, sizeof w2, "%s: db", what);
    gpa_nt_close_to(t, w2, got + nx + nw, ref + nx + nw, rm + nx + nw, c->Cout, 1e-5);
  }
  if (ny * cg * c->K <= 100000) {
    double *vars[3] = {r.x, r.W, r.b};
    int64_t nv[3] = {nx, nw, c->bias ? c->Cout : 0}, off[3] = {0, nx, nx + nw};
    for (int v = 0; v < 3; v++)
      for (int64_t s = 0; s < 6 && nv[v]; s++) {
        int64_t i = (s * 7919 + 3) % nv[v];
        double fd = gpa_nt_fd(ref_loss, &r, vars[v], i, 1e-4), gg = got[off[v] + i];
        if (fabs(gg - fd) > 1e-4 * fabs(fd) + 1e-4) {
          snprintf(w2, sizeof w2, "%s: finite difference of input %d element %lld: %.8g vs fd %.8g", what, v,
                   (long long)i, gg, fd);
          gpa_nt_fail(t, w2);
        }
      }
  }
  free(ref); free(rm); free(y); free(mag); free(r.x); free(r.W); free(r.b); free(r.w);
  free(x); free(W); free(b); free(dy); free(got); free(got2);
}

static void errors(gpa_nt *t) {
  int64_t xs[3] = {2, 6, 10}, ws[3] = {4, 3, 3}, wbad[3] = {4, 6, 3}, ys[3] = {2, 4, 8}, yb[3] = {2, 4, 9};
  gpa_tensor x = gpa_nt_out(t, 3, xs), w = gpa_nt_out(t, 3, ws), wb = gpa_nt_out(t, 3, wbad);
  gpa_tensor y = gpa_nt_out(t, 3, ys), y9 = gpa_nt_out(t, 3, yb);
  gpa_attr g2 = {"groups", GPA_ATTR_INT, 2, 0}, g4 = {"groups", GPA_ATTR_INT, 4, 0};
  gpa_tensor in1[2] = {x, w};
  gpa_nt_expect_error(t, "conv1d_fwd", in1, 2, &y, 1, NULL, 0, GPA_ESHAPE, "W has shape [4,3,3]");
  gpa_nt_expect_error(t, "conv1d_fwd", in1, 2, &y, 1, &g4, 1, GPA_EINVAL, "groups = 4");
  gpa_nt_expect_error(t, "conv1d_fwd", in1, 2, &y9, 1, &g2, 1, GPA_ESHAPE, "outputs[0]");
  gpa_tensor in2[2] = {x, wb};
  gpa_attr cp[2] = {{"causal", GPA_ATTR_INT, 1, 0}, {"padding", GPA_ATTR_INT, 1, 0}};
  gpa_nt_expect_error(t, "conv1d_fwd", in2, 2, &y, 1, cp, 2, GPA_EINVAL, "padding must be 0");
  gpa_attr dil = {"dilation", GPA_ATTR_INT, 5, 0};
  gpa_nt_expect_error(t, "conv1d_fwd", in2, 2, &y, 1, &dil, 1, GPA_ESHAPE, "no output");
  gpa_attr s0 = {"stride", GPA_ATTR_INT, 0, 0};
  gpa_nt_expect_error(t, "conv1d_fwd", in2, 2, &y, 1, &s0, 1, GPA_ERANGE, "stride");
  gpa_tensor bin[3] = {y9, x, wb}, bout[2] = {x, wb};
  gpa_nt_expect_error(t, "conv1d_bwd_nobias", bin, 3, bout, 2, NULL, 0, GPA_ESHAPE, "dy has shape [2,4,9]");
  /* layouts: an unknown value; x [2,6,10] read as nlc has Cin 10 (W [4,3,3] wants 3 or 6); dy of the
   * ncl shape under nlc; y of the ncl shape under nlc */
  gpa_attr l2 = {"layout", GPA_ATTR_INT, 2, 0}, nl = {"layout", GPA_ATTR_INT, 1, 0};
  gpa_nt_expect_error(t, "conv1d_fwd", in2, 2, &y, 1, &l2, 1, GPA_EINVAL, "layout = 2 is not a layout");
  gpa_nt_expect_error(t, "conv1d_fwd", in2, 2, &y, 1, &nl, 1, GPA_ESHAPE, "x.shape[2], layout nlc");
  int64_t xn[3] = {2, 10, 6}, yn[3] = {2, 8, 4};
  gpa_tensor xl = gpa_nt_out(t, 3, xn), yl = gpa_nt_out(t, 3, yn);
  gpa_tensor in3[2] = {xl, wb}, bin2[3] = {y, xl, wb}, bout2[2] = {xl, wb};
  gpa_nt_expect_error(t, "conv1d_fwd", in3, 2, &y, 1, &nl, 1, GPA_ESHAPE, "outputs[0]");
  gpa_nt_expect_error(t, "conv1d_bwd_nobias", bin2, 3, bout2, 2, &nl, 1, GPA_ESHAPE, "[B,Lout,Cout] of the forward (layout nlc)");
  gpa_tensor bin3[3] = {yl, xl, wb};
  gpa_nt_expect_error(t, "conv1d_bwd_nobias", bin3, 3, bout2, 2, NULL, 0, GPA_ESHAPE, "W has shape");
}

/* ---- the same ops through the parity harness (cross-backend runs) ---- */

/* in: x [B,Cin,L], W [Cout,Cin/g,K], b [Cout] (optional); out: y */
static void h_ref_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int64_t B = in[0].t->shape[0], Cin = in[0].t->shape[1], L = in[0].t->shape[2];
  int64_t Cout = in[1].t->shape[0], cg = in[1].t->shape[1], K = in[1].t->shape[2];
  int64_t s = gpa_pcase_get_i(c, "stride", 1), pad = gpa_pcase_get_i(c, "padding", 0);
  int64_t dil = gpa_pcase_get_i(c, "dilation", 1), G = gpa_pcase_get_i(c, "groups", 1);
  int causal = (int)gpa_pcase_get_i(c, "causal", 0);
  int64_t pl = causal ? (K - 1) * dil : pad, pr = causal ? 0 : pad, og = Cout / G;
  int64_t Lout = (L + pl + pr - dil * (K - 1) - 1) / s + 1;
  for (int64_t b = 0; b < B; b++)
    for (int64_t co = 0; co < Cout; co++)
      for (int64_t t = 0; t < Lout; t++) {
        double acc = c->n_in > 2 ? in[2].d[co] : 0;
        for (int64_t ci = 0; ci < cg; ci++)
          for (int64_t k = 0; k < K; k++) {
            int64_t pos = t * s - pl + k * dil;
            if (pos >= 0 && pos < L) acc += in[1].d[(co * cg + ci) * K + k] * in[0].d[(b * Cin + co / og * cg + ci) * L + pos];
          }
        out[0].d[(b * Cout + co) * Lout + t] = acc;
      }
  (void)Cin;
}

static int harness_cases(void) {
  gpa_parity *p = gpa_parity_open("parity_conv1d");
  /* B Cin L Cout K stride pad dil groups causal */
  const int64_t cs[][10] = {{1, 1, 1, 1, 1, 1, 0, 1, 1, 0},  {2, 3, 17, 5, 3, 1, 1, 1, 1, 0}, {3, 6, 31, 4, 5, 2, 3, 2, 2, 0},
                            {2, 4, 19, 4, 3, 1, 0, 2, 4, 1}, {2, 5, 7, 3, 1, 1, 0, 1, 1, 0},  {1, 7, 13, 11, 2, 3, 2, 1, 1, 0}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    const int64_t *v = cs[i];
    int64_t pl = v[9] ? (v[4] - 1) * v[7] : v[6], pr = v[9] ? 0 : v[6];
    int64_t Lout = (v[2] + pl + pr - v[7] * (v[4] - 1) - 1) / v[5] + 1;
    gpa_pcase c = gpa_pcase_make("conv1d_fwd", h_ref_fwd);
    gpa_pcase_in(&c, gpa_pt_f32(3, (int64_t[]){v[0], v[1], v[2]}, -1, 1));
    gpa_pcase_in(&c, gpa_pt_f32(3, (int64_t[]){v[3], v[1] / v[8], v[4]}, -1, 1));
    gpa_pcase_in(&c, gpa_pt_f32(1, (int64_t[]){v[3]}, -1, 1));
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, (int64_t[]){v[0], v[3], Lout}));
    gpa_pcase_attr_int(&c, "stride", v[5]);
    gpa_pcase_attr_int(&c, "padding", v[6]);
    gpa_pcase_attr_int(&c, "dilation", v[7]);
    gpa_pcase_attr_int(&c, "groups", v[8]);
    gpa_pcase_attr_int(&c, "causal", v[9]);
    c.atol = 2e-7 * (double)(v[1] / v[8] * v[4] + 1);
    gpa_parity_check(p, &c);
    gpa_pgrad g = {.op = "conv1d_bwd", .n_dy = 1, .n_in = 3,
                   .in = {{GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_FWD_IN, 1}},
                   .n_out = 3, .grad_of = {0, 1, 2}, .n_attrs = 5};
    for (int a = 0; a < 5; a++) g.attrs[a] = c.attrs[a];
    gpa_parity_grad(p, &c, &g);
  }
  return gpa_parity_close(p);
}

int main(void) {
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  const ccase cases[] = {
      /* B Cin L Cout K stride pad dil groups causal bias */
      {1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1},   {2, 3, 17, 5, 3, 1, 1, 1, 1, 0, 1},  {3, 6, 31, 4, 5, 2, 3, 2, 2, 0, 0},
      {2, 4, 19, 4, 3, 1, 0, 2, 4, 1, 1},  {2, 5, 7, 3, 1, 1, 0, 1, 1, 0, 1},   {1, 7, 13, 11, 2, 3, 2, 1, 1, 0, 1},
      {2, 4, 50, 6, 7, 3, 0, 3, 2, 0, 0},  {1, 3, 23, 2, 4, 1, 0, 3, 1, 1, 0},  {3, 8, 29, 8, 3, 2, 1, 1, 8, 0, 1},
      {2, 6, 11, 9, 11, 1, 5, 1, 3, 0, 1}, {1, 16, 64, 32, 3, 1, 1, 1, 1, 0, 1}, {2, 5, 9, 7, 1, 2, 0, 1, 1, 0, 1},
      {0, 3, 8, 2, 3, 1, 1, 1, 1, 0, 1},
      /* CUDA's implicit-GEMM tiles (64 x 64, 16 channels a stage): causal dilation 8 with Cin, Cout, L
       * past one tile and not multiples of it; stride 2 and 3 with groups and padding; then a kernel
       * extent whose tiles pass 48 KiB of shared memory (the im2col + cuBLAS path takes it) */
      {3, 70, 131, 67, 3, 1, 0, 8, 1, 1, 1}, {2, 12, 97, 18, 5, 2, 3, 3, 3, 0, 1}, {2, 34, 77, 36, 4, 3, 0, 2, 2, 1, 0},
      {1, 2, 13010, 2, 2, 1, 0, 13000, 1, 0, 1},
      /* K = 100: past the 96 reduction rows of a small-grid stage (those kernels decline it) */
      {2, 3, 70, 5, 100, 1, 0, 1, 1, 1, 1},
      /* dW's B Lout sum in 387 slices: 194 runs of 2, the last of 1 (ordered partial sums) */
      {129, 2, 130, 3, 3, 1, 0, 1, 1, 1, 1},
      /* db split into chunks of B Lout on CUDA (the grid's last block adds them): the main
       * job's B32 L128 Cout 96 (fewer input channels), and an odd B x Lout */
      {32, 4, 128, 96, 3, 1, 0, 1, 1, 1, 1}, {33, 3, 127, 60, 3, 1, 0, 2, 1, 1, 1},
  };
  uint64_t seed = 777;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&t, &cases[i], seed + i, 0);
  /* channels last (layout nlc) on every path: the 1x1 direct GEMMs, strided im2col with groups, the
   * shift and direct kernels with a dilation > 1 and L past a tile (not a multiple of it), the
   * im2col + cuBLAS shape CUDA declines, the main job's L128 C96 causal (4 batches), and empty */
  const ccase nlc_cases[] = {
      {2, 5, 7, 3, 1, 1, 0, 1, 1, 0, 1},      {3, 6, 31, 4, 5, 2, 3, 2, 2, 0, 0},  {3, 70, 131, 67, 3, 1, 0, 8, 1, 1, 1},
      {2, 12, 97, 18, 5, 2, 3, 3, 3, 0, 1},   {2, 34, 77, 36, 4, 3, 0, 2, 2, 1, 0}, {2, 16, 77, 24, 3, 1, 0, 4, 1, 1, 1},
      {2, 48, 77, 40, 3, 1, 1, 2, 2, 0, 1},   {1, 2, 13010, 2, 2, 1, 0, 13000, 1, 0, 1},
      {4, 96, 128, 96, 3, 1, 0, 1, 1, 1, 1}, {0, 3, 8, 2, 3, 1, 1, 1, 1, 0, 1}};
  for (size_t i = 0; i < sizeof nlc_cases / sizeof nlc_cases[0]; i++) run_case(&t, &nlc_cases[i], seed + 50 + i, 1);
  if (!t.quick) {
    /* stride 2, Cin*K = 4608 rows: the 16 MiB column cap gives 910-column chunks */
    const ccase big[] = {{2, 512, 2000, 4, 9, 2, 4, 1, 1, 0, 1}, {2, 64, 300, 48, 3, 1, 0, 4, 1, 1, 1},
                         /* the host's dynamic units (stride 1): the causal dilated form and the
                          * main job's (B32, L128), smaller channels */
                         {8, 32, 1024, 32, 3, 1, 0, 4, 1, 1, 1}, {32, 24, 128, 24, 3, 1, 0, 1, 1, 1, 1}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) run_case(&t, &big[i], seed + 100 + i, 0);
  }
  errors(&t);
  int hrc = harness_cases();
  rc = gpa_nt_close(&t);
  return rc ? rc : (hrc == 1 ? 1 : 0);
}
