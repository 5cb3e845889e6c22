/* linear_fwd / linear_gelu_fwd / linear_bwd / linear_bwd_nobias through the
 * actor against a double reference, gradients against central finite
 * differences, backward determinism, and the shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/ops_linear.h"
#include "tests/parity/linear_ref.h"
#include "util/nn_test.h"

typedef struct lcase {
  int64_t lead0, N, in, out; /* x is [N,in], or [lead0, N/lead0, in] when lead0 > 0 */
  int bias, gelu;
} lcase;

typedef struct lref {
  const lcase *c;
  double *x, *W, *b, *w; /* w: loss weights (= dy) */
} lref;

/* pre, mag (sum of |terms|) nullable */
static void ref_fwd(const lref *r, double *pre, double *y, double *mag) {
  const lcase *c = r->c;
  for (int64_t i = 0; i < c->N; i++)
    for (int64_t j = 0; j < c->out; j++) {
      double s = c->bias ? r->b[j] : 0, m = fabs(s);
      for (int64_t k = 0; k < c->in; k++) {
        s += r->x[i * c->in + k] * r->W[j * c->in + k];
        m += fabs(r->x[i * c->in + k] * r->W[j * c->in + k]);
      }
      if (pre) pre[i * c->out + j] = s;
      if (mag) mag[i * c->out + j] = 1.5 * m;
      y[i * c->out + j] = c->gelu ? gpa_pref_gelu(s) : s;
    }
}

static double ref_loss(void *p) {
  lref *r = p;
  int64_t n = r->c->N * r->c->out;
  double *y = malloc((size_t)n * sizeof(double)), l = 0;
  ref_fwd(r, NULL, y, NULL);
  for (int64_t i = 0; i < n; i++) l += r->w[i] * y[i];
  free(y);
  return l;
}

static void to_d(double *d, const float *f, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = f[i];
}

