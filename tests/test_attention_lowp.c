/* attention_fwd / attention_bwd with bf16 and fp16 q, k, v (and dout)
 * against the double reference computed from the same rounded values:
 * GQA ratios 1, 2 and 8, causal and not, odd S and Sk, S > Sk, key lengths
 * (including 0), S = 0, Sk = 0, head dims 16, 32, 48, 64, 96, 128, 160, 256
 * (the FlashAttention-2 kernels on CUDA, kernels/cuda/attention_fa2*.cu:
 * 64, 96 and 128 their exact-head-dim kernels by default and the class
 * kernels with GPA_FA2_EXACT=0, each checked to run where it should; 160
 * and 256 their wide class, checked to run there and not on the host
 * fallback) and 40 (the host fallback there); bitwise determinism of both
 * ops; on the host, equality with the f32 ops run on the widened values;
 * o, dq, dk, dv in the storage type (the f32 results rounded once); dtype
 * errors. cuDNN is kept out (GPA_CUDNN points nowhere): these are the
 * checks of our own kernels.
 *
 * Tolerance. On the host the inputs are widened exactly and the f32 kernels
 * run: bit-equal to the f32 ops. On CUDA the products of two bf16/fp16
 * values are exact in fp32 and summed in fp32 (the f32 tolerance of
 * tests/test_attention.c covers that); the kernels then round P (forward:
 * normalized, before P V; backward: before P^T dO) and dS (before dS K and
 * dS^T Q) to the storage type, each term off by at most u |t| + eta (bf16:
 * u = 2^-8; fp16: u = 2^-11, eta = 2^-25 for subnormal results). The allowed
 * error adds twice that bound, summed over the terms of each output
 * (util/attn_ref.c). The backward is fed the reference's o and lse, so its
 * check does not inherit the forward's error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention/attention.h"
#include "util/attn_fixture.h"

/* Outputs in the storage type (o, dq, dk, dv as bf16/fp16): run the op
 * again into 16-bit tensors filled with NaN (an element left unwritten
 * stays NaN) and compare with the f32 run's results rounded once: the
 * kernels (and the host) round the same fp32 values they write as f32. */
static void lowp_outputs(gpa_nt *t, const char *what, const char *op, int dtype, const gpa_tensor *in, uint32_t nin,
                         const gpa_tensor *outs32, uint32_t nout, const float *const *want, const gpa_attr *at) {
  gpa_tensor out[3];
  uint16_t *got[3] = {NULL, NULL, NULL};
  for (uint32_t i = 0; i < nout; i++) {
    out[i] = outs32[i];
    if (i == 1 && nout == 2) continue; /* the forward's lse stays f32 */
    const int64_t n = gpa_tensor_numel(&outs32[i]);
    got[i] = malloc(2 * (size_t)(n + 1));
    for (int64_t j = 0; j < n; j++) got[i][j] = dtype == GPA_F16 ? 0x7e00u : 0x7fc0u;
    out[i] = gpa_nt_tensor(t, dtype, outs32[i].rank, outs32[i].shape, got[i]);
  }
  char w2[1024];
  gpa_status st = gpa_nt_run(t, op, in, nin, out, nout, at, 1);
  if (st != GPA_OK) {
    snprintf(w2, sizeof w2, "%s: %s with %s outputs: %s: %s", what, op, gpa_dtype_name(dtype), gpa_status_name(st),
             gpa_nt_msg);
    gpa_nt_fail(t, w2);
  }
  for (uint32_t i = 0; i < nout; i++) {
    if (!got[i]) continue;
    const int64_t n = gpa_tensor_numel(&outs32[i]);
    gpa_nt_read(t, &out[i], got[i]);
    for (int64_t j = 0; j < n; j++) {
      const uint16_t r = tu_to16(dtype, want[i][j]);
      if (got[i][j] != r) {
        snprintf(w2, sizeof w2, "%s: %s output %u in %s: element %lld is 0x%04x, the f32 result rounds to 0x%04x",
                 what, op, i, gpa_dtype_name(dtype), (long long)j, got[i][j], r);
        gpa_nt_fail(t, w2);
        break;
      }
    }
    free(got[i]);
  }
}

static double *dalloc(int64_t n) { return malloc(sizeof(double) * (size_t)(n + 1)); }

