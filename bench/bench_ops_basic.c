/* Benchmarks of the basic op library on the host: each op as a direct kernel
 * call (both cores through the benches' host pool, as the triad) and through an
 * actor ("<name>_actor": submit + await per run, the backend's thread pool).
 * Memory-bound: gbps over the bytes the op must move; ref = STREAM triad
 * measured in the same run next to each result (ratio = our GB/s over the
 * triad's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_list.h"
#include "bench_nn_host.h"
#include "gpuactor.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/embedding.h"
#include "kernels/host/gelu.h"
#include "kernels/host/layernorm.h"
#include "kernels/host/metrics.h"
#include "kernels/host/optim.h"


/* Direct calls run on the benches' host pool (bench_nn_host.h): the same
 * pool type and thread count as inside the actor, and the triad's. */
#define PAR gpa_bench_host_par()

/* STREAM's rule: arrays well beyond the caches (3 x 32 MB here; L3 is 32 MB
 * on the reference machine). Run alternately with ours (gpa_bench_vs_triad),
 * so both see the same machine load (the machine is shared). An op whose
 * working set fits in L3 (embedding_fwd: 16.8 MB) can beat it. */
#define TRIAD_N (1u << 23)

static gpa_bench_triad *triad(void) {
  static gpa_bench_triad *t;
  if (!t) t = gpa_bench_triad_open(TRIAD_N);
  return t;
}

static float *farr(int64_t n, double lo, double hi, uint64_t seed) {
  float *p = aligned_alloc(64, ((size_t)(n > 0 ? n : 1) * sizeof *p + 63) & ~(size_t)63);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)(lo + (hi - lo) * (double)(seed >> 40) / (double)(1ull << 24));
  }
  return p;
}

/* ratio_med / _q1 / _q3: the same ratio per round (the op's GB/s over the
 * triad run right after it), its median and quartiles over the rounds
 * (gpa_bench_triad_pairs); ratio is the best over the best. copy_gbps and
 * ratio_copy_med: the same against the non-temporal copy run after each
 * triad, the ceiling of the ops with one input and one output. */
static void emit_ns(const char *name, const char *shape, double ns, double ref_ns, double bytes) {
  double plain, nt, q1 = 0, med = 0, q3 = 0, c1 = 0, cmed = 0, c3 = 0;
  gpa_bench_triad_best_ns(triad(), &plain, &nt);
  gpa_bench_triad_pairs(triad(), &q1, &med, &q3);
  gpa_bench_triad_copy_pairs(triad(), &c1, &cmed, &c3);
  const double k = bytes / (12.0 * TRIAD_N); /* triad time / op time -> GB/s ratio */
  const double kc = bytes / (8.0 * TRIAD_N);  /* the same for the copy */
  char extra[384];
  snprintf(extra, sizeof extra,
           "\"triad_plain_gbps\":%.3f,\"triad_nt_gbps\":%.3f,\"ratio_med\":%.4f,\"ratio_q1\":%.4f,"
           "\"ratio_q3\":%.4f,\"copy_gbps\":%.3f,\"ratio_copy_med\":%.4f",
           12.0 * TRIAD_N / plain, 12.0 * TRIAD_N / nt, k * med, k * q1, k * q3,
           8.0 * TRIAD_N / gpa_bench_triad_copy_ns(triad()), kc * cmed);
  gpa_bench_result r = {name, "cpu", shape, "stream_triad", ns, ref_ns, bytes, 0, 12.0 * TRIAD_N, 0, extra};
  gpa_bench_emit(&r);
}

/* ours = fn(ctx), timed alternately with the triad */
static void emit(const char *name, const char *shape, int reps, void (*fn)(void *), void *ctx, double bytes) {
  double ref_ns, ns = gpa_bench_vs_triad(triad(), reps, fn, ctx, &ref_ns);
  emit_ns(name, shape, ns, ref_ns, bytes);
}

/* ---- through the actor ---------------------------------------------------- */

typedef struct actor_run {
  gpa_queue *q;
  gpa_op_call call;
  int failed;
} actor_run;

static void actor_once(void *p) {
  actor_run *r = p;
  gpa_handle *h = NULL;
  if (gpa_submit(r->q, &r->call, &h) != GPA_OK || gpa_await(h, -1) != GPA_OK) r->failed = 1;
  gpa_handle_release(h);
}

