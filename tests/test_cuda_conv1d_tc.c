/* bf16 conv1d on CUDA's tensor-core kernels (ops/conv1d/cuda_tc.c), on the
 * simulated device with its fault injection (GPA_CUDNN_CONV=0: our
 * kernels). Accuracy at many shapes is parity_conv1d_bf16_own's; this test
 * is about the path and its failures:
 *   - selection: a refused launch names the kernel it refused, so the
 *     first launch of conv1d_fwd is the channels-last pack, and the 4th and
 *     5th of conv1d_bwd_nobias are the tensor-core dx and dW kernels; with
 *     GPA_CONV_TC=0 the forward's first launch is the SIMT kernel;
 *   - a refused launch fails that op with GPA_EDEVICE and the driver's
 *     message, and the next conv1d on the queue is correct;
 *   - the op's scratch (the copies, W re-laid, dW partials) out of memory
 *     for good: GPA_ENOMEM with the driver's message; memory back, the op
 *     runs;
 *   - deterministic: two backward passes (dW in 4 partial splits) agree to
 *     the bit, and both match a double reference;
 *   - channels last (layout nlc): with channels per group multiples of 8
 *     the kernels read x and dy in place (no pack: the forward's first
 *     launch re-lays W, the backward's 2nd and 3rd are dx and dW), and a
 *     refused launch fails the op the same way; 20 input channels go to
 *     the SIMT kernels. Accuracy: parity_conv1d_bf16's nlc cases. */
#include <math.h>
#include <stdlib.h>

#include "test_cuda_util.h"
#include "util/half.h"

enum { B = 2, CIN = 20, L = 45, COUT = 12, K = 3, DIL = 2 };
#define LOUT L /* causal, stride 1 */
#define PADL ((K - 1) * DIL)

static gpa_tensor bf(gpa_actor *a, int64_t d0, int64_t d1, int64_t d2, gpa_dtype dt) {
  gpa_tensor t = {0};
  const int64_t n = d0 * d1 * d2;
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)n * (dt == GPA_F32 ? 4 : 2), &t.buffer));
  t.dtype = dt;
  t.rank = 3;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  return t;
}

typedef struct bufs {
  gpa_tensor x, w, y, dy, dx, dw;
  uint16_t hx[B * CIN * L], hw[COUT * CIN * K], hdy[B * COUT * LOUT];
} bufs;

static const gpa_attr attrs[2] = {{"causal", GPA_ATTR_INT, 1, 0}, {"dilation", GPA_ATTR_INT, DIL, 0}};

static gpa_status fwd(gpa_queue *q, bufs *s, gpa_handle **h) {
  gpa_tensor in[2] = {s->x, s->w};
  gpa_op_call c = {"conv1d_fwd", in, 2, &s->y, 1, attrs, 2};
  return tcu_run(q, &c, h);
}
static gpa_status bwd(gpa_queue *q, bufs *s, gpa_handle **h) {
  gpa_tensor in[3] = {s->dy, s->x, s->w}, out[2] = {s->dx, s->dw};
  gpa_op_call c = {"conv1d_bwd_nobias", in, 3, out, 2, attrs, 2};
  return tcu_run(q, &c, h);
}

/* channels last: t = x [B,L,cin], w [cout,cin,K], y, dy [B,L,cout], dx [B,L,cin], dW (f32) */
static void nlc_refused(gpa_queue *q, tcu_sim *sim, const gpa_tensor *t, int back, unsigned nth, const char *kernel) {
  static const gpa_attr at[3] = {{"causal", GPA_ATTR_INT, 1, 0}, {"dilation", GPA_ATTR_INT, DIL, 0},
                                 {"layout", GPA_ATTR_INT, 1, 0}};
  gpa_tensor fin[2] = {t[0], t[1]}, bin[3] = {t[3], t[0], t[1]}, bout[2] = {t[4], t[5]}, y = t[2];
  gpa_op_call f = {"conv1d_fwd", fin, 2, &y, 1, at, 3}, b = {"conv1d_bwd_nobias", bin, 3, bout, 2, at, 3};
  gpa_handle *h = NULL;
  if (nth) sim->fault_launch(nth);
  gpa_status st = tcu_run(q, back ? &b : &f, &h);
  if (!nth) { /* no fault: it runs */
    CHECK_OK(st);
    gpa_handle_release(h);
    return;
  }
  tcu_expect_refused(q, st, h, back ? "conv1d_bwd" : "conv1d_fwd", nth, kernel);
}

