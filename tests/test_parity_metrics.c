/* Parity of cross_entropy_fwd/bwd (f32 and bf16 logits), mse and cosine
 * against double references, the cross-entropy gradient against finite
 * differences, bad targets at execution, validation. */
#include <math.h>
#include <stdio.h>

#include "tests/parity/harness.h"

/* in: logits [N,V], targets [N] */
static void ref_ce_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int64_t ign = gpa_pcase_get_i(c, "ignore_index", -100);
  int64_t N = in[0].t->shape[0], V = in[0].t->shape[1], k = 0;
  double s = 0;
  for (int64_t n = 0; n < N; n++) {
    int64_t t = (int64_t)in[1].d[n];
    if (t == ign) continue;
    const double *x = in[0].d + n * V;
    double m = x[0], z = 0;
    for (int64_t v = 1; v < V; v++) m = x[v] > m ? x[v] : m;
    for (int64_t v = 0; v < V; v++) z += exp(x[v] - m);
    s += m + log(z) - x[t];
    k++;
  }
  out[0].d[0] = k ? s / (double)k : 0.0;
}

static void ref_ce_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int64_t ign = gpa_pcase_get_i(c, "ignore_index", -100);
  double scale = gpa_pcase_get_f(c, "scale", 1.0);
  int64_t N = in[0].t->shape[0], V = in[0].t->shape[1], k = 0;
  for (int64_t n = 0; n < N; n++) k += (int64_t)in[1].d[n] != ign;
  for (int64_t n = 0; n < N; n++) {
    int64_t t = (int64_t)in[1].d[n];
    const double *x = in[0].d + n * V;
    double *o = out[0].d + n * V;
    if (t == ign) {
      for (int64_t v = 0; v < V; v++) o[v] = 0;
      continue;
    }
    double m = x[0], z = 0;
    for (int64_t v = 1; v < V; v++) m = x[v] > m ? x[v] : m;
    for (int64_t v = 0; v < V; v++) z += exp(x[v] - m);
    for (int64_t v = 0; v < V; v++) o[v] = scale * (exp(x[v] - m) / z - (v == t)) / (double)k;
  }
}

static void ref_mse(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  double s = 0;
  for (int64_t i = 0; i < in[0].n; i++) s += (in[0].d[i] - in[1].d[i]) * (in[0].d[i] - in[1].d[i]);
  out[0].d[0] = in[0].n ? s / (double)in[0].n : 0.0;
}

static void ref_cos(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  double eps = gpa_pcase_get_f(c, "eps", 1e-8);
  const gpa_pt *t = in[0].t;
  int64_t D = t->shape[t->rank - 1], rows = 1;
  for (uint32_t i = 0; i + 1 < t->rank; i++) rows *= t->shape[i];
  double s = 0;
  for (int64_t r = 0; r < rows; r++) {
    double a = 0, b = 0, d = 0;
    for (int64_t k = 0; k < D; k++) {
      double u = in[0].d[r * D + k], v = in[1].d[r * D + k];
      a += u * v;
      b += u * u;
      d += v * v;
    }
    double den = sqrt(b * d);
    s += a / (den > eps ? den : eps);
  }
  out[0].d[0] = rows ? s / (double)rows : 0.0;
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static gpa_pcase ce(const char *op, int64_t N, int64_t V, int64_t tlo, int64_t thi, double spread) {
  gpa_pcase c = gpa_pcase_make(op, op[14] == 'f' ? ref_ce_fwd : ref_ce_bwd);
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(N, V), -spread, spread));
  gpa_pcase_in(&c, gpa_pt_int(GPA_I32, 1, SH(N), tlo, thi));
  if (op[14] == 'f')
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 0, NULL));
  else
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(N, V)));
  return c;
}

/* bf16 logits (the reference sees their bf16 values). The loss is f32
 * computed in fp32 from exactly those values: the default tolerance.
 * dlogits is the fp32 gradient rounded once to bf16: GPA_PARITY_BF16_RTOL
 * (each value is a relative quantity, softmax or softmax - 1, scaled). */