typedef struct bt {
  int dtype;
  uint32_t rank;
  int64_t shape[3];
  const void *data; /* uploaded when not NULL */
} bt;

/* Times `op` through a fresh cpu actor (alternately with the triad, whose
 * best goes to *ref_ns); -1 if it cannot run. */
static double actor_ns(const char *op, const bt *in, uint32_t n_in, const bt *out, uint32_t n_out,
                       const gpa_attr *attrs, uint32_t n_attrs, int reps, double *ref_ns) {
  gpa_actor_options o = {.size = sizeof o, .device = "cpu"};
  gpa_actor *a;
  if (gpa_actor_create(&o, &a) != GPA_OK) return -1;
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor t[8];
  int ok = 1;
  for (uint32_t i = 0; i < n_in + n_out; i++) {
    const bt *s = i < n_in ? &in[i] : &out[i - n_in];
    memset(&t[i], 0, sizeof t[i]);
    t[i].dtype = s->dtype;
    t[i].rank = s->rank;
    uint64_t n = 1;
    for (uint32_t k = 0; k < s->rank; k++) n *= (uint64_t)(t[i].shape[k] = s->shape[k]);
    n *= gpa_dtype_size(s->dtype);
    ok &= gpa_buffer_acquire(a, NULL, n ? n : 4, &t[i].buffer) == GPA_OK;
    if (ok && s->data) {
      gpa_handle *h = NULL;
      ok &= gpa_upload(q, &t[i], s->data, n, 0, &h) == GPA_OK && gpa_await(h, -1) == GPA_OK;
      gpa_handle_release(h);
    }
  }
  double ns = -1;
  if (ok) {
    actor_run r = {q, {op, t, n_in, t + n_in, n_out, attrs, n_attrs}, 0};
    ns = gpa_bench_vs_triad(triad(), reps, actor_once, &r, ref_ns);
    if (r.failed) ns = -1;
  }
  gpa_actor_destroy(a);
  return ns;
}

static void emit_actor(const char *name, const char *shape, double ns, double ref_ns, double bytes) {
  char n[96];
  snprintf(n, sizeof n, "%s_actor", name);
  if (ns > 0)
    emit_ns(n, shape, ns, ref_ns, bytes);
  else
    fprintf(stderr, "gpa-bench: %s could not run through the actor\n", n);
}

/* ---- layernorm [4096,1024] ---------------------------------------------- */

enum { LN_N = 4096, LN_D = 1024 };

typedef struct ln_ctx {
  float *x, *g, *b, *y, *mean, *rstd, *dy, *dx, *dg, *db;
  void *scratch;
} ln_ctx;

static void ln_fwd_run(void *p) {
  ln_ctx *c = p;
  gpa__layernorm_fwd_f32(PAR, c->y, c->mean, c->rstd, c->x, c->g, c->b, LN_N, LN_D, 1e-5);
}

static void ln_bwd_run(void *p) {
  ln_ctx *c = p;
  gpa__layernorm_bwd_f32(PAR, c->dx, c->dg, c->db, c->x, c->dy, c->g, c->mean, c->rstd, LN_N, LN_D, c->scratch);
}

