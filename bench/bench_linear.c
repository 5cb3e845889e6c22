/* linear and conv1d host kernels against cblas_sgemm of the same GEMM
 * shapes, measured alternately in the same run. Ours: the GEMMs split across
 * the host pool, OpenBLAS single-threaded (kernels/host/blas.h). The
 * reference: plain cblas_sgemm on OpenBLAS's own threads, one per CPU
 * (switched on for each reference run and off after it), with the kernel set
 * the library loaded it with: the best this CPU runs (bench/cblas_loaded.h;
 * "blas_kernels" in each row):
 *   linear_fwd       y = x W^T + b, 1024^3 (bias broadcast + GEMM beta=1)
 *   linear_fwd_gelu  the same with the fused tanh GELU
 *   linear_bwd       dx, dW, db (ref: the two GEMMs)
 *   conv1d_fwd       B=1, Cin=Cout=256, L=1024, K=3, pad 1 (one GEMM per tap on shifted x;
 *                    ref: the one GEMM of K = 768 on an im2col'd matrix built beforehand)
 *   conv1d_bwd       dx, dW, db (ref: the two GEMMs of the same shapes)
 *   conv1d_*_im2col  the same through the im2col path (im2col + one K = 768 GEMM per chunk)
 * GPA_BENCH_THREADS=1 compares one thread with one OpenBLAS thread.
 *
 * gemm_targets: issue 26's shapes (linear [4096,768]->3072 and 1024^3, conv1d
 * B8 C256 L1024 K3 d4 and B32 C96 L128 K3, causal), each against the best
 * sgemm of the same FLOPs: an n^3 GEMM with n^3 = FLOPs/2 (the shape a BLAS
 * runs best), timed through both cblas_sgemm on OpenBLAS's threads and
 * gpa__sgemm on the host pool, the faster taken, its time scaled to the
 * op's FLOPs. The op's own GEMMs are smaller or thinner than that cube, so
 * ratio = reference time / ours is the fraction of the machine's GEMM rate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "bench/cblas_loaded.h"
#include "bench_nn_host.h"
#include "kernels/host/blas.h"
#include "kernels/host/conv1d.h"
#include "kernels/host/linear.h"

typedef struct lin_ctx {
  int64_t N, in, out;
  float *x, *W, *b, *y, *pre, *dy, *dx, *dW, *db, *g;
  int gelu;
} lin_ctx;

static void run_lin_fwd(void *p) {
  lin_ctx *c = p;
  gpa__linear_fwd(gpa_bench_host_par(), c->x, c->W, c->b, c->y, c->gelu ? c->pre : NULL, c->N, c->in, c->out,
                  c->gelu);
}
static void run_lin_bwd(void *p) {
  lin_ctx *c = p;
  gpa__linear_bwd(gpa_bench_host_par(), c->dy, c->x, c->W, NULL, c->dx, c->dW, c->db, c->N, c->in, c->out, 0,
                  NULL);
}
/* OpenBLAS threads for the reference (on) and back to ours (off). */
static void ref_threads(int on) {
  int t = gpa_bench_host_threads();
  openblas_set_num_threads(on || !gpa__blas_single_threaded() ? t : 1);
}

static void ref_lin_fwd(void *p) {
  lin_ctx *c = p;
  ref_threads(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c->N, (int)c->out, (int)c->in, 1.0f, c->x, (int)c->in,
              c->W, (int)c->in, 0.0f, c->y, (int)c->out);
  ref_threads(0);
}
static void ref_lin_bwd(void *p) {
  lin_ctx *c = p;
  ref_threads(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->N, (int)c->in, (int)c->out, 1.0f, c->dy,
              (int)c->out, c->W, (int)c->in, 0.0f, c->dx, (int)c->in);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)c->out, (int)c->in, (int)c->N, 1.0f, c->dy,
              (int)c->out, c->x, (int)c->in, 0.0f, c->dW, (int)c->in);
  ref_threads(0);
}

static char extra_buf[256];
/* cold_ns, cold_ref_ns: the best first run after a pause (see
 * gpa_bench_pair_settled); ns and ref_ns are the runs right after those. */