static void run_case(gpa_nt *t, const lcase *c, uint64_t seed) {
  int64_t N = c->N, in = c->in, out = c->out;
  char what[160];
  snprintf(what, sizeof what, "linear N=%lld in=%lld out=%lld bias=%d gelu=%d%s", (long long)N, (long long)in,
           (long long)out, c->bias, c->gelu, c->lead0 ? " (rank-3 x)" : "");
  float *x = malloc(sizeof(float) * (size_t)(N * in + 1)), *W = malloc(sizeof(float) * (size_t)(out * in + 1));
  float *b = malloc(sizeof(float) * (size_t)(out + 1)), *dy = malloc(sizeof(float) * (size_t)(N * out + 1));
  /* room for the forward (N*out) or the backward (dx, dW, db) */
  float *got = malloc(sizeof(float) * (size_t)(N * out + N * in + out * in + out + 1));
  float *got2 = malloc(sizeof(float) * (size_t)(N * out + N * in + out * in + out + 1));
  gpa_nt_fill(x, N * in, -1, 1, &seed);
  gpa_nt_fill(W, out * in, -1, 1, &seed);
  gpa_nt_fill(b, out, -1, 1, &seed);
  gpa_nt_fill(dy, N * out, -1, 1, &seed);
  lref r = {c, malloc(sizeof(double) * (size_t)(N * in + 1)), malloc(sizeof(double) * (size_t)(out * in + 1)),
            malloc(sizeof(double) * (size_t)(out + 1)), malloc(sizeof(double) * (size_t)(N * out + 1))};
  to_d(r.x, x, N * in);
  to_d(r.W, W, out * in);
  to_d(r.b, b, out);
  to_d(r.w, dy, N * out);
  double *pre = malloc(sizeof(double) * (size_t)(N * out + 1)), *y = malloc(sizeof(double) * (size_t)(N * out + 1));
  double *mag = malloc(sizeof(double) * (size_t)(N * out + 1));
  ref_fwd(&r, pre, y, mag);

  int64_t xs[3], ys[3], dys[3];
  uint32_t rank = c->lead0 ? 3 : 2;
  if (c->lead0) {
    int64_t s[3] = {c->lead0, N / c->lead0, in}, s2[3] = {c->lead0, N / c->lead0, out};
    memcpy(xs, s, sizeof s);
    memcpy(ys, s2, sizeof s2);
  } else {
    xs[0] = N, xs[1] = in;
    ys[0] = N, ys[1] = out;
  }
  memcpy(dys, ys, sizeof ys);
  int64_t ws[2] = {out, in};
  gpa_tensor tin[4], tout[3];
  tin[0] = gpa_nt_tensor(t, GPA_F32, rank, xs, x);
  tin[1] = gpa_nt_tensor(t, GPA_F32, 2, ws, W);
  tin[2] = gpa_nt_tensor(t, GPA_F32, 1, &out, b);
  gpa_tensor ty = gpa_nt_out(t, rank, ys), tpre = gpa_nt_out(t, rank, ys);
  gpa_attr ag = {"gelu", GPA_ATTR_INT, c->gelu, 0};
  char w2[1024];

  /* forward: linear_fwd (gelu attr), and linear_gelu_fwd for the pre-activation */
  gpa_status st = gpa_nt_run(t, "linear_fwd", tin, c->bias ? 3 : 2, &ty, 1, &ag, 1);
  if (st != GPA_OK) { snprintf(w2, sizeof w2, "%s: linear_fwd %s: %s", what, gpa_status_name(st), gpa_nt_msg); gpa_nt_fail(t, w2); }
  gpa_nt_read(t, &ty, got);
  snprintf(w2, sizeof w2, "%s: y", what);
  gpa_nt_close_to(t, w2, got, y, mag, N * out, 1e-5);
  if (c->gelu) {
    gpa_tensor o2[2] = {gpa_nt_out(t, rank, ys), tpre};
    st = gpa_nt_run(t, "linear_gelu_fwd", tin, c->bias ? 3 : 2, o2, 2, NULL, 0);
    if (st != GPA_OK) { snprintf(w2, sizeof w2, "%s: linear_gelu_fwd: %s", what, gpa_nt_msg); gpa_nt_fail(t, w2); }
    gpa_nt_read(t, &o2[0], got2);
    snprintf(w2, sizeof w2, "%s: linear_gelu_fwd y equals linear_fwd y", what);
    gpa_nt_same_bits(t, w2, got, got2, N * out);
    gpa_nt_read(t, &tpre, got);
    snprintf(w2, sizeof w2, "%s: pre", what);
    gpa_nt_close_to(t, w2, got, pre, mag, N * out, 1e-5);
  }

  /* backward */
  gpa_tensor bin[4] = {gpa_nt_tensor(t, GPA_F32, rank, dys, dy), tin[0], tin[1], tpre};
  const char *bop = c->bias ? "linear_bwd" : "linear_bwd_nobias";
  uint32_t nbo = c->bias ? 3 : 2;
  float *runs[2] = {got, got2};
  for (int rep = 0; rep < 2; rep++) {
    tout[0] = gpa_nt_out(t, rank, xs);
    tout[1] = gpa_nt_out(t, 2, ws);
    tout[2] = gpa_nt_out(t, 1, &out);
    st = gpa_nt_run(t, bop, bin, c->gelu ? 4 : 3, tout, nbo, &ag, 1);
    if (st != GPA_OK) { snprintf(w2, sizeof w2, "%s: %s: %s", what, bop, gpa_nt_msg); gpa_nt_fail(t, w2); }
    gpa_nt_read(t, &tout[0], runs[rep]);
    gpa_nt_read(t, &tout[1], runs[rep] + N * in);
    if (c->bias) gpa_nt_read(t, &tout[2], runs[rep] + N * in + out * in);
  }
  int64_t ng = N * in + out * in + (c->bias ? out : 0);
  snprintf(w2, sizeof w2, "%s: backward determinism", what);
  gpa_nt_same_bits(t, w2, got, got2, ng);
  /* analytic reference: g = dy * gelu'(pre) */
  double *g = malloc(sizeof(double) * (size_t)(N * out + 1)), *ref = malloc(sizeof(double) * (size_t)(ng + 1));
  double *gm = malloc(sizeof(double) * (size_t)(N * out + 1)), *rm = malloc(sizeof(double) * (size_t)(ng + 1));
  for (int64_t i = 0; i < N * out; i++) {
    g[i] = r.w[i] * (c->gelu ? gpa_pref_dgelu(pre[i]) : 1.0);
    /* g's own fp32 error: gelu' of a pre-activation off by eps*mag */
    gm[i] = 2 * fabs(g[i]) + (c->gelu ? fabs(r.w[i]) * mag[i] : 0.0);
  }
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < in; k++) {
      double s = 0, m = 0;
      for (int64_t j = 0; j < out; j++) {
        s += g[i * out + j] * r.W[j * in + k];
        m += gm[i * out + j] * fabs(r.W[j * in + k]);
      }
      ref[i * in + k] = s;
      rm[i * in + k] = m;
    }
  for (int64_t j = 0; j < out; j++) {
    for (int64_t k = 0; k < in; k++) {
      double s = 0, m = 0;
      for (int64_t i = 0; i < N; i++) {
        s += g[i * out + j] * r.x[i * in + k];
        m += gm[i * out + j] * fabs(r.x[i * in + k]);
      }
      ref[N * in + j * in + k] = s;
      rm[N * in + j * in + k] = m;
    }
    if (c->bias) {
      double s = 0, m = 0;
      for (int64_t i = 0; i < N; i++) {
        s += g[i * out + j];
        m += gm[i * out + j];
      }
      ref[N * in + out * in + j] = s;
      rm[N * in + out * in + j] = m;
    }
  }
  snprintf(w2, sizeof w2, "%s: dx", what);
  gpa_nt_close_to(t, w2, got, ref, rm, N * in, 1e-5);
  snprintf(w2, sizeof w2, "%s: dW", what);
  gpa_nt_close_to(t, w2, got + N * in, ref + N * in, rm + N * in, out * in, 1e-5);
  if (c->bias) {
    snprintf(w2, sizeof w2, "%s: db", what);
    gpa_nt_close_to(t, w2, got + N * in + out * in, ref + N * in + out * in, rm + N * in + out * in, out, 1e-5);
  }
  /* finite differences of the double forward at a few elements */
  if (N * out * in <= 20000) {
    double *vars[3] = {r.x, r.W, r.b};
    int64_t nv[3] = {N * in, out * in, c->bias ? out : 0}, off[3] = {0, N * in, N * in + out * in};
    for (int v = 0; v < 3; v++)
      for (int64_t s = 0; s < 5 && nv[v]; s++) {
        int64_t i = (s * 7919) % nv[v];
        double fd = gpa_nt_fd(ref_loss, &r, vars[v], i, 1e-4);
        double gg = got[off[v] + i];
        if (fabs(gg - fd) > 1e-4 * fabs(fd) + 1e-4) {
          snprintf(w2, sizeof w2, "%s: finite difference of input %d element %lld: %.8g vs fd %.8g", what, v,
                   (long long)i, gg, fd);
          gpa_nt_fail(t, w2);
        }
      }
  }
  free(g); free(gm); free(rm); free(mag); free(ref); free(pre); free(y); free(r.x); free(r.W); free(r.b); free(r.w);
  free(x); free(W); free(b); free(dy); free(got); free(got2);
}