static void ln_bench(int bwd) {
  int reps = gpa_bench_reps(20);
  double rns = 0;
  int64_t nd = (int64_t)LN_N * LN_D;
  ln_ctx c = {farr(nd, -2, 2, 1), farr(LN_D, 0.5, 1.5, 2), farr(LN_D, -1, 1, 3), farr(nd, 0, 0, 4),
              farr(LN_N, 0, 0, 5), farr(LN_N, 0, 0, 6), farr(nd, -1, 1, 7), farr(nd, 0, 0, 8),
              farr(LN_D, 0, 0, 9), farr(LN_D, 0, 0, 10), malloc(gpa__layernorm_bwd_scratch(LN_N, LN_D))};
  ln_fwd_run(&c);
  const char *shape = "4096x1024";
  const bt x = {GPA_F32, 2, {LN_N, LN_D}, c.x}, vec = {GPA_F32, 1, {LN_D}, c.g}, rows = {GPA_F32, 1, {LN_N}, c.mean};
  const bt rs = {GPA_F32, 1, {LN_N}, c.rstd}, y = {GPA_F32, 2, {LN_N, LN_D}, NULL}, vo = {GPA_F32, 1, {LN_D}, NULL};
  const bt ro = {GPA_F32, 1, {LN_N}, NULL}, dy = {GPA_F32, 2, {LN_N, LN_D}, c.dy};
  if (!bwd) {
    double bytes = 4.0 * (2.0 * nd + 2.0 * LN_D + 2.0 * LN_N);
    emit("layernorm_fwd", shape, reps, ln_fwd_run, &c, bytes);
    const gpa_attr eps = {"eps", GPA_ATTR_FLOAT, 0, 1e-5};
    double an = actor_ns("layernorm_fwd", (bt[]){x, vec, vec}, 3, (bt[]){y, ro, ro}, 3, &eps, 1, reps, &rns);
    emit_actor("layernorm_fwd", shape, an, rns, bytes);
  } else {
    double bytes = 4.0 * (3.0 * nd + 3.0 * LN_D + 2.0 * LN_N);
    emit("layernorm_bwd", shape, reps, ln_bwd_run, &c, bytes);
    double an = actor_ns("layernorm_bwd", (bt[]){x, dy, vec, rows, rs}, 5, (bt[]){y, vo, vo}, 3, NULL, 0, reps, &rns);
    emit_actor("layernorm_bwd", shape, an, rns, bytes);
  }
  free(c.x), free(c.g), free(c.b), free(c.y), free(c.mean), free(c.rstd), free(c.dy), free(c.dx), free(c.dg);
  free(c.db), free(c.scratch);
}

void gpa_bench_layernorm_fwd(void) { ln_bench(0); }
void gpa_bench_layernorm_bwd(void) { ln_bench(1); }

/* ---- gelu (4M) and add (4M) --------------------------------------------- */

enum { EW_N = 4 << 20 };

typedef struct ew_ctx {
  float *x, *dy, *y;
  int form;
} ew_ctx;

static void gelu_fwd_run(void *p) {
  ew_ctx *c = p;
  gpa__gelu_fwd_f32(PAR, c->y, c->x, EW_N, c->form);
}
static void gelu_bwd_run(void *p) {
  ew_ctx *c = p;
  gpa__gelu_bwd_f32(PAR, c->y, c->x, c->dy, EW_N, c->form);
}
static void add_run(void *p) {
  ew_ctx *c = p;
  gpa__add_f32(PAR, c->y, c->x, c->dy, EW_N);
}

static void ew_bench(const char *name, int kind) {
  int reps = gpa_bench_reps(20);
  double rns = 0;
  ew_ctx c = {farr(EW_N, -4, 4, 11), farr(EW_N, -1, 1, 12), farr(EW_N, 0, 0, 13), 0};
  const bt x = {GPA_F32, 1, {EW_N}, c.x}, dy = {GPA_F32, 1, {EW_N}, c.dy}, y = {GPA_F32, 1, {EW_N}, NULL};
  const char *shape = "4194304";
  if (kind == 2) {
    double bytes = 12.0 * EW_N;
    emit(name, shape, reps, add_run, &c, bytes);
    double an = actor_ns("add", (bt[]){x, dy}, 2, &y, 1, NULL, 0, reps, &rns);
    emit_actor(name, shape, an, rns, bytes);
  } else {
    for (int form = 0; form < 2; form++) {
      char n[64], s[64];
      c.form = form;
      snprintf(n, sizeof n, "%s", name);
      snprintf(s, sizeof s, "%s,%s", shape, form ? "tanh" : "erf");
      double bytes = (kind ? 12.0 : 8.0) * EW_N;
      emit(n, s, reps, kind ? gelu_bwd_run : gelu_fwd_run, &c, bytes);
      const gpa_attr ap = {"approximate", GPA_ATTR_INT, form, 0};
      double an = kind ? actor_ns("gelu_bwd", (bt[]){x, dy}, 2, &y, 1, &ap, 1, reps, &rns)
                       : actor_ns("gelu_fwd", &x, 1, &y, 1, &ap, 1, reps, &rns);
      emit_actor(n, s, an, rns, bytes);
    }
  }
  free(c.x), free(c.dy), free(c.y);
}

