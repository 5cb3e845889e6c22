/* Optimizer kernels; see optim.h. The scalar factors are formed once in
 * double; the loops are streaming fp32 the compiler vectorizes. */
#include "kernels/host/optim.h"

#include <math.h>
#include <stdint.h>

#define OPT_GRAIN 16384

typedef struct opt_ctx {
  float *po, *mo, *vo;
  const float *p, *g, *m, *v;
  float decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps, lr, mu, wd;
  int nesterov;
} opt_ctx;

/* The same loop body in three aliasing forms: in place (the outputs are the
 * inputs), out of place (no overlap), and a general one. With restrict the
 * compiler vectorizes without run-time overlap checks over seven pointers. */
#define ADAMW_BODY(PO, MO, VO, P, G, M, V)                      \
  for (int64_t i = s; i < e; i++) {                             \
    float gi = G[i];                                            \
    float mi = b1 * M[i] + c1 * gi;                             \
    float vi = b2 * V[i] + c2 * gi * gi;                        \
    float pi = P[i] * decay;                                    \
    PO[i] = pi - ss * mi / (sqrtf(vi) * ib + eps);              \
    MO[i] = mi;                                                 \
    VO[i] = vi;                                                 \
  }
#define ADAMW_SCALARS                                                                  \
  const opt_ctx *c = ctx;                                                              \
  const float decay = c->decay, b1 = c->b1, c1 = c->c1, b2 = c->b2, c2 = c->c2;        \
  const float ss = c->step_size, ib = c->inv_bc2_sqrt, eps = c->eps

GPA__KCLONES static void adamw_inplace(int64_t s, int64_t e, void *ctx) {
  ADAMW_SCALARS;
  float *restrict p = c->po, *restrict m = c->mo, *restrict v = c->vo;
  const float *restrict g = c->g;
  ADAMW_BODY(p, m, v, p, g, m, v)
}

GPA__KCLONES static void adamw_apart(int64_t s, int64_t e, void *ctx) {
  ADAMW_SCALARS;
  float *restrict po = c->po, *restrict mo = c->mo, *restrict vo = c->vo;
  const float *restrict p = c->p, *restrict g = c->g, *restrict m = c->m, *restrict v = c->v;
  ADAMW_BODY(po, mo, vo, p, g, m, v)
}

static void adamw_any(int64_t s, int64_t e, void *ctx) {
  ADAMW_SCALARS;
  ADAMW_BODY(c->po, c->mo, c->vo, c->p, c->g, c->m, c->v)
}

/* 1 if [a, a+n) and [b, b+n) overlap */
static int overlap(const float *a, const float *b, int64_t n) {
  return (uintptr_t)a < (uintptr_t)(b + n) && (uintptr_t)b < (uintptr_t)(a + n);
}

void gpa__adamw_f32(const gpa__par *par, float *p_out, float *m_out, float *v_out, const float *p,
                    const float *g, const float *m, const float *v, int64_t n, const gpa__adamw_hp *hp) {
  double bc1 = 1.0 - pow(hp->beta1, (double)hp->step);
  double bc2 = 1.0 - pow(hp->beta2, (double)hp->step);
  opt_ctx c = {.po = p_out, .mo = m_out, .vo = v_out, .p = p, .g = g, .m = m, .v = v,
               .decay = (float)(1.0 - hp->lr * hp->weight_decay),
               .b1 = (float)hp->beta1, .c1 = (float)(1.0 - hp->beta1),
               .b2 = (float)hp->beta2, .c2 = (float)(1.0 - hp->beta2),
               .step_size = (float)(hp->lr / bc1), .inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)),
               .eps = (float)hp->eps};
  gpa__range_fn fn = adamw_any;
  if (p_out == p && m_out == m && v_out == v) {
    if (!overlap(p, g, n) && !overlap(p, m, n) && !overlap(p, v, n) && !overlap(g, m, n) && !overlap(g, v, n) &&
        !overlap(m, v, n))
      fn = adamw_inplace;
  } else {
    const float *all[7] = {p_out, m_out, v_out, p, g, m, v};
    int apart = 1;
    for (int i = 0; i < 3; i++)
      for (int j = i + 1; j < 7; j++) apart &= !overlap(all[i], all[j], n);
    if (apart) fn = adamw_apart;
  }
  gpa__pfor(par, n, OPT_GRAIN, fn, &c);
}

GPA__KCLONES static void sgd_range(int64_t s, int64_t e, void *ctx) {
  const opt_ctx *c = ctx;
  float *po = c->po, *bo = c->mo;
  const float *p = c->p, *g = c->g, *b = c->m;
  const float lr = c->lr, mu = c->mu, wd = c->wd;
  if (c->nesterov) {
    for (int64_t i = s; i < e; i++) {
      float gi = g[i] + wd * p[i];
      float bi = mu * b[i] + gi;
      po[i] = p[i] - lr * (gi + mu * bi);
      bo[i] = bi;
    }
  } else {
    for (int64_t i = s; i < e; i++) {
      float gi = g[i] + wd * p[i];
      float bi = mu * b[i] + gi;
      po[i] = p[i] - lr * bi;
      bo[i] = bi;
    }
  }
}

void gpa__sgd_f32(const gpa__par *par, float *p_out, float *buf_out, const float *p, const float *g,
                  const float *buf, int64_t n, const gpa__sgd_hp *hp) {
  opt_ctx c = {.po = p_out, .mo = buf_out, .p = p, .g = g, .m = buf, .lr = (float)hp->lr,
               .mu = (float)hp->momentum, .wd = (float)hp->weight_decay, .nesterov = hp->nesterov};
  gpa__pfor(par, n, OPT_GRAIN, sgd_range, &c);
}
