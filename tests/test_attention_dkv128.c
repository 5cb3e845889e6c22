/* attention_bwd in bf16 and fp16 with GPA_FA2_DKV128=1: on CUDA (and sim)
 * dK and dV from the 128-key, 8-warp kernels (kernels/cuda/
 * attention_fa2_dkv128.cu; dQ from the deterministic dQ pass as always),
 * checked to run where they should (D 64, 96, 128, deterministic = 1) and
 * not elsewhere (D 80, deterministic = 0, an actor without the option),
 * against the double reference at the tolerance of
 * tests/test_attention_lowp.c (util/attn_ref.c: P and dS rounded to the
 * storage type), with the same bits on a second run (fp32 gradients, and
 * 16-bit ones: dk, dv the fp32 run's rounded once). MHA and GQA, causal and
 * not, S < Sk and S > Sk, key lengths ending inside a 128-key tile (and
 * 0), Sk = 0, several key tiles and query steps (128 keys, 64 queries). On
 * the host the switch changes nothing: the same checks hold. cuDNN kept
 * out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention/attention.h"
#include "util/attn_fixture.h"

static unsigned long long k128_calls(void) {
#ifdef GPA_HAVE_CUDA_BACKEND
  return __atomic_load_n(&gpa__attn_fa2k_bwd_calls, __ATOMIC_RELAXED);
#else
  return 0;
#endif
}

/* gpa_afix_bwd; returns whether the 128-key kernels took the call. */
static int bwd(gpa_nt *t, const char *what, const gpa_tensor *in, uint32_t nin, const int64_t qs[4],
               const int64_t ks[4], int causal, int det, int dtype16, float *g, uint16_t *u16) {
  const unsigned long long c0 = k128_calls();
  gpa_afix_bwd(t, what, in, nin, qs, ks, causal, det, dtype16, g, u16);
  return k128_calls() > c0;
}

/* want: the 128-key kernels should take the deterministic calls
 * (CUDA/sim); full: also the 16-bit gradients and deterministic = 0. */
static void k128_case(gpa_nt *t, const acase *c, int dtype, uint64_t seed, int want, int full) {
  afix x;
  gpa_afix_init(&x, c, dtype, "attention_bwd dkv128", &seed);
  gpa_afix_ref(&x, strcmp(gpa_actor_backend(t->a), "cpu"));
  gpa_afix_upload(t, &x);
  const int64_t nq = x.nq, nk = x.nk, ng = nq + 2 * nk, *qs = x.qs, *ks = x.ks;
  const char *what = x.what;
  char w[1024];
  gpa_tensor in[7] = {x.dout, x.q, x.k, x.v, gpa_nt_tensor(t, GPA_F32, 4, qs, x.ro),
                      gpa_nt_tensor(t, GPA_F32, 3, x.ls, x.rl), x.lt};
  const uint32_t nin = c->lens ? 7 : 6;
  float *g1 = malloc(sizeof(float) * (size_t)(ng + 1)), *g2 = malloc(sizeof(float) * (size_t)(ng + 1));
  uint16_t *h1 = malloc(2 * (size_t)(ng + 1)), *h2 = malloc(2 * (size_t)(ng + 1));
  int ran[5] = {0}, expect[5] = {want, want, want, want, 0};
  ran[0] = bwd(t, what, in, nin, qs, ks, c->causal, 1, 0, g1, NULL);
  ran[1] = bwd(t, what, in, nin, qs, ks, c->causal, 1, 0, g2, NULL);
  gpa_afix_check_grads(t, &x, NULL, g1, g1 + nq, g1 + nq + nk, 1e-5);
  snprintf(w, sizeof w, "%s: a second run's gradients", what);
  gpa_nt_same_bits(t, w, g2, g1, ng);
  int runs = 2;
  if (full) {
    ran[2] = bwd(t, what, in, nin, qs, ks, c->causal, 1, dtype, NULL, h1);
    ran[3] = bwd(t, what, in, nin, qs, ks, c->causal, 1, dtype, NULL, h2);
    ran[4] = bwd(t, what, in, nin, qs, ks, c->causal, 0, 0, g2, NULL); /* the non-deterministic kernels' */
    runs = 5;
    snprintf(w, sizeof w, "%s: %s gradients: a second run's", what, gpa_dtype_name(dtype));
    if (memcmp(h1, h2, 2 * (size_t)ng)) gpa_nt_fail(t, w);
    for (int64_t j = nq; j < ng; j++) /* dk, dv: the fp32 sums rounded once */
      if (h1[j] != tu_to16(dtype, g1[j])) {
        snprintf(w, sizeof w, "%s: %s gradients: element %lld of %s is %g, the f32 run's %g", what,
                 gpa_dtype_name(dtype), (long long)(j < nq + nk ? j - nq : j - nq - nk), j < nq + nk ? "dk" : "dv",
                 (double)tu_from16(dtype, h1[j]), (double)g1[j]);
        gpa_nt_fail(t, w);
        break;
      }
  }
  const char *be = gpa_actor_backend(t->a);
  if (!strcmp(be, "cuda") || !strcmp(be, "sim"))
    for (int i = 0; i < runs; i++)
      if (ran[i] != expect[i]) {
        snprintf(w, sizeof w, "%s: run %d: the 128-key dK/dV kernels %s", what, i, ran[i] ? "ran" : "did not run");
        gpa_nt_fail(t, w);
      }
  free(g1), free(g2), free(h1), free(h2);
  gpa_afix_free(&x);
}

