/* Parity of adamw and sgd (in place and out of place) against double
 * references of torch.optim.AdamW / SGD, with f32 tensors and with bf16
 * grad (fp32 params and state: the mixed-precision layout) or bf16 grad and
 * param; attribute and dtype validation. */
#include <math.h>
#include <stdio.h>

#include "tests/parity/harness.h"

/* in: param, grad, m, v; out: param', m', v' */
static void ref_adamw(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  double lr = gpa_pcase_get_f(c, "lr", 0), b1 = gpa_pcase_get_f(c, "beta1", 0.9), b2 = gpa_pcase_get_f(c, "beta2", 0.999);
  double eps = gpa_pcase_get_f(c, "eps", 1e-8), wd = gpa_pcase_get_f(c, "weight_decay", 0.01);
  double t = (double)gpa_pcase_get_i(c, "step", 1);
  for (int64_t i = 0; i < in[0].n; i++) {
    double p = in[0].d[i], g = in[1].d[i];
    double m = b1 * in[2].d[i] + (1 - b1) * g, v = b2 * in[3].d[i] + (1 - b2) * g * g;
    p -= lr * wd * p;
    p -= lr * (m / (1 - pow(b1, t))) / (sqrt(v / (1 - pow(b2, t))) + eps);
    out[0].d[i] = p;
    out[1].d[i] = m;
    out[2].d[i] = v;
  }
}

/* in: param, grad, buf; out: param', buf' */
static void ref_sgd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  double lr = gpa_pcase_get_f(c, "lr", 0), mu = gpa_pcase_get_f(c, "momentum", 0);
  double wd = gpa_pcase_get_f(c, "weight_decay", 0);
  int nest = (int)gpa_pcase_get_i(c, "nesterov", 0);
  for (int64_t i = 0; i < in[0].n; i++) {
    double p = in[0].d[i], g = in[1].d[i] + wd * p;
    double b = mu * in[2].d[i] + g;
    out[0].d[i] = p - lr * (nest ? g + mu * b : b);
    out[1].d[i] = b;
  }
}

/* bf: which tensors are bf16 (the reference sees the bf16 inputs' values) */
enum { F32 = 0, BF_GRAD = 1, BF_GRAD_PARAM = 2 };

static gpa_pt val(int bf16, uint32_t rank, const int64_t *shape) {
  return bf16 ? gpa_pt_bf16(rank, shape, -1, 1) : gpa_pt_f32(rank, shape, -1, 1);
}

/* A bf16 grad is widened exactly: the fp32 math and its default tolerance.
 * A bf16 param' is the fp32 result rounded once (GPA_PARITY_BF16_RTOL: one
 * rounding to an 8-bit significand). */
static void bf_tol(gpa_pcase *c, int bf) {
  if (bf == BF_GRAD_PARAM) c->rtol = GPA_PARITY_BF16_RTOL;
}

static gpa_pcase adamw_bf(uint32_t rank, const int64_t *shape, int in_place, int64_t step, int bf) {
  gpa_pcase c = gpa_pcase_make("adamw", ref_adamw);
  gpa_pcase_in(&c, val(bf == BF_GRAD_PARAM, rank, shape));
  gpa_pcase_in(&c, val(bf != F32, rank, shape));
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, -0.1, 0.1));
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, 0, 0.01));
  if (in_place) {
    gpa_pcase_out_alias(&c, 0);
    gpa_pcase_out_alias(&c, 2);
    gpa_pcase_out_alias(&c, 3);
    c.label = "in place";
  } else {
    for (int i = 0; i < 3; i++) gpa_pcase_out(&c, gpa_pt_spec(i == 0 ? c.in[0].dtype : GPA_F32, rank, shape));
  }
  gpa_pcase_attr_float(&c, "lr", 1e-3);
  gpa_pcase_attr_int(&c, "step", step);
  bf_tol(&c, bf);
  return c;
}

static gpa_pcase adamw(uint32_t rank, const int64_t *shape, int in_place, int64_t step) {
  return adamw_bf(rank, shape, in_place, step, F32);
}

static gpa_pcase sgd_bf(uint32_t rank, const int64_t *shape, int in_place, int bf) {
  gpa_pcase c = gpa_pcase_make("sgd", ref_sgd);
  gpa_pcase_in(&c, val(bf == BF_GRAD_PARAM, rank, shape));
  gpa_pcase_in(&c, val(bf != F32, rank, shape));
  gpa_pcase_in(&c, gpa_pt_f32(rank, shape, -0.5, 0.5));
  if (in_place) {
    gpa_pcase_out_alias(&c, 0);
    gpa_pcase_out_alias(&c, 2);
    c.label = "in place";
  } else {
    for (int i = 0; i < 2; i++) gpa_pcase_out(&c, gpa_pt_spec(i == 0 ? c.in[0].dtype : GPA_F32, rank, shape));
  }
  gpa_pcase_attr_float(&c, "lr", 0.1);
  bf_tol(&c, bf);
  return c;
}

