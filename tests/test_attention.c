/* attention_fwd / attention_bwd through the actor against a double
 * reference: MHA/GQA/MQA (ratios 1, 2, 8), head dims 32/64/96/128 (and odd
 * ones), odd S and Sk, S = 1, Sk = 1, causal with S != Sk, per-batch key
 * lengths including 0, the default scale; finite differences, bitwise
 * determinism of the backward, equality with the direct (inline, one
 * thread) kernel run, and the shape/length errors. On CUDA (and sim), that
 * fp32 forwards and backwards with D % 16 == 0, D <= 128 ran on the 3xTF32
 * kernels (attention_f32tc.cu, attention_f32tc_bwd.cu) and the others on
 * the SIMT ones. */
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/ops_attention.h"
#include "kernels/host/attention.h"
#ifdef GPA_HAVE_CUDA_BACKEND
#include "ops/attention/attention.h"
#endif
#include "tests/parity/harness.h"
#include "util/attn_fixture.h"

static double ref_loss(void *p) {
  aref *r = p;
  int64_t n = r->c->B * r->c->S * r->c->H * r->c->D;
  double *o = malloc(sizeof(double) * (size_t)n), l = 0;
  gpa_attn_ref(r, o, NULL, NULL, NULL, NULL, NULL);
  for (int64_t i = 0; i < n; i++) l += r->w[i] * o[i];
  free(o);
  return l;
}

#ifdef GPA_HAVE_CUDA_BACKEND
/* On CUDA (and sim) an fp32 pass with D a multiple of 16 up to 128 runs on
 * the 3xTF32 tensor-core kernels, any other on the SIMT ones: their call
 * counter moved past `before` exactly when it should. */
static void ran_tc32(gpa_nt *t, const char *what, int64_t D, const unsigned long long *calls,
                     unsigned long long before, const char *pass) {
  if (strcmp(gpa_actor_backend(t->a), "cuda") && strcmp(gpa_actor_backend(t->a), "sim")) return;
  const int want = D % 16 == 0 && D <= 128;
  if ((__atomic_load_n(calls, __ATOMIC_RELAXED) > before) != want) {
    char w[1024];
    snprintf(w, sizeof w, "%s: the %s kernels did not run the %s", what, want ? "3xTF32" : "SIMT", pass);
    gpa_nt_fail(t, w);
  }
}
#endif

static void run_case(gpa_nt *t, const acase *c, uint64_t seed) {
  int64_t B = c->B, Sk = c->Sk, Hk = c->Hkv, D = c->D;
  afix x;
  gpa_afix_init(&x, c, GPA_F32, "attention", &seed);
  gpa_afix_ref(&x, 0);
  gpa_afix_upload(t, &x);
  const int64_t nq = x.nq, nk = x.nk, nl = x.nl, *qs = x.qs, *ks = x.ks, *ls = x.ls;
  const float *q = x.f[0], *k = x.f[1], *v = x.f[2], *dout = x.f[3];
  const char *what = x.what;
  char w2[1024];
  snprintf(x.what + strlen(x.what), sizeof x.what - strlen(x.what), " scale=%g", c->scale);

  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, c->scale}, {"causal", GPA_ATTR_INT, c->causal, 0}};
  gpa_tensor tq = x.q, tk = x.k, tv = x.v, tl = x.lt;
  gpa_tensor fin[4] = {tq, tk, tv, tl}, fout[2] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 3, ls)};
#ifdef GPA_HAVE_CUDA_BACKEND
  const unsigned long long tc0 = __atomic_load_n(&gpa__attn_tc32_calls, __ATOMIC_RELAXED);