void gpa_bench_gelu_fwd(void) { ew_bench("gelu_fwd", 0); }
void gpa_bench_gelu_bwd(void) { ew_bench("gelu_bwd", 1); }
void gpa_bench_add(void) { ew_bench("add", 2); }

/* ---- embedding V=32000, D=512, ids 8x512 -------------------------------- */

enum { EM_V = 32000, EM_D = 512, EM_B = 8, EM_L = 512 };

typedef struct em_ctx {
  int32_t *ids;
  float *table, *y, *dy, *dtable;
  void *scratch;
} em_ctx;

static void emb_fwd_run(void *p) {
  em_ctx *c = p;
  gpa__embedding_fwd_f32(PAR, c->y, c->ids, c->table, EM_B * EM_L, EM_D);
}
static void emb_bwd_run(void *p) {
  em_ctx *c = p;
  gpa__embedding_bwd_f32(PAR, c->dtable, c->dy, c->ids, EM_B * EM_L, EM_V, EM_D, 0, c->scratch);
}

static void emb_bench(int bwd) {
  int reps = gpa_bench_reps(20);
  double rns = 0;
  int64_t n = EM_B * EM_L;
  em_ctx c = {malloc((size_t)n * sizeof(int32_t)), farr((int64_t)EM_V * EM_D, -1, 1, 21), farr(n * EM_D, 0, 0, 22),
              farr(n * EM_D, -1, 1, 23), farr((int64_t)EM_V * EM_D, 0, 0, 24),
              malloc(gpa__embedding_bwd_scratch(n, EM_V))};
  uint64_t s = 99;
  for (int64_t i = 0; i < n; i++) c.ids[i] = (int32_t)((s = s * 6364136223846793005ull + 1) >> 33) % EM_V;
  const char *shape = "V32000xD512,ids8x512";
  const bt ids = {GPA_I32, 2, {EM_B, EM_L}, c.ids}, tab = {GPA_F32, 2, {EM_V, EM_D}, c.table};
  const bt y = {GPA_F32, 3, {EM_B, EM_L, EM_D}, NULL}, dy = {GPA_F32, 3, {EM_B, EM_L, EM_D}, c.dy};
  const bt dt = {GPA_F32, 2, {EM_V, EM_D}, NULL};
  if (!bwd) {
    double bytes = 4.0 * n + 8.0 * n * EM_D; /* ids, gathered rows read, y written */
    emit("embedding_fwd", shape, reps, emb_fwd_run, &c, bytes);
    double an = actor_ns("embedding_fwd", (bt[]){ids, tab}, 2, &y, 1, NULL, 0, reps, &rns);
    emit_actor("embedding_fwd", shape, an, rns, bytes);
  } else {
    double bytes = 4.0 * n + 4.0 * n * EM_D + 4.0 * EM_V * EM_D; /* ids, dy read, dtable written */
    emit("embedding_bwd", shape, reps, emb_bwd_run, &c, bytes);
    double an = actor_ns("embedding_bwd", (bt[]){dy, ids}, 2, &dt, 1, NULL, 0, reps, &rns);
    emit_actor("embedding_bwd", shape, an, rns, bytes);
  }
  free(c.ids), free(c.table), free(c.y), free(c.dy), free(c.dtable), free(c.scratch);
}

void gpa_bench_embedding_fwd(void) { emb_bench(0); }
void gpa_bench_embedding_bwd(void) { emb_bench(1); }

/* ---- cross entropy [512, 32000] ----------------------------------------- */

enum { CE_N = 512, CE_V = 32000 };

typedef struct ce_ctx {
  float *logits, *dlogits, loss;
  int32_t *t;
  double *scratch;
} ce_ctx;

static void ce_fwd_run(void *p) {
  ce_ctx *c = p;
  gpa__cross_entropy_fwd_f32(PAR, &c->loss, c->logits, c->t, CE_N, CE_V, -100, c->scratch);
}
static void ce_bwd_run(void *p) {
  ce_ctx *c = p;
  gpa__cross_entropy_bwd_f32(PAR, c->dlogits, c->logits, c->t, CE_N, CE_V, -100, CE_N, 1.0);
}

