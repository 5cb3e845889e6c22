/* gpa-bench conv1d_nlc: the host conv1d kernels (kernels/host/conv1d.c,
 * conv1d_direct.c) channels last (geom.nlc: x [B,L,Cin], y [B,Lout,Cout])
 * against the same convolution in the default layout ([B,C,L]) on the same
 * values re-laid, forward and backward, at the main job's shape (B32 C96
 * L128 K3 causal, dilation 1 and 8) and at B8 C256 L1024 K3 dilation 4
 * causal. Each row's
 * ns is nlc, ref_ns ncl (ref "conv1d_ncl"), measured alternately by
 * gpa_bench_pair_settled (the same pauses and warm second runs as the
 * conv1d_fwd / conv1d_bwd rows), so a ratio ref_ns / ns near 1 means the
 * layout costs nothing. Threads: the host backend's pool. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "bench_nn_host.h"
#include "kernels/host/conv1d.h"

typedef struct lay_ctx {
  gpa__conv1d_geom g;
  float *x, *W, *b, *y, *dy, *dx, *dW, *db, *scratch;
} lay_ctx;

static void run_fwd(void *p) {
  lay_ctx *c = p;
  gpa__conv1d_fwd(gpa_bench_host_par(), &c->g, c->x, c->W, c->b, c->y, c->scratch);
}
static void run_bwd(void *p) {
  lay_ctx *c = p;
  gpa__conv1d_bwd(gpa_bench_host_par(), &c->g, c->dy, c->x, c->W, c->dx, c->dW, c->db, c->scratch);
}

/* [B][C][L] -> [B][L][C] */
static void to_nlc(float *dst, const float *src, int64_t B, int64_t C, int64_t L) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t l = 0; l < L; l++) dst[(b * L + l) * C + c] = src[(b * C + c) * L + l];
}

static int ctx_init(lay_ctx *c, gpa__conv1d_geom g, int nlc, const lay_ctx *from) {
  c->g = g;
  c->g.nlc = nlc;
  size_t nx = (size_t)(g.B * g.Cin * g.L), nw = (size_t)(g.Cout * g.Cin / g.groups * g.K);
  size_t ny = (size_t)(g.B * g.Cout * g.Lout);
  size_t ns = (size_t)gpa__conv1d_scratch_bytes(&c->g, 1, gpa_bench_host_par());
  size_t nf = (size_t)gpa__conv1d_scratch_bytes(&c->g, 0, gpa_bench_host_par());
  c->x = malloc(nx * 4), c->W = malloc(nw * 4), c->b = malloc((size_t)g.Cout * 4), c->y = malloc(ny * 4);
  c->dy = malloc(ny * 4), c->dx = malloc(nx * 4), c->dW = malloc(nw * 4), c->db = malloc((size_t)g.Cout * 4);
  c->scratch = malloc((ns > nf ? ns : nf) + 64);
  if (!c->x || !c->W || !c->b || !c->y || !c->dy || !c->dx || !c->dW || !c->db || !c->scratch) return 0;
  if (!from) {
    gpa_bench_fill(c->x, (int64_t)nx, -1, 1, 1);
    gpa_bench_fill(c->W, (int64_t)nw, -1, 1, 2);
    gpa_bench_fill(c->b, g.Cout, -1, 1, 3);
    gpa_bench_fill(c->dy, (int64_t)ny, -1, 1, 4);
    return 1;
  }
  to_nlc(c->x, from->x, g.B, g.Cin, g.L);
  to_nlc(c->dy, from->dy, g.B, g.Cout, g.Lout);
  for (size_t i = 0; i < nw; i++) c->W[i] = from->W[i];
  for (int64_t i = 0; i < g.Cout; i++) c->b[i] = from->b[i];
  return 1;
}

static void ctx_free(lay_ctx *c) {
  free(c->x), free(c->W), free(c->b), free(c->y), free(c->dy), free(c->dx), free(c->dW), free(c->db);
  free(c->scratch);
}

static void layout_rows(int64_t B, int64_t C, int64_t L, int64_t K, int64_t d) {
  gpa__conv1d_geom g = {.B = B, .Cin = C, .L = L, .Cout = C, .K = K, .stride = 1, .pad_l = (K - 1) * d,
                        .pad_r = 0, .dilation = d, .groups = 1};
  if (!gpa__conv1d_geom_init(&g)) return;
  lay_ctx ncl = {0}, nlc = {0};
  if (ctx_init(&ncl, g, 0, NULL) && ctx_init(&nlc, g, 1, &ncl)) {
    char shape[96], extra[160];
    snprintf(shape, sizeof shape, "B%lld C%lld L%lld K%lld d%lld causal", (long long)B, (long long)C, (long long)L,
             (long long)K, (long long)d);
    for (int bwd = 0; bwd < 2; bwd++) {
      double ns, rns, cns, crns;
      gpa_bench_pair_settled(gpa_bench_reps(20), bwd ? run_bwd : run_fwd, &nlc, bwd ? run_bwd : run_fwd, &ncl, &ns,
                             &rns, &cns, &crns);
      snprintf(extra, sizeof extra, "\"threads\":%d,\"cold_ns\":%.1f,\"cold_ref_ns\":%.1f",
               gpa_bench_host_threads(), cns, crns);
      gpa_bench_result r = {.name = bwd ? "conv1d_nlc_bwd" : "conv1d_nlc_fwd", .backend = "cpu", .shape = shape,
                            .ref = "conv1d_ncl", .ns = ns, .ref_ns = rns,
                            .flops = (bwd ? 4.0 : 2.0) * (double)(B * C * C * K * g.Lout), .extra = extra};
      gpa_bench_emit(&r);
    }
  }
  ctx_free(&ncl);
  ctx_free(&nlc);
}

void gpa_bench_conv1d_nlc(void) {
  layout_rows(32, 96, 128, 3, 1);
  layout_rows(32, 96, 128, 3, 8); /* the main job's last block's dilation (docs/training.md) */
  layout_rows(8, 256, 1024, 3, 4);
}
