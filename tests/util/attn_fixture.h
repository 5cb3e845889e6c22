/* One case of the attention tests (attention, attention_lowp, attention_nd,
 * cudnn_attention): its inputs, its key lengths, the double reference's
 * results (util/attn_ref.h) and the checks against them, written once so
 * that the tests agree on what a case is and how it is judged. Main thread
 * of a test only. */
#ifndef GPA_TESTS_ATTN_FIXTURE_H
#define GPA_TESTS_ATTN_FIXTURE_H
#include <stdint.h>

#include "util/attn_ref.h"
#include "util/half.h"
#include "util/nn_test.h"

/* A value in a 16-bit storage type (GPA_BF16 or GPA_F16) and back. */
static inline uint16_t tu_to16(int dtype, float f) { return dtype == GPA_F16 ? tu_to_f16(f) : tu_to_bf16(f); }
static inline float tu_from16(int dtype, uint16_t u) { return dtype == GPA_F16 ? tu_from_f16(u) : tu_from_bf16(u); }

typedef struct afix {
  const acase *c;
  int dtype;                   /* q, k, v, dout: GPA_F32, GPA_BF16 or GPA_F16 */
  int64_t nq, nk, nl;          /* elements of q (o, dout, dq), k (v, dk, dv), lse */
  int64_t qs[4], ks[4], ls[3]; /* their shapes */
  float *f[4];                 /* q, k, v, dout: their values (rounded to dtype) */
  uint16_t *u[4];              /* the same in dtype's bits (16-bit types; else NULL) */
  /* B key lengths: batch 0 all Sk, batch 1 none, the others spread (one may
   * end inside a key tile); the reference reads them when c->lens. A test
   * may write its own between gpa_afix_init and gpa_afix_ref. */
  int32_t *lens;
  aref r;                         /* the reference's inputs: double copies of f */
  double *o, *lse, *dq, *dk, *dv; /* the reference (gpa_afix_ref) */
  amag mg;                        /* its error magnitudes */
  float *ro, *rl;                 /* o and lse in f32: a backward fed the reference's */
  gpa_tensor q, k, v, dout, lt;   /* gpa_afix_upload's tensors (lt: the lengths) */
  char what[256];                 /* "<prefix> [dtype ]B=.. S=.. ...": the messages' subject */
} afix;

/* n uniform values in [lo, hi) rounded to dtype (16-bit): bits into u,
 * values into f. */
void gpa_afix_fill(int dtype, float *f, uint16_t *u, int64_t n, double lo, double hi, uint64_t *seed);

/* Case c's inputs in dtype from *seed (q and k in [-1.5, 1.5), v and dout
 * in [-1, 1), in that order), its lengths and x->what. */
void gpa_afix_init(afix *x, const acase *c, int dtype, const char *prefix, uint64_t *seed);
/* The reference at c->scale (0: 1/sqrt(D)), forward and gradients, with
 * their error magnitudes; lowp: with the roundings of P and dS to dtype
 * (the tensor-core kernels' bound, aref.u). Fills ro and rl. */
void gpa_afix_ref(afix *x, int lowp);
/* q, k, v, dout (dtype) and lengths as tensors of t. */
void gpa_afix_upload(gpa_nt *t, afix *x);
/* Reads the backward's three outputs into g (dq, dk, dv in a row, in their
 * dtype). */
void gpa_afix_read_grads(gpa_nt *t, const gpa_tensor out[3], void *g);
/* attention_bwd on in[] (nin tensors; q of shape qs, k and v of ks) with
 * the causal and deterministic attributes; gradients dq, dk, dv into g (f32:
 * nq + 2 nk floats) or, dtype16 (GPA_BF16 or GPA_F16), into u16 (the same
 * count of 16-bit values, NaN before the call). A failure fails the test,
 * naming what. */
void gpa_afix_bwd(gpa_nt *t, const char *what, const gpa_tensor *in, uint32_t nin, const int64_t qs[4],
                  const int64_t ks[4], int causal, int det, int dtype16, float *g, uint16_t *u16);
/* o within rtol_o, lse within 1e-5 of the reference (with its magnitudes). */
void gpa_afix_check_fwd(gpa_nt *t, const afix *x, const float *o, const float *lse, double rtol_o);
/* dq, dk, dv within rtol of the reference; note (nullable) follows each
 * name in the messages. */
void gpa_afix_check_grads(gpa_nt *t, const afix *x, const char *note, const float *dq, const float *dk,
                          const float *dv, double rtol);
void gpa_afix_free(afix *x);

#endif