static void errors(gpa_nt *t) {
  int64_t xs[2] = {4, 5}, ws[2] = {3, 6}, wok[2] = {3, 5}, bs[1] = {4}, ys[2] = {4, 3}, x1[1] = {5};
  gpa_tensor x = gpa_nt_out(t, 2, xs), w = gpa_nt_out(t, 2, ws), wk = gpa_nt_out(t, 2, wok);
  gpa_tensor b = gpa_nt_out(t, 1, bs), y = gpa_nt_out(t, 2, ys), xr1 = gpa_nt_out(t, 1, x1);
  gpa_tensor in1[3] = {x, w, b};
  gpa_nt_expect_error(t, "linear_fwd", in1, 2, &y, 1, NULL, 0, GPA_ESHAPE, "W has shape [3,6]");
  gpa_tensor in2[3] = {x, wk, b};
  gpa_nt_expect_error(t, "linear_fwd", in2, 3, &y, 1, NULL, 0, GPA_ESHAPE, "b has shape [4]");
  gpa_tensor in3[2] = {xr1, wk};
  gpa_nt_expect_error(t, "linear_fwd", in3, 2, &y, 1, NULL, 0, GPA_ESHAPE, "x has shape [5]");
  int64_t bad_y[2] = {4, 4};
  gpa_tensor yb = gpa_nt_out(t, 2, bad_y);
  gpa_nt_expect_error(t, "linear_fwd", in2, 2, &yb, 1, NULL, 0, GPA_ESHAPE, "outputs[0]");
  gpa_attr g1 = {"gelu", GPA_ATTR_INT, 1, 0};
  gpa_tensor bin[3] = {y, x, wk}, bout[3] = {x, wk, gpa_nt_out(t, 1, &wok[0])};
  gpa_nt_expect_error(t, "linear_bwd", bin, 3, bout, 3, &g1, 1, GPA_EINVAL, "pre");
  gpa_tensor bin2[3] = {x, x, wk};
  gpa_nt_expect_error(t, "linear_bwd", bin2, 3, bout, 3, NULL, 0, GPA_ESHAPE, "dy has shape [4,5]");
  gpa_tensor xi = gpa_nt_tensor(t, GPA_I32, 2, xs, NULL);
  gpa_tensor in4[2] = {xi, wk};
  gpa_nt_expect_error(t, "linear_fwd", in4, 2, &y, 1, NULL, 0, GPA_EDTYPE, "x has dtype i32");
}