static const char *extra(double cold, double cold_ref) {
  snprintf(extra_buf, sizeof extra_buf,
           "\"threads\":%d,\"blas_threads\":%d,\"ref_blas_threads\":%d,\"cold_ns\":%.1f,\"cold_ref_ns\":%.1f,"
           "\"cold_ratio\":%.4f,\"blas_kernels\":\"%s\"",
           gpa_bench_host_threads(), openblas_get_num_threads(), gpa_bench_host_threads(), cold, cold_ref,
           cold_ref / cold, gpa__blas()->kernels);
  return extra_buf;
}

/* The best sgemm of given FLOPs (see the top): an n x n x n GEMM. */
typedef struct cube_ctx {
  int64_t n;
  float *a, *b, *c;
} cube_ctx;

static void cube_cblas(void *p) {
  cube_ctx *c = p;
  int n = (int)c->n;
  ref_threads(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, c->a, n, c->b, n, 0.0f, c->c, n);
  ref_threads(0);
}
static void cube_pool(void *p) {
  cube_ctx *c = p;
  gpa__sgemm(gpa_bench_host_par(), 0, 0, c->n, c->n, c->n, c->a, c->n, c->b, c->n, 0.0f, c->c, c->n);
}

/* Ours (run on ctx) against the best sgemm of `flops`; emits one row. */
static void vs_cube(const char *name, const char *shape, double flops, void (*run)(void *), void *ctx, int reps) {
  cube_ctx q = {.n = (int64_t)llround(cbrt(flops / 2.0) / 16.0) * 16};
  if (q.n < 64) q.n = 64;
  size_t nn = (size_t)(q.n * q.n);
  q.a = malloc(nn * 4); q.b = malloc(nn * 4); q.c = malloc(nn * 4);
  if (q.a && q.b && q.c) {
    gpa_bench_fill(q.a, (int64_t)nn, -1, 1, 7);
    gpa_bench_fill(q.b, (int64_t)nn, -1, 1, 8);
    double ns, bns, pns, ns2, cns = 0, cbns = 0;
    gpa_bench_pair_settled(reps, run, ctx, cube_cblas, &q, &ns, &bns, &cns, &cbns);
    gpa_bench_pair_settled(reps, run, ctx, cube_pool, &q, &ns2, &pns, NULL, NULL);
    if (ns2 < ns) ns = ns2;
    double scale = flops / (2.0 * (double)q.n * (double)q.n * (double)q.n);
    double best = (bns < pns ? bns : pns) * scale;
    char ex[512];
    snprintf(ex, sizeof ex, "%s,\"cube_n\":%lld,\"cube_cblas_ns\":%.1f,\"cube_pool_ns\":%.1f", extra(cns, cbns * scale),
             (long long)q.n, bns * scale, pns * scale);
    gpa_bench_result res = {.name = name, .backend = "cpu", .shape = shape, .ref = "best_sgemm_same_flops",
                            .ns = ns, .ref_ns = best, .flops = flops, .extra = ex};
    gpa_bench_emit(&res);
  }
  free(q.a); free(q.b); free(q.c);
}

/* target: 0 compares with cblas_sgemm of the op's own GEMMs; 1 with vs_cube. */
static void lin_bench_at(const char *name, int bwd, int gelu, int64_t N, int64_t in, int64_t out, int target) {
  lin_ctx c = {.N = N, .in = in, .out = out, .gelu = gelu};
  size_t nx = (size_t)(c.N * c.in), nw = (size_t)(c.out * c.in), ny = (size_t)(c.N * c.out);
  c.x = malloc(nx * 4); c.W = malloc(nw * 4); c.b = malloc((size_t)c.out * 4); c.y = malloc(ny * 4);
  c.pre = malloc(ny * 4); c.dy = malloc(ny * 4); c.dx = malloc(nx * 4); c.dW = malloc(nw * 4);
  c.db = malloc((size_t)c.out * 4);
  if (!c.x || !c.W || !c.b || !c.y || !c.pre || !c.dy || !c.dx || !c.dW || !c.db) return;
  gpa_bench_fill(c.x, (int64_t)nx, -1, 1, 1);
  gpa_bench_fill(c.W, (int64_t)nw, -1, 1, 2);
  gpa_bench_fill(c.b, c.out, -1, 1, 3);
  gpa_bench_fill(c.dy, (int64_t)ny, -1, 1, 4);
  double fl = (bwd ? 4.0 : 2.0) * (double)c.N * (double)c.in * (double)c.out;
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)N, (long long)in, (long long)out);
  if (target) {
    vs_cube(name, shape, fl, bwd ? run_lin_bwd : run_lin_fwd, &c, gpa_bench_reps(9));
  } else {
    double ns, rns, cns, crns;
    gpa_bench_pair_settled(gpa_bench_reps(15), bwd ? run_lin_bwd : run_lin_fwd, &c,
                           bwd ? ref_lin_bwd : ref_lin_fwd, &c, &ns, &rns, &cns, &crns);
    gpa_bench_result res = {.name = name, .backend = "cpu", .shape = shape, .ref = "cblas_sgemm",
                            .ns = ns, .ref_ns = rns, .flops = fl, .extra = extra(cns, crns)};
    gpa_bench_emit(&res);
  }
  free(c.x); free(c.W); free(c.b); free(c.y); free(c.pre); free(c.dy); free(c.dx); free(c.dW); free(c.db);
}

