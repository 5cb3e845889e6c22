/* The mixed-dtype forms of layernorm_fwd (x f32, y bf16), layernorm_bwd (x
 * and dx f32, dy bf16, optional dx_bf16 copy), add (f32 + bf16 -> f32) and
 * gelu_bwd (x and dx bf16, dy f32), which gpa-train-lm --bf16 uses instead
 * of a cast beside each op: each must give, bit for bit, what the op of one
 * dtype gives beside the cast it replaces (the same fp32 math, one
 * rounding), on the device the suite runs (GPA_DEVICE), over shapes that
 * take each CUDA path (16-byte and scalar accesses, lane groups and a
 * block per row, the split column sums and the partials). The parity
 * tests hold them to the double references; this test holds them to the
 * casts. Bad combinations are refused with a message: overlaps of tensors
 * of two element sizes, dx_bf16 outside the mixed form, wrong output
 * dtypes. */
#include "util/testutil.h"

static uint64_t seed = 0x9e3779b97f4a7c15ull;

static float rnd(float lo, float hi) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((seed >> 40) * (1.0 / 16777216.0));
}

static gpa_tensor tensor(gpa_actor *a, int dt, int64_t n, int64_t d) {
  gpa_tensor t = {.dtype = dt, .rank = d ? 2 : 1, .shape = {n, d}};
  uint64_t numel = (uint64_t)(n * (d ? d : 1));
  /* 4 bytes an element for every dtype: an f32 view over a bf16 tensor's
   * buffer (bad_input's overlaps) stays inside it */
  CHECK_OK(gpa_buffer_acquire(a, NULL, (numel ? numel : 1) * 4, &t.buffer));
  return t;
}

static uint64_t nbytes(const gpa_tensor *t) {
  int64_t n = 1;
  for (uint32_t i = 0; i < t->rank; i++) n *= t->shape[i];
  return (uint64_t)n * gpa_dtype_size(t->dtype);
}

/* Random values in [lo, hi): f32, or bf16 (the top half of a random f32). */
static void put_random(gpa_queue *q, const gpa_tensor *t, float lo, float hi) {
  uint64_t n = nbytes(t) / gpa_dtype_size(t->dtype);
  void *buf = malloc(nbytes(t) + 4);
  for (uint64_t i = 0; i < n; i++) {
    float v = rnd(lo, hi);
    if (t->dtype == GPA_F32) {
      ((float *)buf)[i] = v;
    } else {
      uint32_t u;
      memcpy(&u, &v, 4);
      ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
    }
  }
  tu_put_bytes(q, t, buf, nbytes(t));
  free(buf);
}

static void op(gpa_queue *q, const char *name, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
               uint32_t n_out) {
  gpa_op_call c = {name, in, n_in, out, n_out, NULL, 0};
  CHECK_OK(gpa_submit(q, &c, NULL));
}

static gpa_status try_op(gpa_queue *q, const char *name, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                         uint32_t n_out) {
  gpa_op_call c = {name, in, n_in, out, n_out, NULL, 0};
  return gpa_submit(q, &c, NULL);
}

/* got and want (tensors of one dtype and shape) hold the same bits. */
static void same(gpa_queue *q, const char *what, long long n, long long d, const gpa_tensor *got,
                 const gpa_tensor *want) {
  uint64_t b = nbytes(want);
  unsigned char *g = malloc(b + 1), *w = malloc(b + 1);
  CHECK_OK(gpa_sync_batch(q, NULL));
  tu_get_bytes(q, got, g, b);
  tu_get_bytes(q, want, w, b);
  if (memcmp(g, w, b)) {
    uint64_t i = 0;
    while (g[i] == w[i]) i++;
    fprintf(stderr, "%s [%lld x %lld]: not the bits of the op beside a cast (first at byte %llu of %llu)\n", what, n,
            d, (unsigned long long)i, (unsigned long long)b);
    exit(1);
  }
  free(g), free(w);
}

