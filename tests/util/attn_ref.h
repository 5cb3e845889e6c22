/* A plain attention reference for the attention tests: the softmax
 * materialized in double, forward and gradients, with the magnitudes of the
 * rounding errors an fp32 (or bf16/fp16 tensor-core) implementation may
 * make. Main thread of a test only. */
#ifndef GPA_TESTS_ATTN_REF_H
#define GPA_TESTS_ATTN_REF_H
#include <stdint.h>

typedef struct acase {
  int64_t B, S, Sk, H, Hkv, D;
  int causal, lens; /* lens: 0 none, 1 per-batch lengths (b=1 gets 0 when B > 1) */
  double scale;     /* 0: default */
} acase;

typedef struct aref {
  const acase *c;
  double scale;
  const int32_t *lens;
  double *q, *k, *v, *w; /* w: weights of o in the loss (= dout) */
  /* Low-precision kernels (bf16, fp16) round P (forward and backward) and
   * dS to their storage type before the tensor-core products: each rounded
   * term t is off by at most u |t| + eta (u: unit roundoff, eta: half the
   * smallest subnormal). Nonzero: the magnitudes include twice that bound
   * for every rounded term, in units of FLT_EPSILON. */
  double u, eta;
} aref;

/* Magnitudes of the fp32 rounding errors of each output (divided by
 * FLT_EPSILON): sums of |terms|, with the softmax's sensitivity to score
 * errors of size eps * sum |q||k| * scale (plus the low-precision roundings
 * when aref.u or aref.eta is nonzero). */
typedef struct amag {
  double *o, *lse, *dq, *dk, *dv;
} amag;

/* o [B,S,H,D], lse [B,H,S] (nullable); the gradients of sum(w * o) too
 * when dq != NULL; error magnitudes when m != NULL (needs dq). */
void gpa_attn_ref(const aref *r, double *o, double *lse, double *dq, double *dk, double *dv, const amag *m);

#endif
