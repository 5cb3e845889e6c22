/* conv1d's small-grid SIMT kernels for y and dx (ops/conv1d/cuda_igsmall.c,
 * kernels/cuda/conv1d_small.cu) under GPA_CONV_IG_SMALL, f32 on our SIMT
 * kernels (GPA_CUDNN_CONV=0, GPA_CONV_TC unset), on the simulated device
 * with its fault injection; on a GPU the determinism check alone.
 * parity_conv1d_igsmall and parity_conv1d_bf16_igsmall run every parity
 * case through these kernels against the double reference; this test is
 * about the choice and the path's failures:
 *   - which kernels a setting picks, by the name a refused launch gives:
 *     "1" the small ones at any shape; "auto" the small ones where the
 *     64 x 64 grid is under 528 blocks (the main job's shape: 128) and the
 *     64 x 64 ones past it (600 batches: 600 blocks); "0" and unset the
 *     64 x 64 ones; dW stays on gpa_conv_ig_dw_f32 under every setting;
 *   - a refused launch fails its op with GPA_EDEVICE and the driver's
 *     message, and the same op then runs and gives the bits of a run before;
 *   - two runs agree to the bit, and the small kernels agree with the
 *     64 x 64 ones within the f32 parity bound. */
#include <math.h>
#include <stdlib.h>

#include "test_cuda_util.h"

typedef struct shape {
  int B, C, L, K, dil;
} shape;

typedef struct conv {
  shape s;
  int64_t nx, nw;
  gpa_tensor x, w, b, y, dy, dx, dw, db;
} conv;

static void put_random(gpa_queue *q, const gpa_tensor *t, int64_t n, uint64_t *r) {
  float *p = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) p[i] = (float)((*r = *r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) * 2 - 1;
  tu_put(q, t, p, n);
  free(p);
}

/* causal, Cin = Cout = C, stride 1 (y has x's shape) */
static void setup(gpa_actor *a, gpa_queue *q, conv *c, shape s, uint64_t seed) {
  c->s = s;
  c->nx = (int64_t)s.B * s.C * s.L;
  c->nw = (int64_t)s.C * s.C * s.K;
  c->x = tcu_f32(a, 3, s.B, s.C, s.L);
  c->w = tcu_f32(a, 3, s.C, s.C, s.K);
  c->b = tcu_f32(a, 1, s.C, 0, 0);
  c->y = tcu_f32(a, 3, s.B, s.C, s.L);
  c->dy = tcu_f32(a, 3, s.B, s.C, s.L);
  c->dx = tcu_f32(a, 3, s.B, s.C, s.L);
  c->dw = tcu_f32(a, 3, s.C, s.C, s.K);
  c->db = tcu_f32(a, 1, s.C, 0, 0);
  put_random(q, &c->x, c->nx, &seed);
  put_random(q, &c->w, c->nw, &seed);
  put_random(q, &c->b, s.C, &seed);
  put_random(q, &c->dy, c->nx, &seed);
}

static void release(gpa_actor *a, conv *c) {
  gpa_tensor *ts[] = {&c->x, &c->w, &c->b, &c->y, &c->dy, &c->dx, &c->dw, &c->db};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) CHECK_OK(gpa_buffer_release(a, ts[i]->buffer));
}

static gpa_status op(gpa_queue *q, conv *c, int back, gpa_handle **h) {
  gpa_attr at[2] = {{"causal", GPA_ATTR_INT, 1, 0}, {"dilation", GPA_ATTR_INT, c->s.dil, 0}};
  gpa_tensor fin[3] = {c->x, c->w, c->b}, bin[3] = {c->dy, c->x, c->w}, bout[3] = {c->dx, c->dw, c->db};
  gpa_op_call f = {"conv1d_fwd", fin, 3, &c->y, 1, at, 2}, b = {"conv1d_bwd", bin, 3, bout, 3, at, 2};
  return tcu_run(q, back ? &b : &f, h);
}

static void run_ok(gpa_queue *q, conv *c, int back) {
  gpa_handle *h = NULL;
  CHECK_OK(op(q, c, back, &h));
  gpa_handle_release(h);
}

/* launch nth of the op is refused; its message names `kernel` (sim only) */
static void refused(gpa_queue *q, conv *c, tcu_sim *sim, int back, unsigned nth, const char *kernel) {
  gpa_handle *h = NULL;
  sim->fault_launch(nth);
  gpa_status st = op(q, c, back, &h);
  tcu_expect_refused(q, st, h, back ? "conv1d_bwd" : "conv1d_fwd", nth, kernel);
  sim->fault_clear();
}

