/* One case of the attention tests: see attn_fixture.h. */
#include "util/attn_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n + 1 elements: n may be 0 */
static void *alloc(int64_t n, size_t size) { return malloc(size * (size_t)(n + 1)); }

void gpa_afix_fill(int dtype, float *f, uint16_t *u, int64_t n, double lo, double hi, uint64_t *seed) {
  gpa_nt_fill(f, n, lo, hi, seed);
  for (int64_t i = 0; i < n; i++) f[i] = tu_from16(dtype, u[i] = tu_to16(dtype, f[i]));
}

void gpa_afix_init(afix *x, const acase *c, int dtype, const char *prefix, uint64_t *seed) {
  const int64_t B = c->B, S = c->S, Sk = c->Sk, H = c->H, Hk = c->Hkv, D = c->D;
  memset(x, 0, sizeof *x);
  x->c = c;
  x->dtype = dtype;
  x->nq = B * S * H * D;
  x->nk = B * Sk * Hk * D;
  x->nl = B * H * S;
  const int64_t qs[4] = {B, S, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, S};
  memcpy(x->qs, qs, sizeof qs);
  memcpy(x->ks, ks, sizeof ks);
  memcpy(x->ls, ls, sizeof ls);
  snprintf(x->what, sizeof x->what, "%s%s%s B=%lld S=%lld Sk=%lld H=%lld Hkv=%lld D=%lld%s%s", prefix,
           dtype == GPA_F32 ? "" : " ", dtype == GPA_F32 ? "" : gpa_dtype_name(dtype), (long long)B, (long long)S,
           (long long)Sk, (long long)H, (long long)Hk, (long long)D, c->causal ? " causal" : "",
           c->lens ? " lengths" : "");
  const int64_t n[4] = {x->nq, x->nk, x->nk, x->nq};
  for (int i = 0; i < 4; i++) {
    const double lim = i < 2 ? 1.5 : 1.0;
    x->f[i] = alloc(n[i], sizeof(float));
    if (dtype == GPA_F32) {
      gpa_nt_fill(x->f[i], n[i], -lim, lim, seed);
    } else {
      x->u[i] = alloc(n[i], sizeof(uint16_t));
      gpa_afix_fill(dtype, x->f[i], x->u[i], n[i], -lim, lim, seed);
    }
  }
  x->lens = alloc(B, sizeof(int32_t));
  for (int64_t b = 0; b < B; b++) x->lens[b] = (int32_t)(b == 0 ? Sk : b == 1 ? 0 : (b * 7919 + 13) % (Sk + 1));
}

void gpa_afix_ref(afix *x, int lowp) {
  const acase *c = x->c;
  const int64_t nq = x->nq, nk = x->nk, nl = x->nl;
  x->r = (aref){c,
                c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->D),
                c->lens ? x->lens : NULL,
                gpa_nt_to_double(x->f[0], nq),
                gpa_nt_to_double(x->f[1], nk),
                gpa_nt_to_double(x->f[2], nk),
                gpa_nt_to_double(x->f[3], nq),
                0,
                0};
  if (lowp) {
    x->r.u = x->dtype == GPA_F16 ? 0x1p-11 : 0x1p-8;
    x->r.eta = x->dtype == GPA_F16 ? 0x1p-25 : 0x1p-134;
  }
  x->o = alloc(nq, sizeof(double));
  x->lse = alloc(nl, sizeof(double));
  x->dq = alloc(nq, sizeof(double));
  x->dk = alloc(nk, sizeof(double));
  x->dv = alloc(nk, sizeof(double));
  x->mg = (amag){alloc(nq, sizeof(double)), alloc(nl, sizeof(double)), alloc(nq, sizeof(double)),
                 alloc(nk, sizeof(double)), alloc(nk, sizeof(double))};
  gpa_attn_ref(&x->r, x->o, x->lse, x->dq, x->dk, x->dv, &x->mg);
  x->ro = alloc(nq, sizeof(float));
  x->rl = alloc(nl, sizeof(float));
  for (int64_t i = 0; i < nq; i++) x->ro[i] = (float)x->o[i];
  for (int64_t i = 0; i < nl; i++) x->rl[i] = (float)x->lse[i];
}