/* The typed calls give the same bits as the generic path. */
static void typed(gpa_nt *t) {
  int64_t xs[2] = {9, 20}, ws[2] = {7, 20}, ys[2] = {9, 7}, b7 = 7;
  uint64_t seed = 99;
  float x[180], W[140], b[7], dy[63], r1[180], r2[180];
  gpa_nt_fill(x, 180, -1, 1, &seed);
  gpa_nt_fill(W, 140, -1, 1, &seed);
  gpa_nt_fill(b, 7, -1, 1, &seed);
  gpa_nt_fill(dy, 63, -1, 1, &seed);
  gpa_tensor tx = gpa_nt_tensor(t, GPA_F32, 2, xs, x), tw = gpa_nt_tensor(t, GPA_F32, 2, ws, W);
  gpa_tensor tb = gpa_nt_tensor(t, GPA_F32, 1, &b7, b), tdy = gpa_nt_tensor(t, GPA_F32, 2, ys, dy);
  gpa_tensor y1 = gpa_nt_out(t, 2, ys), p1 = gpa_nt_out(t, 2, ys), y2 = gpa_nt_out(t, 2, ys), p2 = gpa_nt_out(t, 2, ys);
  gpa_linear_fwd_args fa = {sizeof fa, tx, tw, tb, y1, p1, 1};
  gpa_handle *h = NULL;
  if (gpa_linear_fwd(t->q, &fa, &h) != GPA_OK || gpa_await(h, -1) != GPA_OK) gpa_nt_fail(t, "gpa_linear_fwd");
  gpa_handle_release(h);
  gpa_tensor in[3] = {tx, tw, tb}, o2[2] = {y2, p2};
  if (gpa_nt_run(t, "linear_gelu_fwd", in, 3, o2, 2, NULL, 0) != GPA_OK) gpa_nt_fail(t, "linear_gelu_fwd");
  gpa_nt_read(t, &y1, r1);
  gpa_nt_read(t, &y2, r2);
  gpa_nt_same_bits(t, "typed gpa_linear_fwd y", r1, r2, 63);
  gpa_nt_read(t, &p1, r1);
  gpa_nt_read(t, &p2, r2);
  gpa_nt_same_bits(t, "typed gpa_linear_fwd pre", r1, r2, 63);
  gpa_tensor dx1 = gpa_nt_out(t, 2, xs), dw1 = gpa_nt_out(t, 2, ws), dx2 = gpa_nt_out(t, 2, xs),
             dw2 = gpa_nt_out(t, 2, ws);
  gpa_linear_bwd_args ba = {0, tdy, tx, tw, p1, dx1, dw1, {0}, 1};
  if (gpa_linear_bwd(t->q, &ba, NULL) != GPA_OK) gpa_nt_fail(t, "gpa_linear_bwd");
  gpa_attr g1 = {"gelu", GPA_ATTR_INT, 1, 0};
  gpa_tensor bi[4] = {tdy, tx, tw, p2}, bo[2] = {dx2, dw2};
  if (gpa_nt_run(t, "linear_bwd_nobias", bi, 4, bo, 2, &g1, 1) != GPA_OK) gpa_nt_fail(t, "linear_bwd_nobias");
  gpa_nt_read(t, &dx1, r1);
  gpa_nt_read(t, &dx2, r2);
  gpa_nt_same_bits(t, "typed gpa_linear_bwd dx", r1, r2, 180);
  if (gpa_linear_fwd(t->q, NULL, NULL) != GPA_EINVAL) gpa_nt_fail(t, "gpa_linear_fwd(NULL args) is not EINVAL");
  /* conv1d typed: causal, dilation 2, groups 1, K = 3 over x viewed as [1,9,20] */
  int64_t cx[3] = {1, 9, 20}, cw[3] = {4, 9, 3}, cy[3] = {1, 4, 20}, c4 = 4;
  float cwv[108], cb[4];
  gpa_nt_fill(cwv, 108, -1, 1, &seed);
  gpa_nt_fill(cb, 4, -1, 1, &seed);
  gpa_tensor ttx = tx, tcw = gpa_nt_tensor(t, GPA_F32, 3, cw, cwv), tcb = gpa_nt_tensor(t, GPA_F32, 1, &c4, cb);
  ttx.rank = 3;
  for (int i = 0; i < 3; i++) ttx.shape[i] = cx[i];
  gpa_tensor cy1 = gpa_nt_out(t, 3, cy), cy2 = gpa_nt_out(t, 3, cy);
  gpa_conv1d_fwd_args ca = {sizeof ca, ttx, tcw, tcb, cy1, {0, 0, 2, 0, 1, GPA_CONV1D_NCL}};
  if (gpa_conv1d_fwd(t->q, &ca, NULL) != GPA_OK) gpa_nt_fail(t, "gpa_conv1d_fwd");
  gpa_attr cat[2] = {{"dilation", GPA_ATTR_INT, 2, 0}, {"causal", GPA_ATTR_INT, 1, 0}};
  gpa_tensor ci[3] = {ttx, tcw, tcb};
  if (gpa_nt_run(t, "conv1d_fwd", ci, 3, &cy2, 1, cat, 2) != GPA_OK) gpa_nt_fail(t, "conv1d_fwd");
  gpa_nt_read(t, &cy1, r1);
  gpa_nt_read(t, &cy2, r2);
  gpa_nt_same_bits(t, "typed gpa_conv1d_fwd", r1, r2, 80);
  /* the same channels last (geom.layout): x viewed as [1,20,9], y [1,20,4] */
  int64_t cxn[3] = {1, 20, 9}, cyn[3] = {1, 20, 4};
  gpa_tensor txn = ttx, cy3 = gpa_nt_out(t, 3, cyn), cy4 = gpa_nt_out(t, 3, cyn);
  for (int i = 0; i < 3; i++) txn.shape[i] = cxn[i];
  gpa_conv1d_fwd_args can = {sizeof can, txn, tcw, tcb, cy3, {0, 0, 2, 0, 1, GPA_CONV1D_NLC}};
  if (gpa_conv1d_fwd(t->q, &can, NULL) != GPA_OK) gpa_nt_fail(t, "gpa_conv1d_fwd (nlc)");
  gpa_attr catn[3] = {{"dilation", GPA_ATTR_INT, 2, 0}, {"causal", GPA_ATTR_INT, 1, 0}, {"layout", GPA_ATTR_INT, 1, 0}};
  gpa_tensor cin3[3] = {txn, tcw, tcb};
  if (gpa_nt_run(t, "conv1d_fwd", cin3, 3, &cy4, 1, catn, 3) != GPA_OK) gpa_nt_fail(t, "conv1d_fwd (nlc)");
  gpa_nt_read(t, &cy3, r1);
  gpa_nt_read(t, &cy4, r2);
  gpa_nt_same_bits(t, "typed gpa_conv1d_fwd (nlc)", r1, r2, 80);
  can.geom.layout = 2; /* not a layout */
  if (gpa_conv1d_fwd(t->q, &can, NULL) != GPA_EINVAL) gpa_nt_fail(t, "gpa_conv1d_fwd layout 2 is not EINVAL");
  gpa_tensor cdx = gpa_nt_out(t, 3, cx), cdw = gpa_nt_out(t, 3, cw), cdb = gpa_nt_out(t, 1, &c4);
  gpa_conv1d_bwd_args cba = {0, cy1, ttx, tcw, cdx, cdw, cdb, {0, 0, 2, 0, 1, GPA_CONV1D_NCL}};
  gpa_handle *h2 = NULL;
  if (gpa_conv1d_bwd(t->q, &cba, &h2) != GPA_OK || gpa_await(h2, -1) != GPA_OK) gpa_nt_fail(t, "gpa_conv1d_bwd");
  gpa_handle_release(h2);
}