static void nlc_paths(gpa_actor *a, tcu_sim *sim) {
  gpa_queue *q = gpa_actor_default_queue(a);
  const int64_t cins[2] = {16, CIN}; /* 16: in place on tensor cores; 20: the SIMT kernels */
  for (int i = 0; i < 2; i++) {
    const int64_t ci = cins[i], co = 24;
    gpa_tensor t[6] = {bf(a, B, L, ci, GPA_BF16), bf(a, co, ci, K, GPA_BF16), bf(a, B, LOUT, co, GPA_BF16),
                       bf(a, B, LOUT, co, GPA_BF16), bf(a, B, L, ci, GPA_BF16), bf(a, co, ci, K, GPA_F32)};
    for (int j = 0; j < 4; j++) CHECK_OK(tu_fill(q, &t[j], 0.5, NULL)); /* defined inputs */
    if (i == 0) {
      nlc_refused(q, sim, t, 0, 1, "gpa_conv_tc_wpack_bf16");
      nlc_refused(q, sim, t, 0, 2, "gpa_conv_tc_fwd_bf16");
      nlc_refused(q, sim, t, 1, 2, "gpa_conv_tc_dx_bf16");
      nlc_refused(q, sim, t, 1, 3, "gpa_conv_tc_dw_bf16");
    } else {
      nlc_refused(q, sim, t, 0, 1, "gpa_conv_ig_fwd_bf16");
      nlc_refused(q, sim, t, 1, 1, "gpa_conv_ig_dx_bf16");
    }
    nlc_refused(q, sim, t, 0, 0, NULL);
    nlc_refused(q, sim, t, 1, 0, NULL);
    gpa_sync_batch(q, NULL);
    for (int j = 0; j < 6; j++) gpa_buffer_release(a, t[j].buffer);
  }
  sim->fault_clear();
}

/* op fails with EDEVICE, its message naming `kernel` */
static void refused(gpa_queue *q, bufs *s, tcu_sim *sim, int back, unsigned nth, const char *kernel) {
  gpa_handle *h = NULL;
  sim->fault_launch(nth);
  gpa_status st = back ? bwd(q, s, &h) : fwd(q, s, &h);
  tcu_expect_refused(q, st, h, back ? "conv1d_bwd" : "conv1d_fwd", nth, kernel);
}

static double xv(const bufs *s, int b, int c, int p) {
  return p < 0 || p >= L ? 0.0 : tu_from_bf16(s->hx[(b * CIN + c) * L + p]);
}

/* y, dx, dW against double sums; bound: fp32 sums of bf16 products (exact),
 * plus y's and dx's rounding to bf16 */
static void check_ref(const bufs *s, const uint16_t *y, const uint16_t *dx, const float *dw) {
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int co = 0; co < COUT; co++)
      for (int t = 0; t < LOUT; t++) {
        double r = 0;
        for (int c = 0; c < CIN; c++)
          for (int k = 0; k < K; k++) r += tu_from_bf16(s->hw[(co * CIN + c) * K + k]) * xv(s, b, c, t - PADL + k * DIL);
        const double e = fabs(tu_from_bf16(y[(b * COUT + co) * LOUT + t]) - r);
        CHECK(e <= fabs(r) / 256 + 1e-5);
        worst = e > worst ? e : worst;
      }
  for (int b = 0; b < B; b++)
    for (int c = 0; c < CIN; c++)
      for (int p = 0; p < L; p++) {
        double r = 0;
        for (int co = 0; co < COUT; co++)
          for (int k = 0; k < K; k++) {
            const int t = p + PADL - k * DIL;
            if (t >= 0 && t < LOUT)
              r += tu_from_bf16(s->hw[(co * CIN + c) * K + k]) * tu_from_bf16(s->hdy[(b * COUT + co) * LOUT + t]);
          }
        CHECK(fabs(tu_from_bf16(dx[(b * CIN + c) * L + p]) - r) <= fabs(r) / 256 + 1e-5);
      }
  for (int co = 0; co < COUT; co++)
    for (int c = 0; c < CIN; c++)
      for (int k = 0; k < K; k++) {
        double r = 0;
        for (int b = 0; b < B; b++)
          for (int t = 0; t < LOUT; t++)
            r += tu_from_bf16(s->hdy[(b * COUT + co) * LOUT + t]) * xv(s, b, c, t - PADL + k * DIL);
        CHECK(fabs(dw[(co * CIN + c) * K + k] - r) <= 1e-5 * (B * LOUT) * (1 + fabs(r)));
      }
  printf("ok: y, dx, dW match the double reference (worst y error %.3g)\n", worst);
}

