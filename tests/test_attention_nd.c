/* attention_bwd with deterministic = 0 in bf16 and fp16: on CUDA (and sim)
 * the FlashAttention-2 kernels' non-deterministic backward (head dims up to
 * 128: the dK/dV kernel adds dQ's share of each key tile with fp32 atomics,
 * kernels/cuda/attention_fa2_bwd.cu, fa2_dq_red), checked to run where it
 * should (and class 256 and the default deterministic = 1 not to), against
 * the double reference at the tolerance of tests/test_attention_lowp.c
 * (util/attn_ref.c: P and dS rounded to the storage type; the atomics
 * only reorder fp32 sums, which the fp32 term covers). dK and dV come from
 * the same code as the deterministic backward's: bit-equal to its. With
 * bf16/fp16 gradients: dk, dv the deterministic f32 run's rounded once, dq
 * within one unit of the storage type of the f32 run's (the fp32 sums'
 * order may differ between runs). MHA and GQA, causal and not, S != Sk,
 * key lengths ending inside a key tile, several key tiles and query steps
 * (64 keys, 32 queries), Sk = 0; the exact-head-dim kernels (default) and
 * the class kernels (GPA_FA2_EXACT=0, and D 80). On the host the op is
 * deterministic either way: the same checks hold. On sim, fault injection
 * (faults below). cuDNN kept out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention/attention.h"
#include "util/attn_fixture.h"
#ifdef GPA_HAVE_CUDA_BACKEND
#include "test_cuda_util.h"
#endif

static unsigned long long nd_calls(void) {
#ifdef GPA_HAVE_CUDA_BACKEND
  return __atomic_load_n(&gpa__attn_fa2nd_bwd_calls, __ATOMIC_RELAXED);
#else
  return 0;
#endif
}

/* want_nd: the non-deterministic kernels should take the call (CUDA/sim). */
static void nd_case(gpa_nt *t, const acase *c, int dtype, uint64_t seed, int want_nd) {
  afix x;
  gpa_afix_init(&x, c, dtype, "attention_bwd nd", &seed);
  gpa_afix_ref(&x, strcmp(gpa_actor_backend(t->a), "cpu"));
  gpa_afix_upload(t, &x);
  const int64_t nq = x.nq, nk = x.nk, ng = nq + 2 * nk, *qs = x.qs, *ks = x.ks;
  const double *dq = x.dq;
  const char *what = x.what;
  char w[1024];
  gpa_tensor in[7] = {x.dout, x.q, x.k, x.v, gpa_nt_tensor(t, GPA_F32, 4, qs, x.ro),
                      gpa_nt_tensor(t, GPA_F32, 3, x.ls, x.rl), x.lt};
  const uint32_t nin = c->lens ? 7 : 6;
  float *gd = malloc(sizeof(float) * (size_t)(ng + 1)), *gn = malloc(sizeof(float) * (size_t)(ng + 1));
  uint16_t *g16 = malloc(2 * (size_t)(ng + 1));

  const unsigned long long c0 = nd_calls();
  gpa_afix_bwd(t, what, in, nin, qs, ks, c->causal, 1, 0, gd, NULL);
  const unsigned long long c1 = nd_calls();
  gpa_afix_bwd(t, what, in, nin, qs, ks, c->causal, 0, 0, gn, NULL);
  const unsigned long long c2 = nd_calls();
  gpa_afix_bwd(t, what, in, nin, qs, ks, c->causal, 0, dtype, NULL, g16);
  const unsigned long long c3 = nd_calls();
  const char *be = gpa_actor_backend(t->a);
  if (!strcmp(be, "cuda") || !strcmp(be, "sim")) {
    const int got[3] = {c1 > c0, c2 > c1, c3 > c2}, want[3] = {0, want_nd, want_nd};
    for (int i = 0; i < 3; i++)
      if (got[i] != want[i]) {
        snprintf(w, sizeof w, "%s: run %d (%s): the non-deterministic kernels %s", what, i,
                 i ? "deterministic=0" : "default", got[i] ? "ran" : "did not run");
        gpa_nt_fail(t, w);
      }
  }
  gpa_afix_check_grads(t, &x, NULL, gn, gn + nq, gn + nq + nk, 1e-5);
  snprintf(w, sizeof w, "%s: dk, dv equal the deterministic backward's", what);
  gpa_nt_same_bits(t, w, gn + nq, gd + nq, 2 * nk);
  /* 16-bit gradients: dk, dv rounded once; dq within one unit of T */
  const double ulp = dtype == GPA_F16 ? 0x1p-10 : 0x1p-7, tiny = dtype == GPA_F16 ? 0x1p-24 : 0x1p-133;
  double dqmax = 0;
  for (int64_t j = 0; j < nq; j++) dqmax = fmax(dqmax, fabs(dq[j]));
  for (int64_t j = 0; j < ng; j++) {
    const float want = j < nq ? gn[j] : gd[j], got = tu_from16(dtype, g16[j]);
    /* dq: the two runs' fp32 sums differ by their order (cancellation:
     * 2^-14 max|dq|, far under one unit of T at the largest) */
    const int ok = j < nq ? fabs((double)got - want) <= ulp * fabs((double)want) + tiny + 0x1p-14 * dqmax &&
                                got == got
                          : g16[j] == tu_to16(dtype, want);
    if (!ok) {
      snprintf(w, sizeof w, "%s: %s gradients: element %lld of %s is %g, the f32 run's %g", what,
               gpa_dtype_name(dtype), (long long)(j < nq ? j : j < nq + nk ? j - nq : j - nq - nk),
               j < nq ? "dq" : j < nq + nk ? "dk" : "dv", (double)got, (double)want);
      gpa_nt_fail(t, w);
      break;
    }
  }
  free(gd); free(gn); free(g16);
  gpa_afix_free(&x);
}

