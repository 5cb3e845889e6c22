/* The 16-byte paths of the memory-bound kernels (GELU, layernorm; f32 and
 * bf16) against their scalar fallbacks: the same values once in aligned
 * views (the vector path) and once one element into their buffers (every
 * pointer misaligned: the scalar path), on the backend GPA_DEVICE selects.
 * GELU is elementwise, so both must give the same bits; so must layernorm's
 * dgamma/dbeta (the partials sum each column in row order either way);
 * layernorm's y and dx sum a row in another order per path, so they agree
 * to fp32 rounding (f32) or within a bf16 ulp (bf16). GELU's size is not
 * a multiple of 8, so the vector path's scalar tail runs too. A NaN x gives NaN
 * y and dx in both paths. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/bf16.h"
#include "util/nn_test.h"

enum { NG = 1027 };

static int failures;

/* Uploads n values (as dtype) into a buffer of n + off elements, the view at element off. */
static gpa_tensor view(gpa_nt *t, int dt, uint32_t rank, const int64_t *shape, const float *v, int64_t n, int off) {
  size_t es = dt == GPA_BF16 ? 2 : 4;
  unsigned char *h = calloc((size_t)(n + off) + 1, es);
  for (int64_t i = 0; i < n; i++) {
    if (dt == GPA_BF16) {
      uint16_t b = gpa__f32_to_bf16(v[i]);
      memcpy(h + (size_t)(i + off) * es, &b, 2);
    } else {
      memcpy(h + (size_t)(i + off) * es, &v[i], 4);
    }
  }
  int64_t flat = n + off;
  gpa_tensor x = gpa_nt_tensor(t, dt, 1, &flat, h);
  free(h);
  x.rank = rank;
  memcpy(x.shape, shape, rank * sizeof *shape);
  x.offset = (uint64_t)off * es;
  return x;
}

/* Reads a view back as floats. */
static void get(gpa_nt *t, const gpa_tensor *x, float *out, int64_t n) {
  if (x->dtype != GPA_BF16) {
    gpa_nt_read(t, x, out);
    return;
  }
  uint16_t *b = malloc((size_t)n * 2 + 2);
  gpa_nt_read(t, x, b);
  for (int64_t i = 0; i < n; i++) out[i] = gpa__bf16_to_f32(b[i]);
  free(b);
}

static void run(gpa_nt *t, const char *op, const gpa_tensor *in, uint32_t ni, const gpa_tensor *out, uint32_t no,
                const gpa_attr *at, uint32_t na) {
  if (gpa_nt_run(t, op, in, ni, out, no, at, na) != GPA_OK) {
    printf("FAIL %s: %s\n", op, gpa_nt_msg);
    failures++;
  }
}

/* a and b agree: bit for bit (tol < 0) or within tol * max|a| */
static void agree(const char *what, const float *a, const float *b, int64_t n, double tol) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(a[i]));
  for (int64_t i = 0; i < n; i++) {
    int bad = tol < 0 ? memcmp(&a[i], &b[i], 4) != 0 : !(fabs(a[i] - b[i]) <= tol * mx);
    if (bad) {
      printf("FAIL %s: [%lld] vector path %.9g, scalar path %.9g\n", what, (long long)i, a[i], b[i]);
      failures++;
      return;
    }
  }
  printf("ok   %s (%lld values)\n", what, (long long)n);
}

static void gelu(gpa_nt *t, int dt, int form) {
  float *x = malloc(NG * 4), *dy = malloc(NG * 4), *r[4];
  uint64_t seed = 11 + (uint64_t)form;
  gpa_nt_fill(x, NG, -6, 6, &seed);
  gpa_nt_fill(dy, NG, -2, 2, &seed);
  x[3] = NAN; /* inside the vector path's first 16 bytes: y and dx NaN in both paths */
  x[5] = -INFINITY, x[6] = INFINITY; /* erf form: y ~0 and inf, dx ~0 and dy */
  int64_t n = NG;
  gpa_attr at = {"approximate", GPA_ATTR_INT, form, 0};
  for (int off = 0; off < 2; off++) {
    gpa_tensor in[2] = {view(t, dt, 1, &n, x, n, off), view(t, dt, 1, &n, dy, n, off)};
    gpa_tensor y = view(t, dt, 1, &n, x, n, off), dx = view(t, dt, 1, &n, x, n, off);
    run(t, "gelu_fwd", in, 1, &y, 1, &at, 1);
    run(t, "gelu_bwd", in, 2, &dx, 1, &at, 1);
    get(t, &y, r[2 * off] = malloc(NG * 4), n);
    get(t, &dx, r[2 * off + 1] = malloc(NG * 4), n);
  }
  char w[96];
  snprintf(w, sizeof w, "gelu_fwd %s form %d", dt == GPA_BF16 ? "bf16" : "f32", form);
  agree(w, r[0], r[2], n, -1);
  snprintf(w, sizeof w, "gelu_bwd %s form %d", dt == GPA_BF16 ? "bf16" : "f32", form);
  agree(w, r[1], r[3], n, -1);
  for (int k = 0; k < 4; k++)
    if (!isnan(r[k][3])) {
      printf("FAIL gelu_%s %s form %d, %s path: x NaN gave %.9g\n", k % 2 ? "bwd" : "fwd",
             dt == GPA_BF16 ? "bf16" : "f32", form, k < 2 ? "vector" : "scalar", r[k][3]);
      failures++;
    }
  for (int k = 0; k < 4 && form == 0; k++) {
    const float lo = r[k][5], hi = r[k][6], want_hi = k % 2 ? r[k][6] : INFINITY;
    const float dyh = dt == GPA_BF16 ? gpa__bf16_to_f32(gpa__f32_to_bf16(dy[6])) : dy[6];
    if (!(fabsf(lo) < 1e-30f) || !(k % 2 ? hi == dyh : hi == want_hi)) {
      printf("FAIL gelu_%s %s erf, %s path: x -inf, +inf gave %.9g, %.9g\n", k % 2 ? "bwd" : "fwd",
             dt == GPA_BF16 ? "bf16" : "f32", k < 2 ? "vector" : "scalar", lo, hi);
      failures++;
    }
  }
  for (int i = 0; i < 4; i++) free(r[i]);
  free(x);
  free(dy);
}

