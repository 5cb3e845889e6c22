/* conv1d through cuDNN's convolutions (backends/cuda/cudnn_conv.c,
 * docs/cuda.md "cuDNN convolutions"), through the public API.
 *   - parity against a double reference of y (with bias), dx, dW and db,
 *     f32 and bf16: the main job's shape (B32 C96 L128 K3, causal,
 *     dilation 1 and 8) and a strided, grouped, padded one; f32 within an
 *     fp32 summation bound (a TF32 engine's rounding fails it), bf16 within
 *     one bf16 rounding of y and dx;
 *   - the backward twice: the same bits (on sim not at the main job's shape);
 *   - on sim, proof that cuDNN ran: its execution count grows by one per
 *     forward and two per backward, and the last engine is the
 *     deterministic exact one (1), not the non-deterministic (0) or TF32
 *     (2) ones its heuristics list first; the backend's own count
 *     (gpa__cudnn_stats.conv_execs, read by a user op) is printed on any
 *     device and checked on sim (on a GPU with GPA_TEST_EXPECT_CUDNN_CONV=1);
 *   - faults (sim): graph refused, no engine, plan refused, execute failing,
 *     no device memory for the workspace: each falls back to our kernels
 *     with correct results (the forward's execution not counted; after the
 *     execute fault the same shape runs on cuDNN again);
 *   - GPA_CUDNN_CONV=0 and a cuDNN that does not load: our kernels, correct;
 *   - where the machine has libcudnn.so.9 (no GPU needed; not in sanitizer
 *     builds): our convolution graphs finalize in the real library, with
 *     their heuristics.
 * cpu: the real-library part only. A real GPU: parity and determinism
 * (through cuDNN when it is there, else our kernels). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "util/nn_test.h"
#include "util/testutil.h"

#ifndef GPA_HAVE_CUDA_BACKEND
int main(void) {
  fprintf(stderr, "skipped: built without the CUDA backend\n");
  return 77;
}
#else
#include "backends/cuda/cudnn_conv.h"
#include "sim/cudnn/gpa_sim_cudnn.h"
#include "util/real_cudnn.h"

typedef struct shape {
  int64_t B, Cin, L, Cout, K, stride, pad, dil, G;
  int causal;
} shape;

static int64_t pad_l(const shape *s) { return s->causal ? (s->K - 1) * s->dil : s->pad; }
static int64_t pad_r(const shape *s) { return s->causal ? 0 : s->pad; }
static int64_t lout(const shape *s) { return (s->L + pad_l(s) + pad_r(s) - s->dil * (s->K - 1) - 1) / s->stride + 1; }

/* ---- the simulator's counters --------------------------------------------------------------------- */

static struct {
  void (*graph)(unsigned), (*heur)(unsigned), (*plan)(unsigned), (*exec)(unsigned), (*clear)(void);
  void (*counts)(long long *, long long *, long long *, int *);
  void (*workspace)(long long);
  void (*calls)(gpa_sim_cudnn_calls *);
} simc;
static int on_sim;