int main(void) {
  setenv("GPA_CUDNN", "/nonexistent/libcudnn.so.9", 1); /* our own kernels, not cuDNN's */
  unsetenv("GPA_FA2_EXACT");
  setenv("GPA_FA2_DKV128", "1", 1); /* read at actor creation */
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  unsetenv("GPA_FA2_DKV128");
  if (rc) return rc;
  /* B S Sk H Hkv D causal lengths. B = 3 with lengths: batch 1's is 0,
   * batch 2's ends inside a key tile. */
  const acase cases[] = {
      {3, 70, 300, 4, 2, 64, 1, 1, 0},  /* GQA 2, causal, S < Sk, 3 key tiles, 2 query steps */
      {1, 150, 140, 2, 1, 128, 0, 0, 0}, /* GQA 2, S > Sk, 3 query steps, a partial second tile */
      {1, 67, 130, 2, 2, 96, 1, 0, 0},  /* MHA, causal, S < Sk */
      {2, 33, 200, 2, 1, 128, 0, 1, 0}, /* lengths (batch 1: 0) */
      {1, 140, 41, 8, 1, 64, 1, 0, 0},  /* GQA 8, S > Sk, causal: some rows see no key */
      {1, 90, 170, 2, 2, 96, 0, 0, 0},  /* MHA, 2 key tiles, 2 query steps */
      {2, 3, 0, 2, 2, 64, 0, 1, 0},     /* Sk = 0: dq is zero */
  };
  const int quick_run[] = {1, 0, 0, 1, 0, 0, 1}; /* sanitizer builds */
  uint64_t seed = 12823;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, seed++)
    if (!t.quick || quick_run[i]) k128_case(&t, &cases[i], i & 1 ? GPA_F16 : GPA_BF16, seed, 1, i < 2);
  /* D 80 (the class-96 kernels): not theirs */
  const acase d80 = {1, 20, 40, 2, 1, 80, 1, 0, 0};
  k128_case(&t, &d80, GPA_BF16, seed++, 0, 0);
  rc = gpa_nt_close(&t);
  /* without the option: the 64-key kernels */
  gpa_nt t0;
  int rc2 = gpa_nt_open(&t0);
  if (rc2) return rc ? rc : rc2 == 77 ? 0 : rc2;
  k128_case(&t0, &cases[2], GPA_BF16, seed++, 0, 0);
  rc2 = gpa_nt_close(&t0);
  return rc ? rc : rc2;
}