/* D = 96: lane groups; 2056: a block per row holding it in registers
 * (forward, both dtypes) against the lane groups' scalar path. N = 1003
 * rows of 96: dgamma/dbeta split over 32 chunks of rows on CUDA, whose
 * tile's last block adds them (kernels/cuda/split_sum.h). */
static void layernorm(gpa_nt *t, int dt, int64_t N, int64_t D) {
  float *x = malloc(sizeof(float) * N * D), *dy = malloc(sizeof(float) * N * D), *gm = malloc(sizeof(float) * D);
  float *bt = malloc(sizeof(float) * D), *r[2], *st = malloc(sizeof(float) * 2 * N);
  r[0] = malloc(sizeof(float) * (N * D + 2 * D));
  r[1] = malloc(sizeof(float) * (N * D + 2 * D));
  uint64_t seed = 5;
  gpa_nt_fill(x, N * D, -2, 2, &seed);
  gpa_nt_fill(dy, N * D, -1, 1, &seed);
  gpa_nt_fill(gm, D, 0.5, 1.5, &seed);
  gpa_nt_fill(bt, D, -1, 1, &seed);
  int64_t s2[2] = {N, D}, sd = D, sn = N;
  gpa_attr eps = {"eps", GPA_ATTR_FLOAT, 0, 1e-5};
  char dn[32];
  snprintf(dn, sizeof dn, "%s N=%lld D=%lld", dt == GPA_BF16 ? "bf16" : "f32", (long long)N, (long long)D);
  for (int off = 0; off < 2; off++) {
    gpa_tensor in[3] = {view(t, dt, 2, s2, x, N * D, off), view(t, GPA_F32, 1, &sd, gm, D, off),
                        view(t, GPA_F32, 1, &sd, bt, D, off)};
    gpa_tensor out[3] = {view(t, dt, 2, s2, x, N * D, off), view(t, GPA_F32, 1, &sn, x, N, off),
                         view(t, GPA_F32, 1, &sn, x, N, off)};
    run(t, "layernorm_fwd", in, 3, out, 3, &eps, 1);
    get(t, &out[0], r[off], N * D);
    if (off == 0) { /* the statistics of the vector path feed both backward runs */
      get(t, &out[1], st, N);
      get(t, &out[2], st + N, N);
    }
  }
  char w[96];
  snprintf(w, sizeof w, "layernorm_fwd %s y", dn);
  agree(w, r[0], r[1], N * D, dt == GPA_BF16 ? 8e-3 : 2e-6);
  for (int off = 0; off < 2; off++) {
    gpa_tensor in[5] = {view(t, dt, 2, s2, x, N * D, off), view(t, dt, 2, s2, dy, N * D, off),
                        view(t, GPA_F32, 1, &sd, gm, D, off), view(t, GPA_F32, 1, &sn, st, N, off),
                        view(t, GPA_F32, 1, &sn, st + N, N, off)};
    gpa_tensor out[3] = {view(t, dt, 2, s2, x, N * D, off), view(t, GPA_F32, 1, &sd, gm, D, off),
                         view(t, GPA_F32, 1, &sd, gm, D, off)};
    run(t, "layernorm_bwd", in, 5, out, 3, NULL, 0);
    get(t, &out[0], r[off], N * D);
    get(t, &out[1], r[off] + N * D, D);
    get(t, &out[2], r[off] + N * D + D, D);
  }
  snprintf(w, sizeof w, "layernorm_bwd %s dx", dn);
  agree(w, r[0], r[1], N * D, dt == GPA_BF16 ? 8e-3 : 2e-6);
  snprintf(w, sizeof w, "layernorm_bwd %s dgamma, dbeta", dn);
  agree(w, r[0] + N * D, r[1] + N * D, 2 * D, -1);
  free(x), free(dy), free(gm), free(bt), free(r[0]), free(r[1]), free(st);
}

int main(void) {
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  printf("backend %s\n", gpa_actor_backend(t.a));
  for (int dt = 0; dt < 2; dt++) {
    for (int form = 0; form < 2; form++) gelu(&t, dt ? GPA_BF16 : GPA_F32, form);
    layernorm(&t, dt ? GPA_BF16 : GPA_F32, 7, 96);
    layernorm(&t, dt ? GPA_BF16 : GPA_F32, 7, 2056);
    layernorm(&t, dt ? GPA_BF16 : GPA_F32, 1003, 96);
  }
  rc = gpa_nt_close(&t);
  return failures || rc ? 1 : 0;
}