void gpa_bench_cross_entropy(void) {
  int reps = gpa_bench_reps(20);
  double rns = 0;
  int64_t nv = (int64_t)CE_N * CE_V;
  ce_ctx c = {farr(nv, -5, 5, 31), farr(nv, 0, 0, 32), 0, malloc(CE_N * sizeof(int32_t)), malloc(CE_N * sizeof(double))};
  for (int i = 0; i < CE_N; i++) c.t[i] = (i * 7919) % CE_V;
  const char *shape = "512x32000";
  const bt lg = {GPA_F32, 2, {CE_N, CE_V}, c.logits}, tg = {GPA_I32, 1, {CE_N}, c.t};
  const bt loss = {GPA_F32, 0, {0}, NULL}, dl = {GPA_F32, 2, {CE_N, CE_V}, NULL};
  double bytes = 4.0 * nv + 4.0 * CE_N;
  emit("cross_entropy", shape, reps, ce_fwd_run, &c, bytes);
  double an = actor_ns("cross_entropy_fwd", (bt[]){lg, tg}, 2, &loss, 1, NULL, 0, reps, &rns);
  emit_actor("cross_entropy", shape, an, rns, bytes);
  bytes = 8.0 * nv + 4.0 * CE_N;
  emit("cross_entropy_bwd", shape, reps, ce_bwd_run, &c, bytes);
  an = actor_ns("cross_entropy_bwd", (bt[]){lg, tg}, 2, &dl, 1, NULL, 0, reps, &rns);
  emit_actor("cross_entropy_bwd", shape, an, rns, bytes);
  free(c.logits), free(c.dlogits), free(c.t), free(c.scratch);
}

/* ---- adamw (4M parameters, in place) ------------------------------------ */

typedef struct ad_ctx {
  float *p, *g, *m, *v;
} ad_ctx;

static void adamw_run(void *p) {
  ad_ctx *c = p;
  const gpa__adamw_hp hp = {1e-3, 0.9, 0.999, 1e-8, 0.01, 10};
  gpa__adamw_f32(PAR, c->p, c->m, c->v, c->p, c->g, c->m, c->v, EW_N, &hp);
}

void gpa_bench_adamw(void) {
  int reps = gpa_bench_reps(20);
  double rns = 0;
  ad_ctx c = {farr(EW_N, -1, 1, 41), farr(EW_N, -1, 1, 42), farr(EW_N, -0.1, 0.1, 43), farr(EW_N, 0, 0.01, 44)};
  const char *shape = "4194304";
  double bytes = 28.0 * EW_N; /* p, g, m, v read; p, m, v written */
  emit("adamw", shape, reps, adamw_run, &c, bytes);
  /* in place: outputs are the input tensors (same buffers) */
  gpa_actor_options o = {.size = sizeof o, .device = "cpu"};
  gpa_actor *a;
  double ns = -1;
  if (gpa_actor_create(&o, &a) == GPA_OK) {
    gpa_queue *q = gpa_actor_default_queue(a);
    gpa_tensor t[4];
    const float *src[4] = {c.p, c.g, c.m, c.v};
    int ok = 1;
    for (int i = 0; i < 4; i++) {
      memset(&t[i], 0, sizeof t[i]);
      t[i].dtype = GPA_F32;
      t[i].rank = 1;
      t[i].shape[0] = EW_N;
      ok &= gpa_buffer_acquire(a, NULL, 4ull * EW_N, &t[i].buffer) == GPA_OK;
      gpa_handle *h = NULL;
      ok &= ok && gpa_upload(q, &t[i], src[i], 4ull * EW_N, 0, &h) == GPA_OK && gpa_await(h, -1) == GPA_OK;
      gpa_handle_release(h);
    }
    const gpa_attr at[] = {{"lr", GPA_ATTR_FLOAT, 0, 1e-3}, {"step", GPA_ATTR_INT, 10, 0}};
    const gpa_tensor outs[3] = {t[0], t[2], t[3]};
    if (ok) {
      actor_run r = {q, {"adamw", t, 4, outs, 3, at, 2}, 0};
      ns = gpa_bench_vs_triad(triad(), reps, actor_once, &r, &rns);
      if (r.failed) ns = -1;
    }
    gpa_actor_destroy(a);
  }
  emit_actor("adamw", shape, ns, rns, bytes);
  free(c.p), free(c.g), free(c.m), free(c.v);
}