/* y, dx, dW of one forward and one backward pass into out (nx + nx + nw floats) */
static void outputs(gpa_queue *q, conv *c, float *out) {
  run_ok(q, c, 0);
  run_ok(q, c, 1);
  tu_get(q, &c->y, out, c->nx);
  tu_get(q, &c->dx, out + c->nx, c->nx);
  tu_get(q, &c->dw, out + 2 * c->nx, c->nw);
}

/* which kernels the setting picks for y and dx at the main job's shape
 * (small grid) and at 600 batches (a large one) */
static void choice(const char *setting, const char *main_fwd, const char *main_dx, const char *big_fwd,
                   const char *big_dx) {
  gpa_actor *a = tcu_conv_actor_with("GPA_CONV_IG_SMALL", setting);
  tcu_sim sim = tcu_sim_api(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  const shape sh[2] = {{32, 96, 128, 3, 8}, {600, 4, 64, 3, 1}};
  const char *names[2][2] = {{main_fwd, main_dx}, {big_fwd, big_dx}};
  for (int i = 0; i < 2; i++) {
    conv c;
    setup(a, q, &c, sh[i], 99);
    refused(q, &c, &sim, 0, 1, names[i][0]);
    refused(q, &c, &sim, 1, 2, names[i][1]); /* after db */
    refused(q, &c, &sim, 1, 3, "gpa_conv_ig_dw_f32");
    release(a, &c);
  }
  CHECK_OK(gpa_actor_destroy(a));
  printf("ok: GPA_CONV_IG_SMALL=%s picks the expected kernels\n", setting ? setting : "(unset)");
}

int main(void) {
  tcu_device_or_skip();
  /* rows, columns and the reduction (40 channels x 3 taps: two stages) past
   * one 32 x 32 tile */
  const shape s = {2, 40, 45, 3, 2};
  gpa_actor *a = tcu_conv_actor_with("GPA_CONV_IG_SMALL", "1");
  const int on_sim = !strcmp(gpa_actor_backend(a), "sim");
  gpa_queue *q = gpa_actor_default_queue(a);
  conv c;
  setup(a, q, &c, s, 4242);
  const int64_t n = 2 * c.nx + c.nw;
  float *r1 = malloc(sizeof(float) * (size_t)n), *r2 = malloc(sizeof(float) * (size_t)n);
  float *big = malloc(sizeof(float) * (size_t)n);
  outputs(q, &c, r1);
  if (on_sim) {
    tcu_sim sim = tcu_sim_api(a);
    refused(q, &c, &sim, 0, 1, "gpa_conv_igs_fwd_f32");
    refused(q, &c, &sim, 1, 2, "gpa_conv_igs_dx_f32");
  }
  outputs(q, &c, r2);
  CHECK(!memcmp(r1, r2, sizeof(float) * (size_t)n));
  printf("ok: y, dx, dW agree to the bit over two runs%s\n", on_sim ? " with refused launches between" : "");
  release(a, &c);
  CHECK_OK(gpa_actor_destroy(a));

  /* the 64 x 64 kernels on the same data: the same sums in another order */
  a = tcu_conv_actor_with("GPA_CONV_IG_SMALL", "0");
  q = gpa_actor_default_queue(a);
  setup(a, q, &c, s, 4242);
  outputs(q, &c, big);
  release(a, &c);
  CHECK_OK(gpa_actor_destroy(a));
  double worst = 0;
  for (int64_t i = 0; i < 2 * c.nx; i++) {
    /* every term is under 1 in magnitude: 120 terms, a bound of 1e-5 of that */
    const double e = fabs((double)r1[i] - big[i]);
    if (e > worst) worst = e;
  }
  CHECK(worst <= 1e-5 * 120);
  CHECK(!memcmp(r1 + 2 * c.nx, big + 2 * c.nx, sizeof(float) * (size_t)c.nw)); /* dW: the same kernel */
  printf("ok: y and dx within %.3g of the 64 x 64 kernels' (dW the same bits)\n", worst);
  free(r1);
  free(r2);
  free(big);
  if (!on_sim) return 0;

  choice("1", "gpa_conv_igs_fwd_f32", "gpa_conv_igs_dx_f32", "gpa_conv_igs_fwd_f32", "gpa_conv_igs_dx_f32");
  choice("auto", "gpa_conv_igs_fwd_f32", "gpa_conv_igs_dx_f32", "gpa_conv_ig_fwd_f32", "gpa_conv_ig_dx_f32");
  choice("0", "gpa_conv_ig_fwd_f32", "gpa_conv_ig_dx_f32", "gpa_conv_ig_fwd_f32", "gpa_conv_ig_dx_f32");
  choice(NULL, "gpa_conv_ig_fwd_f32", "gpa_conv_ig_dx_f32", "gpa_conv_ig_fwd_f32", "gpa_conv_ig_dx_f32");
  return 0;
}