static void lin_bench(const char *name, int bwd, int gelu) { lin_bench_at(name, bwd, gelu, 1024, 1024, 1024, 0); }

void gpa_bench_linear_fwd(void) {
  lin_bench("linear_fwd", 0, 0);
  lin_bench("linear_fwd_gelu", 0, 1);
}
void gpa_bench_linear_bwd(void) { lin_bench("linear_bwd", 1, 0); }

typedef struct conv_ctx {
  gpa__conv1d_geom g;
  float *x, *W, *b, *y, *dy, *dx, *dW, *db, *scratch;
} conv_ctx;

static void run_conv_fwd(void *p) {
  conv_ctx *c = p;
  gpa__conv1d_fwd(gpa_bench_host_par(), &c->g, c->x, c->W, c->b, c->y, c->scratch);
}
static void run_conv_bwd(void *p) {
  conv_ctx *c = p;
  gpa__conv1d_bwd(gpa_bench_host_par(), &c->g, c->dy, c->x, c->W, c->dx, c->dW, c->db, c->scratch);
}
/* The GEMMs of the same shapes (per batch): y = W col; dW = dy col^T; dcol = W^T dy. */
static void ref_conv_fwd(void *p) {
  conv_ctx *c = p;
  int M = (int)c->g.Cout, N = (int)c->g.Lout, K = (int)(c->g.Cin * c->g.K);
  ref_threads(1);
  for (int64_t b = 0; b < c->g.B; b++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, c->W, K, c->scratch, N, 0.0f,
                c->y + b * M * N, N);
  ref_threads(0);
}
static void ref_conv_bwd(void *p) {
  conv_ctx *c = p;
  int M = (int)c->g.Cout, N = (int)c->g.Lout, K = (int)(c->g.Cin * c->g.K);
  ref_threads(1);
  for (int64_t b = 0; b < c->g.B; b++) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, c->dy + b * M * N, N, c->scratch, N,
                b ? 1.0f : 0.0f, c->dW, K);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, c->W, K, c->dy + b * M * N, N, 0.0f,
                c->scratch + (size_t)K * N, N);
  }
  ref_threads(0);
}