/* outs16: also run with 16-bit outputs (lowp_outputs) */
static void lowp_case(gpa_nt *t, const acase *c, int dtype, uint64_t seed, int outs16) {
  const int on_host = !strcmp(gpa_actor_backend(t->a), "cpu");
  afix x;
  gpa_afix_init(&x, c, dtype, "attention", &seed);
  gpa_afix_ref(&x, !on_host);
  gpa_afix_upload(t, &x);
  const int64_t S = c->S, Sk = c->Sk, D = c->D, nq = x.nq, nk = x.nk, nl = x.nl, ng = nq + 2 * nk;
  const int64_t *qs = x.qs, *ks = x.ks, *ls = x.ls;
  const char *what = x.what;
  char w2[1024];
  gpa_attr at = {"causal", GPA_ATTR_INT, c->causal, 0};
  gpa_tensor tq = x.q, tk = x.k, tv = x.v, tdo = x.dout, tl = x.lt;
  uint32_t nfi = c->lens ? 4 : 3, nbi = c->lens ? 7 : 6;

  /* forward, twice */
  float *go[2] = {malloc(sizeof(float) * (size_t)(nq + 1)), malloc(sizeof(float) * (size_t)(nq + 1))};
  float *gl[2] = {malloc(sizeof(float) * (size_t)(nl + 1)), malloc(sizeof(float) * (size_t)(nl + 1))};
  const int reps = t->quick ? 1 : 2; /* sanitizer builds: memory errors, not determinism */
  for (int rep = 0; rep < reps; rep++) {
    gpa_tensor in[4] = {tq, tk, tv, tl}, out[2] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 3, ls)};
    gpa_status st = gpa_nt_run(t, "attention_fwd", in, nfi, out, 2, &at, 1);
    if (st != GPA_OK) {
      snprintf(w2, sizeof w2, "%s: attention_fwd %s: %s", what, gpa_status_name(st), gpa_nt_msg);
      gpa_nt_fail(t, w2);
    }
    gpa_nt_read(t, &out[0], go[rep]);
    gpa_nt_read(t, &out[1], gl[rep]);
  }
  if (reps == 2) {
    snprintf(w2, sizeof w2, "%s: forward determinism (o)", what);
    gpa_nt_same_bits(t, w2, go[0], go[1], nq);
    snprintf(w2, sizeof w2, "%s: forward determinism (lse)", what);
    gpa_nt_same_bits(t, w2, gl[0], gl[1], nl);
  }
  gpa_afix_check_fwd(t, &x, go[0], gl[0], 1e-5);
  if (outs16) {
    gpa_tensor in[4] = {tq, tk, tv, tl}, out[2] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 3, ls)};
    const float *want[2] = {go[0], NULL};
    lowp_outputs(t, what, "attention_fwd", dtype, in, nfi, out, 2, want, &at);
  }

  /* backward from the reference's o and lse, twice */
  gpa_tensor to = gpa_nt_tensor(t, GPA_F32, 4, qs, x.ro), tlse = gpa_nt_tensor(t, GPA_F32, 3, ls, x.rl);
  float *g[2] = {malloc(sizeof(float) * (size_t)(ng + 1)), malloc(sizeof(float) * (size_t)(ng + 1))};
  for (int rep = 0; rep < reps; rep++) {
    gpa_tensor in[7] = {tdo, tq, tk, tv, to, tlse, tl};
    gpa_tensor out[3] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
    gpa_status st = gpa_nt_run(t, "attention_bwd", in, nbi, out, 3, &at, 1);
    if (st != GPA_OK) {
      snprintf(w2, sizeof w2, "%s: attention_bwd %s: %s", what, gpa_status_name(st), gpa_nt_msg);
      gpa_nt_fail(t, w2);
    }
    gpa_afix_read_grads(t, out, g[rep]);
  }
  if (reps == 2) {
    snprintf(w2, sizeof w2, "%s: backward determinism", what);
    gpa_nt_same_bits(t, w2, g[0], g[1], ng);
  }
  if (outs16) {
    gpa_tensor in[7] = {tdo, tq, tk, tv, to, tlse, tl};
    gpa_tensor out[3] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
    const float *want[3] = {g[0], g[0] + nq, g[0] + nq + nk};
    lowp_outputs(t, what, "attention_bwd", dtype, in, nbi, out, 3, want, &at);
  }
  gpa_afix_check_grads(t, &x, NULL, g[0], g[0] + nq, g[0] + nq + nk, 1e-5);

  /* CUDA, D = 144..256: the tensor-core kernels of the wide class ran, not
   * the host fallback. Their roundings of P and dS to the storage type put
   * some o, dq and dv outside the fp32 tolerance, which the fallback (fp32
   * math on the widened values) meets: checked against the reference's
   * fp32-only magnitudes, where there are enough terms to show it. */
  if (!on_host && D > 128 && D % 16 == 0 && S * Sk >= 1000) {
    aref r32 = x.r;
    r32.u = r32.eta = 0;
    amag m32 = {dalloc(nq), dalloc(nl), dalloc(nq), dalloc(nk), dalloc(nk)};
    double *x32[5] = {dalloc(nq), dalloc(nl), dalloc(nq), dalloc(nk), dalloc(nk)};
    gpa_attn_ref(&r32, x32[0], x32[1], x32[2], x32[3], x32[4], &m32);
    const char *names[3] = {"o", "dq", "dv"};
    const float *gots[3] = {go[0], g[0], g[0] + nq + nk};
    const double *refs[3] = {x32[0], x32[2], x32[4]}, *mags[3] = {m32.o, m32.dq, m32.dv};
    const int64_t ns[3] = {nq, nq, nk};
    for (int i = 0; i < 3; i++)
      if (gpa_nt_worst(gots[i], refs[i], mags[i], ns[i], 1e-5, NULL) < 0) {
        snprintf(w2, sizeof w2, "%s: %s within the fp32 tolerance: the host fallback ran, not the kernels", what,
                 names[i]);
        gpa_nt_fail(t, w2);
      }
    for (int i = 0; i < 5; i++) free(x32[i]);
    free(m32.o); free(m32.lse); free(m32.dq); free(m32.dk); free(m32.dv);
  }

  /* the host: the f32 ops on the widened values, bit for bit */
  if (on_host) {
    gpa_tensor fq = gpa_nt_tensor(t, GPA_F32, 4, qs, x.f[0]), fk = gpa_nt_tensor(t, GPA_F32, 4, ks, x.f[1]);
    gpa_tensor fv = gpa_nt_tensor(t, GPA_F32, 4, ks, x.f[2]), fdo = gpa_nt_tensor(t, GPA_F32, 4, qs, x.f[3]);
    gpa_tensor in[4] = {fq, fk, fv, tl}, out[2] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 3, ls)};
    float *y = malloc(sizeof(float) * (size_t)(ng + nl + 1));
    if (gpa_nt_run(t, "attention_fwd", in, nfi, out, 2, &at, 1) != GPA_OK) gpa_nt_fail(t, "f32 attention_fwd");
    gpa_nt_read(t, &out[0], y);
    snprintf(w2, sizeof w2, "%s: o equals the f32 op's on the widened values", what);
    gpa_nt_same_bits(t, w2, go[0], y, nq);
    gpa_nt_read(t, &out[1], y);
    snprintf(w2, sizeof w2, "%s: lse equals the f32 op's on the widened values", what);
    gpa_nt_same_bits(t, w2, gl[0], y, nl);
    gpa_tensor bin[7] = {fdo, fq, fk, fv, to, tlse, tl};
    gpa_tensor bout[3] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
    if (gpa_nt_run(t, "attention_bwd", bin, nbi, bout, 3, &at, 1) != GPA_OK) gpa_nt_fail(t, "f32 attention_bwd");
    gpa_afix_read_grads(t, bout, y);
    snprintf(w2, sizeof w2, "%s: gradients equal the f32 op's on the widened values", what);
    gpa_nt_same_bits(t, w2, g[0], y, ng);
    free(y);
  }
  for (int i = 0; i < 2; i++) free(go[i]), free(gl[i]), free(g[i]);
  gpa_afix_free(&x);
}