#endif
  gpa_status st = gpa_nt_run(t, "attention_fwd", fin, c->lens ? 4 : 3, fout, 2, at, c->scale > 0 ? 2 : 1 + 0 * 1);
  if (c->scale <= 0) { /* default scale: the attribute absent */
    gpa_attr ac = {"causal", GPA_ATTR_INT, c->causal, 0};
    st = gpa_nt_run(t, "attention_fwd", fin, c->lens ? 4 : 3, fout, 2, &ac, 1);
  }
  if (st != GPA_OK) {
    snprintf(w2, sizeof w2, "%s: attention_fwd %s: %s", what, gpa_status_name(st), gpa_nt_msg);
    gpa_nt_fail(t, w2);
  }
#ifdef GPA_HAVE_CUDA_BACKEND
  ran_tc32(t, what, D, &gpa__attn_tc32_calls, tc0, "forward");
#endif
  float *go = malloc(sizeof(float) * (size_t)nq), *gl = malloc(sizeof(float) * (size_t)nl);
  gpa_nt_read(t, &fout[0], go);
  gpa_nt_read(t, &fout[1], gl);
  gpa_afix_check_fwd(t, &x, go, gl, 1e-5);

  gpa_tensor bin[7] = {x.dout, tq, tk, tv, fout[0], fout[1], tl};
  float *g1 = malloc(sizeof(float) * (size_t)(nq + 2 * nk)), *g2 = malloc(sizeof(float) * (size_t)(nq + 2 * nk));
  float *runs[2] = {g1, g2};
#ifdef GPA_HAVE_CUDA_BACKEND
  const unsigned long long tb0 = __atomic_load_n(&gpa__attn_tc32_bwd_calls, __ATOMIC_RELAXED);
#endif
  for (int rep = 0; rep < 2; rep++) {
    gpa_tensor bout[3] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
    st = gpa_nt_run(t, "attention_bwd", bin, c->lens ? 7 : 6, bout, 3, at, 2);
    if (st != GPA_OK) {
      snprintf(w2, sizeof w2, "%s: attention_bwd %s: %s", what, gpa_status_name(st), gpa_nt_msg);
      gpa_nt_fail(t, w2);
    }
    gpa_afix_read_grads(t, bout, runs[rep]);
  }
#ifdef GPA_HAVE_CUDA_BACKEND
  ran_tc32(t, what, D, &gpa__attn_tc32_bwd_calls, tb0, "backward");
#endif
  snprintf(w2, sizeof w2, "%s: backward determinism", what);
  gpa_nt_same_bits(t, w2, g1, g2, nq + 2 * nk);
  gpa_afix_check_grads(t, &x, NULL, g1, g1 + nq, g1 + nq + nk, 1e-5);

  /* on the host backend, the actor (thread pool) and the kernel run inline
   * agree bit for bit (other backends run their own kernels: the parity
   * checks above apply to them) */
  gpa__attn_geom g = {B, c->S, Sk, c->H, Hk, D, (float)x.r.scale, c->causal, 0};
  float *io = malloc(sizeof(float) * (size_t)nq), *il = malloc(sizeof(float) * (size_t)nl);
  float *ig = malloc(sizeof(float) * (size_t)(nq + 2 * nk));
  const int32_t *lp = x.r.lens;
  int on_host = !strcmp(gpa_actor_backend(t->a), "cpu");
  gpa__attention_fwd(NULL, &g, q, k, v, lp, io, il);
  snprintf(w2, sizeof w2, "%s: o, actor vs inline", what);
  if (on_host) gpa_nt_same_bits(t, w2, go, io, nq);
  /* both backward work splits, inline, equal the actor's result */
  for (int path = 1; path <= 2 && on_host; path++) {
    g.bwd_path = path;
    for (int64_t i = 0; i < nq + 2 * nk; i++) ig[i] = NAN;
    gpa__attention_bwd(NULL, &g, dout, q, k, v, io, il, lp, ig, ig + nq, ig + nq + nk);
    snprintf(w2, sizeof w2, "%s: grads, actor vs inline (%s backward)", what, path == 1 ? "fused" : "split");
    gpa_nt_same_bits(t, w2, g1, ig, nq + 2 * nk);
  }

  if (nq * Sk <= 60000) {
    double *vars[3] = {x.r.q, x.r.k, x.r.v};
    int64_t nv[3] = {nq, nk, nk}, off[3] = {0, nq, nq + nk};
    for (int vi = 0; vi < 3; vi++)
      for (int64_t s = 0; s < 6 && nv[vi] > 0; s++) {
        int64_t i = (s * 7919 + 5) % nv[vi];
        double fd = gpa_nt_fd(ref_loss, &x.r, vars[vi], i, 1e-4), gg = g1[off[vi] + i];
        if (fabs(gg - fd) > 1e-4 * fabs(fd) + 2e-5) {
          snprintf(w2, sizeof w2, "%s: finite difference of input %d element %lld: %.8g vs fd %.8g", what, vi,
                   (long long)i, gg, fd);
          gpa_nt_fail(t, w2);
        }
      }
  }
  free(io); free(il); free(ig); free(g1); free(g2); free(go); free(gl);
  gpa_afix_free(&x);
}

