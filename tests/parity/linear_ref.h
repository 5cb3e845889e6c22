/* The double references of linear_fwd / linear_gelu_fwd and of the tanh
 * GELU they apply, shared by the f32 and bf16 linear parity tests. */
#ifndef GPA_TESTS_PARITY_LINEAR_REF_H
#define GPA_TESTS_PARITY_LINEAR_REF_H
#include "tests/parity/harness.h"

/* GELU, tanh form, and its derivative */
double gpa_pref_gelu(double s);
double gpa_pref_dgelu(double s);

/* in: x [N,K], W [M,K], b [M] (optional); out: y (and pre for
 * linear_gelu_fwd); attr gelu */
void gpa_pref_linear_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out);

#endif
