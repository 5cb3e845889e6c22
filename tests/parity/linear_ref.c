/* The linear parity references: see linear_ref.h. */
#include "tests/parity/linear_ref.h"

#include <math.h>

#define GC 0.7978845608028654 /* sqrt(2 / pi) */
#define GA 0.044715

double gpa_pref_gelu(double s) { return 0.5 * s * (1 + tanh(GC * (s + GA * s * s * s))); }

double gpa_pref_dgelu(double s) {
  double u = GC * (s + GA * s * s * s), t = tanh(u);
  return 0.5 * (1 + t) + 0.5 * s * (1 - t * t) * GC * (1 + 3 * GA * s * s);
}

void gpa_pref_linear_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int gelu = c->n_out == 2 || gpa_pcase_get_i(c, "gelu", 0);
  int64_t N = in[0].t->shape[0], K = in[0].t->shape[1], M = in[1].t->shape[0];
  for (int64_t i = 0; i < N; i++)
    for (int64_t j = 0; j < M; j++) {
      double s = c->n_in > 2 ? in[2].d[j] : 0;
      for (int64_t k = 0; k < K; k++) s += in[0].d[i * K + k] * in[1].d[j * K + k];
      out[0].d[i * M + j] = gelu ? gpa_pref_gelu(s) : s;
      if (c->n_out == 2) out[1].d[i * M + j] = s;
    }
}