/* target: as lin_bench_at; name NULL: the conv1d_{fwd,bwd}[_im2col] names. */
static void conv_bench_at(const char *name, int bwd, gpa__conv1d_geom g, int target) {
  conv_ctx c = {.g = g};
  if (!gpa__conv1d_geom_init(&c.g)) return;
  size_t nx = (size_t)(c.g.B * c.g.Cin * c.g.L), nw = (size_t)(c.g.Cout * c.g.Cin * c.g.K);
  size_t ny = (size_t)(c.g.B * c.g.Cout * c.g.Lout);
  size_t ns_ = (size_t)gpa__conv1d_scratch_bytes(&c.g, 1, gpa_bench_host_par()) + 2 * (size_t)(c.g.Cin * c.g.K * c.g.Lout) * 4;
  c.x = malloc(nx * 4); c.W = malloc(nw * 4); c.b = malloc((size_t)c.g.Cout * 4); c.y = malloc(ny * 4);
  c.dy = malloc(ny * 4); c.dx = malloc(nx * 4); c.dW = malloc(nw * 4); c.db = malloc((size_t)c.g.Cout * 4);
  c.scratch = malloc(ns_);
  if (!c.x || !c.W || !c.b || !c.y || !c.dy || !c.dx || !c.dW || !c.db || !c.scratch) return;
  gpa_bench_fill(c.x, (int64_t)nx, -1, 1, 1);
  gpa_bench_fill(c.W, (int64_t)nw, -1, 1, 2);
  gpa_bench_fill(c.b, c.g.Cout, -1, 1, 3);
  gpa_bench_fill(c.dy, (int64_t)ny, -1, 1, 4);
  gpa_bench_fill(c.scratch, (int64_t)(ns_ / 4), -1, 1, 5);
  double fl = (bwd ? 4.0 : 2.0) * (double)c.g.B * (double)c.g.Cout * (double)(c.g.Cin * c.g.K) * (double)c.g.Lout;
  const char *names[2][2] = {{"conv1d_fwd", "conv1d_fwd_im2col"}, {"conv1d_bwd", "conv1d_bwd_im2col"}};
  char shape[96];
  snprintf(shape, sizeof shape, "B%lld_Cin%lld_Cout%lld_L%lld_K%lld_d%lld_padl%lld_padr%lld", (long long)g.B,
           (long long)g.Cin, (long long)g.Cout, (long long)g.L, (long long)g.K, (long long)g.dilation,
           (long long)g.pad_l, (long long)g.pad_r);
  if (target) {
    vs_cube(name, shape, fl, bwd ? run_conv_bwd : run_conv_fwd, &c, gpa_bench_reps(9));
  } else {
    double ns, rns, cns, crns;
    gpa_bench_pair_settled(gpa_bench_reps(20), bwd ? run_conv_bwd : run_conv_fwd, &c,
                           bwd ? ref_conv_bwd : ref_conv_fwd, &c, &ns, &rns, &cns, &crns);
    gpa_bench_result res = {.name = name ? name : names[bwd][g.im2col], .backend = "cpu", .shape = shape,
                            .ref = "cblas_sgemm", .ns = ns, .ref_ns = rns, .flops = fl, .extra = extra(cns, crns)};
    gpa_bench_emit(&res);
  }
  free(c.x); free(c.W); free(c.b); free(c.y); free(c.dy); free(c.dx); free(c.dW); free(c.db); free(c.scratch);
}

static void conv_bench(int bwd, int im2col) {
  gpa__conv1d_geom g = {.B = 1, .Cin = 256, .L = 1024, .Cout = 256, .K = 3, .stride = 1, .pad_l = 1, .pad_r = 1,
                        .dilation = 1, .groups = 1, .im2col = im2col};
  conv_bench_at(NULL, bwd, g, 0);
}

void gpa_bench_conv1d_fwd(void) {
  conv_bench(0, 0);
  conv_bench(0, 1);
}
void gpa_bench_conv1d_bwd(void) {
  conv_bench(1, 0);
  conv_bench(1, 1);
}

/* Causal: all padding on the left, (K - 1) * dilation. */
static gpa__conv1d_geom causal(int64_t B, int64_t C, int64_t L, int64_t K, int64_t d) {
  return (gpa__conv1d_geom){.B = B, .Cin = C, .L = L, .Cout = C, .K = K, .stride = 1, .pad_l = (K - 1) * d,
                            .pad_r = 0, .dilation = d, .groups = 1};
}

void gpa_bench_gemm_targets(void) {
  lin_bench_at("target_linear_fwd", 0, 0, 4096, 768, 3072, 1);
  lin_bench_at("target_linear_bwd", 1, 0, 4096, 768, 3072, 1);
  lin_bench_at("target_linear_fwd", 0, 0, 1024, 1024, 1024, 1);
  lin_bench_at("target_linear_bwd", 1, 0, 1024, 1024, 1024, 1);
  conv_bench_at("target_conv1d_fwd", 0, causal(8, 256, 1024, 3, 4), 1);
  conv_bench_at("target_conv1d_bwd", 1, causal(8, 256, 1024, 3, 4), 1);
  conv_bench_at("target_conv1d_fwd", 0, causal(32, 96, 128, 3, 1), 1);
  conv_bench_at("target_conv1d_bwd", 1, causal(32, 96, 128, 3, 1), 1);
}