/* lowp_case, checking which kernels ran it: the exact-head-dim variant
 * (the default at D = 64, 96, 128, bf16 and fp16) or, exact 0
 * (GPA_FA2_EXACT=0) and at other head dims, the class kernels. */
static void case_on(gpa_nt *t, const acase *c, int dtype, uint64_t seed, int outs16, int exact) {
#ifdef GPA_HAVE_CUDA_BACKEND
  const unsigned long long f0 = __atomic_load_n(&gpa__attn_fa2x_fwd_calls, __ATOMIC_RELAXED);
  const unsigned long long b0 = __atomic_load_n(&gpa__attn_fa2x_bwd_calls, __ATOMIC_RELAXED);
#endif
  lowp_case(t, c, dtype, seed, outs16);
#ifdef GPA_HAVE_CUDA_BACKEND
  const char *be = gpa_actor_backend(t->a);
  if (strcmp(be, "cuda") && strcmp(be, "sim")) return;
  const int want = exact && (c->D == 64 || c->D == 96 || c->D == 128);
  const int fwd = __atomic_load_n(&gpa__attn_fa2x_fwd_calls, __ATOMIC_RELAXED) > f0;
  const int bwd = __atomic_load_n(&gpa__attn_fa2x_bwd_calls, __ATOMIC_RELAXED) > b0;
  if (fwd != want || bwd != want) {
    char w[256];
    snprintf(w, sizeof w, "attention %s D=%lld: the exact-head-dim kernels %s (forward %d, backward %d)",
             gpa_dtype_name(dtype), (long long)c->D, want ? "did not run" : "ran", fwd, bwd);
    gpa_nt_fail(t, w);
  }
#else
  (void)exact;
#endif
}