/* ---- the same ops through the parity harness (cross-backend runs) ---- */

static gpa_pcase h_fwd_case(int64_t N, int64_t K, int64_t M, int bias, int gelu_train) {
  gpa_pcase c = gpa_pcase_make(gelu_train ? "linear_gelu_fwd" : "linear_fwd", gpa_pref_linear_fwd);
  gpa_pcase_in(&c, gpa_pt_f32(2, (int64_t[]){N, K}, -1, 1));
  gpa_pcase_in(&c, gpa_pt_f32(2, (int64_t[]){M, K}, -1, 1));
  if (bias) gpa_pcase_in(&c, gpa_pt_f32(1, (int64_t[]){M}, -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, (int64_t[]){N, M}));
  if (gelu_train) gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, (int64_t[]){N, M}));
  /* fp32 sums over K terms of size <= 1: allow their rounding */
  c.atol = 2e-7 * (double)K;
  return c;
}

/* Returns the harness's exit code (0, 1, or 77). */
static int harness_cases(void) {
  gpa_parity *p = gpa_parity_open("parity_linear");
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {3, 17, 11}, {13, 1, 7}, {2, 31, 37}, {64, 100, 37}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int64_t N = shapes[i][0], K = shapes[i][1], M = shapes[i][2];
    /* plain: dx, dW, db */
    gpa_pcase c = h_fwd_case(N, K, M, 1, 0);
    gpa_parity_check(p, &c);
    gpa_pgrad g = {.op = "linear_bwd", .n_dy = 1, .n_in = 3,
                   .in = {{GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_FWD_IN, 1}},
                   .n_out = 3, .grad_of = {0, 1, 2}};
    gpa_parity_grad(p, &c, &g);
    /* fused GELU, training form: the backward takes pre (forward output 1) */
    c = h_fwd_case(N, K, M, 1, 1);
    gpa_parity_check(p, &c);
    gpa_pgrad gg = {.op = "linear_bwd", .n_dy = 1, .n_in = 4,
                    .in = {{GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_FWD_IN, 1}, {GPA_PSRC_FWD_OUT, 1}},
                    .n_out = 3, .grad_of = {0, 1, 2}, .attrs = {{"gelu", GPA_ATTR_INT, 1, 0}}, .n_attrs = 1};
    gpa_parity_grad(p, &c, &gg);
    /* no bias */
    c = h_fwd_case(N, K, M, 0, 0);
    gpa_pcase_attr_int(&c, "gelu", 1);
    gpa_parity_check(p, &c);
  }
  gpa_pcase c = h_fwd_case(4, 6, 3, 1, 0);
  c.in[1].shape[1] = 7;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "W has shape [3,7], expected [out,6]");
  return gpa_parity_close(p);
}

