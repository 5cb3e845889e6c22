/* Parity harness: runs ops against a plain double-precision reference, on
 * the backend GPA_DEVICE selects (through an actor) and directly (the op's
 * host implementation called inline, env NULL), and checks backward ops
 * against central finite differences of the forward reference.
 *
 * Adding a case (a few lines; see tests/test_parity_layernorm.c):
 *
 *   static void ref_relu(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
 *     for (int64_t i = 0; i < in[0].n; i++) out[0].d[i] = in[0].d[i] > 0 ? in[0].d[i] : 0;
 *   }
 *   int main(void) {
 *     gpa_parity *p = gpa_parity_open("relu");
 *     gpa_pcase c = gpa_pcase_make("relu", ref_relu);
 *     gpa_pcase_in(&c, gpa_pt_f32(2, (int64_t[]){7, 13}, -2, 2));   // inputs, in order
 *     gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, (int64_t[]){7, 13}));     // expected outputs
 *     gpa_pcase_attr_int(&c, "approximate", 1);                      // attributes
 *     gpa_parity_check(p, &c);            // op vs reference, fp32 rtol 1e-5
 *     return gpa_parity_close(p);         // 0 ok, 1 failures, 77 backend unavailable
 *   }
 *
 * References read in[i].d (every input converted to double, ints exactly) and
 * write out[i].d (NaN on entry, or the output's initial contents when the
 * output has a fill or aliases an input). Attributes: gpa_pcase_get_f/_i.
 *
 * Tolerance: an output element passes when
 *     |got - ref| <= rtol * |ref| + atol,
 * rtol = 1e-5 unless the case sets it, atol = rtol * 1e-2 * max|ref| over that
 * output unless the case sets it: an fp32 result that is a difference of terms
 * of size max|ref| carries an error of their ulp, not of its own (sums of
 * mixed signs, layernorm's dx, softmax - onehot); 1% of the relative tolerance
 * at the scale of the output is far below any real bug.
 *
 * Gradients: gpa_parity_grad(p, &fwd_case, &grad) builds the forward inputs,
 * runs the forward reference in double, draws random weights w for the first
 * grad.n_dy forward outputs (loss = sum w * out), builds the backward op's
 * inputs from them (forward inputs, forward outputs such as saved statistics,
 * the weights as dy), runs the backward op, compares it with grad.ref (an
 * analytic double reference, if given) at the usual tolerance, and with
 * central finite differences of the loss (double, forward reference) at
 * sampled elements of each differentiated input: |g - fd| <= fd_rtol*|fd| +
 * fd_rtol*0.1*max|g| (fd_rtol 1e-4: g is fp32, fd is O(h^2) accurate).
 * The FD check uses the direct run; without grad.ref the backward is not run
 * through the actor.
 *
 * Errors: gpa_parity_expect_error(p, &case, status, "substring") checks that
 * validation (submit) or execution fails with that status (0: any error) and
 * a message that contains the substring (e.g. the argument's name).
 *
 * On the cpu backend the actor's result (thread pool) must also equal the
 * direct, single-threaded result bit for bit (determinism). An op the
 * backend has no implementation of (EUNSUPPORTED "no implementation for
 * backend ...") is reported as skipped there, not failed; a test none of
 * whose cases could run on the backend exits 77. */
#ifndef GPA_TESTS_PARITY_HARNESS_H
#define GPA_TESTS_PARITY_HARNESS_H
#include <stdint.h>

#include "gpuactor.h"

#define GPA_PMAX 8 /* inputs, outputs, attributes per case */

enum gpa_pfill {
  GPA_PFILL_NONE = 0,    /* outputs: poisoned with NaN before the op runs */
  GPA_PFILL_UNIFORM = 1, /* uniform in [lo, hi) (floats) */
  GPA_PFILL_INT = 2,     /* integers uniform in [lo, hi] */
  GPA_PFILL_MASK = 3,    /* 1 with probability lo, else 0; each row's first element is 1 unless hi < 0 */
};

typedef struct gpa_pt {
  int32_t dtype;
  uint32_t rank;
  int64_t shape[GPA_MAX_RANK];
  int32_t fill; /* gpa_pfill */
  double lo, hi;
} gpa_pt;

typedef struct gpa_parr {
  double *d;
  int64_t n; /* elements */
  const gpa_pt *t;
} gpa_parr;

typedef struct gpa_pcase gpa_pcase;
typedef void (*gpa_pref_fn)(const gpa_pcase *c, gpa_parr *in, gpa_parr *out);

