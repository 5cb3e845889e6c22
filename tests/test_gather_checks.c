/* embedding_fwd's row copies and the index checks that the CUDA backend
 * does inside the ops' own kernels (embedding_fwd's copy; cross-entropy's
 * one-block count and final sum), on the backend GPA_DEVICE selects:
 *  - y equals the table rows bit for bit, in aligned views (16-byte
 *    accesses) and one element into their buffers (the scalar fallback),
 *    for f32 and bf16, at row lengths that are not a multiple of 8 and
 *    that leave a thread's last step of accesses partly idle;
 *  - with several bad indices the message names the first one, its
 *    position and its value (the packed atomicMin of embedding_fwd, the
 *    block minimum of cross-entropy's checks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/bf16.h"
#include "util/nn_test.h"

/* A tensor of n elements of es bytes from host bytes, the view `off`
 * elements into its buffer (off = 1: every row access misaligned). */
static gpa_tensor view(gpa_nt *t, int dt, size_t es, uint32_t rank, const int64_t *shape, const void *v, int64_t n,
                       int off) {
  unsigned char *h = calloc((size_t)(n + off) + 1, es);
  if (v) memcpy(h + (size_t)off * es, v, (size_t)n * es);
  int64_t flat = n + off;
  gpa_tensor x = gpa_nt_tensor(t, dt, 1, &flat, h);
  free(h);
  x.rank = rank;
  memcpy(x.shape, shape, rank * sizeof *shape);
  x.offset = (uint64_t)off * es;
  return x;
}

static void rows(gpa_nt *t, int bf, int64_t B, int64_t L, int64_t V, int64_t D) {
  const size_t es = bf ? 2 : 4;
  const int64_t n = B * L;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
  float *f = malloc(sizeof(float) * (size_t)(V * D));
  unsigned char *tab = malloc((size_t)(V * D) * es), *want = malloc((size_t)(n * D) * es + 1);
  unsigned char *got = malloc((size_t)(n * D) * es + 1);
  uint64_t seed = (uint64_t)(V * 131 + D);
  gpa_nt_fill(f, V * D, -3, 3, &seed);
  for (int64_t i = 0; i < V * D; i++) {
    if (bf) {
      const uint16_t b = gpa__f32_to_bf16(f[i]);
      memcpy(tab + (size_t)i * 2, &b, 2);
    } else {
      memcpy(tab + (size_t)i * 4, &f[i], 4);
    }
  }
  for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + 3) % V);
  for (int64_t i = 0; i < n; i++) memcpy(want + (size_t)(i * D) * es, tab + (size_t)(ids[i] * D) * es, (size_t)D * es);
  const int64_t si[2] = {B, L}, st[2] = {V, D}, sy[3] = {B, L, D};
  for (int off = 0; off < 2; off++) {
    gpa_tensor in[2] = {gpa_nt_tensor(t, GPA_I32, 2, si, ids), view(t, bf ? GPA_BF16 : GPA_F32, es, 2, st, tab, V * D, off)};
    gpa_tensor y = view(t, bf ? GPA_BF16 : GPA_F32, es, 3, sy, NULL, n * D, off);
    char what[96];
    snprintf(what, sizeof what, "embedding_fwd %s [%lld,%lld] of [%lld,%lld], %s", bf ? "bf16" : "f32", (long long)B,
             (long long)L, (long long)V, (long long)D, off ? "one element in (scalar)" : "aligned view");
    if (gpa_nt_run(t, "embedding_fwd", in, 2, &y, 1, NULL, 0) != GPA_OK) {
      printf("FAIL %s: %s\n", what, gpa_nt_msg);
      t->failures++;
      continue;
    }
    gpa_nt_read(t, &y, got);
    int64_t bad = -1;
    for (int64_t i = 0; i < n * D && bad < 0; i++)
      if (memcmp(got + (size_t)i * es, want + (size_t)i * es, es)) bad = i;
    if (bad >= 0) {
      printf("FAIL %s: y[%lld] differs from table[%d][%lld]\n", what, (long long)bad, ids[bad / D],
             (long long)(bad % D));
      t->failures++;
    } else {
      printf("ok   %s\n", what);
    }
  }
  free(ids), free(f), free(tab), free(want), free(got);
}