/* The exact-head-dim kernels' edges (D = 64, 96, 128): causal and not,
 * odd S and Sk, several query tiles (128 rows) and key tiles (64, in two
 * 32-key softmax steps at D 96 and 128), key lengths, GQA, S = 0, Sk = 0,
 * Sk = 1. B = 3 with lengths: batch 2's length ends inside a key tile (29,
 * 59, 147, 17 here), batch 1's is 0. Run on the default kernels (the exact
 * ones) and on the class kernels (GPA_FA2_EXACT=0). */
static const acase edges[] = {{3, 37, 53, 4, 2, 64, 1, 1, 0}, {1, 70, 70, 2, 1, 128, 0, 0, 0},
                              {1, 67, 1, 2, 2, 96, 1, 0, 0},  {1, 45, 100, 2, 1, 128, 1, 0, 0},
                              {1, 0, 5, 2, 1, 64, 1, 0, 0},   {2, 3, 0, 2, 2, 128, 0, 1, 0}};
static const acase edges_big[] = {{3, 65, 140, 2, 2, 64, 0, 1, 0}, {1, 131, 129, 2, 1, 96, 1, 0, 0},
                                  {3, 33, 150, 2, 2, 128, 1, 1, 0}, {3, 130, 77, 1, 1, 96, 0, 1, 0}};

/* The edges on actor t in dtype, on the exact kernels or not (exact);
 * determinism as above. */
static void edge_cases(gpa_nt *t, int dtype, int exact, uint64_t seed) {
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) case_on(t, &edges[i], dtype, seed++, i < 2, exact);
  for (size_t i = 0; i < sizeof edges_big / sizeof edges_big[0] && !t->quick; i++)
    case_on(t, &edges_big[i], dtype, seed++, 0, exact);
}

/* GPA_FA2_EXACT=0 (a fresh actor reads it): the class kernels at the exact
 * kernels' head dims, bf16 and fp16 (bf16 only in sanitizer builds),
 * against the same reference; other head dims take them either way. */
static int class_variant(gpa_nt *t0) {
  const char *be = gpa_actor_backend(t0->a);
  if (strcmp(be, "cuda") && strcmp(be, "sim")) return 0;
  setenv("GPA_FA2_EXACT", "0", 1);
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  unsetenv("GPA_FA2_EXACT");
  if (rc) return rc == 77 ? 0 : rc;
  edge_cases(&t, GPA_BF16, 0, 4242);
  if (!t.quick) edge_cases(&t, GPA_F16, 0, 4343); /* sanitizer builds: the same template as bf16 */
  const acase d32 = {1, 5, 9, 2, 2, 32, 0, 0, 0};
  case_on(&t, &d32, GPA_BF16, 4444, 0, 0);
  return gpa_nt_close(&t);
}

