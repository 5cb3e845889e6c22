/* Parity of embedding_fwd / embedding_bwd against double references (f32,
 * and bf16 table/y and dy with an f32 dtable), the backward against finite
 * differences, out-of-range ids at execution, and validation messages. */
#include <stdio.h>

#include "tests/parity/harness.h"

/* in: ids [B,L], table [V,D] */
static void ref_fwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  (void)c;
  int64_t n = in[0].n, D = in[1].t->shape[1];
  for (int64_t i = 0; i < n; i++)
    for (int64_t d = 0; d < D; d++) out[0].d[i * D + d] = in[1].d[(int64_t)in[0].d[i] * D + d];
}

/* in: dy [B,L,D], ids [B,L]; out: dtable [V,D] (holds its prior contents on entry) */
static void ref_bwd(const gpa_pcase *c, gpa_parr *in, gpa_parr *out) {
  int acc = (int)gpa_pcase_get_i(c, "accumulate", 0);
  int64_t n = in[1].n, D = out[0].t->shape[1];
  if (!acc)
    for (int64_t i = 0; i < out[0].n; i++) out[0].d[i] = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t d = 0; d < D; d++) out[0].d[(int64_t)in[1].d[i] * D + d] += in[0].d[i * D + d];
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static gpa_pcase fwd(int64_t B, int64_t L, int64_t V, int64_t D, int64_t lo, int64_t hi) {
  gpa_pcase c = gpa_pcase_make("embedding_fwd", ref_fwd);
  gpa_pcase_in(&c, gpa_pt_int(GPA_I32, 2, SH(B, L), lo, hi));
  gpa_pcase_in(&c, gpa_pt_f32(2, SH(V, D), -1, 1));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 3, SH(B, L, D)));
  return c;
}

static gpa_pcase bwd(int64_t B, int64_t L, int64_t V, int64_t D, int64_t lo, int64_t hi) {
  gpa_pcase c = gpa_pcase_make("embedding_bwd", ref_bwd);
  gpa_pcase_in(&c, gpa_pt_f32(3, SH(B, L, D), -1, 1));
  gpa_pcase_in(&c, gpa_pt_int(GPA_I32, 2, SH(B, L), lo, hi));
  gpa_pcase_out(&c, gpa_pt_spec(GPA_F32, 2, SH(V, D)));
  return c;
}

/* bf16 storage: the forward copies bf16 values (exact: the default
 * tolerance); the backward sums the widened bf16 dy into an f32 dtable in
 * double, as the f32 op does (exact inputs: the default tolerance too). */
static void bf16_cases(gpa_parity *p) {
  /* 32 x 128 ids: the most the one-block sort takes (the main job's step);
   * 16 x 300: past it, the sort network's stages as separate launches */
  const int64_t shapes[][4] = {{1, 1, 1, 1},      {2, 3, 5, 7},       {0, 5, 10, 4}, {2, 5, 10, 0}, {4, 33, 97, 64},
                               {8, 64, 1000, 129}, {32, 128, 60, 16}, {16, 300, 50, 8}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t *s = shapes[i];
    gpa_pcase c = fwd(s[0], s[1], s[2], s[3], 0, s[2] - 1);
    c.in[1] = gpa_pt_bf16(2, SH(s[2], s[3]), -1, 1);
    c.out[0].dtype = GPA_BF16;
    gpa_parity_check(p, &c);
    for (int acc = 0; acc < 2; acc++) {
      c = bwd(s[0], s[1], s[2], s[3], 0, s[2] - 1);
      c.in[0] = gpa_pt_bf16(3, SH(s[0], s[1], s[3]), -1, 1);
      if (acc) {
        gpa_pcase_attr_int(&c, "accumulate", 1);
        c.out[0] = gpa_pt_f32(2, SH(s[2], s[3]), -1, 1);
      }
      gpa_parity_check(p, &c);
    }
  }
  gpa_pcase c = fwd(2, 3, 7, 4, 0, 6);
  c.in[1] = gpa_pt_bf16(2, SH(7, 4), -1, 1);
  /* the submit's "outputs[0] has dtype ..." (EDTYPE) or the harness's own
   * direct check (ESHAPE, "output 0: shape function expects ...") */
  gpa_parity_expect_error(p, &c, 0, "bf16");
  c = bwd(2, 3, 7, 4, 0, 6);
  c.in[0] = gpa_pt_bf16(3, SH(2, 3, 4), -1, 1);
  c.out[0].dtype = GPA_BF16; /* dtable stays f32 */
  /* the submit's "outputs[0] has dtype ..." (EDTYPE) or the harness's own
   * direct check (ESHAPE, "output 0: shape function expects ...") */
  gpa_parity_expect_error(p, &c, 0, "bf16");
  c = fwd(2, 3, 7, 4, 0, 6);
  c.in[1].dtype = GPA_F16;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "embedding_fwd: table has dtype f16, expected f32 or bf16");
}