#ifdef GPA_HAVE_CUDA_BACKEND
/* One bf16 backward (16-bit gradients) on queue q; deterministic det. */
static gpa_status bwd_on(gpa_queue *q, const gpa_tensor *in, const gpa_tensor *out, int det, gpa_handle **h) {
  const gpa_attr at[2] = {{"causal", GPA_ATTR_INT, 0, 0}, {"deterministic", GPA_ATTR_INT, det, 0}};
  const gpa_op_call c = {"attention_bwd", in, 6, out, 3, at, 2};
  return tcu_run(q, &c, h);
}

/* The simulator's fault injection on the non-deterministic path (bf16, D
 * 64, 16-bit gradients; launches: delta, then gpa_fa2nx_dkv_bf16_d64 after
 * the accumulator's memset, then gpa_fa2_dq_out_bf16):
 *   - its second and third launches refused: GPA_EDEVICE naming those
 *     kernels (so they are the ones that run), then a call that succeeds;
 *   - the scratch with the fp32 dQ accumulator out of memory on a fresh
 *     queue: GPA_ENOMEM with the driver's message (as the deterministic
 *     backward's delta scratch); memory back, the call runs. */
static void faults(gpa_nt *t) {
  tcu_sim sim = tcu_sim_api(t->a);
  enum { B = 1, S = 40, SK = 70, H = 2, HK = 1, D = 64 };
  const int64_t qs[4] = {B, S, H, D}, ks[4] = {B, SK, HK, D}, ls[3] = {B, H, S};
  const int64_t nq = B * S * H * D, nk = B * SK * HK * D, nl = B * H * S, ng = nq + 2 * nk;
  uint64_t seed = 99;
  float *f = malloc(sizeof(float) * (size_t)(2 * nq + nl)), *fk = malloc(sizeof(float) * (size_t)(2 * nk));
  uint16_t *u = malloc(2 * (size_t)(2 * nq + 2 * nk));
  gpa_nt_fill(f, 2 * nq + nl, -1.0, 1.0, &seed);
  gpa_nt_fill(fk, 2 * nk, -1.0, 1.0, &seed);
  for (int64_t i = 0; i < 2 * nq; i++) u[i] = tu_to16(GPA_BF16, f[i]);
  for (int64_t i = 0; i < 2 * nk; i++) u[2 * nq + i] = tu_to16(GPA_BF16, fk[i]);
  for (int64_t i = 0; i < nl; i++) f[2 * nq + i] = 2.0f + f[2 * nq + i]; /* lse: any finite values */
  const gpa_tensor in[6] = {gpa_nt_tensor(t, GPA_BF16, 4, qs, u),
                            gpa_nt_tensor(t, GPA_BF16, 4, qs, u + nq),
                            gpa_nt_tensor(t, GPA_BF16, 4, ks, u + 2 * nq),
                            gpa_nt_tensor(t, GPA_BF16, 4, ks, u + 2 * nq + nk),
                            gpa_nt_tensor(t, GPA_F32, 4, qs, f),
                            gpa_nt_tensor(t, GPA_F32, 3, ls, f + 2 * nq)};
  const gpa_tensor out[3] = {gpa_nt_tensor(t, GPA_BF16, 4, qs, NULL), gpa_nt_tensor(t, GPA_BF16, 4, ks, NULL),
                             gpa_nt_tensor(t, GPA_BF16, 4, ks, NULL)};
  uint16_t *gd = malloc(2 * (size_t)ng), *gn = malloc(2 * (size_t)ng);
  gpa_handle *h = NULL;
  CHECK_OK(bwd_on(t->q, in, out, 1, &h));
  gpa_handle_release(h);
  gpa_afix_read_grads(t, out, gd);

  gpa_status st = (sim.fault_launch(2), bwd_on(t->q, in, out, 0, &h));
  tcu_expect_refused(t->q, st, h, "attention_bwd (deterministic=0)", 2, "gpa_fa2nx_dkv_bf16_d64");
  st = (sim.fault_launch(3), bwd_on(t->q, in, out, 0, &h));
  tcu_expect_refused(t->q, st, h, "attention_bwd (deterministic=0)", 3, "gpa_fa2_dq_out_bf16");
  unsigned long long n0 = nd_calls();
  CHECK_OK(bwd_on(t->q, in, out, 0, &h));
  gpa_handle_release(h);
  CHECK(nd_calls() > n0);
  gpa_afix_read_grads(t, out, gn);
  CHECK(!memcmp(gn + nq, gd + nq, 2 * (size_t)(2 * nk))); /* dk, dv: the same code */
  double mx = 0;
  for (int64_t i = 0; i < nq; i++) mx = fmax(mx, fabs(tu_from16(GPA_BF16, gd[i])));
  for (int64_t i = 0; i < nq; i++) { /* dq: the fp32 sums in another order (cancellation: mx) */
    const double a = tu_from16(GPA_BF16, gn[i]), b = tu_from16(GPA_BF16, gd[i]);
    CHECK(fabs(a - b) <= 0x1p-7 * fabs(b) + 0x1p-12 * mx);
  }
  printf("ok: the non-deterministic backward's refused launches, then a right one\n");

  gpa_queue *fq; /* a fresh queue's scratch is the op's own allocation */
  CHECK_OK(gpa_queue_create(t->a, "fresh", &fq));
  sim.fault_oom(1);
  CHECK_ST(bwd_on(fq, in, out, 0, &h), GPA_ENOMEM);
  CHECK(strstr(gpa_handle_error_message(h), "CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK(strstr(gpa_handle_error_message(h), "scratch"));
  printf("ok: %s\n", gpa_handle_error_message(h));
  gpa_handle_release(h);
  sim.fault_oom(0);
  sim.fault_clear();
  CHECK_OK(bwd_on(fq, in, out, 0, &h));
  gpa_handle_release(h);
  gpa_afix_read_grads(t, out, gn);
  CHECK(!memcmp(gn + nq, gd + nq, 2 * (size_t)(2 * nk)));
  CHECK_OK(gpa_queue_destroy(fq));
  printf("ok: the dQ accumulator's scratch out of memory: GPA_ENOMEM; memory back, the op runs\n");
  free(f); free(fk); free(u); free(gd); free(gn);
}
#endif

int main(void) {
  setenv("GPA_CUDNN", "/nonexistent/libcudnn.so.9", 1); /* our own kernels, not cuDNN's */
  unsetenv("GPA_FA2_EXACT");
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  /* B S Sk H Hkv D causal lengths. B = 3 with lengths: batch 1's is 0,
   * batch 2's ends inside a key tile. */
  const acase cases[] = {
      {3, 70, 150, 4, 2, 64, 1, 1, 0},  /* GQA 2, 3 key tiles, 3 query steps */
      {1, 45, 100, 2, 1, 128, 0, 0, 0}, /* GQA 2, S < Sk */
      {1, 67, 130, 2, 2, 96, 1, 0, 0},  /* MHA, causal, S < Sk */
      {2, 33, 70, 2, 1, 128, 0, 1, 0},  /* lengths (batch 1: 0) */
      {1, 40, 90, 2, 2, 80, 1, 0, 0},   /* the class-96 kernels at D 80 */
      {1, 90, 41, 8, 1, 64, 1, 0, 0},   /* GQA 8, S > Sk (causal: some rows see no key) */
      {2, 3, 0, 2, 2, 64, 0, 1, 0},     /* Sk = 0: dq is zero */
  };
  const int quick_run[] = {1, 0, 0, 1, 0, 0, 1}; /* sanitizer builds */
  uint64_t seed = 2323;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, seed++)
    if (!t.quick || quick_run[i]) nd_case(&t, &cases[i], i & 1 ? GPA_F16 : GPA_BF16, seed, 1);
  /* class 256: the deterministic kernels take it */
  const acase d256 = {1, 3, 5, 1, 1, 256, 1, 0, 0};
  nd_case(&t, &d256, GPA_BF16, seed++, 0);
#ifdef GPA_HAVE_CUDA_BACKEND
  if (!strcmp(gpa_actor_backend(t.a), "sim")) faults(&t);
#endif
  rc = gpa_nt_close(&t);
  /* the class kernels at the exact kernels' head dims (GPA_FA2_EXACT=0, read
   * at actor creation) */
  const char *be = NULL;
  gpa_nt tc;
  setenv("GPA_FA2_EXACT", "0", 1);
  int rc2 = gpa_nt_open(&tc);
  unsetenv("GPA_FA2_EXACT");
  if (rc2) return rc ? rc : rc2 == 77 ? 0 : rc2;
  be = gpa_actor_backend(tc.a);
  if (!strcmp(be, "cuda") || !strcmp(be, "sim")) {
    nd_case(&tc, &cases[0], GPA_F16, seed++, 1);
    if (!tc.quick) nd_case(&tc, &cases[3], GPA_BF16, seed++, 1);
  }
  rc2 = gpa_nt_close(&tc);
  return rc ? rc : rc2;
}
