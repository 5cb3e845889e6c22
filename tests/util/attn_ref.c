/* The attention tests' reference: see attn_ref.h. */
#include "util/attn_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The bound on one rounded term t (see aref.u), in units of FLT_EPSILON;
 * eta_scale: the factor applied to t after its rounding. */
static double lowp(const aref *r, double t, double eta_scale) {
  return 2 * (r->u * fabs(t) + r->eta * eta_scale) / FLT_EPSILON;
}

void gpa_attn_ref(const aref *r, double *o, double *lse, double *dq, double *dk, double *dv, const amag *m) {
  const acase *c = r->c;
  int64_t S = c->S, Sk = c->Sk, H = c->H, Hk = c->Hkv, D = c->D, G = H / Hk;
  double *p = malloc(sizeof(double) * (size_t)Sk), *dp = malloc(sizeof(double) * (size_t)Sk);
  double *mdp = malloc(sizeof(double) * (size_t)Sk);
  if (m) {
    memset(m->o, 0, sizeof(double) * (size_t)(c->B * S * H * D));
    memset(m->dq, 0, sizeof(double) * (size_t)(c->B * S * H * D));
    memset(m->dk, 0, sizeof(double) * (size_t)(c->B * Sk * Hk * D));
    memset(m->dv, 0, sizeof(double) * (size_t)(c->B * Sk * Hk * D));
  }
  if (dq) {
    memset(dq, 0, sizeof(double) * (size_t)(c->B * S * H * D));
    memset(dk, 0, sizeof(double) * (size_t)(c->B * Sk * Hk * D));
    memset(dv, 0, sizeof(double) * (size_t)(c->B * Sk * Hk * D));
  }
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < S; i++) {
        int64_t kh = h / G, lim = r->lens ? r->lens[b] : Sk;
        if (c->causal && i + Sk - S + 1 < lim) lim = i + Sk - S + 1;
        if (lim < 0) lim = 0;
        const double *qi = r->q + ((b * S + i) * H + h) * D;
        double *oi = o + ((b * S + i) * H + h) * D, mx = -INFINITY, sum = 0, E = 1;
        for (int64_t j = 0; j < lim; j++) {
          const double *kj = r->k + ((b * Sk + j) * Hk + kh) * D;
          double s = 0, a = 0;
          for (int64_t d = 0; d < D; d++) {
            s += qi[d] * kj[d];
            a += fabs(qi[d] * kj[d]);
          }
          p[j] = s * r->scale;
          if (p[j] > mx) mx = p[j];
          if (1 + 2 * a * r->scale > E) E = 1 + 2 * a * r->scale;
        }
        for (int64_t j = 0; j < lim; j++) sum += (p[j] = exp(p[j] - mx));
        for (int64_t d = 0; d < D; d++) oi[d] = 0;
        if (lse) lse[(b * H + h) * S + i] = lim ? mx + log(sum) : -INFINITY;
        if (m) m->lse[(b * H + h) * S + i] = lim ? 4 * (E + fabs(mx + log(sum))) : 0;
        if (!lim) continue;
        double *mo = m ? m->o + ((b * S + i) * H + h) * D : NULL;
        for (int64_t j = 0; j < lim; j++) {
          p[j] /= sum;
          const double *vj = r->v + ((b * Sk + j) * Hk + kh) * D;
          for (int64_t d = 0; d < D; d++) oi[d] += p[j] * vj[d];
          if (mo)
            for (int64_t d = 0; d < D; d++) mo[d] += (4 * E * p[j] + lowp(r, p[j], 1)) * fabs(vj[d]);
        }
        if (!dq) continue;
        const double *doi = r->w + ((b * S + i) * H + h) * D;
        double dl = 0, mdl = 0;
        for (int64_t j = 0; j < lim; j++) {
          const double *vj = r->v + ((b * Sk + j) * Hk + kh) * D;
          double s = 0, a = 0;
          for (int64_t d = 0; d < D; d++) {
            s += doi[d] * vj[d];
            a += fabs(doi[d] * vj[d]);
          }
          dp[j] = s;
          mdp[j] = a;
          dl += p[j] * s;
          mdl += p[j] * a;
        }
        for (int64_t j = 0; j < lim; j++) {
          double ds = p[j] * (dp[j] - dl) * r->scale;
          if (m) {
            double mds = 4 * r->scale * p[j] * (mdp[j] + mdl + E * fabs(dp[j] - dl));
            const double *kj = r->k + ((b * Sk + j) * Hk + kh) * D;
            double *a = m->dq + ((b * S + i) * H + h) * D, *bk = m->dk + ((b * Sk + j) * Hk + kh) * D;
            double *bv = m->dv + ((b * Sk + j) * Hk + kh) * D;
            double lds = lowp(r, ds, r->scale), lp = lowp(r, p[j], 1);
            for (int64_t d = 0; d < D; d++) {
              a[d] += (mds + lds) * fabs(kj[d]);
              bk[d] += (mds + lds) * fabs(qi[d]);
              bv[d] += (4 * E * p[j] + lp) * fabs(doi[d]);
            }
          }
          const double *kj = r->k + ((b * Sk + j) * Hk + kh) * D;
          double *dqi = dq + ((b * S + i) * H + h) * D, *dkj = dk + ((b * Sk + j) * Hk + kh) * D;
          double *dvj = dv + ((b * Sk + j) * Hk + kh) * D;
          for (int64_t d = 0; d < D; d++) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
            dvj[d] += p[j] * doi[d];
          }
        }
      }
  free(p);
  free(dp);
  free(mdp);
}