static void errors(gpa_nt *t) {
  int64_t qs[4] = {2, 5, 8, 32}, ks[4] = {2, 7, 4, 32}, ls[3] = {2, 8, 5};
  gpa_tensor qh = gpa_nt_tensor(t, GPA_F16, 4, qs, NULL), kh = gpa_nt_tensor(t, GPA_F16, 4, ks, NULL);
  gpa_tensor kb = gpa_nt_tensor(t, GPA_BF16, 4, ks, NULL), qi = gpa_nt_tensor(t, GPA_I32, 4, qs, NULL);
  /* o may be f32 or q's storage type (f16 here): bf16 is neither */
  gpa_tensor ob = gpa_nt_tensor(t, GPA_BF16, 4, qs, NULL), o = gpa_nt_out(t, 4, qs), lse = gpa_nt_out(t, 3, ls);
  gpa_tensor out[2] = {o, lse}, bout[3] = {o, gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
  gpa_tensor a[3] = {qh, kb, kb};
  gpa_nt_expect_error(t, "attention_fwd", a, 3, out, 2, NULL, 0, GPA_EDTYPE, "k has dtype bf16, expected f16");
  gpa_tensor b[3] = {qi, kh, kh};
  gpa_nt_expect_error(t, "attention_fwd", b, 3, out, 2, NULL, 0, GPA_EDTYPE, "q has dtype i32, expected f32, bf16");
  gpa_tensor c[3] = {qh, kh, kh}, out16[2] = {ob, lse};
  gpa_nt_expect_error(t, "attention_fwd", c, 3, out16, 2, NULL, 0, GPA_EDTYPE, "outputs[0]");
  gpa_tensor d[6] = {o, qh, kh, kh, o, lse};
  gpa_nt_expect_error(t, "attention_bwd", d, 6, bout, 3, NULL, 0, GPA_EDTYPE, "dout has dtype f32, expected f16");
  gpa_tensor e[6] = {qh, qh, kh, kh, ob, lse};
  gpa_nt_expect_error(t, "attention_bwd", e, 6, bout, 3, NULL, 0, GPA_EDTYPE, "o has dtype bf16, expected f32 or f16");
  gpa_tensor f[6] = {qh, qh, kh, kb, o, lse};
  gpa_nt_expect_error(t, "attention_bwd", f, 6, bout, 3, NULL, 0, GPA_EDTYPE, "v has dtype bf16, expected f16");
}

int main(void) {
  /* CUDA: our own kernels, not cuDNN's fused path, which runs first where
   * the library is present (tests/test_cudnn_attention.c checks that one) */
  setenv("GPA_CUDNN", "/nonexistent/libcudnn.so.9", 1);
  unsetenv("GPA_FA2_EXACT"); /* the default kernels; class_variant opts out */
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  /* B S Sk H Hkv D causal lengths. D % 16 == 0 (D <= 256) run the
   * tensor-core kernels on CUDA; D = 40 the host fallback. */
  const acase cases[] = {
      {1, 1, 1, 1, 1, 64, 0, 0, 0},   {2, 37, 53, 4, 2, 64, 1, 1, 0}, {1, 70, 70, 2, 1, 128, 1, 0, 0},
      {1, 5, 9, 8, 8, 32, 0, 1, 0},   {1, 20, 33, 8, 1, 64, 1, 0, 0}, {1, 9, 4, 2, 1, 40, 1, 0, 0},
      {2, 3, 0, 2, 2, 32, 0, 1, 0},   {1, 67, 1, 2, 2, 96, 1, 0, 0},  {3, 90, 41, 2, 1, 48, 1, 1, 0},
      {1, 3, 2, 2, 1, 256, 1, 1, 0},  {1, 0, 5, 2, 1, 32, 1, 0, 0},   {2, 19, 23, 4, 1, 16, 0, 1, 0},
  };
  /* several tiles each way (forward: 128 query rows, 64 keys; class 256:
   * 64, 32; backward: 64 keys and 32 queries a step, dQ 64 rows); few
   * heads: the simulator emulates every mma with shuffles between lanes */
  const acase big[] = {{2, 65, 140, 2, 2, 64, 0, 1, 0},  {1, 129, 129, 2, 1, 96, 1, 0, 0},
                       {1, 65, 66, 1, 1, 256, 1, 0, 0},  {1, 40, 33, 1, 1, 160, 0, 0, 0},
                       {2, 33, 150, 2, 2, 128, 1, 1, 0}};
  /* Sanitizer builds (t.quick) run the emulated kernels instrumented, about
   * 20x slower: there every case runs in bf16 but one (the same template
   * covers fp16), fp16 only the cheap ones. 2: both dtypes, 1: bf16, 0: none. */
  const int quick_run[] = {2, 1, 1, 2, 1, 2, 2, 1, 0, 2, 2, 2};
  _Static_assert(sizeof quick_run / sizeof quick_run[0] == sizeof cases / sizeof cases[0], "one per case");
  const int dtypes[2] = {GPA_BF16, GPA_F16};
  uint64_t seed = 777;
  for (int di = 0; di < 2; di++) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++, seed++)
      if (!t.quick || quick_run[i] > di) case_on(&t, &cases[i], dtypes[di], seed, 1, 1);
    for (size_t i = 0; i < sizeof big / sizeof big[0] && !t.quick; i++) case_on(&t, &big[i], dtypes[di], seed++, 0, 1);
  }
  edge_cases(&t, GPA_BF16, 1, 4242);
  errors(&t);
  int rc2 = class_variant(&t);
  rc = gpa_nt_close(&t);
  return rc ? rc : rc2;
}
