/* fp32 attention on CUDA's 3xTF32 tensor-core kernels (kernels/cuda/
 * attention_f32tc.cu, attention_f32tc_bwd.cu) on the simulated device with
 * its fault injection, at the main job's head dim (D 32, causal, GQA 2).
 * Accuracy is sim_attention_f32tc's and attention's; this test is about the
 * path and its failures:
 *   - selection: a refused launch names the kernel it refused, so the
 *     forward's first launch is gpa_tc32_fwd_d64 (the forward's class 64
 *     takes D 32) and the backward's second and third (after delta) are
 *     gpa_tc32_dkv_d32 and gpa_tc32_dq_d32;
 *   - a refused launch fails that op with GPA_EDEVICE and the driver's
 *     message, and the next attention on the queue is right;
 *   - the backward's scratch (delta) out of memory on a fresh queue:
 *     GPA_ENOMEM with the driver's message; memory back, the op runs;
 *   - deterministic: the gradients of every successful backward, on either
 *     queue, agree to the bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef GPA_HAVE_CUDA_BACKEND
int main(void) {
  fprintf(stderr, "skipped: built without the CUDA backend\n");
  return 77;
}
#else
#include "ops/attention/attention.h"
#include "test_cuda_util.h"

enum { B = 2, S = 37, SK = 45, H = 2, HKV = 1, D = 32 };
#define NQ (B * S * H * D)
#define NK (B * SK * HKV * D)
#define NL (B * H * S)

typedef struct bufs {
  gpa_tensor q, k, v, o, lse, dout, dq, dk, dv;
} bufs;

static gpa_tensor f32(gpa_actor *a, int rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  gpa_tensor t = {0};
  const int64_t dims[4] = {d0, d1, d2, d3};
  uint64_t n = 1;
  for (int i = 0; i < rank; i++) n *= (uint64_t)(t.shape[i] = dims[i]);
  CHECK_OK(gpa_buffer_acquire(a, NULL, n * 4, &t.buffer));
  t.dtype = GPA_F32;
  t.rank = rank;
  return t;
}

static const gpa_attr causal = {"causal", GPA_ATTR_INT, 1, 0};

static gpa_status fwd(gpa_queue *q, bufs *s, gpa_handle **h) {
  gpa_tensor in[3] = {s->q, s->k, s->v}, out[2] = {s->o, s->lse};
  gpa_op_call c = {"attention_fwd", in, 3, out, 2, &causal, 1};
  return tcu_run(q, &c, h);
}
static gpa_status bwd(gpa_queue *q, bufs *s, gpa_handle **h) {
  gpa_tensor in[6] = {s->dout, s->q, s->k, s->v, s->o, s->lse}, out[3] = {s->dq, s->dk, s->dv};
  gpa_op_call c = {"attention_bwd", in, 6, out, 3, &causal, 1};
  return tcu_run(q, &c, h);
}

/* launch nth of the op refused: EDEVICE, its message naming `kernel` */
static void refused(gpa_queue *q, bufs *s, tcu_sim *sim, int back, unsigned nth, const char *kernel) {
  gpa_handle *h = NULL;
  sim->fault_launch(nth);
  gpa_status st = back ? bwd(q, s, &h) : fwd(q, s, &h);
  tcu_expect_refused(q, st, h, back ? "attention_bwd" : "attention_fwd", nth, kernel);
}

/* dq, dk, dv of a successful backward on q, into g */
static void grads(gpa_queue *q, bufs *s, float *g) {
  gpa_handle *h;
  CHECK_OK(bwd(q, s, &h));
  gpa_handle_release(h);
  tu_get(q, &s->dq, g, NQ);
  tu_get(q, &s->dk, g + NQ, NK);
  tu_get(q, &s->dv, g + NQ + NK, NK);
}

int main(void) {
  tcu_device_or_skip();
  static float hq[NQ], hk[NK], hv[NK], hdo[NQ], g0[NQ + 2 * NK], g1[NQ + 2 * NK];
  uint64_t r = 2323;
  float *fill[4] = {hq, hk, hv, hdo};
  const int64_t nfill[4] = {NQ, NK, NK, NQ};
  for (int i = 0; i < 4; i++)
    for (int64_t j = 0; j < nfill[i]; j++)
      fill[i][j] = (float)((r = r * 6364136223846793005ULL + 1) >> 40) / (1 << 24) * 3 - 1.5f;
  gpa_actor *a = tu_actor(NULL);
  tcu_sim sim = tcu_sim_api(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  bufs s = {f32(a, 4, B, S, H, D),  f32(a, 4, B, SK, HKV, D), f32(a, 4, B, SK, HKV, D),
            f32(a, 4, B, S, H, D),  f32(a, 3, B, H, S, 0),    f32(a, 4, B, S, H, D),
            f32(a, 4, B, S, H, D),  f32(a, 4, B, SK, HKV, D), f32(a, 4, B, SK, HKV, D)};
  tu_put(q, &s.q, hq, NQ);
  tu_put(q, &s.k, hk, NK);
  tu_put(q, &s.v, hv, NK);
  tu_put(q, &s.dout, hdo, NQ);
  gpa_handle *h;

  refused(q, &s, &sim, 0, 1, "gpa_tc32_fwd_d64");
  const unsigned long long n0 = __atomic_load_n(&gpa__attn_tc32_bwd_calls, __ATOMIC_RELAXED);
  CHECK_OK(fwd(q, &s, &h));
  gpa_handle_release(h);
  refused(q, &s, &sim, 1, 2, "gpa_tc32_dkv_d32");
  refused(q, &s, &sim, 1, 3, "gpa_tc32_dq_d32");
  grads(q, &s, g0);
  CHECK(__atomic_load_n(&gpa__attn_tc32_bwd_calls, __ATOMIC_RELAXED) > n0);
  int nonzero = 0;
  for (int64_t i = 0; i < NQ + 2 * NK; i++) {
    CHECK(isfinite(g0[i]));
    nonzero += g0[i] != 0.0f;
  }
  CHECK(nonzero > (NQ + 2 * NK) / 2);

  /* the scratch of a fresh queue is the op's own allocation */
  gpa_queue *fq;
  CHECK_OK(gpa_queue_create(a, "fresh", &fq));
  sim.fault_oom(1);
  CHECK_ST(bwd(fq, &s, &h), GPA_ENOMEM);
  CHECK(strstr(gpa_handle_error_message(h), "CUDA_ERROR_OUT_OF_MEMORY"));
  printf("ok: scratch out of memory: %s\n", gpa_handle_error_message(h));
  gpa_handle_release(h);
  sim.fault_oom(0);
  grads(fq, &s, g1);
  CHECK(!memcmp(g0, g1, sizeof g0));
  CHECK_OK(gpa_queue_destroy(fq));
  grads(q, &s, g1);
  CHECK(!memcmp(g0, g1, sizeof g0));
  printf("ok: the backward after each failure, on either queue, agrees to the bit\n");
  sim.fault_clear();
  const gpa_tensor all[9] = {s.q, s.k, s.v, s.o, s.lse, s.dout, s.dq, s.dk, s.dv};
  for (int i = 0; i < 9; i++) CHECK_OK(gpa_buffer_release(a, all[i].buffer));
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
#endif