static void errors(gpa_nt *t) {
  int64_t qs[4] = {2, 5, 8, 32}, k3[4] = {2, 7, 3, 32}, kd[4] = {2, 7, 4, 64}, kb[4] = {3, 7, 4, 32};
  int64_t k4[4] = {2, 7, 4, 32}, ls[3] = {2, 8, 5}, lbad[3] = {2, 5, 8}, q300[4] = {1, 2, 1, 300};
  gpa_tensor q = gpa_nt_out(t, 4, qs), o = gpa_nt_out(t, 4, qs), lse = gpa_nt_out(t, 3, ls);
  gpa_tensor kk3 = gpa_nt_out(t, 4, k3), kkd = gpa_nt_out(t, 4, kd), kkb = gpa_nt_out(t, 4, kb);
  gpa_tensor k = gpa_nt_out(t, 4, k4);
  gpa_tensor out[2] = {o, lse};
  gpa_tensor a[3] = {q, kk3, kk3};
  gpa_nt_expect_error(t, "attention_fwd", a, 3, out, 2, NULL, 0, GPA_ESHAPE,
                      "k has 3 heads, not a divisor of q's 8 heads");
  gpa_tensor b[3] = {q, kkd, kkd};
  gpa_nt_expect_error(t, "attention_fwd", b, 3, out, 2, NULL, 0, GPA_ESHAPE, "k has shape [2,7,4,64]");
  gpa_tensor c[3] = {q, kkb, kkb};
  gpa_nt_expect_error(t, "attention_fwd", c, 3, out, 2, NULL, 0, GPA_ESHAPE, "B and D of q");
  gpa_tensor d[3] = {q, k, kk3};
  gpa_nt_expect_error(t, "attention_fwd", d, 3, out, 2, NULL, 0, GPA_ESHAPE, "v has shape");
  gpa_tensor e[3] = {q, k, k}, out2[2] = {o, gpa_nt_out(t, 3, lbad)};
  gpa_nt_expect_error(t, "attention_fwd", e, 3, out2, 2, NULL, 0, GPA_ESHAPE, "outputs[1]");
  int64_t two = 2, three = 3;
  int32_t badlen[2] = {3, 8};
  gpa_tensor lf = gpa_nt_out(t, 1, &two), l3 = gpa_nt_tensor(t, GPA_I32, 1, &three, NULL);
  gpa_tensor lb = gpa_nt_tensor(t, GPA_I32, 1, &two, badlen);
  gpa_tensor f[4] = {q, k, k, lf};
  gpa_nt_expect_error(t, "attention_fwd", f, 4, out, 2, NULL, 0, GPA_EDTYPE, "lengths has dtype f32");
  gpa_tensor g[4] = {q, k, k, l3};
  gpa_nt_expect_error(t, "attention_fwd", g, 4, out, 2, NULL, 0, GPA_ESHAPE, "lengths has shape [3]");
  gpa_tensor h[4] = {q, k, k, lb};
  gpa_nt_expect_error(t, "attention_fwd", h, 4, out, 2, NULL, 0, GPA_ERANGE, "lengths[1] = 8");
  gpa_tensor qb = gpa_nt_out(t, 4, q300), ob[2] = {qb, gpa_nt_out(t, 3, (int64_t[]){1, 1, 2})};
  gpa_tensor i[3] = {qb, qb, qb};
  gpa_nt_expect_error(t, "attention_fwd", i, 3, ob, 2, NULL, 0, GPA_ESHAPE, "head dim D = 300");
  /* bf16: q, k, v (and dout) all alike (tests/test_attention_lowp.c: the rest) */
  gpa_tensor qh = gpa_nt_tensor(t, GPA_BF16, 4, qs, NULL), kh = gpa_nt_tensor(t, GPA_BF16, 4, k4, NULL);
  gpa_tensor m1[3] = {qh, k, k};
  gpa_nt_expect_error(t, "attention_fwd", m1, 3, out, 2, NULL, 0, GPA_EDTYPE, "k has dtype f32");
  gpa_tensor m2[3] = {qh, kh, k};
  gpa_nt_expect_error(t, "attention_fwd", m2, 3, out, 2, NULL, 0, GPA_EDTYPE, "v has dtype f32");
  gpa_tensor m3[3] = {qh, kh, gpa_nt_tensor(t, GPA_BF16, 4, k3, NULL)};
  gpa_nt_expect_error(t, "attention_fwd", m3, 3, out, 2, NULL, 0, GPA_ESHAPE, "v has shape");
  gpa_tensor m4[6] = {q, qh, kh, kh, o, lse}, bo4[3] = {q, k, k};
  gpa_nt_expect_error(t, "attention_bwd", m4, 6, bo4, 3, NULL, 0, GPA_EDTYPE, "dout has dtype f32, expected bf16");
  gpa_tensor bo[3] = {q, k, k};
  gpa_tensor j[6] = {q, q, k, k, o, gpa_nt_out(t, 3, lbad)};
  gpa_nt_expect_error(t, "attention_bwd", j, 6, bo, 3, NULL, 0, GPA_ESHAPE, "lse has shape [2,5,8]");
}