/* ids [4, 50] of a 7-row table, valid but for three: the first is ids[1,7] */
static void bad_ids(gpa_nt *t, int bf) {
  int32_t ids[200];
  for (int i = 0; i < 200; i++) ids[i] = i % 7;
  ids[50 + 30] = -4, ids[50 + 7] = 9, ids[150] = 7;
  const int64_t si[2] = {4, 50}, st[2] = {7, 16}, sy[3] = {4, 50, 16};
  const int dt = bf ? GPA_BF16 : GPA_F32;
  gpa_tensor in[2] = {gpa_nt_tensor(t, GPA_I32, 2, si, ids), gpa_nt_tensor(t, dt, 2, st, NULL)};
  gpa_tensor y = gpa_nt_tensor(t, dt, 3, sy, NULL);
  gpa_nt_expect_error(t, "embedding_fwd", in, 2, &y, 1, NULL, 0, GPA_ERANGE,
                      "embedding_fwd: ids[1,7] = 9 out of range [0, 7)");
  ids[50 + 7] = 1;
  in[0] = gpa_nt_tensor(t, GPA_I32, 2, si, ids);
  gpa_nt_expect_error(t, "embedding_fwd", in, 2, &y, 1, NULL, 0, GPA_ERANGE,
                      "embedding_fwd: ids[1,30] = -4 out of range [0, 7)");
}

/* 600 rows of 32 classes (more rows than the check's block has threads:
 * each thread's first bad position is not the block's), ignore_index -100
 * at some rows; bad targets at 411, 517 and 299 (the first). */
static void bad_targets(gpa_nt *t) {
  enum { N = 600, C = 32 };
  int32_t tg[N];
  for (int i = 0; i < N; i++) tg[i] = i % 9 == 0 ? -100 : i % C;
  tg[411] = -3, tg[517] = C + 2, tg[299] = C;
  float *x = malloc(sizeof(float) * N * C);
  uint64_t seed = 3;
  gpa_nt_fill(x, N * C, -2, 2, &seed);
  const int64_t sx[2] = {N, C}, sn[1] = {N}, s1[1] = {1};
  gpa_tensor in[2] = {gpa_nt_tensor(t, GPA_F32, 2, sx, x), gpa_nt_tensor(t, GPA_I32, 1, sn, tg)};
  gpa_tensor loss = gpa_nt_tensor(t, GPA_F32, 1, s1, NULL), dx = gpa_nt_tensor(t, GPA_F32, 2, sx, NULL);
  const char *want = "targets[299] = 32 out of range [0, 32) (ignore_index -100)";
  gpa_nt_expect_error(t, "cross_entropy_fwd", in, 2, &loss, 1, NULL, 0, GPA_ERANGE, want);
  gpa_nt_expect_error(t, "cross_entropy_bwd", in, 2, &dx, 1, NULL, 0, GPA_ERANGE, want);
  tg[299] = 1, tg[517] = 0;
  in[1] = gpa_nt_tensor(t, GPA_I32, 1, sn, tg);
  want = "targets[411] = -3 out of range [0, 32) (ignore_index -100)";
  gpa_nt_expect_error(t, "cross_entropy_fwd", in, 2, &loss, 1, NULL, 0, GPA_ERANGE, want);
  gpa_nt_expect_error(t, "cross_entropy_bwd", in, 2, &dx, 1, NULL, 0, GPA_ERANGE, want);
  free(x);
}

int main(void) {
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  printf("backend %s\n", gpa_actor_backend(t.a));
  /* D: f32 100 (25 accesses: 8 threads a row, the last step partly idle),
   * 1030 (not a multiple of 4: scalar, 256 threads a row, two steps), 13;
   * bf16 1000 (125 accesses), 4104 (513: 256 threads, the third access of
   * one thread), 12 (not a multiple of 8) */
  for (int bf = 0; bf < 2; bf++) {
    const int64_t ds[3] = {bf ? 1000 : 100, bf ? 4104 : 1030, bf ? 12 : 13};
    for (int k = 0; k < 3; k++) rows(&t, bf, 3, 11, 17, ds[k]);
    bad_ids(&t, bf);
  }
  bad_targets(&t);
  return gpa_nt_close(&t);
}
