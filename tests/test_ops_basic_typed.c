/* The typed calls of ops_basic.h end to end through an actor: results match
 * plain loops, execution errors land on the handle, NULL args are refused,
 * in-place optimizers over several steps, and determinism across runs. */
#include <math.h>

#include "gpuactor/ops_basic.h"
#include "util/testutil.h"

static gpa_tensor mk(gpa_actor *a, int dtype, uint32_t rank, const int64_t *shape) {
  gpa_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; i++) n *= (uint64_t)(t.shape[i] = shape[i]);
  CHECK_OK(gpa_buffer_acquire(a, NULL, n * gpa_dtype_size(dtype) + 4, &t.buffer));
  return t;
}

static void put(gpa_queue *q, const gpa_tensor *t, const void *src) {
  uint64_t n = (uint64_t)gpa_tensor_numel(t) * gpa_dtype_size(t->dtype);
  gpa_handle *h;
  CHECK_OK(gpa_upload(q, t, src, n, 0, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
}

static void get(gpa_queue *q, const gpa_tensor *t, void *dst) {
  gpa_handle *h;
  const void *data;
  uint64_t size;
  CHECK_OK(gpa_readback(q, t, &h));
  CHECK_OK(gpa_await(h, -1));
  CHECK_OK(gpa_handle_data(h, &data, &size));
  CHECK(size == (uint64_t)gpa_tensor_numel(t) * gpa_dtype_size(t->dtype));
  memcpy(dst, data, size);
  gpa_handle_release(h);
}

/* run(call(..., &h), &h): the call has returned when run's body reads *hp */
static void run(gpa_status st, gpa_handle **hp) {
  gpa_handle *h = *hp;
  CHECK_OK(st);
  gpa_status s = gpa_await(h, -1);
  if (s != GPA_OK) fprintf(stderr, "op failed: %s %s\n", gpa_status_name(s), gpa_handle_error_message(h));
  CHECK(s == GPA_OK);
  gpa_handle_release(h);
}

static int close_to(double got, double ref, double tol) { return fabs(got - ref) <= tol * (1 + fabs(ref)); }

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_handle *h = NULL;
  enum { N = 37, D = 129, V = 50 };
  static float x[N * D], g[D], b[D], y[N * D], mean[N], rstd[N], y2[N * D];
  uint64_t seed = 12345;
  for (int i = 0; i < N * D; i++) x[i] = (float)((seed = seed * 6364136223846793005ull + 1) >> 40) / (float)(1 << 24) * 4 - 2;
  for (int i = 0; i < D; i++) g[i] = 1.0f + 0.01f * (float)i, b[i] = -0.5f + 0.001f * (float)i;

  /* layernorm_fwd: eps 0 = default 1e-5 */
  gpa_layernorm_fwd_args ln = {.size = sizeof ln};
  ln.x = mk(a, GPA_F32, 2, (int64_t[]){N, D});
  ln.gamma = mk(a, GPA_F32, 1, (int64_t[]){D});
  ln.beta = mk(a, GPA_F32, 1, (int64_t[]){D});
  ln.y = mk(a, GPA_F32, 2, (int64_t[]){N, D});
  ln.mean = mk(a, GPA_F32, 1, (int64_t[]){N});
  ln.rstd = mk(a, GPA_F32, 1, (int64_t[]){N});
  put(q, &ln.x, x);
  put(q, &ln.gamma, g);
  put(q, &ln.beta, b);
  run(gpa_layernorm_fwd(q, &ln, &h), &h);
  get(q, &ln.y, y);
  get(q, &ln.mean, mean);
  get(q, &ln.rstd, rstd);
  for (int n = 0; n < N; n++) {
    double m = 0, v = 0;
    for (int d = 0; d < D; d++) m += x[n * D + d];
    m /= D;
    for (int d = 0; d < D; d++) v += (x[n * D + d] - m) * (x[n * D + d] - m);
    double r = 1 / sqrt(v / D + 1e-5);
    CHECK(close_to(mean[n], m, 1e-6) && close_to(rstd[n], r, 1e-6));
    for (int d = 0; d < D; d++) CHECK(close_to(y[n * D + d], (x[n * D + d] - m) * r * g[d] + b[d], 1e-5));
  }
  /* deterministic: the same call again gives the same bits */
  run(gpa_layernorm_fwd(q, &ln, &h), &h);
  get(q, &ln.y, y2);
  CHECK(!memcmp(y, y2, sizeof y));

  /* gelu tanh form in place */
  gpa_gelu_fwd_args ge = {sizeof ge, ln.y, ln.y, 1};
  run(gpa_gelu_fwd(q, &ge, &h), &h);
  get(q, &ln.y, y2);
  for (int i = 0; i < N * D; i++) {
    double u = y[i], r = 0.5 * u * (1 + tanh(sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
    CHECK(close_to(y2[i], r, 1e-5));
  }

  /* embedding: an id out of range fails the op with ERANGE naming the position */
  static int32_t ids[2 * 5] = {0, 1, 2, 3, 4, 5, 6, 7, 49, 50};
  gpa_embedding_fwd_args em = {.size = sizeof em};
  em.ids = mk(a, GPA_I32, 2, (int64_t[]){2, 5});
  em.table = mk(a, GPA_F32, 2, (int64_t[]){V, D});
  em.y = mk(a, GPA_F32, 3, (int64_t[]){2, 5, D});
  put(q, &em.ids, ids);
  CHECK_OK(gpa_embedding_fwd(q, &em, &h));
  CHECK(gpa_await(h, -1) == GPA_ERANGE);
  CHECK(strstr(gpa_handle_error_message(h), "ids[1,4] = 50 out of range [0, 50)"));
  gpa_handle_release(h);
  /* validation at submit names the argument */
  gpa_embedding_fwd_args bad = em;
  bad.table.rank = 1;
  CHECK_ST(gpa_embedding_fwd(q, &bad, &h), GPA_ESHAPE);
  CHECK(h == NULL);
  CHECK_MSG("table");
  CHECK_ST(gpa_embedding_fwd(q, NULL, &h), GPA_EINVAL);
  CHECK_MSG("args");

  /* cross entropy without ignore_index: every row counts, even target -100 is out of range */
  static float logits[3 * 4] = {1, 2, 3, 4, 0, 0, 0, 0, -1, 5, 2, 0};
  static int32_t tg[3] = {3, 0, 1};
  gpa_cross_entropy_fwd_args ce = {.size = sizeof ce};
  ce.logits = mk(a, GPA_F32, 2, (int64_t[]){3, 4});
  ce.targets = mk(a, GPA_I32, 1, (int64_t[]){3});
  ce.loss = mk(a, GPA_F32, 0, NULL);
  put(q, &ce.logits, logits);
  put(q, &ce.targets, tg);
  run(gpa_cross_entropy_fwd(q, &ce, &h), &h);
  float loss;
  get(q, &ce.loss, &loss);
  double ref = 0;
  for (int n = 0; n < 3; n++) {
    double z = 0;
    for (int v = 0; v < 4; v++) z += exp(logits[n * 4 + v]);
    ref += log(z) - logits[n * 4 + tg[n]];
  }
  CHECK(close_to(loss, ref / 3, 1e-6));
  tg[1] = -100;
  put(q, &ce.targets, tg);
  CHECK_OK(gpa_cross_entropy_fwd(q, &ce, &h));
  CHECK(gpa_await(h, -1) == GPA_ERANGE);
  gpa_handle_release(h);
  ce.use_ignore_index = 1;
  ce.ignore_index = -100;
  run(gpa_cross_entropy_fwd(q, &ce, &h), &h);
  get(q, &ce.loss, &loss);
  CHECK(close_to(loss, (ref - (log(4.0) - 0)) / 2, 1e-6));

  /* adamw in place over 5 steps against the same loop in double */
  enum { P = 1001 };
  static float pp[P], gg[P], mm[P], vv[P], out[P];
  static double rp[P], rm[P], rv[P];
  for (int i = 0; i < P; i++) pp[i] = (float)sin(i), gg[i] = (float)cos(3 * i), rp[i] = pp[i];
  gpa_adamw_args ad = {.size = sizeof ad};
  ad.param = mk(a, GPA_F32, 1, (int64_t[]){P});
  ad.grad = mk(a, GPA_F32, 1, (int64_t[]){P});
  ad.m = mk(a, GPA_F32, 1, (int64_t[]){P});
  ad.v = mk(a, GPA_F32, 1, (int64_t[]){P});
  put(q, &ad.param, pp);
  put(q, &ad.grad, gg);
  put(q, &ad.m, mm);
  put(q, &ad.v, vv);
  ad.lr = 1e-2, ad.beta1 = 0.9, ad.beta2 = 0.999, ad.weight_decay = 0.01;
  for (int t = 1; t <= 5; t++) {
    ad.step = t;
    run(gpa_adamw(q, &ad, &h), &h);
    for (int i = 0; i < P; i++) {
      rm[i] = 0.9 * rm[i] + 0.1 * gg[i];
      rv[i] = 0.999 * rv[i] + 0.001 * (double)gg[i] * gg[i];
      rp[i] -= 1e-2 * 0.01 * rp[i];
      rp[i] -= 1e-2 * (rm[i] / (1 - pow(0.9, t))) / (sqrt(rv[i] / (1 - pow(0.999, t))) + 1e-8);
    }
  }
  get(q, &ad.param, out);
  for (int i = 0; i < P; i++) CHECK(close_to(out[i], rp[i], 1e-5));
  get(q, &ad.m, out);
  for (int i = 0; i < P; i++) CHECK(close_to(out[i], rm[i], 1e-5));

  /* sgd nesterov in place, one step */
  gpa_sgd_args sg = {sizeof sg, ad.param, ad.grad, ad.m, 0.1, 0.9, 0.0, 1};
  float p0[P], b0[P];
  get(q, &ad.param, p0);
  get(q, &ad.m, b0);
  run(gpa_sgd(q, &sg, &h), &h);
  get(q, &ad.param, out);
  for (int i = 0; i < P; i++) {
    double bb = 0.9 * b0[i] + gg[i];
    CHECK(close_to(out[i], p0[i] - 0.1 * (gg[i] + 0.9 * bb), 1e-5));
  }
  /* a zero lr is used as given: nothing moves */
  sg.lr = 0;
  sg.momentum = 0;
  run(gpa_sgd(q, &sg, &h), &h);
  get(q, &ad.param, p0);
  CHECK(!memcmp(p0, out, sizeof out));
  CHECK_OK(gpa_actor_destroy(a));
  printf("ops_basic typed calls: ok\n");
  return 0;
}