/* The typed calls give the same bits as the generic path. */
static void typed(gpa_nt *t) {
  int64_t qs[4] = {2, 9, 4, 32}, ks[4] = {2, 11, 2, 32}, ls[3] = {2, 4, 9}, two = 2;
  uint64_t seed = 5;
  float q[2304], k[1408], v[1408], r1[2304], r2[2304];
  int32_t lens[2] = {11, 4};
  gpa_nt_fill(q, 2304, -1, 1, &seed);
  gpa_nt_fill(k, 1408, -1, 1, &seed);
  gpa_nt_fill(v, 1408, -1, 1, &seed);
  gpa_tensor tq = gpa_nt_tensor(t, GPA_F32, 4, qs, q), tk = gpa_nt_tensor(t, GPA_F32, 4, ks, k);
  gpa_tensor tv = gpa_nt_tensor(t, GPA_F32, 4, ks, v), tl = gpa_nt_tensor(t, GPA_I32, 1, &two, lens);
  gpa_tensor o1 = gpa_nt_out(t, 4, qs), l1 = gpa_nt_out(t, 3, ls), o2 = gpa_nt_out(t, 4, qs), l2 = gpa_nt_out(t, 3, ls);
  gpa_attention_fwd_args fa = {sizeof fa, tq, tk, tv, tl, o1, l1, 0.0, 1};
  gpa_handle *h = NULL;
  if (gpa_attention_fwd(t->q, &fa, &h) != GPA_OK || gpa_await(h, -1) != GPA_OK) gpa_nt_fail(t, "gpa_attention_fwd");
  gpa_handle_release(h);
  gpa_attr c1 = {"causal", GPA_ATTR_INT, 1, 0};
  gpa_tensor in[4] = {tq, tk, tv, tl}, out[2] = {o2, l2};
  if (gpa_nt_run(t, "attention_fwd", in, 4, out, 2, &c1, 1) != GPA_OK) gpa_nt_fail(t, "attention_fwd");
  gpa_nt_read(t, &o1, r1);
  gpa_nt_read(t, &o2, r2);
  gpa_nt_same_bits(t, "typed gpa_attention_fwd o", r1, r2, 2304);
  gpa_tensor dq1 = gpa_nt_out(t, 4, qs), dk1 = gpa_nt_out(t, 4, ks), dv1 = gpa_nt_out(t, 4, ks);
  gpa_tensor dq2 = gpa_nt_out(t, 4, qs), dk2 = gpa_nt_out(t, 4, ks), dv2 = gpa_nt_out(t, 4, ks);
  gpa_attention_bwd_args ba = {0, o1, tq, tk, tv, o1, l1, tl, dq1, dk1, dv1, 0.0, 1, 0};
  if (gpa_attention_bwd(t->q, &ba, NULL) != GPA_OK) gpa_nt_fail(t, "gpa_attention_bwd");
  gpa_tensor bi[7] = {o1, tq, tk, tv, o1, l1, tl}, bo[3] = {dq2, dk2, dv2};
  if (gpa_nt_run(t, "attention_bwd", bi, 7, bo, 3, &c1, 1) != GPA_OK) gpa_nt_fail(t, "attention_bwd");
  gpa_nt_read(t, &dk1, r1);
  gpa_nt_read(t, &dk2, r2);
  gpa_nt_same_bits(t, "typed gpa_attention_bwd dk", r1, r2, 1408);
  /* nondeterministic = 1 only lets cuDNN choose; f32 runs our kernels, the
   * same bits; a struct from before the field (smaller size) ignores it */
  ba.nondeterministic = 1;
  if (gpa_attention_bwd(t->q, &ba, NULL) != GPA_OK) gpa_nt_fail(t, "gpa_attention_bwd, nondeterministic");
  gpa_nt_read(t, &dk1, r1);
  gpa_nt_same_bits(t, "typed gpa_attention_bwd dk, nondeterministic = 1", r1, r2, 1408);
  ba.size = (uint32_t)offsetof(gpa_attention_bwd_args, nondeterministic);
  if (gpa_attention_bwd(t->q, &ba, NULL) != GPA_OK) gpa_nt_fail(t, "gpa_attention_bwd, older struct size");
  if (gpa_attention_bwd(t->q, NULL, NULL) != GPA_EINVAL) gpa_nt_fail(t, "gpa_attention_bwd(NULL args) is not EINVAL");
}

