/* The host kernels' streaming-store paths (kernels/host/nt_store.h), which
 * the parity tests reach only for tensors larger than the L3: forced on
 * here (gpa__nt_force(1), what GPA_HOST_NT=1 does, before the first kernel call) and checked against
 * plain references, on a pool, with outputs at every alignment modulo 16
 * bytes and lengths that leave heads and tails (gelu, add/scale/axpy,
 * layernorm fwd/bwd, embedding_bwd's zero and copied rows). Device
 * independent: runs the kernels directly. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/host/elementwise.h"
#include "kernels/host/embedding.h"
#include "kernels/host/gelu.h"
#include "kernels/host/layernorm.h"
#include "kernels/host/nt_store.h"
#include "kernels/host/pool.h"
#include "util/nn_test.h"
#include "util/testutil.h"

static void near(const char *what, const float *got, const double *ref, int64_t n, double rtol, double atol) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - ref[i]) <= rtol * fabs(ref[i]) + atol)) {
      fprintf(stderr, "%s: [%lld] got %.9g ref %.9g\n", what, (long long)i, got[i], ref[i]);
      exit(1);
    }
}

int main(void) {
  gpa__nt_force(1);
  CHECK(gpa__nt_worth(4)); /* forced on */
  gpa__pool *pool = gpa__pool_create(2);
  CHECK(pool);
  const gpa__par par = gpa__pool_par(pool);
  enum { N = 70001 };
  float *x = malloc((N + 16) * sizeof(float)), *b = malloc((N + 16) * sizeof(float));
  float *y = malloc((N + 16) * sizeof(float));
  double *ref = malloc(N * sizeof(double));
  CHECK(x && b && y && ref);
  gpa_nt_fill(x, N, -4.0, 4.0, &(uint64_t){1});
  gpa_nt_fill(b, N, -4.0, 4.0, &(uint64_t){2});
  for (int off = 0; off < 4; off++) { /* y + off: 0, 4, 8, 12 bytes past 16-byte alignment */
    float *yo = y + off;
    gpa__gelu_fwd_f32(&par, yo, x, N, 0);
    for (int64_t i = 0; i < N; i++) ref[i] = 0.5 * x[i] * erfc(-x[i] / sqrt(2.0));
    near("gelu_fwd erf", yo, ref, N, 1e-5, 1e-7);
    gpa__gelu_bwd_f32(&par, yo, x, b, N, 1);
    for (int64_t i = 0; i < N; i++) {
      double v = x[i], k = sqrt(2.0 / M_PI), u = k * (v + 0.044715 * v * v * v), t = tanh(u);
      ref[i] = b[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v));
    }
    near("gelu_bwd tanh", yo, ref, N, 1e-5, 1e-6);
    gpa__add_f32(&par, yo, x, b, N);
    for (int64_t i = 0; i < N; i++) ref[i] = (double)(x[i] + b[i]);
    near("add", yo, ref, N, 0, 0);
    gpa__scale_f32(&par, yo, x, 0.5f, N);
    for (int64_t i = 0; i < N; i++) ref[i] = (double)(0.5f * x[i]);
    near("scale", yo, ref, N, 0, 0);
    gpa__axpy_f32(&par, yo, x, b, 2.0f, N);
    for (int64_t i = 0; i < N; i++) ref[i] = (double)(2.0f * x[i] + b[i]);
    near("axpy", yo, ref, N, 1e-7, 0);
  }
  /* layernorm: rows of odd length, so rows start at every alignment */
  {
    const int64_t R = 37, D = 1027;
    float g[1027], be[1027], mean[37], rstd[37], dg[1027], db[1027];
    gpa_nt_fill(g, D, -4.0, 4.0, &(uint64_t){3});
    gpa_nt_fill(be, D, -4.0, 4.0, &(uint64_t){4});
    void *scr = malloc(gpa__layernorm_bwd_scratch(R, D));
    CHECK(scr);
    gpa__layernorm_fwd_f32(&par, y, mean, rstd, x, g, be, R, D, 1e-5);
    for (int64_t r = 0; r < R; r++) {
      double m = 0, v = 0;
      for (int64_t i = 0; i < D; i++) m += x[r * D + i];
      m /= (double)D;
      for (int64_t i = 0; i < D; i++) v += (x[r * D + i] - m) * (x[r * D + i] - m);
      double rs = 1.0 / sqrt(v / (double)D + 1e-5);
      for (int64_t i = 0; i < D; i++) ref[r * D + i] = (x[r * D + i] - m) * rs * g[i] + be[i];
    }
    near("layernorm_fwd", y, ref, R * D, 1e-5, 1e-5);
    gpa__layernorm_bwd_f32(&par, y, dg, db, x, b, g, mean, rstd, R, D, scr);
    for (int64_t r = 0; r < R; r++) {
      double sa = 0, sb = 0;
      for (int64_t i = 0; i < D; i++) {
        double xh = (x[r * D + i] - mean[r]) * (double)rstd[r], gg = (double)b[r * D + i] * g[i];
        sa += gg;
        sb += gg * xh;
      }
      for (int64_t i = 0; i < D; i++) {
        double xh = (x[r * D + i] - mean[r]) * (double)rstd[r];
        ref[r * D + i] = rstd[r] * ((double)b[r * D + i] * g[i] - sa / (double)D - xh * sb / (double)D);
      }
    }
    near("layernorm_bwd dx", y, ref, R * D, 1e-4, 1e-4);
    free(scr);
  }
  /* embedding_bwd: most rows zero, some one copied row, some summed */
  {
    const int64_t V = 61, D = 33, n = 40;
    int32_t ids[40];
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7) % 23); /* ids < 23 used, some twice */
    void *scr = malloc(gpa__embedding_bwd_scratch(n, V));
    CHECK(scr);
    gpa_nt_fill(y, V * D, -4.0, 4.0, &(uint64_t){5}); /* garbage the zero rows must overwrite */
    gpa__embedding_bwd_f32(&par, y, x, ids, n, V, D, 0, scr);
    for (int64_t i = 0; i < V * D; i++) ref[i] = 0;
    for (int64_t i = 0; i < n; i++)
      for (int64_t d = 0; d < D; d++) ref[ids[i] * D + d] += x[i * D + d];
    near("embedding_bwd", y, ref, V * D, 1e-6, 1e-6);
    free(scr);
  }
  gpa__pool_destroy(pool);
  free(x), free(b), free(y), free(ref);
  printf("host_nt: ok\n");
  return 0;
}