static void setup(gpa_actor *a, gpa_queue *q, bufs *s) {
  uint64_t r = 12345;
  for (size_t i = 0; i < sizeof s->hx / 2; i++) s->hx[i] = tu_to_bf16((float)((r = r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) * 2 - 1);
  for (size_t i = 0; i < sizeof s->hw / 2; i++) s->hw[i] = tu_to_bf16((float)((r = r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) * 2 - 1);
  for (size_t i = 0; i < sizeof s->hdy / 2; i++) s->hdy[i] = tu_to_bf16((float)((r = r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) * 2 - 1);
  s->x = bf(a, B, CIN, L, GPA_BF16);
  s->w = bf(a, COUT, CIN, K, GPA_BF16);
  s->y = bf(a, B, COUT, LOUT, GPA_BF16);
  s->dy = bf(a, B, COUT, LOUT, GPA_BF16);
  s->dx = bf(a, B, CIN, L, GPA_BF16);
  s->dw = bf(a, COUT, CIN, K, GPA_F32);
  tu_put_bytes(q, &s->x, s->hx, sizeof s->hx);
  tu_put_bytes(q, &s->w, s->hw, sizeof s->hw);
  tu_put_bytes(q, &s->dy, s->hdy, sizeof s->hdy);
}

int main(void) {
  tcu_device_or_skip();
  static bufs s;
  static uint16_t y[B * COUT * LOUT], dx[B * CIN * L], dx2[B * CIN * L];
  static float dw[COUT * CIN * K], dw2[COUT * CIN * K];
  gpa_actor *a = tcu_conv_actor(NULL);
  tcu_sim sim = tcu_sim_api(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  setup(a, q, &s);
  gpa_handle *h;

  refused(q, &s, &sim, 0, 1, "gpa_conv_tc_pack_bf16");
  refused(q, &s, &sim, 1, 4, "gpa_conv_tc_dx_bf16");
  refused(q, &s, &sim, 1, 5, "gpa_conv_tc_dw_bf16");
  CHECK_OK(fwd(q, &s, &h));
  gpa_handle_release(h);

  /* the scratch of a fresh queue is the op's own allocation */
  gpa_queue *fq;
  CHECK_OK(gpa_queue_create(a, "fresh", &fq));
  sim.fault_oom(1);
  CHECK_ST(bwd(fq, &s, &h), GPA_ENOMEM);
  CHECK(strstr(gpa_handle_error_message(h), "CUDA_ERROR_OUT_OF_MEMORY"));
  printf("ok: scratch out of memory: %s\n", gpa_handle_error_message(h));
  gpa_handle_release(h);
  sim.fault_oom(0);
  CHECK_OK(bwd(fq, &s, &h));
  gpa_handle_release(h);
  tu_get_bytes(fq, &s.dx, dx, sizeof dx);
  tu_get_bytes(fq, &s.dw, dw, sizeof dw);
  CHECK_OK(gpa_queue_destroy(fq));
  CHECK_OK(bwd(q, &s, &h));
  gpa_handle_release(h);
  tu_get_bytes(q, &s.dx, dx2, sizeof dx2);
  tu_get_bytes(q, &s.dw, dw2, sizeof dw2);
  CHECK(!memcmp(dx, dx2, sizeof dx) && !memcmp(dw, dw2, sizeof dw));
  printf("ok: two backward passes agree to the bit\n");
  tu_get_bytes(q, &s.y, y, sizeof y);
  check_ref(&s, y, dx, dw);
  sim.fault_clear();
  nlc_paths(a, &sim);
  CHECK_OK(gpa_actor_destroy(a));

  /* GPA_CONV_TC=0: the SIMT implicit GEMM takes bf16 */
  a = tcu_conv_actor("0");
  sim = tcu_sim_api(a);
  q = gpa_actor_default_queue(a);
  setup(a, q, &s);
  refused(q, &s, &sim, 0, 1, "gpa_conv_ig_fwd_bf16");
  CHECK_OK(fwd(q, &s, &h));
  gpa_handle_release(h);
  CHECK_OK(bwd(q, &s, &h));
  gpa_handle_release(h);
  tu_get_bytes(q, &s.y, y, sizeof y);
  tu_get_bytes(q, &s.dx, dx, sizeof dx);
  tu_get_bytes(q, &s.dw, dw, sizeof dw);
  check_ref(&s, y, dx, dw);
  sim.fault_clear();
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