/* ---- the same ops through the parity harness (cross-backend runs) ---- */

/* in: q, k, v, lengths (optional, i32); out: o, lse */
static void h_ref_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  const gpa_pt *q = in[0].t, *k = in[1].t;
  acase ac = {q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2], q->shape[3],
              (int)gpa_pcase_get_i(c, "causal", 0), c->n_in > 3, gpa_pcase_get_f(c, "scale", 0)};
  int32_t lens[16];
  for (int64_t b = 0; b < ac.B && c->n_in > 3; b++) lens[b] = (int32_t)in[3].d[b];
  aref r = {&ac, ac.scale > 0 ? ac.scale : 1.0 / sqrt((double)ac.D), c->n_in > 3 ? lens : NULL,
            in[0].d, in[1].d, in[2].d, NULL, 0, 0};
  gpa_attn_ref(&r, out[0].d, out[1].d, NULL, NULL, NULL, NULL);
}

static int harness_cases(void) {
  gpa_parity *p = gpa_parity_open("attention");
  /* B S Sk H Hkv D causal lengths */
  const int64_t cs[][8] = {{1, 1, 1, 1, 1, 32, 0, 0},  {2, 5, 9, 4, 2, 32, 1, 1}, {1, 9, 4, 2, 1, 40, 1, 0},
                           {3, 7, 7, 8, 8, 16, 0, 1},  {1, 3, 11, 8, 1, 64, 1, 1}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    const int64_t *v = cs[i];
    gpa_pcase c = gpa_pcase_make("attention_fwd", h_ref_fwd);
    gpa_pcase_in(&c, gpa_pt_f32(4, (int64_t[]){v[0], v[1], v[3], v[5]}, -1.5, 1.5));
    gpa_pcase_in(&c, gpa_pt_f32(4, (int64_t[]){v[0], v[2], v[4], v[5]}, -1.5, 1.5));
    gpa_pcase_in(&c, gpa_pt_f32(4, (int64_t[]){v[0], v[2], v[4], v[5]}, -1, 1));
    if (v[7]) gpa_pcase_in(&c, gpa_pt_int(GPA_I32, 1, (int64_t[]){v[0]}, 0, v[2]));
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 4, (int64_t[]){v[0], v[1], v[3], v[5]}));
    gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, (int64_t[]){v[0], v[3], v[1]}));
    gpa_pcase_attr_int(&c, "causal", v[6]);
    c.atol = 1e-6; /* o, lse of size 1: fp32 sums of D products of size ~2 */
    gpa_parity_check(p, &c);
    gpa_pgrad g = {.op = "attention_bwd", .n_dy = 1, .n_in = v[7] ? 7 : 6,
                   .in = {{GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 0}, {GPA_PSRC_FWD_IN, 1}, {GPA_PSRC_FWD_IN, 2},
                          {GPA_PSRC_FWD_OUT, 0}, {GPA_PSRC_FWD_OUT, 1}, {GPA_PSRC_FWD_IN, 3}},
                   .n_out = 3, .grad_of = {0, 1, 2}, .attrs = {{"causal", GPA_ATTR_INT, v[6], 0}}, .n_attrs = 1};
    gpa_parity_grad(p, &c, &g);
  }
  return gpa_parity_close(p);
}