int main(void) {
  gpa_parity *p = gpa_parity_open("parity_embedding");
  const gpa_pgrad g = {.op = "embedding_bwd", .n_dy = 1, .n_in = 2, .in = {{GPA_PSRC_DY, 0}, {GPA_PSRC_FWD_IN, 0}},
                       .n_out = 1, .grad_of = {1}, .ref = ref_bwd};
  /* B, L, V, D */
  const int64_t shapes[][4] = {{1, 1, 1, 1},  {2, 3, 5, 7},   {3, 7, 3, 13},      {1, 100, 2, 33},
                               {0, 5, 10, 4},  {2, 0, 10, 4},  {2, 5, 10, 0},      {4, 33, 97, 64},
                               {8, 64, 1000, 129}, {32, 128, 60, 16}, {16, 300, 50, 8}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t *s = shapes[i];
    gpa_pcase c = fwd(s[0], s[1], s[2], s[3], 0, s[2] - 1);
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &g);
    c = bwd(s[0], s[1], s[2], s[3], 0, s[2] - 1);
    gpa_pcase_attr_int(&c, "accumulate", 1);
    c.out[0] = gpa_pt_f32(2, SH(s[2], s[3]), -1, 1); /* prior gradient, added to */
    c.label = "accumulate";
    gpa_parity_check(p, &c);
  }
  /* 19200 ids: the sort's tiles of 4096 merged over three sequence sizes
   * (global stages and tile merges, ops/embedding/cuda.c) */
  gpa_pcase big = bwd(64, 300, 50, 4, 0, 49);
  gpa_parity_check(p, &big);
  /* CUDA's backward without a sort (ops/embedding/cuda_rows.c; the ctest
   * parity_embedding_sort forces the sort path for every case): the main
   * job's shape, one id everywhere (a run of 4000 cut into 125 pieces), one
   * vocabulary row past the size rule's 1024 (the sort path) */
  const int64_t rows_cases[][6] = {{32, 128, 256, 96, 0, 255}, {4, 1000, 7, 8, 3, 3}, {1, 64, 1025, 4, 0, 1024}};
  for (size_t i = 0; i < sizeof rows_cases / sizeof rows_cases[0]; i++) {
    const int64_t *s = rows_cases[i];
    gpa_pcase c = bwd(s[0], s[1], s[2], s[3], s[4], s[5]);
    gpa_parity_check(p, &c);
    gpa_pcase_attr_int(&c, "accumulate", 1);
    c.out[0] = gpa_pt_f32(2, SH(s[2], s[3]), -1, 1);
    c.label = "accumulate";
    gpa_parity_check(p, &c);
  }
  if (gpa_parity_large(p)) {
    gpa_pcase c = fwd(8, 512, 32000, 64, 0, 31999);
    gpa_parity_check(p, &c);
    gpa_parity_grad(p, &c, &g);
  } else {
    gpa_pcase c = fwd(2, 64, 32000, 16, 0, 31999);
    gpa_parity_grad(p, &c, &g);
  }
  bf16_cases(p);
  /* ids out of range: detected at execution, the message names the position */
  gpa_pcase c = fwd(2, 3, 7, 4, -9, -1);
  gpa_parity_expect_error(p, &c, GPA_ERANGE, "embedding_fwd: ids[0,0] = -");
  c = fwd(4, 50, 7, 4, 0, 13);
  gpa_parity_expect_error(p, &c, GPA_ERANGE, "out of range [0, 7)");
  c = bwd(3, 5, 6, 4, 6, 6);
  gpa_parity_expect_error(p, &c, GPA_ERANGE, "embedding_bwd: ids[0,0] = 6 out of range [0, 6)");
  /* validation */
  c = fwd(2, 3, 7, 4, 0, 6);
  c.in[0].dtype = GPA_F32;
  gpa_parity_expect_error(p, &c, GPA_EDTYPE, "embedding_fwd: ids has dtype f32, expected i32");
  c = fwd(2, 3, 7, 4, 0, 6);
  c.in[1].rank = 1;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "embedding_fwd: table has shape [7]");
  c = bwd(2, 3, 7, 4, 0, 6);
  c.in[1].shape[1] = 4;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, "embedding_bwd: ids has shape [2,4], expected [2,3]");
  c = bwd(2, 3, 7, 4, 0, 6);
  c.out[0].shape[1] = 5;
  gpa_parity_expect_error(p, &c, GPA_ESHAPE, NULL);
  c = bwd(2, 3, 7, 4, 0, 6);
  gpa_pcase_attr_int(&c, "accumulate", 3);
  gpa_parity_expect_error(p, &c, 0, "accumulate");
  return gpa_parity_close(p);
}