static gpa_pcase ce_bf(const char *op, int64_t N, int64_t V, int64_t tlo, int64_t thi, double spread) {
  gpa_pcase c = ce(op, N, V, tlo, thi, spread);
  c.in[0] = gpa_pt_bf16(2, SH(N, V), -spread, spread);
  if (op[14] == 'b') {
    c.out[0].dtype = GPA_BF16;
    c.rtol = GPA_PARITY_BF16_RTOL;
  }
  return c;
}

static gpa_pcase pair(const char *op, uint32_t rank, const int64_t *shape, int scalar1) {
  gpa_pcase c = gpa_pcase_make(op, op[0] == 'm' ? ref_mse : ref_cos);
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, -2, 2));
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, -2, 2));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, scalar1 ? 1 : 0, SH(1)));
  return c;
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_metrics");
  int large = gpa_parity_large(p);
  /* 1024 and 4096 wide (f32), 2048 and 4096 (bf16): cross_entropy_bwd's
   * block-per-row kernel on CUDA (rows of 4 KiB and more) */
  const int64_t shapes[][2] = {{1, 1}, {1, 2}, {3, 5}, {7, 13}, {0, 4}, {16, 1000}, {5, 1025}, {3, 32000},
                               {3, 1024}, {5, 4096}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    int64_t N = shapes[i][0], V = shapes[i][1];
    gpa_pgrad g = {.op = "cross_entropy_bwd", .n_dy = 1, .n_in = 2, .in = {{GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_FWD_IN, 1}},
                   .n_out = 1, .grad_of = {0}, .dy_attr = "scale", .ref = ref_ce_bwd};
    gpa_pcase c = ce("cross_entropy_fwd", N, V, 0, V - 1, 4);
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &g);
    /* ignored rows (ignore_index -1); the [1] form of the scalar output */
    c = ce("cross_entropy_fwd", N, V, -1, V - 1, 4);
    gpa_pcase_attr_int(&c, "ignore_index", -1);
    c.out[0] = gpa_pt_spec(GPA_F32, 1, SH(1));
    g.attrs[0] = (gpa_attr){"ignore_index", GPA_ATTR_INT, -1, 0};
    g.n_attrs = 1;
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &g);
    c = ce("cross_entropy_bwd", N, V, -1, V - 1, 4);
    gpa_pcase_attr_int(&c, "ignore_index", -1);
    gpa_pcase_attr_float(&c, "scale", 0.5);
    gpa_parity_check(p, &c);
  }
  const int64_t bshapes[][2] = {{1, 1}, {3, 5}, {0, 4}, {16, 1000}, {5, 1025}, {3, 32000}, {3, 2048}, {5, 4096}};
  for (size_t i = 0; i < sizeof bshapes / sizeof bshapes[0]; i++) {
    int64_t N = bshapes[i][0], V = bshapes[i][1];
    gpa_pcase c = ce_bf("cross_entropy_fwd", N, V, 0, V - 1, 4);
    gpa_parity_check(p, &c);
    c = ce_bf("cross_entropy_fwd", N, V, -1, V - 1, 4);
    gpa_pcase_attr_int(&c, "ignore_index", -1);
    gpa_parity_check(p, &c);
    c = ce_bf("cross_entropy_bwd", N, V, 0, V - 1, 4);
    gpa_parity_check(p, &c);
    c = ce_bf("cross_entropy_bwd", N, V, -1, V - 1, 4);
    gpa_pcase_attr_int(&c, "ignore_index", -1);
    gpa_pcase_attr_float(&c, "scale", 0.5);
    gpa_parity_check(p, &c);
  }
  gpa_pcase c = ce("cross_entropy_fwd", 6, 9, 7, 7, 4);
  gpa_pcase_attr_int(&c, "ignore_index", 7);
  c.label = "every row ignored: 0";
  gpa_parity_check(p, &c);
  c = ce("cross_entropy_bwd", 6, 9, 7, 7, 4);
  gpa_pcase_attr_int(&c, "ignore_index", 7);
  c.label = "every row ignored: 0";
  gpa_parity_check(p, &c);
  c = ce("cross_entropy_fwd", 8, 50, 0, 49, 80);
  c.label = "logits up to 80: stable softmax";
  gpa_parity_check(p, &c);
  if (large) {
    c = ce("cross_entropy_fwd", 64, 32000, 0, 31999, 6);
    gpa_parity_check(p, &c);
    c = ce("cross_entropy_bwd", 64, 32000, 0, 31999, 6);
    gpa_parity_check(p, &c);
  }
  /* mse / cosine */
  const int64_t pshapes[][2] = {{1, 1}, {3, 5}, {7, 13}, {0, 4}, {4, 0}, {33, 257}, {256, 1024}};
  for (size_t i = 0; i < sizeof pshapes / sizeof pshapes[0]; i++) {
    c = pair("mse", 2, pshapes[i], (int)(i % 2));
    gpa_parity_check(p, &c);
    c = pair("cosine", 2, pshapes[i], (int)(i % 2));
    gpa_parity_check(p, &c);
  }
  c = pair("mse", 1, SH(large ? 1000003 : 10007), 0);
  gpa_parity_check(p, &c);
  c = pair("cosine", 3, SH(2, 3, 17), 0);
  gpa_pcase_attr_float(&c, "eps", 1e-6);
  gpa_parity_check(p, &c);
  c = pair("cosine", 2, SH(4, 8), 0);
  c.in[0].lo = c.in[0].hi = 0; /* zero vectors: 0 / eps = 0 */
  c.label = "zero rows";
  gpa_parity_check(p, &c);

  /* bad targets at execution; validation */
  c = ce("cross_entropy_fwd", 5, 9, 9, 9, 1);
  gpa_parity_expect_error(p, &c, GPA_ERANGE, "cross_entropy_fwd: targets[0] = 9 out of range [0, 9)");
  c = ce("cross_entropy_bwd", 5, 9, -3, -2, 1);
  gpa_parity_expect_error(p, &c, GPA_ERANGE, "cross_entropy_bwd: targets[0] = -");
  c = ce("cross_entropy_fwd", 5, 9, 0, 8, 1);
  c.in[1].shape[0] = 4;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "targets has shape [4], expected [5] (N of logits)");
  c = ce("cross_entropy_fwd", 5, 9, 0, 8, 1);
  c.in[1].dtype = GPA_I64;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "targets has dtype i64, expected i32");
  c = ce("cross_entropy_fwd", 5, 9, 0, 8, 1);
  c.out[0] = gpa_pt_spec(GPA_F32, 1, SH(5));
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, NULL);
  c = ce_bf("cross_entropy_bwd", 5, 9, 0, 8, 1);
  c.out[0].dtype = GPA_F32; /* dlogits has the dtype of logits */
  /* the submit's "outputs[0] has dtype ..." (EDTYPE) or the harness's own
   * direct check (ESHAPE, "output 0: shape function expects ...") */
  gpa_parity_expect_error(p, &c, 0, "bf16");
  c = ce("cross_entropy_fwd", 5, 9, 0, 8, 1);
  c.in[0].dtype = GPA_F16;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "cross_entropy_fwd: logits has dtype f16, expected f32 or bf16");
  c = pair("mse", 2, SH(3, 4), 0);
  c.in[0] = gpa_pt_bf16(2, SH(3, 4), -2, 2);
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "mse: y has dtype bf16, expected f32");
  c = pair("mse", 2, SH(3, 4), 0);
  c.in[1].shape[0] = 2;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "mse: t has shape [2,4], expected [3,4] (shape of y)");
  c = pair("cosine", 2, SH(3, 4), 0);
  gpa_pcase_attr_float(&c, "eps", -1);
  gpa_parity_expect_error(p, &c, 0, "eps");
  return gpa_parity_close(p);
}