int main(void) {
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  const lcase cases[] = {
      {0, 1, 1, 1, 1, 0},   {0, 1, 1, 1, 0, 1},    {0, 7, 13, 5, 1, 0},  {0, 7, 13, 5, 1, 1},
      {0, 3, 17, 11, 0, 0}, {0, 2, 31, 37, 0, 1},  {6, 12, 9, 4, 1, 1},  {0, 64, 100, 37, 1, 1},
      {0, 129, 67, 65, 1, 0}, {0, 0, 5, 3, 1, 1},   {0, 4, 0, 3, 1, 0},
      /* db split over rows on CUDA (a tile's chunks, the last block adding them):
       * the main job's 4096 rows (bias 96 with GELU, 60 plain), an odd row count */
      {0, 4096, 24, 96, 1, 1}, {0, 4099, 16, 60, 1, 0},
  };
  uint64_t seed = 12345;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&t, &cases[i], seed + i);
  if (!t.quick) {
    const lcase big[] = {{0, 257, 300, 190, 1, 1}, {0, 96, 513, 128, 1, 0}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) run_case(&t, &big[i], seed + 100 + i);
  }
  errors(&t);
  typed(&t);
  int hrc = harness_cases();
  rc = gpa_nt_close(&t);
  return rc ? rc : (hrc == 1 ? 1 : 0);
}
