/* The host layernorm kernels give the same bits however their rows are
 * split over threads (kernels/host/host_par.h's rule). The AVX2 path sums a
 * row either inside the previous row's loop or, for the first row of a
 * thread's range, on its own; both must agree, as must the backward's
 * column partials. A fake parallel-for cuts the range at chosen points
 * (one to three pieces) and the results are compared with one serial run,
 * with streaming stores forced on (gpa__nt_force(1), what GPA_HOST_NT=1 does) and y/dx at every float
 * offset modulo 32 bytes, so heads and tails of every length occur. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/layernorm.h"
#include "kernels/host/nt_store.h"
#include "util/nn_test.h"
#include "util/testutil.h"

static int64_t cut; /* where the fake loop splits [0, n) */

/* Output offsets tried. The test runs no threads, so ThreadSanitizer has
 * nothing to check here and only slows it (57 s of CPU, past the time limit
 * on a loaded machine): under it, two offsets instead of eight. */
#ifdef GPA_TSAN
#define OFF_STEP 5
#else
#define OFF_STEP 1
#endif

static void split_pfor(void *self, int64_t n, int64_t grain, gpa__range_fn fn, void *ctx) {
  (void)self;
  (void)grain;
  int64_t k = cut % n, a = k / 2;
  if (a > 0) fn(0, a, ctx);
  if (k > a) fn(a, k, ctx);
  fn(k, n, ctx);
}

static void same(const char *what, const float *a, const float *b, int64_t n, int64_t D, int64_t c) {
  if (n && memcmp(a, b, (size_t)n * sizeof *a)) {
    int64_t i = 0;
    while (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) i++;
    fprintf(stderr, "%s: D=%lld cut=%lld: [%lld] %.9g vs serial %.9g\n", what, (long long)D, (long long)c,
            (long long)i, b[i], a[i]);
    exit(1);
  }
}

/* Every split of [N, D] (forward cuts fstep apart, backward bstep apart)
 * against the serial run. */
static void check(int64_t N, int64_t D, int64_t fstep, int64_t bstep) {
  const int64_t nd = N * D;
  float *x = malloc((size_t)nd * sizeof *x), *dy = malloc((size_t)nd * sizeof *dy);
  float *y0 = malloc((size_t)(nd + 8) * sizeof *y0), *y1 = malloc((size_t)(nd + 8) * sizeof *y1);
  float *g = malloc((size_t)D * sizeof *g), *b = malloc((size_t)D * sizeof *b);
  float *dg0 = malloc((size_t)D * sizeof *dg0), *db0 = malloc((size_t)D * sizeof *db0);
  float *dg1 = malloc((size_t)D * sizeof *dg1), *db1 = malloc((size_t)D * sizeof *db1);
  float *m0 = malloc((size_t)N * sizeof *m0), *r0 = malloc((size_t)N * sizeof *r0);
  float *m1 = malloc((size_t)N * sizeof *m1), *r1 = malloc((size_t)N * sizeof *r1);
  void *scratch = malloc(gpa__layernorm_bwd_scratch(N, D));
  CHECK(x && dy && y0 && y1 && g && b && dg0 && db0 && dg1 && db1 && scratch && m0 && r0 && m1 && r1);
  gpa_nt_fill(x, nd, -2.0, 2.0, &(uint64_t){1 + (uint64_t)D});
  for (int64_t i = 0; i < nd; i += 7) x[i] += 1e3f; /* rows with a large mean and outliers */
  gpa_nt_fill(dy, nd, -1.0, 1.0, &(uint64_t){2 + (uint64_t)D});
  gpa_nt_fill(g, D, 0.5, 1.5, &(uint64_t){3});
  gpa_nt_fill(b, D, -1.0, 1.0, &(uint64_t){4});
  for (int off = 0; off < 8; off += OFF_STEP) {
    float *ys = y0 + off, *yp = y1 + off;
    gpa__layernorm_fwd_f32(NULL, ys, m0, r0, x, g, b, N, D, 1e-5);
    for (cut = 1; cut < 2 * N; cut += fstep) {
      const gpa__par par = {split_pfor, NULL, 2};
      gpa__layernorm_fwd_f32(&par, yp, m1, r1, x, g, b, N, D, 1e-5);
      same("layernorm_fwd y", ys, yp, nd, D, cut);
      same("layernorm_fwd mean", m0, m1, N, D, cut);
      same("layernorm_fwd rstd", r0, r1, N, D, cut);
    }
    gpa__layernorm_bwd_f32(NULL, ys, dg0, db0, x, dy, g, m0, r0, N, D, scratch);
    for (cut = 1; cut < 2 * N; cut += bstep) { /* the backward splits groups of rows: few distinct cuts */
      const gpa__par par = {split_pfor, NULL, 2};
      gpa__layernorm_bwd_f32(&par, yp, dg1, db1, x, dy, g, m0, r0, N, D, scratch);
      same("layernorm_bwd dx", ys, yp, nd, D, cut);
      same("layernorm_bwd dgamma", dg0, dg1, D, D, cut);
      same("layernorm_bwd dbeta", db0, db1, D, D, cut);
    }
  }
  free(x), free(dy), free(y0), free(y1), free(g), free(b), free(dg0), free(db0), free(dg1), free(db1);
  free(scratch), free(m0), free(r0), free(m1), free(r1);
}

int main(void) {
  gpa__nt_force(1);
  const int64_t Ds[] = {1024, 1000, 97, 37, 5, 1};
  /* 131 rows: 5 blocks of GPA__LN_BLOCK_ROWS, the last partial */
  for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) check(131, Ds[di], 29, 3);
  /* 4100 rows: the backward's blocks in groups of 4 (33 groups, the last
   * one block of 4 rows; cuts 31 apart reach every group boundary) */
  check(4100, 37, 997, 31);
  check(4100, 5, 997, 31);
  printf("ok: layernorm fwd/bwd bitwise the same for every split of the rows\n");
  return 0;
}