void gpa_afix_upload(gpa_nt *t, afix *x) {
  const void *d[4];
  for (int i = 0; i < 4; i++) d[i] = x->u[i] ? (const void *)x->u[i] : (const void *)x->f[i];
  x->q = gpa_nt_tensor(t, x->dtype, 4, x->qs, d[0]);
  x->k = gpa_nt_tensor(t, x->dtype, 4, x->ks, d[1]);
  x->v = gpa_nt_tensor(t, x->dtype, 4, x->ks, d[2]);
  x->dout = gpa_nt_tensor(t, x->dtype, 4, x->qs, d[3]);
  x->lt = gpa_nt_tensor(t, GPA_I32, 1, &x->c->B, x->lens);
}

void gpa_afix_read_grads(gpa_nt *t, const gpa_tensor out[3], void *g) {
  char *p = g;
  for (int i = 0; i < 3; i++) {
    gpa_nt_read(t, &out[i], p);
    p += (size_t)gpa_tensor_numel(&out[i]) * gpa_dtype_size(out[i].dtype);
  }
}

void gpa_afix_bwd(gpa_nt *t, const char *what, const gpa_tensor *in, uint32_t nin, const int64_t qs[4],
                  const int64_t ks[4], int causal, int det, int dtype16, float *g, uint16_t *u16) {
  const int64_t nq = qs[0] * qs[1] * qs[2] * qs[3], nk = ks[0] * ks[1] * ks[2] * ks[3];
  gpa_attr at[2] = {{"causal", GPA_ATTR_INT, causal, 0}, {"deterministic", GPA_ATTR_INT, det, 0}};
  gpa_tensor out[3] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
  if (dtype16) {
    for (int64_t j = 0; j < nq + 2 * nk; j++) u16[j] = dtype16 == GPA_F16 ? 0x7e00u : 0x7fc0u; /* NaN */
    out[0] = gpa_nt_tensor(t, dtype16, 4, qs, u16);
    out[1] = gpa_nt_tensor(t, dtype16, 4, ks, u16 + nq);
    out[2] = gpa_nt_tensor(t, dtype16, 4, ks, u16 + nq + nk);
  }
  gpa_status st = gpa_nt_run(t, "attention_bwd", in, nin, out, 3, at, 2);
  if (st != GPA_OK) {
    char w[1024];
    snprintf(w, sizeof w, "%s: attention_bwd deterministic=%d: %s: %s", what, det, gpa_status_name(st), gpa_nt_msg);
    gpa_nt_fail(t, w);
  }
  gpa_afix_read_grads(t, out, dtype16 ? (void *)u16 : (void *)g);
}

void gpa_afix_check_fwd(gpa_nt *t, const afix *x, const float *o, const float *lse, double rtol_o) {
  char w[512];
  snprintf(w, sizeof w, "%s: o", x->what);
  gpa_nt_close_to(t, w, o, x->o, x->mg.o, x->nq, rtol_o);
  snprintf(w, sizeof w, "%s: lse", x->what);
  gpa_nt_close_to(t, w, lse, x->lse, x->mg.lse, x->nl, 1e-5);
}

void gpa_afix_check_grads(gpa_nt *t, const afix *x, const char *note, const float *dq, const float *dk,
                          const float *dv, double rtol) {
  const char *names[3] = {"dq", "dk", "dv"};
  const float *got[3] = {dq, dk, dv};
  const double *ref[3] = {x->dq, x->dk, x->dv}, *mag[3] = {x->mg.dq, x->mg.dk, x->mg.dv};
  const int64_t n[3] = {x->nq, x->nk, x->nk};
  char w[512];
  for (int i = 0; i < 3; i++) {
    snprintf(w, sizeof w, "%s: %s%s", x->what, names[i], note ? note : "");
    gpa_nt_close_to(t, w, got[i], ref[i], mag[i], n[i], rtol);
  }
}

void gpa_afix_free(afix *x) {
  for (int i = 0; i < 4; i++) free(x->f[i]), free(x->u[i]);
  free(x->lens);
  free(x->r.q), free(x->r.k), free(x->r.v), free(x->r.w);
  free(x->o), free(x->lse), free(x->dq), free(x->dk), free(x->dv);
  free(x->mg.o), free(x->mg.lse), free(x->mg.dq), free(x->mg.dk), free(x->mg.dv);
  free(x->ro), free(x->rl);
  memset(x, 0, sizeof *x);
}