static gpa_pcase sgd(uint32_t rank, const int64_t *shape, int in_place) { return sgd_bf(rank, shape, in_place, F32); }

/* bf16 grad, and bf16 grad and param, in place and not */
static void bf16_cases(gpa_parity *p) {
  const int64_t lens[] = {0, 1, 7, 16, 17, 1000, 4099, 65539}; /* 65539: many host chunks and threads */
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    for (int ip = 0; ip < 2; ip++)
      for (int bf = BF_GRAD; bf <= BF_GRAD_PARAM; bf++) {
        gpa_pcase c = adamw_bf(1, &lens[i], ip, 7, bf);
        gpa_pcase_attr_float(&c, "weight_decay", 0.1);
        gpa_parity_check(p, &c);
        c = sgd_bf(1, &lens[i], ip, bf);
        gpa_pcase_attr_float(&c, "momentum", 0.9);
        gpa_pcase_attr_float(&c, "weight_decay", 1e-2);
        gpa_parity_check(p, &c);
        gpa_pcase_attr_int(&c, "nesterov", 1);
        gpa_parity_check(p, &c);
      }
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_optim");
  const int64_t lens[] = {0, 1, 7, 16, 17, 1000, 65539};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    for (int ip = 0; ip < 2; ip++) {
      gpa_pcase c = adamw(1, &lens[i], ip, 1);
      gpa_parity_check(p, &c);
      c = adamw(1, &lens[i], ip, 1000);
      gpa_pcase_attr_float(&c, "beta1", 0.8);
      gpa_pcase_attr_float(&c, "beta2", 0.95);
      gpa_pcase_attr_float(&c, "eps", 1e-6);
      gpa_pcase_attr_float(&c, "weight_decay", 0.1);
      gpa_parity_check(p, &c);
      c = sgd(1, &lens[i], ip);
      gpa_parity_check(p, &c);
      c = sgd(1, &lens[i], ip);
      gpa_pcase_attr_float(&c, "momentum", 0.9);
      gpa_pcase_attr_float(&c, "weight_decay", 1e-2);
      gpa_parity_check(p, &c);
      gpa_pcase_attr_int(&c, "nesterov", 1);
      gpa_parity_check(p, &c);
    }
  }
  bf16_cases(p);
  const int64_t sh[] = {5, 7, 3};
  gpa_pcase c = adamw(3, sh, 1, 3);
  gpa_parity_check(p, &c);
  if (gpa_parity_large(p)) {
    int64_t n = (1 << 20) + 3;
    c = adamw(1, &n, 1, 10);
    gpa_parity_check(p, &c);
  }
  /* validation */
  c = adamw(1, sh, 0, 1);
  c.n_attrs = 1; /* lr only: step missing */
  gpa_parity_expect_error(p, &c, 0, "step");
  c = adamw(1, sh, 0, 0);
  gpa_parity_expect_error(p, &c, 0, "step");
  c = adamw(1, sh, 0, 1);
  c.in[3].shape[0] = 4;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "adamw: v has shape [4], expected [5] (shape of param)");
  c = adamw(1, sh, 0, 1);
  gpa_pcase_attr_float(&c, "beta1", 1.0);
  gpa_parity_expect_error(p, &c, 0, "beta1");
  c = sgd(1, sh, 0);
  c.n_attrs = 0;
  gpa_parity_expect_error(p, &c, 0, "lr");
  c = sgd(1, sh, 0);
  c.in[1].dtype = GPA_I32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "sgd: grad has dtype i32, expected f32 or bf16");
  c = adamw_bf(1, sh, 0, 1, BF_GRAD);
  c.in[2] = gpa_pt_bf16(1, sh, -0.1, 0.1); /* the state stays f32 */
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "adamw: m has dtype bf16, expected f32");
  c = sgd_bf(1, sh, 0, BF_GRAD);
  c.in[2] = gpa_pt_bf16(1, sh, -0.5, 0.5);
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "sgd: buf has dtype bf16, expected f32");
  c = sgd_bf(1, sh, 0, BF_GRAD_PARAM);
  c.out[0] = gpa_pt_spec(GPA_F32, 1, sh); /* param' has param's dtype */
  /* the submit's "outputs[0] has dtype ..." (EDTYPE) or the harness's own
   * direct check (ESHAPE, "output 0: shape function expects ...") */
  gpa_parity_expect_error(p, &c, 0, "bf16");
  c = sgd(1, sh, 0);
  gpa_pcase_attr_int(&c, "nesterov", 2);
  gpa_parity_expect_error(p, &c, 0, "nesterov");
  return gpa_parity_close(p);
}