int main(void) {
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  const acase cases[] = {
      /* B S Sk H Hkv D causal lens scale */
      {1, 1, 1, 1, 1, 32, 0, 0, 0},      {1, 1, 1, 2, 1, 64, 1, 0, 0},     {2, 1, 37, 4, 2, 32, 1, 1, 0},
      {1, 37, 1, 2, 2, 32, 1, 0, 0},     {2, 37, 53, 4, 2, 64, 0, 1, 0},   {3, 70, 70, 8, 1, 96, 1, 1, 0},
      {1, 130, 129, 2, 2, 128, 1, 0, 0}, {2, 90, 200, 8, 4, 40, 1, 1, 0},  {1, 200, 90, 8, 8, 33, 1, 0, 0},
      {1, 5, 300, 8, 1, 32, 0, 1, 0.3},  {2, 67, 67, 8, 8, 128, 0, 0, 0},  {1, 3, 2, 2, 1, 256, 1, 1, 0},
      {3, 17, 29, 6, 3, 7, 0, 1, 0.05},  {1, 131, 131, 2, 1, 64, 1, 0, 0}, {2, 3, 0, 2, 2, 32, 0, 1, 0},
      {1, 0, 5, 2, 1, 32, 1, 0, 0},
  };
  uint64_t seed = 4242;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&t, &cases[i], seed + i);
  if (!t.quick) {
    const acase big[] = {{2, 300, 257, 8, 2, 64, 1, 1, 0}, {1, 256, 256, 4, 4, 128, 0, 0, 0}};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) run_case(&t, &big[i], seed + 100 + i);
  }
  errors(&t);
  typed(&t);
  int hrc = harness_cases();
  rc = gpa_nt_close(&t);
  return rc ? rc : (hrc == 1 ? 1 : 0);
}