static void run_case(gpa_actor *a, long long n, long long d) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tensor(a, GPA_F32, n, d), g = tensor(a, GPA_F32, d, 0), b = tensor(a, GPA_F32, d, 0);
  gpa_tensor mean = tensor(a, GPA_F32, n, 0), rstd = tensor(a, GPA_F32, n, 0);
  gpa_tensor mean2 = tensor(a, GPA_F32, n, 0), rstd2 = tensor(a, GPA_F32, n, 0);
  gpa_tensor y = tensor(a, GPA_F32, n, d), yc = tensor(a, GPA_BF16, n, d), ym = tensor(a, GPA_BF16, n, d);
  put_random(q, &x, -3, 5);
  put_random(q, &g, 0.5f, 1.5f);
  put_random(q, &b, -1, 1);
  /* layernorm_fwd: y bf16 straight, against y f32 and a cast */
  op(q, "layernorm_fwd", (gpa_tensor[]){x, g, b}, 3, (gpa_tensor[]){y, mean, rstd}, 3);
  op(q, "cast", &y, 1, &yc, 1);
  op(q, "layernorm_fwd", (gpa_tensor[]){x, g, b}, 3, (gpa_tensor[]){ym, mean2, rstd2}, 3);
  same(q, "layernorm_fwd y (x f32, y bf16)", n, d, &ym, &yc);
  same(q, "layernorm_fwd mean (y bf16)", n, d, &mean2, &mean);
  same(q, "layernorm_fwd rstd (y bf16)", n, d, &rstd2, &rstd);

  /* layernorm_bwd: dy bf16 (and the dx_bf16 copy), against dy cast to f32 */
  gpa_tensor dy = tensor(a, GPA_BF16, n, d), dyf = tensor(a, GPA_F32, n, d);
  gpa_tensor dx = tensor(a, GPA_F32, n, d), dg = tensor(a, GPA_F32, d, 0), db = tensor(a, GPA_F32, d, 0);
  gpa_tensor dxc = tensor(a, GPA_BF16, n, d);
  gpa_tensor dxm = tensor(a, GPA_F32, n, d), dgm = tensor(a, GPA_F32, d, 0), dbm = tensor(a, GPA_F32, d, 0);
  gpa_tensor dxm2 = tensor(a, GPA_BF16, n, d), dxm3 = tensor(a, GPA_F32, n, d);
  put_random(q, &dy, -1, 1);
  op(q, "cast", &dy, 1, &dyf, 1);
  op(q, "layernorm_bwd", (gpa_tensor[]){x, dyf, g, mean, rstd}, 5, (gpa_tensor[]){dx, dg, db}, 3);
  op(q, "cast", &dx, 1, &dxc, 1);
  op(q, "layernorm_bwd", (gpa_tensor[]){x, dy, g, mean, rstd}, 5, (gpa_tensor[]){dxm, dgm, dbm, dxm2}, 4);
  same(q, "layernorm_bwd dx (dy bf16)", n, d, &dxm, &dx);
  same(q, "layernorm_bwd dgamma (dy bf16)", n, d, &dgm, &dg);
  same(q, "layernorm_bwd dbeta (dy bf16)", n, d, &dbm, &db);
  same(q, "layernorm_bwd dx_bf16", n, d, &dxm2, &dxc);
  op(q, "layernorm_bwd", (gpa_tensor[]){x, dy, g, mean, rstd}, 5, (gpa_tensor[]){dxm3, dgm, dbm}, 3);
  same(q, "layernorm_bwd dx (dy bf16, no copy)", n, d, &dxm3, &dx);
  /* the typed call reaches dx_bf16; a struct from before the field (its
   * size ends there) has none: an f32 tensor there would be refused */
  gpa_tensor dxt = tensor(a, GPA_F32, n, d), dxt2 = tensor(a, GPA_BF16, n, d);
  gpa_layernorm_bwd_args la = {sizeof la, x, dy, g, mean, rstd, dxt, dgm, dbm, dxt2};
  CHECK_OK(gpa_layernorm_bwd(q, &la, NULL));
  same(q, "typed layernorm_bwd dx_bf16", n, d, &dxt2, &dxc);
  same(q, "typed layernorm_bwd dx", n, d, &dxt, &dx);
  la.size = offsetof(gpa_layernorm_bwd_args, dx_bf16), la.dx_bf16 = dyf;
  CHECK_OK(gpa_layernorm_bwd(q, &la, NULL));

  /* add: a f32 + b bf16 (either order, and in place over a), against b cast */
  gpa_tensor sum = tensor(a, GPA_F32, n, d), s1 = tensor(a, GPA_F32, n, d), s2 = tensor(a, GPA_F32, n, d);
  op(q, "add", (gpa_tensor[]){x, dyf}, 2, &sum, 1);
  op(q, "add", (gpa_tensor[]){x, dy}, 2, &s1, 1);
  same(q, "add f32 + bf16", n, d, &s1, &sum);
  op(q, "add", (gpa_tensor[]){dy, x}, 2, &s2, 1);
  same(q, "add bf16 + f32", n, d, &s2, &sum);
  op(q, "add", (gpa_tensor[]){x, dy}, 2, &x, 1);
  same(q, "add f32 + bf16 in place", n, d, &x, &sum);

  /* gelu_bwd: x bf16 (yc), dy f32 (dx): against x cast to f32 and dx cast back */
  gpa_tensor xf = tensor(a, GPA_F32, n, d), gf = tensor(a, GPA_F32, n, d), gc = tensor(a, GPA_BF16, n, d);
  gpa_tensor gm = tensor(a, GPA_BF16, n, d);
  op(q, "cast", &yc, 1, &xf, 1);
  op(q, "gelu_bwd", (gpa_tensor[]){xf, dx}, 2, &gf, 1);
  op(q, "cast", &gf, 1, &gc, 1);
  op(q, "gelu_bwd", (gpa_tensor[]){yc, dx}, 2, &gm, 1);
  same(q, "gelu_bwd (x bf16, dy f32)", n, d, &gm, &gc);
  op(q, "gelu_bwd", (gpa_tensor[]){yc, dx}, 2, &yc, 1);
  same(q, "gelu_bwd (x bf16, dy f32) in place over x", n, d, &yc, &gc);

  gpa_tensor all[] = {x, g, b, mean, rstd, mean2, rstd2, y, yc, ym, dy, dyf, dx, dg, db, dxc, dxm, dgm, dbm, dxm2,
                      dxm3, dxt, dxt2, sum, s1, s2, xf, gf, gc, gm};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpa_buffer_release(a, all[i].buffer);
}