struct gpa_pcase {
  const char *op;
  gpa_pref_fn ref;
  uint32_t n_in, n_out, n_attrs;
  gpa_pt in[GPA_PMAX], out[GPA_PMAX];
  int32_t alias[GPA_PMAX]; /* out[i] is the same tensor as in[alias[i] - 1]; 0 = its own */
  gpa_attr attrs[GPA_PMAX];
  double rtol, atol;       /* 0 = defaults (see above) */
  uint64_t seed;           /* 0 = derived from op and shapes */
  const char *label;       /* optional note printed with the case */
};

/* Tensor specs. shape points at rank values. */
gpa_pt gpa_pt_spec(int dtype, uint32_t rank, const int64_t *shape);
gpa_pt gpa_pt_f32(uint32_t rank, const int64_t *shape, double lo, double hi);
/* A bf16 input filled uniformly in [lo, hi) (each value rounded to bf16: the
 * reference sees exactly what the op reads). */
gpa_pt gpa_pt_bf16(uint32_t rank, const int64_t *shape, double lo, double hi);
/* rtol for outputs stored as bf16: the op computes in fp32 (relative error
 * below 1e-5 against the double reference in these cases) and rounds once to
 * bf16, whose 8-bit significand gives a relative rounding error of at most
 * 2^-8 = 3.906e-3 (round to nearest even). Host and device may round fp32
 * values that differ in their last bits to neighbouring bf16 values, but each
 * stays within 2^-8 of its own fp32 value: 2^-8 + 1e-5 < 4e-3 covers both,
 * and an op that rounded twice, or computed in bf16, would exceed it. */
#define GPA_PARITY_BF16_RTOL 4e-3
gpa_pt gpa_pt_int(int dtype, uint32_t rank, const int64_t *shape, int64_t lo, int64_t hi);
gpa_pt gpa_pt_mask(int dtype, uint32_t rank, const int64_t *shape, double p_keep);

gpa_pcase gpa_pcase_make(const char *op, gpa_pref_fn ref);
void gpa_pcase_in(gpa_pcase *c, gpa_pt t);
void gpa_pcase_out(gpa_pcase *c, gpa_pt t);
/* Output i (the next one added) is input k, updated in place. */
void gpa_pcase_out_alias(gpa_pcase *c, uint32_t k);
void gpa_pcase_attr_int(gpa_pcase *c, const char *name, int64_t v);
void gpa_pcase_attr_float(gpa_pcase *c, const char *name, double v);
double gpa_pcase_get_f(const gpa_pcase *c, const char *name, double dflt);
int64_t gpa_pcase_get_i(const gpa_pcase *c, const char *name, int64_t dflt);

/* Backward inputs come from one of these. */
enum gpa_psrc_kind { GPA_PSRC_FWD_IN = 1, GPA_PSRC_FWD_OUT = 2, GPA_PSRC_DY = 3 };
typedef struct gpa_psrc {
  int32_t kind;
  uint32_t index;
} gpa_psrc;

typedef struct gpa_pgrad {
  const char *op;                  /* the backward op */
  uint32_t n_dy;                   /* forward outputs 0..n_dy-1 carry loss weights */
  uint32_t n_in;
  gpa_psrc in[GPA_PMAX];           /* the backward op's inputs, in order */
  uint32_t n_out;
  int32_t grad_of[GPA_PMAX];       /* backward output i = d loss / d forward input grad_of[i] */
  gpa_attr attrs[GPA_PMAX];
  uint32_t n_attrs;
  const char *dy_attr;             /* scalar dy given as this float attribute instead (e.g. "scale") */
  gpa_pref_fn ref;                 /* analytic backward reference (optional); sees the backward case */
  double fd_rtol;                  /* 0 = 1e-4 */
  int64_t fd_max_numel;            /* forward inputs larger than this skip the FD check; 0 = 65536 */
} gpa_pgrad;

typedef struct gpa_parity gpa_parity;

/* Opens the harness: an actor on the backend GPA_DEVICE selects (NULL
 * options). If none can be created, only the direct runs happen and close
 * answers 77 (skip) when nothing failed. Main thread of a test only. */
gpa_parity *gpa_parity_open(const char *suite);
/* 1 when large shapes should run (not a sanitizer build, GPA_PARITY_QUICK unset). */
int gpa_parity_large(const gpa_parity *p);
/* Runs one case; returns 1 if it passed. */
int gpa_parity_check(gpa_parity *p, const gpa_pcase *c);
int gpa_parity_grad(gpa_parity *p, const gpa_pcase *fwd, const gpa_pgrad *g);
int gpa_parity_expect_error(gpa_parity *p, const gpa_pcase *c, int status, const char *substring);
/* Records a failure of a check made by the test itself. */
void gpa_parity_fail(gpa_parity *p, const char *what);
/* Frees everything; the process exit code (0, 1, or 77). */
int gpa_parity_close(gpa_parity *p);

#endif
