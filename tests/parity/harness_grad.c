/* Parity harness: backward ops against an analytic reference and against
 * central finite differences of the double forward reference (harness.h). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/parity/harness_internal.h"

/* ---- gradients ----------------------------------------------------------- */

/* loss = sum over the first n_dy outputs of w * out, forward reference in double */
static double fd_loss(const gpa_pcase *f, gpa_parr *in, pdata *w, uint32_t n_dy) {
  pdata out[GPA_PMAX];
  gpa_parr po[GPA_PMAX];
  memset(out, 0, sizeof out);
  for (uint32_t i = 0; i < f->n_out; i++) {
    gpa_pi_pdata_alloc(&out[i], &f->out[i]);
    for (int64_t k = 0; k < out[i].n; k++) out[i].d[k] = NAN;
    po[i] = (gpa_parr){out[i].d, out[i].n, &f->out[i]};
  }
  f->ref(f, in, po);
  double L = 0;
  for (uint32_t i = 0; i < n_dy; i++)
    for (int64_t k = 0; k < out[i].n; k++) L += w[i].d[k] * out[i].d[k];
  for (uint32_t i = 0; i < f->n_out; i++) gpa_pi_pdata_free(&out[i]);
  return L;
}

int gpa_parity_grad(gpa_parity *p, const gpa_pcase *f, const gpa_pgrad *g) {
  pset fs, bs;
  memset(&bs, 0, sizeof bs);
  uint64_t rng = gpa_pi_case_seed(f) ^ 0x9e3779b97f4a7c15ull;
  gpa_pi_pset_make(f, &fs, &rng);
  gpa_pi_run_ref(f, &fs, fs.ref);
  /* loss weights (dy), fp32-rounded; a scalar dy may go in an attribute */
  pdata w[GPA_PMAX];
  memset(w, 0, sizeof w);
  for (uint32_t i = 0; i < g->n_dy; i++) {
    gpa_pt t = f->out[i];
    t.fill = GPA_PFILL_UNIFORM;
    t.lo = -1;
    t.hi = 1;
    gpa_pi_pdata_alloc(&w[i], &t);
    gpa_pi_fill(&w[i], &t, &rng);
  }
  gpa_pcase b = gpa_pcase_make(g->op, g->ref);
  for (uint32_t i = 0; i < g->n_attrs; i++) b.attrs[b.n_attrs++] = g->attrs[i];
  if (g->dy_attr) gpa_pcase_attr_float(&b, g->dy_attr, w[0].d[0]);
  for (uint32_t i = 0; i < g->n_in; i++) {
    const gpa_psrc *src = &g->in[i];
    gpa_pt t;
    pdata *from;
    if (src->kind == GPA_PSRC_FWD_IN) {
      t = f->in[src->index];
      from = &fs.in[src->index];
    } else if (src->kind == GPA_PSRC_FWD_OUT) {
      t = f->out[src->index];
      from = &fs.ref[src->index];
    } else {
      t = f->out[src->index];
      from = &w[src->index];
    }
    t.fill = GPA_PFILL_NONE;
    gpa_pcase_in(&b, t);
    gpa_pi_pdata_alloc(&bs.in[i], &t);
    for (int64_t k = 0; k < from->n; k++) {
      gpa_pi_raw_set(bs.in[i].raw, t.dtype, k, from->d[k]);
      bs.in[i].d[k] = gpa_pi_raw_get(bs.in[i].raw, t.dtype, k);
    }
  }
  for (uint32_t i = 0; i < g->n_out; i++) {
    gpa_pt t = f->in[g->grad_of[i]];
    t.fill = GPA_PFILL_NONE;
    t.dtype = GPA_F32;
    gpa_pcase_out(&b, t);
  }
  gpa_pi_init_outputs(&b, &bs, &rng);
  char name[512];
  gpa_pi_fmt_case(name, sizeof name, f);
  int ok = 1;
  /* analytic reference: parity of the backward op */
  pdata got[GPA_PMAX];
  memset(got, 0, sizeof got);
  if (g->ref) {
    gpa_pi_run_ref(&b, &bs, bs.ref);
    ok &= gpa_pi_run_and_compare(p, &b, &bs);
  }
  char msg[512];
  for (uint32_t i = 0; i < b.n_out; i++) gpa_pi_copy_pdata(&got[i], &bs.out[i], &b.out[i]);
  gpa_status st = gpa_pi_run_direct(p, &b, bs.in, got, msg, sizeof msg);
  if (st != GPA_OK) {
    char wmsg[1100];
    snprintf(wmsg, sizeof wmsg, "%s backward %s [direct]: %s: %s", name, g->op, gpa_status_name(st), msg);
    gpa_parity_fail(p, wmsg);
    ok = 0;
  }
  /* finite differences of the double forward reference */
  int64_t maxn = g->fd_max_numel > 0 ? g->fd_max_numel : 65536;
  double rtol = g->fd_rtol > 0 ? g->fd_rtol : 1e-4;
  int fd_done = 0;
  for (uint32_t i = 0; ok && i < g->n_out; i++) {
    uint32_t xi = (uint32_t)g->grad_of[i];
    pdata *x = &fs.in[xi];
    if (x->n == 0 || x->n > maxn) continue;
    double gmax = 0;
    for (int64_t k = 0; k < got[i].n; k++) {
      double v = fabs(gpa_pi_raw_get(got[i].raw, GPA_F32, k));
      if (v > gmax) gmax = v;
    }
    gpa_parr in[GPA_PMAX];
    double *xd = malloc((size_t)x->n * sizeof(double));
    memcpy(xd, x->d, (size_t)x->n * sizeof(double));
    for (uint32_t k = 0; k < f->n_in; k++) in[k] = (gpa_parr){k == xi ? xd : fs.in[k].d, fs.in[k].n, &f->in[k]};
    int samples = x->n < 24 ? (int)x->n : 24;
    for (int s = 0; s < samples; s++) {
      int64_t e = x->n < 24 ? s : (s == 0 ? 0 : s == 1 ? x->n - 1 : (int64_t)(gpa_pi_rng_next(&rng) % (uint64_t)x->n));
      double x0 = xd[e], h = 1e-4 * (fabs(x0) > 1 ? fabs(x0) : 1);
      xd[e] = x0 + h;
      double lp = fd_loss(f, in, w, g->n_dy);
      xd[e] = x0 - h;
      double lm = fd_loss(f, in, w, g->n_dy);
      xd[e] = x0;
      double fd = (lp - lm) / (2 * h), gv = gpa_pi_raw_get(got[i].raw, GPA_F32, e);
      if (!(fabs(gv - fd) <= rtol * fabs(fd) + rtol * 0.1 * gmax + 1e-9)) {
        char wmsg[1100];
        snprintf(wmsg, sizeof wmsg, "%s: %s output %u (d/d input %u) [%lld] = %.9g, finite difference %.9g", name,
                 g->op, i, xi, (long long)e, gv, fd);
        gpa_parity_fail(p, wmsg);
        ok = 0;
        break;
      }
    }
    fd_done = 1;
    free(xd);
  }
  if (ok) {
    printf("[%s] ok   %s: %s%s\n", p->suite, name, g->op,
           fd_done ? " matches finite differences" : (g->ref ? " matches its reference (too large for FD)" : ""));
    p->passes++;
  }
  for (uint32_t i = 0; i < GPA_PMAX; i++) {
    gpa_pi_pdata_free(&got[i]);
    gpa_pi_pdata_free(&w[i]);
  }
  gpa_pi_pset_free(&fs);
  gpa_pi_pset_free(&bs);
  return ok;
}