/* t's memory as a tensor of dtype dt, t's shape (overlapping t) */
static gpa_tensor over(gpa_tensor t, int dt) {
  t.dtype = dt;
  return t;
}

static void bad_input(gpa_actor *a) {
  gpa_queue *q = gpa_actor_default_queue(a);
  const long long n = 4, d = 8;
  gpa_tensor x = tensor(a, GPA_F32, n, d), g = tensor(a, GPA_F32, d, 0), b = tensor(a, GPA_F32, d, 0);
  gpa_tensor mean = tensor(a, GPA_F32, n, 0), rstd = tensor(a, GPA_F32, n, 0);
  gpa_tensor yb = tensor(a, GPA_BF16, n, d), dyb = tensor(a, GPA_BF16, n, d), dx = tensor(a, GPA_F32, n, d);
  gpa_tensor dg = tensor(a, GPA_F32, d, 0), db = tensor(a, GPA_F32, d, 0), c = tensor(a, GPA_BF16, n, d);
  gpa_tensor dyf = tensor(a, GPA_F32, n, d), xb = tensor(a, GPA_BF16, n, d), yf = tensor(a, GPA_F32, n, d);
  put_random(q, &x, -1, 1);
  /* layernorm_fwd: a bf16 y over the f32 x; x bf16 with y f32 */
  CHECK_ST(try_op(q, "layernorm_fwd", (gpa_tensor[]){x, g, b}, 3, (gpa_tensor[]){over(x, GPA_BF16), mean, rstd}, 3),
           GPA_EINVAL);
  CHECK_MSG("layernorm_fwd: y (bf16) overlaps x (f32)");
  CHECK_ST(try_op(q, "layernorm_fwd", (gpa_tensor[]){xb, g, b}, 3, (gpa_tensor[]){yf, mean, rstd}, 3), GPA_EDTYPE);
  CHECK_MSG("outputs[0] has dtype f32, expected bf16");
  /* layernorm_bwd: dx_bf16 outside the mixed form, of another dtype, over dx; dx over dy */
  CHECK_ST(try_op(q, "layernorm_bwd", (gpa_tensor[]){x, dyf, g, mean, rstd}, 5, (gpa_tensor[]){dx, dg, db, c}, 4),
           GPA_EINVAL);
  CHECK_MSG("dx_bf16 (outputs[3]) is written only by the mixed form (x f32, dy bf16)");
  CHECK_ST(try_op(q, "layernorm_bwd", (gpa_tensor[]){x, dyb, g, mean, rstd}, 5, (gpa_tensor[]){dx, dg, db, dyf}, 4),
           GPA_EDTYPE);
  CHECK_MSG("outputs[3] has dtype f32, expected bf16");
  CHECK_ST(try_op(q, "layernorm_bwd", (gpa_tensor[]){x, dyb, g, mean, rstd}, 5,
                  (gpa_tensor[]){dx, dg, db, over(dx, GPA_BF16)}, 4),
           GPA_EINVAL);
  CHECK_MSG("layernorm_bwd: dx_bf16 (bf16) overlaps dx (f32)");
  CHECK_ST(try_op(q, "layernorm_bwd", (gpa_tensor[]){x, dyb, g, mean, rstd}, 5,
                  (gpa_tensor[]){over(dyb, GPA_F32), dg, db}, 3),
           GPA_EINVAL);
  CHECK_MSG("layernorm_bwd: dx (f32) overlaps dy (bf16)");
  CHECK_ST(try_op(q, "layernorm_bwd", (gpa_tensor[]){xb, dyf, g, mean, rstd}, 5, (gpa_tensor[]){yb, dg, db}, 3),
           GPA_EDTYPE);
  CHECK_MSG("dy has dtype f32, expected bf16 (the dtype of x)");
  /* add: y over the bf16 operand, y bf16 for a mixed pair */
  CHECK_ST(try_op(q, "add", (gpa_tensor[]){x, dyb}, 2, (gpa_tensor[]){over(dyb, GPA_F32)}, 1), GPA_EINVAL);
  CHECK_MSG("add: y (f32) overlaps b (bf16)");
  CHECK_ST(try_op(q, "add", (gpa_tensor[]){dyb, x}, 2, (gpa_tensor[]){over(dyb, GPA_F32)}, 1), GPA_EINVAL);
  CHECK_MSG("add: y (f32) overlaps a (bf16)");
  CHECK_ST(try_op(q, "add", (gpa_tensor[]){x, dyb}, 2, &c, 1), GPA_EDTYPE);
  CHECK_MSG("add: outputs[0] has dtype bf16, expected f32");
  /* gelu_bwd: dx (bf16) over dy (f32) */
  CHECK_ST(try_op(q, "gelu_bwd", (gpa_tensor[]){xb, dyf}, 2, (gpa_tensor[]){over(dyf, GPA_BF16)}, 1), GPA_EINVAL);
  CHECK_MSG("gelu_bwd: dx (bf16) overlaps dy (f32)");
  /* outputs follow the form: gelu_bwd's dx is x's bf16, layernorm_bwd's dx x's f32 */
  CHECK_ST(try_op(q, "gelu_bwd", (gpa_tensor[]){xb, dyf}, 2, &yf, 1), GPA_EDTYPE);
  CHECK_MSG("gelu_bwd: outputs[0] has dtype f32, expected bf16");
  CHECK_ST(try_op(q, "layernorm_bwd", (gpa_tensor[]){x, dyb, g, mean, rstd}, 5, (gpa_tensor[]){c, dg, db}, 3),
           GPA_EDTYPE);
  CHECK_MSG("layernorm_bwd: outputs[0] has dtype bf16, expected f32");
  /* the good forms of the same tensors pass */
  CHECK_OK(try_op(q, "layernorm_fwd", (gpa_tensor[]){x, g, b}, 3, (gpa_tensor[]){yb, mean, rstd}, 3));
  CHECK_OK(gpa_sync_batch(q, NULL));
  gpa_tensor all[] = {x, g, b, mean, rstd, yb, dyb, dx, dg, db, c, dyf, xb, yf};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpa_buffer_release(a, all[i].buffer);
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  /* the main job's rows (16-byte paths, the split sums); D odd (scalar);
   * D = 1024 (a block per row on CUDA); D past 1024 (the partials); N = 0 */
  static const long long cases[][2] = {{4096, 96}, {33, 97}, {7, 1024}, {5, 1028}, {3, 1027}, {0, 8}, {1, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(a, cases[i][0], cases[i][1]);
  bad_input(a);
  printf("mixed dtypes on %s: layernorm_fwd/bwd, add, gelu_bwd give the bits of the op beside a cast over %zu "
         "shapes; bad combinations refused\n",
         gpa_actor_backend(a), sizeof cases / sizeof cases[0]);
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