static void sim_api(void) {
  void *lib = dlopen("libgpa_sim_cudnn.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
  *(void **)&simc.graph = dlsym(lib, "gpa_sim_cudnn_fault_graph");
  *(void **)&simc.heur = dlsym(lib, "gpa_sim_cudnn_fault_heur");
  *(void **)&simc.plan = dlsym(lib, "gpa_sim_cudnn_fault_plan");
  *(void **)&simc.exec = dlsym(lib, "gpa_sim_cudnn_fault_exec");
  *(void **)&simc.clear = dlsym(lib, "gpa_sim_cudnn_fault_clear");
  *(void **)&simc.counts = dlsym(lib, "gpa_sim_cudnn_counts");
  *(void **)&simc.workspace = dlsym(lib, "gpa_sim_cudnn_set_workspace");
  *(void **)&simc.calls = dlsym(lib, "gpa_sim_cudnn_api_calls");
  CHECK(simc.graph && simc.heur && simc.plan && simc.exec && simc.clear && simc.counts && simc.workspace &&
        simc.calls);
  /* held open for the test's life: the counters are read across actors */
}

static long long sim_execs(int *engine) {
  long long e = 0;
  if (on_sim && simc.counts) simc.counts(NULL, NULL, &e, engine);
  return e;
}

/* ---- the backend's counters (any device with the cuda backend) ---------------------------------- */

/* A user op whose CUDA implementation reads the actor's cuDNN counters
 * (written on the actor thread, read after the handle completed). */
static gpa__cudnn_stats dnn_stats;
static char dnn_why[256];
static gpa_status stats_cuda(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__cudnn_get_stats(C, &dnn_stats);
  snprintf(dnn_why, sizeof dnn_why, "%s", gpa__cudnn_last_decline(C));
  return GPA_OK;
}
static void register_stats(gpa_actor *a) {
  gpa_op_desc d = {.size = sizeof d, .name = "dnn_conv_stats", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
                   .cuda = stats_cuda};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
}
/* The actor's cuDNN counters now (dnn_stats). */
static void read_stats(gpa_nt *t) {
  const int64_t one = 1;
  gpa_tensor a = gpa_nt_out(t, 1, &one), b = gpa_nt_out(t, 1, &one);
  if (gpa_nt_run(t, "dnn_conv_stats", &a, 1, &b, 1, NULL, 0) != GPA_OK) gpa_nt_fail(t, gpa_nt_msg);
}
/* Convolution plans cuDNN executed so far on t's actor. */
static long long backend_execs(gpa_nt *t) {
  read_stats(t);
  return (long long)dnn_stats.conv_execs;
}
static gpa_sim_cudnn_calls sim_calls(void) {
  gpa_sim_cudnn_calls c = {0};
  if (on_sim) simc.calls(&c);
  return c;
}

/* ---- reference ------------------------------------------------------------------------------------ */

typedef struct ref {
  double *y, *dx, *dW, *db, *my, *mdx, *mdW, *mdb; /* values and sums of |terms| */
} ref;

static void reference(const shape *s, const float *x, const float *W, const float *b, const float *dy, ref *r) {
  int64_t lo = lout(s), cg = s->Cin / s->G, og = s->Cout / s->G;
  size_t ny = (size_t)(s->B * s->Cout * lo), nx = (size_t)(s->B * s->Cin * s->L), nw = (size_t)(s->Cout * cg * s->K);
  double **all[8] = {&r->y, &r->dx, &r->dW, &r->db, &r->my, &r->mdx, &r->mdW, &r->mdb};
  size_t sz[8] = {ny, nx, nw, (size_t)s->Cout, ny, nx, nw, (size_t)s->Cout};
  for (int i = 0; i < 8; i++) *all[i] = calloc(sz[i] + 1, sizeof(double));
  for (int64_t n = 0; n < s->B; n++)
    for (int64_t co = 0; co < s->Cout; co++)
      for (int64_t t = 0; t < lo; t++) {
        size_t yi = (size_t)((n * s->Cout + co) * lo + t);
        double g = dy[yi];
        r->y[yi] = b[co], r->my[yi] = fabs(b[co]);
        r->db[co] += g, r->mdb[co] += fabs(g);
        for (int64_t cj = 0; cj < cg; cj++)
          for (int64_t k = 0; k < s->K; k++) {
            int64_t pos = t * s->stride - pad_l(s) + k * s->dil;
            if (pos < 0 || pos >= s->L) continue;
            size_t xi = (size_t)((n * s->Cin + co / og * cg + cj) * s->L + pos), wi = (size_t)((co * cg + cj) * s->K + k);
            r->y[yi] += (double)W[wi] * x[xi], r->my[yi] += fabs((double)W[wi] * x[xi]);
            r->dx[xi] += g * W[wi], r->mdx[xi] += fabs(g * W[wi]);
            r->dW[wi] += g * x[xi], r->mdW[wi] += fabs(g * x[xi]);
          }
      }
}

static void ref_free(ref *r) {
  double *all[8] = {r->y, r->dx, r->dW, r->db, r->my, r->mdx, r->mdW, r->mdb};
  for (int i = 0; i < 8; i++) free(all[i]);
}

/* ---- one case ------------------------------------------------------------------------------------- */

static void attrs(const shape *s, gpa_attr at[5]) {
  const char *names[5] = {"stride", "padding", "dilation", "groups", "causal"};
  int64_t v[5] = {s->stride, s->pad, s->dil, s->G, s->causal};
  for (int i = 0; i < 5; i++) at[i] = (gpa_attr){names[i], GPA_ATTR_INT, v[i], 0.0};
}

/* Values as the dtype holds them (bf16: rounded), and the tensor. */
static gpa_tensor upload(gpa_nt *t, int dtype, int64_t n0, int64_t n1, int64_t n2, float *v, int64_t n) {
  const int64_t shp[3] = {n0, n1, n2};
  uint32_t rank = n1 ? 3 : 1;
  if (dtype == GPA_F32) return gpa_nt_tensor(t, GPA_F32, rank, rank == 3 ? shp : &n0, v);
  uint16_t *h = malloc(sizeof *h * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) h[i] = tu_to_bf16(v[i]), v[i] = tu_from_bf16(h[i]);
  gpa_tensor r = gpa_nt_tensor(t, GPA_BF16, rank, rank == 3 ? shp : &n0, h);
  free(h);
  return r;
}

static void read_f(gpa_nt *t, const gpa_tensor *g, float *dst, int64_t n) {
  if (g->dtype == GPA_F32) {
    gpa_nt_read(t, g, dst);
    return;
  }
  uint16_t *h = malloc(sizeof *h * (size_t)(n + 1));
  gpa_nt_read(t, g, h);
  for (int64_t i = 0; i < n; i++) dst[i] = tu_from_bf16(h[i]);
  free(h);
}

/* Runs forward and backward of shape s in dtype and checks them; the
 * cuDNN executions they took (sim) into *execs. */
static void check_case(gpa_nt *t, const char *what, const shape *s, int dtype, uint64_t seed, long long *execs) {
  int64_t lo = lout(s), cg = s->Cin / s->G;
  int64_t nx = s->B * s->Cin * s->L, nw = s->Cout * cg * s->K, ny = s->B * s->Cout * lo;
  float *x = malloc(sizeof(float) * (size_t)nx), *W = malloc(sizeof(float) * (size_t)nw);
  float *b = malloc(sizeof(float) * (size_t)s->Cout), *dy = malloc(sizeof(float) * (size_t)ny);
  gpa_nt_fill(x, nx, -1, 1, &seed);
  gpa_nt_fill(W, nw, -1, 1, &seed);
  gpa_nt_fill(b, s->Cout, -1, 1, &seed);
  gpa_nt_fill(dy, ny, -1, 1, &seed);
  gpa_tensor tx = upload(t, dtype, s->B, s->Cin, s->L, x, nx), tw = upload(t, dtype, s->Cout, cg, s->K, W, nw);
  gpa_tensor tb = upload(t, dtype, s->Cout, 0, 0, b, s->Cout), tdy = upload(t, dtype, s->B, s->Cout, lo, dy, ny);
  ref r;
  reference(s, x, W, b, dy, &r);
  const int64_t ys[3] = {s->B, s->Cout, lo}, ws[3] = {s->Cout, cg, s->K};
  gpa_tensor ty = gpa_nt_tensor(t, dtype, 3, ys, NULL), tdx = gpa_nt_tensor(t, dtype, 3, tx.shape, NULL);
  gpa_tensor tdw = gpa_nt_out(t, 3, ws), tdb = gpa_nt_out(t, 1, &s->Cout);
  gpa_attr at[5];
  attrs(s, at);
  long long e0 = sim_execs(NULL);
  gpa_tensor fin[3] = {tx, tw, tb}, bin[3] = {tdy, tx, tw}, bout[3] = {tdx, tdw, tdb};
  gpa_status st = gpa_nt_run(t, "conv1d_fwd", fin, 3, &ty, 1, at, 5);
  if (st == GPA_OK) st = gpa_nt_run(t, "conv1d_bwd", bin, 3, bout, 3, at, 5);
  if (execs) *execs = sim_execs(NULL) - e0;
  char name[640];
  if (st != GPA_OK) {
    snprintf(name, sizeof name, "%s: %s", what, gpa_nt_msg);
    gpa_nt_fail(t, name);
  } else {
    float *got = malloc(sizeof(float) * (size_t)(nx > ny ? nx : ny)), *got2 = malloc(sizeof(float) * (size_t)nx);
    float *gw = malloc(sizeof(float) * (size_t)nw), *gw2 = malloc(sizeof(float) * (size_t)nw);
    /* bf16 outputs: one rounding (2^-8 relative); f32: fp32 sums in any
     * order (a TF32 engine's 2^-11 input rounding is 100 times that) */
    double rt = dtype == GPA_BF16 ? 1.0 / 128 : 1e-5;
    read_f(t, &ty, got, ny);
    snprintf(name, sizeof name, "%s: y", what);
    gpa_nt_close_to(t, name, got, r.y, r.my, ny, rt);
    read_f(t, &tdx, got, nx);
    snprintf(name, sizeof name, "%s: dx", what);
    gpa_nt_close_to(t, name, got, r.dx, r.mdx, nx, rt);
    gpa_nt_read(t, &tdw, gw);
    snprintf(name, sizeof name, "%s: dW", what);
    /* dW sums B*Lout = 4096 products per element at the main job's shape:
     * cuDNN 9.14's bf16 filter-gradient engine on an H100 (fp32 sums in a
     * long chain) missed eps * sum|terms| by 1.7x; allow 8x, which a TF32
     * engine's input rounding (2^-11 per product) still exceeds ~8 times. */
    for (int64_t i = 0; i < nw; i++) r.mdW[i] *= 8;
    gpa_nt_close_to(t, name, gw, r.dW, r.mdW, nw, 1e-5);
    float *gb = malloc(sizeof(float) * (size_t)s->Cout);
    gpa_nt_read(t, &tdb, gb);
    snprintf(name, sizeof name, "%s: db", what);
    gpa_nt_close_to(t, name, gb, r.db, r.mdb, s->Cout, 1e-5);
    free(gb);
    /* the backward again: the same bits (on sim the smaller shapes only: the
     * simulator's host sums take seconds at the main job's) */
    if (on_sim && nx > 65536) {
    } else if (gpa_nt_run(t, "conv1d_bwd", bin, 3, bout, 3, at, 5) == GPA_OK) {
      read_f(t, &tdx, got2, nx);
      gpa_nt_read(t, &tdw, gw2);
      snprintf(name, sizeof name, "%s: dx twice", what);
      gpa_nt_same_bits(t, name, got, got2, nx);
      snprintf(name, sizeof name, "%s: dW twice", what);
      gpa_nt_same_bits(t, name, gw, gw2, nw);
    } else {
      gpa_nt_fail(t, gpa_nt_msg);
    }
    free(got), free(got2), free(gw), free(gw2);
  }
  ref_free(&r);
  free(x), free(W), free(b), free(dy);
}

static void expect_execs(gpa_nt *t, const char *what, long long got, long long want) {
  if (!on_sim || got == want) return;
  char m[200];
  snprintf(m, sizeof m, "%s: %lld cuDNN executions, expected %lld", what, got, want);
  gpa_nt_fail(t, m);
}

/* ---- the real library ----------------------------------------------------------------------------- */

static int real_graphs(void) {
  gpa__dnn d;
  if (!tu_real_cudnn_open(&d)) return 0;
  const shape shapes[2] = {{32, 96, 128, 96, 3, 1, 0, 8, 1, 1}, {3, 8, 37, 12, 5, 2, 3, 2, 4, 0}};
  int fails = 0;
  for (int si = 0; si < 4; si++) /* shapes 2, 3: the same channels last (layout nlc, NHWC strides) */
    for (int dt = 0; dt < 2; dt++)
      for (int conv = GPA__DNN_CONV_FWD; conv <= GPA__DNN_CONV_WGRAD; conv++) {
        if (conv == GPA__DNN_CONV_FWD_BIAS && !dt) continue; /* f32 adds its bias itself */
        const shape *s = &shapes[si % 2];
        gpa__dnn_key k;
        memset(&k, 0, sizeof k);
        k.conv = conv, k.dtype = dt ? GPA_BF16 : GPA_F32, k.exact = dt ? 1 : 2;
        const int64_t cgeo[11] = {s->B, s->Cin, s->L, s->Cout, s->K, s->stride, pad_l(s), pad_r(s), s->dil, s->G, si / 2};
        memcpy(k.cg, cgeo, sizeof cgeo);
        gpa__dnn_descs g;
        char why[256] = "";
        int built = gpa__dnn_build_conv(&d, &k, &g, why, sizeof why);
        cudnnStatus_t st = tu_real_cudnn_heur(&d, built, &g, why, sizeof why);
        printf("%s: real cuDNN %zu, conv graph %d %s shape %d: %s\n", st ? "FAIL" : "ok", d.version, conv,
               gpa_dtype_name(k.dtype), si, st ? why : "graph and heuristics finalized");
        fails += st != 0;
      }
  dlclose(d.api.lib);
  return fails;
}

/* ---- main ----------------------------------------------------------------------------------------- */

static const shape small = {2, 6, 23, 4, 3, 1, 1, 2, 2, 0};

/* Host time per call (docs/cuda.md, "Host time per call"): once a shape's
 * plans and variant packs are made, each forward is one execute and each
 * backward two, and nothing else: no variant pack built, no stream set
 * (the backend's counters, any device), no other call into the library
 * (sim). Two sets of buffers in turn (two layers) likewise. */
static void steady_conv(gpa_nt *t) {
  const shape *s = &small;
  int64_t lo = lout(s), xs[3] = {s->B, s->Cin, s->L}, ws[3] = {s->Cout, s->Cin / s->G, s->K};
  int64_t ys[3] = {s->B, s->Cout, lo};
  gpa_tensor io[2][8];
  for (int k = 0; k < 2; k++) {
    gpa_tensor v[8] = {gpa_nt_tensor(t, GPA_F32, 3, xs, NULL), gpa_nt_tensor(t, GPA_F32, 3, ws, NULL),
                       gpa_nt_tensor(t, GPA_F32, 1, &s->Cout, NULL), gpa_nt_tensor(t, GPA_F32, 3, ys, NULL),
                       gpa_nt_tensor(t, GPA_F32, 3, ys, NULL), gpa_nt_tensor(t, GPA_F32, 3, xs, NULL),
                       gpa_nt_out(t, 3, ws), gpa_nt_out(t, 1, &s->Cout)};
    memcpy(io[k], v, sizeof v);
  }
  gpa_attr at[5];
  attrs(s, at);
  const int reps = 3;
  gpa__cudnn_stats a = {0};
  gpa_sim_cudnn_calls c0 = {0};
  for (int r = -2; r < 2 * reps; r++) { /* -2, -1: each set's plans and packs made */
    gpa_tensor *x = io[r & 1];
    gpa_tensor fin[3] = {x[0], x[1], x[2]}, bin[3] = {x[4], x[0], x[1]}, bout[3] = {x[5], x[6], x[7]};
    if (gpa_nt_run(t, "conv1d_fwd", fin, 3, &x[3], 1, at, 5) != GPA_OK ||
        gpa_nt_run(t, "conv1d_bwd", bin, 3, bout, 3, at, 5) != GPA_OK)
      gpa_nt_fail(t, gpa_nt_msg);
    if (r == -1) {
      read_stats(t);
      a = dnn_stats, c0 = sim_calls();
    }
  }
  read_stats(t);
  gpa__cudnn_stats b = dnn_stats;
  gpa_sim_cudnn_calls c1 = sim_calls();
  uint64_t n = 2 * reps;
  char m[400];
  snprintf(m, sizeof m,
           "conv1d steady state: %llu forward+backward calls made %llu executes, %llu variant packs, %llu "
           "cudnnSetStream, %llu plan misses; library: %lld execute, %lld create, %lld set, %lld finalize, "
           "%lld destroy, %lld get, %lld cudnnSetStream",
           (unsigned long long)n, (unsigned long long)(b.execs - a.execs),
           (unsigned long long)(b.packs_built - a.packs_built), (unsigned long long)(b.set_streams - a.set_streams),
           (unsigned long long)(b.misses - a.misses), c1.execute - c0.execute, c1.create - c0.create, c1.set - c0.set,
           c1.finalize - c0.finalize, c1.destroy - c0.destroy, c1.get - c0.get, c1.set_stream - c0.set_stream);
  int ok = b.execs - a.execs == 3 * n && b.conv_execs - a.conv_execs == 3 * n && b.packs_built == a.packs_built &&
           b.set_streams == a.set_streams && b.misses == a.misses;
  if (on_sim)
    ok = ok && c1.execute - c0.execute == 3 * (long long)n && c1.create == c0.create && c1.set == c0.set &&
         c1.finalize == c0.finalize && c1.destroy == c0.destroy && c1.get == c0.get && c1.set_stream == c0.set_stream;
  if (!ok) gpa_nt_fail(t, m);
  else printf("ok: %s\n", m);
}

/* A fresh actor with the environment as now; one small case; the cuDNN
 * executions it took. */
static long long other_actor(gpa_nt *main_t, const char *what) {
  gpa_nt u;
  long long e = -1;
  if (gpa_nt_open(&u)) {
    gpa_nt_fail(main_t, "second actor");
    return -1;
  }
  check_case(&u, what, &small, GPA_F32, 7, &e);
  if (gpa_nt_close(&u)) gpa_nt_fail(main_t, what);
  return e;
}

/* Unset GPA_CUDNN_CONV: a small convolution stays on our kernels, eagerly
 * and inside a graph batch's capture alike (so its replays compute what the
 * eager run did); the simulator's executions. */
static void auto_mode(gpa_nt *main_t) {
  gpa_nt u;
  if (gpa_nt_open(&u)) {
    gpa_nt_fail(main_t, "auto-mode actor");
    return;
  }
  long long e = -1;
  gpa_sim_cudnn_calls c0 = sim_calls();
  check_case(&u, "auto, eager", &small, GPA_F32, 60, &e);
  expect_execs(main_t, "GPA_CUDNN_CONV unset, a small convolution, eager", e, 0);
  /* decided before cuDNN is touched: this actor never loads it (its
   * cudnnSetStream would show), nor makes a descriptor */
  gpa_sim_cudnn_calls c1 = sim_calls();
  if (c1.set_stream != c0.set_stream || c1.create != c0.create)
    gpa_nt_fail(main_t, "GPA_CUDNN_CONV unset, a small convolution: cuDNN was called to decline it");
  int64_t lo = lout(&small);
  const int64_t xs[3] = {small.B, small.Cin, small.L}, ws[3] = {small.Cout, small.Cin / small.G, small.K},
                ys[3] = {small.B, small.Cout, lo};
  gpa_tensor io[4] = {gpa_nt_tensor(&u, GPA_F32, 3, xs, NULL), gpa_nt_tensor(&u, GPA_F32, 3, ws, NULL),
                      gpa_nt_tensor(&u, GPA_F32, 1, &small.Cout, NULL), gpa_nt_tensor(&u, GPA_F32, 3, ys, NULL)};
  gpa_attr at[5];
  attrs(&small, at);
  long long e0 = sim_execs(NULL);
  int graphs = 0;
  for (int step = 0; step < 3; step++) {
    gpa_status st = gpa_batch_begin_opts(u.q, "auto", &(gpa_batch_options){.graph = GPA_GRAPH_ON});
    if (st == GPA_OK)
      st = gpa_submit(u.q, &(gpa_op_call){"conv1d_fwd", io, 3, io + 3, 1, at, 5}, NULL);
    gpa_batch_stats bs = {.size = sizeof bs};
    if (st == GPA_OK) st = gpa_sync_batch(u.q, &bs);
    if (st != GPA_OK) gpa_nt_fail(main_t, gpa_last_error_message());
    graphs += bs.graph != 0;
  }
  if (graphs < 2) gpa_nt_fail(main_t, "auto mode: the conv batches did not record and replay");
  expect_execs(main_t, "GPA_CUDNN_CONV unset, a small convolution, captured", sim_execs(NULL) - e0, 0);
  if (gpa_nt_close(&u)) gpa_nt_fail(main_t, "auto-mode actor");
}

int main(void) {
  if (real_graphs()) return 1;
  const char *dev = getenv("GPA_DEVICE");
  on_sim = dev && !strcmp(dev, "sim");
  /* cuDNN for every convolution, small ones too (unset: our kernels for
   * small ones; auto_mode below) */
  setenv("GPA_CUDNN_CONV", "1", 1);
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  if (!strcmp(gpa_actor_backend(t.a), "cpu")) {
    printf("skipped part: conv1d on cuDNN needs the cuda backend\n");
    return gpa_nt_close(&t);
  }
  register_stats(t.a);
  long long e = 0;
  check_case(&t, "small f32", &small, GPA_F32, 1, NULL); /* the first op loads cuDNN */
  if (on_sim) sim_api();
  check_case(&t, "small f32 again", &small, GPA_F32, 2, &e);
  expect_execs(&t, "small f32 again", e, 3); /* forward, data and filter gradients */
  steady_conv(&t);
  int64_t c = t.quick ? 24 : 96;
  const shape shapes[] = {
      {32, c, 128, c, 3, 1, 0, 1, 1, 1}, /* the main job's, causal, dilation 1 */
      {32, c, 128, c, 3, 1, 0, 8, 1, 1}, /* and 8 */
      {3, 8, 37, 12, 5, 2, 3, 2, 4, 0},  /* strided, grouped, padded */
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int dt = 0; dt < 2; dt++) {
      char what[96];
      snprintf(what, sizeof what, "%s shape %zu", dt ? "bf16" : "f32", i);
      int engine = -1;
      check_case(&t, what, &shapes[i], dt ? GPA_BF16 : GPA_F32, 10 + i, &e);
      expect_execs(&t, what, e, 3);
      sim_execs(&engine);
      if (on_sim && engine != 1) gpa_nt_fail(&t, "the last execution was not on the deterministic exact engine");
    }
  if (on_sim) {
    /* each fault: a new shape (refusals are cached per key), our kernels, correct results */
    static const char *names[] = {"graph refused", "no engine", "plan refused", "no memory for the workspace"};
    for (int f = 0; f < 4; f++) {
      shape s = small;
      s.L = 40 + f;
      simc.clear();
      if (f == 0) simc.graph(1);
      if (f == 1) simc.heur(1);
      if (f == 2) simc.plan(1);
      if (f == 3) simc.workspace(1ll << 44); /* more than the device has: the scratch cannot grow to it */
      check_case(&t, names[f], &s, GPA_F32, 30 + (uint64_t)f, &e);
      /* the forward declined; the gradients (their own keys) run on cuDNN, but for the workspace */
      expect_execs(&t, names[f], e, f == 3 ? 0 : 2);
      if (f == 3) simc.workspace(1 << 20);
    }
    simc.clear();
    /* execute failing: the forward declines once, then the same shape runs on cuDNN */
    shape s = small;
    s.L = 50;
    simc.exec(1);
    check_case(&t, "execute fails", &s, GPA_F32, 40, &e);
    expect_execs(&t, "execute fails", e, 2);
    check_case(&t, "after the execute fault", &s, GPA_F32, 41, &e);
    expect_execs(&t, "after the execute fault", e, 3);
    simc.clear();
    /* the knob, and a library that does not load */
    setenv("GPA_CUDNN_CONV", "0", 1);
    expect_execs(&t, "GPA_CUDNN_CONV=0", other_actor(&t, "GPA_CUDNN_CONV=0"), 0);
    setenv("GPA_CUDNN_CONV", "1", 1);
    expect_execs(&t, "GPA_CUDNN_CONV=1", other_actor(&t, "GPA_CUDNN_CONV=1"), 3);
    setenv("GPA_CUDNN", "/nonexistent/libcudnn.so.9", 1);
    expect_execs(&t, "no library", other_actor(&t, "no library"), 0);
    unsetenv("GPA_CUDNN");
    unsetenv("GPA_CUDNN_CONV");
    auto_mode(&t);
  }
  /* the backend's own count: on sim it must agree with the simulator's; on
   * a GPU it says whether cuDNN took the calls (GPA_TEST_EXPECT_CUDNN_CONV=1:
   * it must have, e.g. on a machine known to have an engine for them) */
  long long be = backend_execs(&t);
  printf("cuDNN convolution executions on this actor: %lld (last decline: %s)\n", be, dnn_why[0] ? dnn_why : "none");
  const char *want = getenv("GPA_TEST_EXPECT_CUDNN_CONV");
  if ((on_sim || (want && !strcmp(want, "1"))) && be < 3 * 8)
    gpa_nt_fail(&t, "cuDNN's convolutions did not run where they should have");
  return gpa_nt_close(&t);
}
#endif
