/* cuDNN's fused attention path (backends/cuda/cudnn*.c, docs/cuda.md "cuDNN").
 *
 * Drives the path through two user ops whose CUDA implementations call it
 * (the attention adapter calls it the same way), so that a decline shows:
 * the ops fail with GPA_EUNSUPPORTED "declined: <reason>" instead of
 * running another implementation.
 *   - parity: bf16 and fp16, MHA/GQA/MQA, causal with S < Sk and S = Sk,
 *     key lengths (one of them 0), against the double reference of
 *     tests/util/attn_ref.c; o, dq, dk, dv in the storage dtype, lse fp32;
 *   - the backward twice: the same bits; on sim, the deterministic engine
 *     ran; with non-determinism allowed (dQ through an fp32 accumulator),
 *     twice within the same bounds, the non-deterministic engine on sim;
 *   - the plan cache: a hit on the second call (no plan built), eviction
 *     past a bound of 2, the evicted key built again;
 *   - declines: f32 storage, o in f32, D not a multiple of 8, causal with
 *     S > Sk; on sim also no library, a too old library, cudnnCreate
 *     failing;
 *   - faults (sim): graph refused, plan refused (declines), execute failing
 *     (EDEVICE with cuDNN's text, and the next op runs), no memory for the
 *     workspace (decline); every descriptor destroyed at actor shutdown;
 *   - any device, where the machine has libcudnn.so.9 (no GPU needed): our
 *     graphs' descriptors, operation graphs and heuristics finalize in the
 *     real library (not in sanitizer builds).
 *   - attention_fwd / attention_bwd with 16-bit o, dq, dk, dv (any device):
 *     the f32 results rounded (bit for bit on the host), cuDNN taking them
 *     on sim and declining f32 outputs; the other 16-bit type refused.
 * cpu: the real-library part and the 16-bit outputs. A real GPU: parity, determinism and declines (cuDNN must be
 * loadable there: without it the test is skipped). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/attn_fixture.h"
#include "util/testutil.h"

#ifndef GPA_HAVE_CUDA_BACKEND
int main(void) {
  fprintf(stderr, "skipped: built without the CUDA backend\n");
  return 77;
}
#else
#include "backends/cuda/cudnn.h"
#include "util/real_cudnn.h"
#include "backends/cuda/cudnn_sdpa.h"
#include "sim/cudnn/gpa_sim_cudnn.h"

typedef struct tparams {
  double scale;
  int64_t causal, nondet, bound;
} tparams;

static const gpa_attr_spec tattrs[] = {
    {"scale", GPA_ATTR_FLOAT, 0, offsetof(tparams, scale), 0, 0.0, 1, 0},
    {"causal", GPA_ATTR_INT, 0, offsetof(tparams, causal), 0, 0.0, 0, 1},
    {"nondet", GPA_ATTR_INT, 0, offsetof(tparams, nondet), 0, 0.0, 0, 1},
    {"bound", GPA_ATTR_INT, 0, offsetof(tparams, bound), 0, 0.0, 0, 64},
};

/* What the last op saw, written on the actor thread and read after its
 * handle completed. */
static gpa__cudnn_stats last_stats;
static char last_plan[256]; /* gpa__cudnn_plan_info after the op */

static gpa_status finish(const gpa_op_exec *x, gpa_status st) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__cudnn_get_stats(C, &last_stats);
  snprintf(last_plan, sizeof last_plan, "%s", gpa__cudnn_plan_info(C));
  if (st == GPA_SKIP) {
    snprintf(x->msg, x->msg_size, "declined: %s", gpa__cudnn_last_decline(C));
    return GPA_EUNSUPPORTED;
  }
  return st;
}

static void geometry(const gpa_op_exec *x, const gpa_tensor *q, const gpa_tensor *k, gpa__sdpa_args *a) {
  const tparams *p = x->params;
  memset(a, 0, sizeof *a);
  a->B = q->shape[0], a->S = q->shape[1], a->H = q->shape[2], a->D = q->shape[3];
  a->Sk = k->shape[1], a->Hkv = k->shape[2];
  a->dtype = q->dtype;
  a->scale = p->scale > 0 ? (float)p->scale : (float)(1.0 / sqrt((double)a->D));
  a->causal = (int)p->causal;
  a->nondeterministic = (int)p->nondet;
  if (p->bound) gpa__cudnn_set_plan_bound(gpa__cu_of(x), (uint32_t)p->bound);
}

/* The adapter's hook (its lengths check): called once cuDNN took the call,
 * before anything is enqueued, with the scratch bytes it reserved. */
static int hook_calls, hook_bad;
static gpa_status hook(const gpa_op_exec *x, CUdeviceptr reserved, void *ctx) {
  (void)x;
  hook_calls++;
  if (!reserved || ctx != &hook_calls) hook_bad++;
  return GPA_OK;
}

static gpa_status fwd_cuda(const gpa_op_exec *x) {
  gpa__sdpa_args a;
  geometry(x, &x->inputs[0], &x->inputs[1], &a);
  a.scratch_reserved = 256, a.before = hook, a.before_ctx = &hook_calls;
  a.out_dtype = x->outputs[0].dtype;
  a.q = x->in[0], a.k = x->in[1], a.v = x->in[2], a.lens = x->n_inputs > 3 ? x->in[3] : NULL;
  a.o = x->out[0], a.lse = x->out[1];
  return finish(x, gpa__cudnn_sdpa_fwd(x, &a));
}

static gpa_status bwd_cuda(const gpa_op_exec *x) {
  gpa__sdpa_args a;
  geometry(x, &x->inputs[1], &x->inputs[2], &a);
  a.out_dtype = x->outputs[0].dtype;
  a.dout = x->in[0], a.q = x->in[1], a.k = x->in[2], a.v = x->in[3], a.o = x->in[4], a.lse = x->in[5];
  a.lens = x->n_inputs > 6 ? x->in[6] : NULL;
  a.dq = x->out[0], a.dk = x->out[1], a.dv = x->out[2];
  a.o_dtype = x->inputs[4].dtype;
  return finish(x, gpa__cudnn_sdpa_bwd(x, &a));
}

static void register_ops(gpa_actor *a) {
  gpa_op_desc f = {.size = sizeof f, .name = "dnn_fwd", .min_inputs = 3, .max_inputs = 4, .n_outputs = 2,
                   .attrs = tattrs, .n_attrs = 4, .params_size = sizeof(tparams), .cuda = fwd_cuda};
  gpa_op_desc b = {.size = sizeof b, .name = "dnn_bwd", .min_inputs = 6, .max_inputs = 7, .n_outputs = 3,
                   .attrs = tattrs, .n_attrs = 4, .params_size = sizeof(tparams), .cuda = bwd_cuda};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &f));
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &b));
}

/* ---- the simulator's control API (sim only) ---------------------------------------------------------- */

static struct {
  void (*graph)(unsigned), (*plan)(unsigned), (*exec)(unsigned), (*create)(unsigned), (*clear)(void);
  void (*version)(size_t), (*counts)(long long *, long long *, long long *, int *);
  long long (*live)(void);
  void (*oom)(unsigned);
  void (*calls)(gpa_sim_cudnn_calls *);
} simc;
static int on_sim;
static void *sim_lib; /* held open: the counters are read after the actor closed its handle */

static void sim_api(void) {
  void *lib = dlopen("libgpa_sim_cudnn.so", RTLD_NOW | RTLD_NOLOAD), *drv = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib && drv);
  *(void **)&simc.graph = dlsym(lib, "gpa_sim_cudnn_fault_graph");
  *(void **)&simc.plan = dlsym(lib, "gpa_sim_cudnn_fault_plan");
  *(void **)&simc.exec = dlsym(lib, "gpa_sim_cudnn_fault_exec");
  *(void **)&simc.create = dlsym(lib, "gpa_sim_cudnn_fault_create");
  *(void **)&simc.clear = dlsym(lib, "gpa_sim_cudnn_fault_clear");
  *(void **)&simc.version = dlsym(lib, "gpa_sim_cudnn_set_version");
  *(void **)&simc.counts = dlsym(lib, "gpa_sim_cudnn_counts");
  *(void **)&simc.live = dlsym(lib, "gpa_sim_cudnn_live_descriptors");
  *(void **)&simc.oom = dlsym(drv, "gpa_sim_fault_oom");
  *(void **)&simc.calls = dlsym(lib, "gpa_sim_cudnn_api_calls");
  CHECK(simc.graph && simc.plan && simc.exec && simc.create && simc.clear && simc.version && simc.counts &&
        simc.live && simc.oom && simc.calls);
  sim_lib = lib;
  dlclose(drv);
}

static long long sim_plans(void) {
  long long p = 0;
  simc.counts(NULL, &p, NULL, NULL);
  return p;
}
static int sim_engine(void) {
  int e = -1;
  simc.counts(NULL, NULL, NULL, &e);
  return e;
}

/* ---- 16-bit values ----------------------------------------------------------------------------------- */

static uint16_t *nan16(int64_t n) {
  uint16_t *u = malloc(2 * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) u[i] = 0xffff; /* NaN in bf16 and fp16: catches what is not written */
  return u;
}

static float *read16(gpa_nt *t, int dt, const gpa_tensor *x, int64_t n) {
  uint16_t *u = malloc(2 * (size_t)(n + 1));
  float *f = malloc(sizeof(float) * (size_t)(n + 1));
  gpa_nt_read(t, x, u);
  for (int64_t i = 0; i < n; i++) f[i] = tu_from16(dt, u[i]);
  free(u);
  return f;
}

/* The backward reads o in the storage type: delta_i = dO_i . o_i moves by
 * up to e_i = u sum_d |dO_id o_id|, and dS_ij = scale P_ij (dP_ij - delta_i)
 * with it, so dq_id by scale sum_j P_ij e_i |k_jd| and dk_jd by
 * scale sum_i P_ij e_i |q_id|. Added to the reference's magnitudes (units
 * of FLT_EPSILON). */
static void delta_mags(const aref *r, const double *o, const double *lse, double u, double *mq, double *mk) {
  const acase *c = r->c;
  int64_t S = c->S, Sk = c->Sk, H = c->H, Hk = c->Hkv, D = c->D, G = H / Hk;
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < S; i++) {
        const double *q = r->q + ((b * S + i) * H + h) * D, *w = r->w + ((b * S + i) * H + h) * D;
        const double *oi = o + ((b * S + i) * H + h) * D;
        double e = 0, l = lse[(b * H + h) * S + i];
        for (int64_t d = 0; d < D; d++) e += u * fabs(w[d] * oi[d]);
        int64_t len = r->lens ? r->lens[b] : Sk;
        for (int64_t j = 0; j < Sk; j++) {
          if (j >= len || (c->causal && j > i + Sk - S)) continue;
          const double *k = r->k + ((b * Sk + j) * Hk + h / G) * D;
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += q[d] * k[d];
          double pe = r->scale * exp(r->scale * s - l) * e / 0x1p-23;
          for (int64_t d = 0; d < D; d++) {
            mq[((b * S + i) * H + h) * D + d] += pe * fabs(k[d]);
            mk[((b * Sk + j) * Hk + h / G) * D + d] += pe * fabs(q[d]);
          }
        }
      }
}

/* ---- one case ------------------------------------------------------------------------------------------ */

typedef struct bufs {
  gpa_tensor q, k, v, dout, lens, o, lse, dq, dk, dv;
  uint32_t nf, nb;
} bufs;

static gpa_attr attr_i(const char *name, int64_t v) { return (gpa_attr){name, GPA_ATTR_INT, v, 0}; }

/* The ops the cases run: the user ops that call only the cuDNN path, or
 * attention_fwd / attention_bwd themselves (their adapter tries cuDNN first). */
static const char *op_fwd = "dnn_fwd", *op_bwd = "dnn_bwd";

static gpa_status run_fwd(gpa_nt *t, const bufs *x, const gpa_attr *at, uint32_t n_at) {
  gpa_tensor in[4] = {x->q, x->k, x->v, x->lens}, out[2] = {x->o, x->lse};
  return gpa_nt_run(t, op_fwd, in, x->nf, out, 2, at, n_at);
}

static gpa_status run_bwd(gpa_nt *t, const bufs *x, const gpa_attr *at, uint32_t n_at) {
  gpa_tensor in[7] = {x->dout, x->q, x->k, x->v, x->o, x->lse, x->lens}, out[3] = {x->dq, x->dk, x->dv};
  return gpa_nt_run(t, op_bwd, in, x->nb, out, 3, at, n_at);
}

static void expect(gpa_nt *t, const char *what, gpa_status got, gpa_status want, const char *sub) {
  char w[768];
  if (got != want || (sub && !strstr(gpa_nt_msg, sub))) {
    snprintf(w, sizeof w, "%s: %s '%s', expected %s mentioning '%s'", what, gpa_status_name(got), gpa_nt_msg,
             gpa_status_name(want), sub ? sub : "");
    gpa_nt_fail(t, w);
  } else {
    printf("ok: %s: %s%s%s\n", what, gpa_status_name(got), got ? ": " : "", got ? gpa_nt_msg : "");
  }
}

static void parity(gpa_nt *t, const acase *c, int dt, uint64_t seed) {
  afix fx;
  gpa_afix_init(&fx, c, dt, "cuDNN", &seed);
  gpa_afix_ref(&fx, 1);
  gpa_afix_upload(t, &fx);
  delta_mags(&fx.r, fx.o, fx.lse, fx.r.u, fx.mg.dq, fx.mg.dk);
  const int64_t nq = fx.nq, nk = fx.nk, nl = fx.nl, *qs = fx.qs, *ks = fx.ks, *ls = fx.ls;
  const char *what = fx.what;
  char w[400];
  /* the backward reads o in the storage type: the reference's, rounded */
  uint16_t *ro = malloc(2 * (size_t)(nq + 1));
  for (int64_t i = 0; i < nq; i++) ro[i] = tu_to16(dt, (float)fx.o[i]);
  uint16_t *nanq = nan16(nq), *nank = nan16(nk);
  bufs x = {fx.q, fx.k, fx.v, fx.dout, fx.lt, gpa_nt_tensor(t, dt, 4, qs, nanq), gpa_nt_out(t, 3, ls),
            gpa_nt_tensor(t, dt, 4, qs, nanq), gpa_nt_tensor(t, dt, 4, ks, nank), gpa_nt_tensor(t, dt, 4, ks, nank),
            c->lens ? 4 : 3, c->lens ? 7 : 6};
  gpa_attr at = attr_i("causal", c->causal);
  snprintf(w, sizeof w, "%s: forward", what);
  expect(t, w, run_fwd(t, &x, &at, 1), GPA_OK, NULL);
  double ulp = dt == GPA_F16 ? 0x1p-11 : 0x1p-8; /* the output's rounding: half an ulp */
  float *go = read16(t, dt, &x.o, nq), *gl = malloc(sizeof(float) * (size_t)(nl + 1));
  gpa_nt_read(t, &x.lse, gl);
  gpa_afix_check_fwd(t, &fx, go, gl, ulp);

  /* backward from the reference's o (rounded) and lse, twice: same bits */
  x.o = gpa_nt_tensor(t, dt, 4, qs, ro);
  x.lse = gpa_nt_tensor(t, GPA_F32, 3, ls, fx.rl);
  float *g[2][3];
  for (int rep = 0; rep < 2; rep++) {
    snprintf(w, sizeof w, "%s: backward #%d", what, rep + 1);
    expect(t, w, run_bwd(t, &x, &at, 1), GPA_OK, NULL);
    if (on_sim && sim_engine() != 1) gpa_nt_fail(t, "the default backward did not run the deterministic engine");
    g[rep][0] = read16(t, dt, &x.dq, nq);
    g[rep][1] = read16(t, dt, &x.dk, nk);
    g[rep][2] = read16(t, dt, &x.dv, nk);
  }
  const char *names[3] = {"dq", "dk", "dv"};
  const int64_t ns[3] = {nq, nk, nk};
  gpa_afix_check_grads(t, &fx, NULL, g[0][0], g[0][1], g[0][2], ulp);
  for (int i = 0; i < 3; i++) {
    snprintf(w, sizeof w, "%s: %s, deterministic", what, names[i]);
    gpa_nt_same_bits(t, w, g[0][i], g[1][i], ns[i]);
  }
  for (int rep = 0; rep < 2; rep++)
    for (int i = 0; i < 3; i++) free(g[rep][i]);
  /* non-deterministic allowed: cuDNN's graph with dQ through an fp32
   * accumulator (the engine PyTorch's default takes), twice: the workspace
   * it lives in is reused, so a stale accumulator would show; the same
   * bounds, not the same bits */
  gpa_attr nd[2] = {at, strcmp(op_bwd, "dnn_bwd") ? attr_i("deterministic", 0) : attr_i("nondet", 1)};
  for (int rep = 0; rep < 2; rep++) {
    snprintf(w, sizeof w, "%s: backward, non-deterministic #%d", what, rep + 1);
    expect(t, w, run_bwd(t, &x, nd, 2), GPA_OK, NULL);
    if (on_sim && sim_engine() != 0) gpa_nt_fail(t, "the non-deterministic backward did not run its engine");
    float *gi[3] = {read16(t, dt, &x.dq, nq), read16(t, dt, &x.dk, nk), read16(t, dt, &x.dv, nk)};
    snprintf(w, sizeof w, ", non-deterministic #%d", rep + 1);
    gpa_afix_check_grads(t, &fx, w, gi[0], gi[1], gi[2], ulp);
    for (int i = 0; i < 3; i++) free(gi[i]);
  }
  free(ro), free(nanq), free(nank), free(go), free(gl);
  gpa_afix_free(&fx);
}

/* A small bf16 case's buffers (values random), for the cache, declines and faults. */
static bufs small(gpa_nt *t, int dt, int64_t B, int64_t S, int64_t Sk, int64_t H, int64_t Hk, int64_t D, int odt) {
  int64_t nq = B * S * H * D, nk = B * Sk * Hk * D, qs[4] = {B, S, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, S};
  uint64_t seed = 99;
  int64_t nmax = nq > nk ? nq : nk;
  float *f = malloc(sizeof(float) * (size_t)(2 * nmax + 1));
  uint16_t *u = malloc(4 * (size_t)(nmax + 1));
  gpa_afix_fill(GPA_BF16, f, u, 2 * nmax, -1.0, 1.0, &seed);
  const void *d = dt == GPA_F32 ? (const void *)f : (const void *)u;
  bufs x = {gpa_nt_tensor(t, dt, 4, qs, d), gpa_nt_tensor(t, dt, 4, ks, d), gpa_nt_tensor(t, dt, 4, ks, d),
            gpa_nt_tensor(t, dt, 4, qs, d), {0}, gpa_nt_tensor(t, odt, 4, qs, NULL), gpa_nt_out(t, 3, ls),
            gpa_nt_tensor(t, odt, 4, qs, NULL), gpa_nt_tensor(t, odt, 4, ks, NULL),
            gpa_nt_tensor(t, odt, 4, ks, NULL), 3, 6};
  free(f);
  free(u);
  return x;
}

/* ---- host time per call: the steady state is one execute ------------------------------------------ */

typedef struct tally {
  gpa__cudnn_stats st;   /* the backend's counters after the last op */
  gpa_sim_cudnn_calls c; /* sim: calls into the library so far */
} tally;

static tally tally_now(void) {
  tally y = {last_stats, {0}};
  if (on_sim) simc.calls(&y.c);
  return y;
}

/* What `n` calls of a cached plan cost, from a to b: n executes and
 * nothing else, neither in the backend's counters (any device) nor in
 * calls into the library (sim): no descriptor created, set, finalized,
 * read or destroyed, no stream set. */
static void steady(gpa_nt *t, const char *what, const tally *a, const tally *b, uint64_t n) {
  char w[400];
  const gpa__cudnn_stats *x = &a->st, *y = &b->st;
  int ok = y->execs - x->execs == n && y->hits - x->hits == n && y->misses == x->misses &&
           y->packs_built == x->packs_built && y->set_streams == x->set_streams;
  snprintf(w, sizeof w,
           "%s: %llu calls of a cached plan made %llu executes, %llu plan hits, %llu misses, %llu variant packs, "
           "%llu cudnnSetStream",
           what, (unsigned long long)n, (unsigned long long)(y->execs - x->execs),
           (unsigned long long)(y->hits - x->hits), (unsigned long long)(y->misses - x->misses),
           (unsigned long long)(y->packs_built - x->packs_built),
           (unsigned long long)(y->set_streams - x->set_streams));
  if (!ok) gpa_nt_fail(t, w);
  else printf("ok: %s\n", w);
  if (!on_sim) return;
  const gpa_sim_cudnn_calls *c = &a->c, *e = &b->c;
  snprintf(w, sizeof w,
           "%s: library calls over %llu calls: %lld execute, %lld create, %lld set, %lld get, %lld finalize, "
           "%lld destroy, %lld cudnnSetStream",
           what, (unsigned long long)n, e->execute - c->execute, e->create - c->create, e->set - c->set,
           e->get - c->get, e->finalize - c->finalize, e->destroy - c->destroy, e->set_stream - c->set_stream);
  if (e->execute - c->execute != (long long)n || e->create != c->create || e->set != c->set || e->get != c->get ||
      e->finalize != c->finalize || e->destroy != c->destroy || e->set_stream != c->set_stream)
    gpa_nt_fail(t, w);
  else printf("ok: %s\n", w);
}

/* Repeated calls of one shape cost an execute each once warm: forward and
 * both backwards with the same buffers; two sets of buffers in turn (two
 * layers of a model); a second queue sets the stream once each way. A
 * pointer set past a plan's pool of variant packs builds one and destroys
 * the least recently used (no descriptor leaks). */
static void steady_state(gpa_nt *t) {
  bufs a = small(t, GPA_BF16, 2, 16, 16, 2, 2, 16, GPA_BF16), b = small(t, GPA_BF16, 2, 16, 16, 2, 2, 16, GPA_BF16);
  gpa_attr nd = attr_i("nondet", 1);
  const int reps = 4;
  for (int k = 0; k < 3; k++) {
    const char *what = k == 0 ? "forward" : k == 1 ? "backward" : "backward, non-deterministic";
    gpa_status (*run)(gpa_nt *, const bufs *, const gpa_attr *, uint32_t) = k ? run_bwd : run_fwd;
    const gpa_attr *at = k == 2 ? &nd : NULL;
    uint32_t n_at = k == 2;
    char w[200];
    snprintf(w, sizeof w, "steady state, %s: warm-up", what);
    expect(t, w, run(t, &a, at, n_at), GPA_OK, NULL);
    tally t0 = tally_now();
    for (int r = 0; r < reps; r++) CHECK(run(t, &a, at, n_at) == GPA_OK);
    tally t1 = tally_now();
    snprintf(w, sizeof w, "steady state, %s, the same buffers", what);
    steady(t, w, &t0, &t1, reps);
    /* b's pack is built once; then a and b in turn cost executes alone */
    CHECK(run(t, &b, at, n_at) == GPA_OK);
    tally t2 = tally_now();
    if (t2.st.packs_built != t1.st.packs_built + 1) gpa_nt_fail(t, "a second set of buffers: no pack built");
    for (int r = 0; r < reps; r++) CHECK(run(t, r & 1 ? &b : &a, at, n_at) == GPA_OK);
    tally t3 = tally_now();
    snprintf(w, sizeof w, "steady state, %s, two sets of buffers in turn", what);
    steady(t, w, &t2, &t3, reps);
  }
  /* another queue: its stream is set once, then the calls are steady; back
   * on the first queue, set once again */
  gpa_queue *q0 = t->q, *q2;
  CHECK_OK(gpa_queue_create(t->a, "steady", &q2));
  t->q = q2;
  CHECK(run_fwd(t, &a, NULL, 0) == GPA_OK);
  tally s0 = tally_now();
  for (int r = 0; r < reps; r++) CHECK(run_fwd(t, &a, NULL, 0) == GPA_OK);
  tally s1 = tally_now();
  /* the scratch differs per queue: a new pack for it, the first call */
  steady(t, "steady state on a second queue", &s0, &s1, reps);
  t->q = q0;
  CHECK(run_fwd(t, &a, NULL, 0) == GPA_OK);
  tally s2 = tally_now();
  if (s2.st.set_streams != s1.st.set_streams + 1) gpa_nt_fail(t, "back on the first queue: the stream was not set");
  CHECK_OK(gpa_queue_destroy(q2));
  /* a plan's pool holds GPA__DNN_PACKS: as many more sets of buffers each
   * build a pack and destroy the least recently used, whose set builds
   * again; the live descriptors stay as many */
  bufs *many = malloc(sizeof *many * GPA__DNN_PACKS);
  for (int i = 0; i < GPA__DNN_PACKS; i++) {
    many[i] = small(t, GPA_BF16, 2, 16, 16, 2, 2, 16, GPA_BF16);
    CHECK(run_fwd(t, &many[i], NULL, 0) == GPA_OK);
  }
  tally p0 = tally_now();
  long long live0 = on_sim ? simc.live() : 0;
  CHECK(run_fwd(t, &a, NULL, 0) == GPA_OK); /* evicted by the last 16 */
  CHECK(run_fwd(t, &many[GPA__DNN_PACKS - 1], NULL, 0) == GPA_OK); /* still there */
  tally p1 = tally_now();
  if (p1.st.packs_built != p0.st.packs_built + 1)
    gpa_nt_fail(t, "the pool of variant packs: expected one pack built for an evicted set, none for a held one");
  if (on_sim && simc.live() != live0) gpa_nt_fail(t, "the pool of variant packs: a descriptor leaked or was lost");
  printf("ok: steady state: %d sets of buffers past a pool of %d: one pack built, descriptors %s\n",
         GPA__DNN_PACKS + 1, GPA__DNN_PACKS, on_sim ? "balanced" : "not counted");
  free(many);
}

static void cache_and_engines(gpa_nt *t) {
  bufs a = small(t, GPA_BF16, 1, 16, 16, 2, 2, 16, GPA_BF16), b = small(t, GPA_BF16, 1, 8, 16, 2, 1, 16, GPA_BF16);
  bufs c = small(t, GPA_BF16, 2, 8, 8, 2, 2, 32, GPA_BF16);
  gpa_attr two = attr_i("bound", 2);
  expect(t, "cache: first call of a shape", run_fwd(t, &a, NULL, 0), GPA_OK, NULL);
  gpa__cudnn_stats s0 = last_stats;
  long long p0 = on_sim ? sim_plans() : 0;
  expect(t, "cache: second call of the shape", run_fwd(t, &a, NULL, 0), GPA_OK, NULL);
  CHECK(last_stats.hits == s0.hits + 1 && last_stats.misses == s0.misses);
  if (on_sim) CHECK(sim_plans() == p0);
  /* bound 2: a, b, c leave b and c; a is built again */
  expect(t, "cache: shape b", run_fwd(t, &b, &two, 1), GPA_OK, NULL);
  expect(t, "cache: shape c", run_fwd(t, &c, &two, 1), GPA_OK, NULL);
  CHECK(last_stats.plans == 2 && last_stats.evictions >= 1);
  uint64_t miss = last_stats.misses;
  expect(t, "cache: shape a after its eviction", run_fwd(t, &a, &two, 1), GPA_OK, NULL);
  CHECK(last_stats.misses == miss + 1 && last_stats.plans == 2);
  if (on_sim) CHECK(sim_plans() == p0 + 3);
  printf("ok: plan cache: hits %llu, misses %llu, evictions %llu\n", (unsigned long long)last_stats.hits,
         (unsigned long long)last_stats.misses, (unsigned long long)last_stats.evictions);
  /* the non-deterministic backward engine when allowed */
  gpa_attr nd = attr_i("nondet", 1);
  expect(t, "backward, non-deterministic allowed", run_bwd(t, &a, &nd, 1), GPA_OK, NULL);
  if (on_sim) CHECK(sim_engine() == 0);
  /* the plan info names the engine that ran: the heuristics' (mode A)
   * first candidate, as cudnn-frontend's build_plans takes */
  printf("plan: %s\n", last_plan);
  CHECK(!strncmp(last_plan, on_sim ? "heur=a cand=0/" : "heur=a cand=", on_sim ? 14 : 12) && strstr(last_plan, " ws="));
  if (on_sim) CHECK(strstr(last_plan, "engine=0 notes=[nondet tc]") != NULL);
  expect(t, "backward, default", run_bwd(t, &a, NULL, 0), GPA_OK, NULL);
  if (on_sim) CHECK(sim_engine() == 1);
  printf("plan: %s\n", last_plan);
  CHECK(!strncmp(last_plan, "heur=a cand=", 12) && !strstr(last_plan, "nondet"));
  if (on_sim) CHECK(strstr(last_plan, "engine=1 notes=[tc]") != NULL);
}

/* The experiment knobs (backends/cuda/cudnn_tune.c), each in an actor of
 * its own: an actor reads them when it loads cuDNN. */
static void knob_actor(const char *var, const char *val, gpa_nt *u) {
  setenv(var, val, 1);
  CHECK(gpa_nt_open(u) == 0);
  register_ops(u->a);
}
static void knob_done(const char *var, gpa_nt *u) {
  CHECK(gpa_nt_close(u) == 0);
  unsetenv(var);
}

/* GPA_CUDNN_GRAPHS=1: each variant pack's execute captured once as a CUDA
 * graph and replayed. Parity (forward, backward twice with the same bits,
 * non-deterministic) through replays; repeated calls launch the graph and
 * call no library entry (sim); a new scale is a new pack and capture (the
 * capture keeps the by-value scalars' values: a replay with the old scale
 * would give the old o); inside a graph batch's capture the plain execute
 * is captured instead, and the batch records and replays. */
static void graphs_knob(const acase *c) {
  gpa_nt u;
  knob_actor("GPA_CUDNN_GRAPHS", "1", &u);
  parity(&u, c, GPA_BF16, 321);
  bufs a = small(&u, GPA_BF16, 1, 16, 16, 2, 2, 16, GPA_BF16);
  int64_t nq = 1 * 16 * 2 * 16;
  expect(&u, "GPA_CUDNN_GRAPHS=1: first call", run_fwd(&u, &a, NULL, 0), GPA_OK, NULL);
  if (!on_sim && !last_stats.graph_captures) {
    /* a real cuDNN whose execute a capture cannot hold: plain executes, by
     * design; the parity above ran on them */
    printf("note: GPA_CUDNN_GRAPHS=1: this cuDNN's executes did not capture (plain executes; GPA_LOG=debug "
           "says why)\n");
    knob_done("GPA_CUDNN_GRAPHS", &u);
    return;
  }
  tally t0 = tally_now();
  for (int r = 0; r < 3; r++) CHECK(run_fwd(&u, &a, NULL, 0) == GPA_OK);
  tally t1 = tally_now();
  char w[300];
  snprintf(w, sizeof w, "GPA_CUDNN_GRAPHS=1: 3 calls: %llu graph launches, %llu captures, %lld library executes",
           (unsigned long long)(t1.st.graph_launches - t0.st.graph_launches),
           (unsigned long long)(t1.st.graph_captures - t0.st.graph_captures), t1.c.execute - t0.c.execute);
  if (t1.st.graph_launches - t0.st.graph_launches != 3 || t1.st.graph_captures != t0.st.graph_captures ||
      (on_sim && t1.c.execute != t0.c.execute))
    gpa_nt_fail(&u, w);
  else printf("ok: %s\n", w);
  float *o1 = read16(&u, GPA_BF16, &a.o, nq);
  gpa_attr sc = {"scale", GPA_ATTR_FLOAT, 0, 0.3};
  expect(&u, "GPA_CUDNN_GRAPHS=1: another scale", run_fwd(&u, &a, &sc, 1), GPA_OK, NULL);
  float *o2 = read16(&u, GPA_BF16, &a.o, nq);
  if (last_stats.graph_captures != t1.st.graph_captures + 1 || !memcmp(o1, o2, sizeof(float) * (size_t)nq))
    gpa_nt_fail(&u, "GPA_CUDNN_GRAPHS=1: a new scale replayed the old graph");
  else printf("ok: GPA_CUDNN_GRAPHS=1: a new scale is a new capture\n");
  free(o1), free(o2);
  int recorded = 0;
  for (int step = 0; step < 3; step++) {
    gpa_status st = gpa_batch_begin_opts(u.q, "dnn", &(gpa_batch_options){.graph = GPA_GRAPH_ON});
    gpa_tensor in[3] = {a.q, a.k, a.v}, out[2] = {a.o, a.lse};
    if (st == GPA_OK) st = gpa_submit(u.q, &(gpa_op_call){"dnn_fwd", in, 3, out, 2, NULL, 0}, NULL);
    gpa_batch_stats bs = {.size = sizeof bs};
    if (st == GPA_OK) st = gpa_sync_batch(u.q, &bs);
    if (st != GPA_OK) gpa_nt_fail(&u, gpa_last_error_message());
    recorded += bs.graph != 0;
  }
  if (recorded < 2) gpa_nt_fail(&u, "GPA_CUDNN_GRAPHS=1: a graph batch of the op did not record and replay");
  else printf("ok: GPA_CUDNN_GRAPHS=1: a graph batch records and replays\n");
  knob_done("GPA_CUDNN_GRAPHS", &u);
}

static void knobs(void) {
  gpa_nt u;
  static const acase gqa = {2, 19, 27, 4, 2, 32, 1, 0, 0}; /* causal, S < Sk */
  knob_actor("GPA_CUDNN_SDPA_BWD_ENGINE", "1000", &u);
  bufs a = small(&u, GPA_BF16, 1, 8, 8, 2, 2, 16, GPA_BF16);
  expect(&u, "GPA_CUDNN_SDPA_BWD_ENGINE=1000: the forward", run_fwd(&u, &a, NULL, 0), GPA_OK, NULL);
  CHECK(!strncmp(last_plan, "heur=a cand=", 12)); /* the knob is the backward's only */
  expect(&u, "GPA_CUDNN_SDPA_BWD_ENGINE=1000: the backward", run_bwd(&u, &a, NULL, 0), GPA_EUNSUPPORTED,
         "GPA_CUDNN_SDPA_BWD_ENGINE=1000: heuristics a lists");
  knob_done("GPA_CUDNN_SDPA_BWD_ENGINE", &u);
  knob_actor("GPA_CUDNN_SDPA_HEUR", "b", &u);
  a = small(&u, GPA_BF16, 1, 8, 8, 2, 2, 16, GPA_BF16);
  gpa_status st = run_fwd(&u, &a, NULL, 0);
  if (on_sim || st != GPA_EUNSUPPORTED) { /* a GPU's cuDNN may list no engine in mode B: then a decline */
    expect(&u, "GPA_CUDNN_SDPA_HEUR=b", st, GPA_OK, NULL);
    printf("plan: %s\n", last_plan);
    CHECK(!strncmp(last_plan, "heur=b ", 7));
  } else {
    printf("ok: GPA_CUDNN_SDPA_HEUR=b declines on this cuDNN: %s\n", gpa_nt_msg);
  }
  knob_done("GPA_CUDNN_SDPA_HEUR", &u);
  knob_actor("GPA_CUDNN_SDPA_HEUR", "c", &u); /* not a mode: the default, said on stderr */
  a = small(&u, GPA_BF16, 1, 8, 8, 2, 2, 16, GPA_BF16);
  expect(&u, "GPA_CUDNN_SDPA_HEUR=c", run_fwd(&u, &a, NULL, 0), GPA_OK, NULL);
  CHECK(!strncmp(last_plan, "heur=a ", 7));
  knob_done("GPA_CUDNN_SDPA_HEUR", &u);
  /* dS in the storage type: the same results (the engines round it so
   * before the products either way) */
  knob_actor("GPA_CUDNN_SDPA_DS", "io", &u);
  parity(&u, &gqa, GPA_BF16, 321);
  knob_done("GPA_CUDNN_SDPA_DS", &u);
  graphs_knob(&gqa);
}

static void declines(gpa_nt *t) {
  int calls = hook_calls;
  bufs f32 = small(t, GPA_F32, 1, 8, 8, 2, 2, 16, GPA_F32), of32 = small(t, GPA_BF16, 1, 8, 8, 2, 2, 16, GPA_F32);
  bufs d20 = small(t, GPA_F16, 1, 8, 8, 2, 2, 20, GPA_F16), sgt = small(t, GPA_BF16, 1, 9, 8, 2, 2, 16, GPA_BF16);
  bufs slt = small(t, GPA_BF16, 1, 8, 12, 2, 2, 16, GPA_BF16);
  int32_t len1 = 7;
  slt.lens = gpa_nt_tensor(t, GPA_I32, 1, (int64_t[]){1}, &len1), slt.nf = 4, slt.nb = 7;
  gpa_attr causal = attr_i("causal", 1);
  expect(t, "decline f32", run_fwd(t, &f32, NULL, 0), GPA_EUNSUPPORTED, "storage is not bf16/fp16");
  expect(t, "decline f32 o", run_fwd(t, &of32, NULL, 0), GPA_EUNSUPPORTED, "o is not in the storage dtype");
  expect(t, "decline f32 dq", run_bwd(t, &of32, NULL, 0), GPA_EUNSUPPORTED, "dq/dk/dv are not in the storage dtype");
  expect(t, "decline D = 20", run_fwd(t, &d20, NULL, 0), GPA_EUNSUPPORTED, "head dim");
  expect(t, "decline causal S > Sk", run_fwd(t, &sgt, &causal, 1), GPA_EUNSUPPORTED, "S > Sk");
  expect(t, "decline key lengths", run_fwd(t, &slt, NULL, 0), GPA_EUNSUPPORTED, "key lengths");
  expect(t, "decline key lengths, causal", run_fwd(t, &slt, &causal, 1), GPA_EUNSUPPORTED, "key lengths");
  CHECK(hook_calls == calls); /* declines enqueue nothing: the adapter's hook did not run */
  expect(t, "no decline without causal at S > Sk", run_fwd(t, &sgt, NULL, 0), GPA_OK, NULL);
  CHECK(hook_calls == calls + 1 && hook_bad == 0);
}

static void faults(gpa_nt *t) {
  bufs a = small(t, GPA_BF16, 1, 24, 24, 2, 2, 32, GPA_BF16), b = small(t, GPA_F16, 1, 24, 24, 2, 2, 16, GPA_F16);
  bufs a1 = small(t, GPA_BF16, 1, 24, 24, 2, 2, 16, GPA_BF16), a2 = small(t, GPA_BF16, 1, 24, 24, 2, 2, 24, GPA_BF16);
  long long graphs = 0, graphs2 = 0;
  simc.graph(1);
  expect(t, "fault: graph refused", run_fwd(t, &a1, NULL, 0), GPA_EUNSUPPORTED, "GRAPH_PATTERN");
  /* a refusal is remembered: the next call declines without a new graph */
  simc.counts(&graphs, NULL, NULL, NULL);
  expect(t, "the refused key again", run_fwd(t, &a1, NULL, 0), GPA_EUNSUPPORTED, "GRAPH_PATTERN (cached)");
  simc.counts(&graphs2, NULL, NULL, NULL);
  CHECK(graphs2 == graphs);
  simc.plan(1);
  expect(t, "fault: plan refused", run_fwd(t, &a2, NULL, 0), GPA_EUNSUPPORTED, "execution plan: CUDNN_STATUS_NOT_SUPPORTED");
  expect(t, "another key after the plan fault", run_fwd(t, &a, NULL, 0), GPA_OK, NULL);
  simc.exec(1);
  expect(t, "fault: execute fails", run_fwd(t, &a, NULL, 0), GPA_EDEVICE, "CUDNN_STATUS_EXECUTION_FAILED");
  expect(t, "after the execute fault", run_fwd(t, &a, NULL, 0), GPA_OK, NULL);
  /* a fresh queue has no scratch: its first op allocates the workspace */
  gpa_queue *q0 = t->q, *q2;
  CHECK_OK(gpa_queue_create(t->a, "ws", &q2));
  t->q = q2;
  simc.oom(1);
  expect(t, "fault: no memory for the workspace", run_fwd(t, &b, NULL, 0), GPA_EUNSUPPORTED, "workspace");
  simc.oom(0);
  expect(t, "after the workspace fault", run_fwd(t, &b, NULL, 0), GPA_OK, NULL);
  t->q = q0;
  CHECK_OK(gpa_queue_destroy(q2));
  simc.clear();
}

/* attention_fwd / attention_bwd themselves with o, dq, dk, dv in the
 * storage type (any device): the same as the f32 outputs rounded once;
 * bit for bit on the host, which rounds its f32 results; within two ulps
 * where another implementation computes them (on sim: cuDNN for the 16-bit
 * outputs, which the counters show, our kernels for the f32 ones). */
static void storage_outputs(gpa_nt *t, int dt) {
  const int64_t B = 2, S = 13, Sk = 13, H = 4, Hk = 2, D = 32, nq = B * S * H * D, nk = B * Sk * Hk * D;
  int64_t qs[4] = {B, S, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, S};
  uint64_t seed = 5;
  float *f = malloc(sizeof(float) * (size_t)(2 * nq + 2 * nk));
  uint16_t *u = malloc(2 * (size_t)(2 * nq + 2 * nk));
  gpa_afix_fill(dt, f, u, 2 * nq + 2 * nk, -1.0, 1.0, &seed);
  int32_t lens[2] = {(int32_t)Sk, 5};
  gpa_tensor q = gpa_nt_tensor(t, dt, 4, qs, u), k = gpa_nt_tensor(t, dt, 4, ks, u + nq);
  gpa_tensor v = gpa_nt_tensor(t, dt, 4, ks, u + nq + nk), dout = gpa_nt_tensor(t, dt, 4, qs, u + nq + 2 * nk);
  gpa_tensor l = gpa_nt_tensor(t, GPA_I32, 1, &B, lens);
  gpa_tensor o32 = gpa_nt_out(t, 4, qs), o16 = gpa_nt_tensor(t, dt, 4, qs, NULL), lse = gpa_nt_out(t, 3, ls);
  gpa_tensor lse2 = gpa_nt_out(t, 3, ls);
  gpa_attr at = attr_i("causal", 1);
  const char *what = dt == GPA_BF16 ? "bf16 outputs" : "f16 outputs";
  char w[200];
  gpa_tensor in[4] = {q, k, v, l}, out32[2] = {o32, lse}, out16[2] = {o16, lse2};
  gpa_tensor g16[3] = {gpa_nt_tensor(t, dt, 4, qs, NULL), gpa_nt_tensor(t, dt, 4, ks, NULL),
                       gpa_nt_tensor(t, dt, 4, ks, NULL)};
  if (strcmp(gpa_actor_backend(t->a), "cpu")) {
    /* another implementation computes each: both against the reference */
    long long e0 = 0, e1 = 0, e2 = 0;
    if (on_sim) simc.counts(NULL, NULL, &e0, NULL);
    expect(t, "attention_fwd, f32 o", gpa_nt_run(t, "attention_fwd", in, 4, out32, 2, &at, 1), GPA_OK, NULL);
    if (on_sim) simc.counts(NULL, NULL, &e1, NULL);
    static const acase c = {2, 13, 13, 4, 2, 32, 1, 0, 0};
    op_fwd = "attention_fwd", op_bwd = "attention_bwd";
    parity(t, &c, dt, 5);
    op_fwd = "dnn_fwd", op_bwd = "dnn_bwd";
    if (on_sim) simc.counts(NULL, NULL, &e2, NULL);
    /* f32 o: our kernels; 16-bit: cuDNN, forward once, backward twice each way */
    if (on_sim && (e1 != e0 || e2 != e1 + 5)) gpa_nt_fail(t, "attention ops: cuDNN ran for f32 o, or not for 16 bits");
    /* deterministic = 0 lets the backward take the non-deterministic engine
     * (no lengths: with them cuDNN declines) */
    gpa_tensor bin[6] = {dout, q, k, v, o16, lse2};
    gpa_attr nd[2] = {at, attr_i("deterministic", 0)};
    expect(t, "attention_fwd, 16-bit o", gpa_nt_run(t, "attention_fwd", in, 3, out16, 2, &at, 1), GPA_OK, NULL);
    expect(t, "attention_bwd, deterministic = 0", gpa_nt_run(t, "attention_bwd", bin, 6, g16, 3, nd, 2), GPA_OK, NULL);
    if (on_sim && sim_engine() != 0) gpa_nt_fail(t, "attention_bwd, deterministic = 0: not the fast engine");
    expect(t, "attention_bwd, default", gpa_nt_run(t, "attention_bwd", bin, 6, g16, 3, &at, 1), GPA_OK, NULL);
    if (on_sim && sim_engine() != 1) gpa_nt_fail(t, "attention_bwd by default: not the deterministic engine");
  } else {
    /* the host rounds its f32 results once: bit for bit */
    expect(t, "attention_fwd, f32 o", gpa_nt_run(t, "attention_fwd", in, 4, out32, 2, &at, 1), GPA_OK, NULL);
    expect(t, "attention_fwd, 16-bit o", gpa_nt_run(t, "attention_fwd", in, 4, out16, 2, &at, 1), GPA_OK, NULL);
    float *a = malloc(sizeof(float) * (size_t)nq), *r = read16(t, dt, &o16, nq);
    gpa_nt_read(t, &o32, a);
    for (int64_t i = 0; i < nq; i++) a[i] = tu_from16(dt, tu_to16(dt, a[i]));
    snprintf(w, sizeof w, "%s: o against the f32 o rounded", what);
    gpa_nt_same_bits(t, w, r, a, nq);
    gpa_tensor bin[7] = {dout, q, k, v, o16, lse2, l};
    gpa_tensor g32[3] = {gpa_nt_out(t, 4, qs), gpa_nt_out(t, 4, ks), gpa_nt_out(t, 4, ks)};
    expect(t, "attention_bwd, f32 gradients", gpa_nt_run(t, "attention_bwd", bin, 7, g32, 3, &at, 1), GPA_OK, NULL);
    expect(t, "attention_bwd, 16-bit gradients", gpa_nt_run(t, "attention_bwd", bin, 7, g16, 3, &at, 1), GPA_OK,
           NULL);
    const int64_t n[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++) {
      float *g = malloc(sizeof(float) * (size_t)n[i]), *h = read16(t, dt, &g16[i], n[i]);
      gpa_nt_read(t, &g32[i], g);
      for (int64_t j = 0; j < n[i]; j++) g[j] = tu_from16(dt, tu_to16(dt, g[j]));
      snprintf(w, sizeof w, "%s: gradient %d against the f32 one rounded", what, i);
      gpa_nt_same_bits(t, w, h, g, n[i]);
      free(g), free(h);
    }
    free(a), free(r);
  }
  /* a length past Sk: ERANGE naming the element (cuDNN declines calls with
   * lengths: our kernels' device check, read when the op completes) */
  int32_t bad_lens[2] = {(int32_t)Sk + 1, 5};
  gpa_tensor lb = gpa_nt_tensor(t, GPA_I32, 1, &B, bad_lens), inl[4] = {q, k, v, lb};
  snprintf(w, sizeof w, "lengths[0] = %d is outside [0, Sk = %d]", (int)Sk + 1, (int)Sk);
  long long x0 = 0, x1 = 0;
  if (on_sim) simc.counts(NULL, NULL, &x0, NULL);
  gpa_nt_expect_error(t, "attention_fwd", inl, 4, out16, 2, &at, 1, GPA_ERANGE, w);
  if (on_sim) simc.counts(NULL, NULL, &x1, NULL);
  if (on_sim && x1 != x0) gpa_nt_fail(t, "a call with lengths went through cuDNN");
  /* the other 16-bit type is no storage type of q */
  int other = dt == GPA_BF16 ? GPA_F16 : GPA_BF16;
  gpa_tensor bad = gpa_nt_tensor(t, other, 4, qs, NULL), outb[2] = {bad, lse};
  gpa_nt_expect_error(t, "attention_fwd", in, 4, outb, 2, &at, 1, GPA_EDTYPE, "outputs[0]");
  gpa_tensor binb[7] = {dout, q, k, v, bad, lse2, l};
  snprintf(w, sizeof w, "o has dtype %s, expected f32 or %s", gpa_dtype_name(other), gpa_dtype_name(dt));
  gpa_nt_expect_error(t, "attention_bwd", binb, 7, g16, 3, &at, 1, GPA_EDTYPE, w);
  printf("ok: %s of attention_fwd / attention_bwd\n", what);
  free(f), free(u);
}

/* f32 attention (the main job's) declines on every call: decided before
 * the library is touched, so a fresh actor whose attention is all f32
 * never loads cuDNN (its cudnnSetStream would show), and the decline still
 * says why. Sim. */
static void f32_never_loads(void) {
  gpa_nt u;
  CHECK(gpa_nt_open(&u) == 0);
  register_ops(u.a);
  bufs f = small(&u, GPA_F32, 1, 8, 8, 2, 2, 16, GPA_F32);
  gpa_sim_cudnn_calls c0, c1;
  simc.calls(&c0);
  for (int r = 0; r < 3; r++)
    expect(&u, "f32 on a fresh actor", run_fwd(&u, &f, NULL, 0), GPA_EUNSUPPORTED, "storage is not bf16/fp16");
  simc.calls(&c1);
  if (c1.set_stream != c0.set_stream || c1.create != c0.create)
    gpa_nt_fail(&u, "f32 attention: cuDNN was loaded to decline it");
  CHECK(gpa_nt_close(&u) == 0);
}

/* An actor whose cuDNN cannot be had: the first op declines with why. */
static void unavailable(const char *what, const char *sub) {
  gpa_nt u;
  CHECK(gpa_nt_open(&u) == 0);
  register_ops(u.a);
  bufs a = small(&u, GPA_BF16, 1, 8, 8, 2, 2, 16, GPA_BF16);
  expect(&u, what, run_fwd(&u, &a, NULL, 0), GPA_EUNSUPPORTED, sub);
  expect(&u, what, run_fwd(&u, &a, NULL, 0), GPA_EUNSUPPORTED, "no cuDNN");
  CHECK(gpa_nt_close(&u) == 0);
}

/* How many tensors of graph g are [B,H,S,Sk] in the key's storage type
 * (read back from the library's descriptors): dS in the backward when
 * GPA_CUDNN_SDPA_DS=io, none by default (P and dS are fp32 there; their
 * storage-typed views are [B,H,Sk,S]). */
static int storage_typed_scores(gpa__dnn *d, const gpa__dnn_descs *g, const gpa__dnn_key *k) {
  cudnnDataType_t io = k->dtype == GPA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  int n = 0;
  for (int i = 0; i < g->n; i++) {
    cudnnDataType_t dt;
    int64_t dim[4], cnt = 0, c2 = 0;
    if (d->api.cudnnBackendGetAttribute(g->d[i], CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &cnt, &dt) ||
        d->api.cudnnBackendGetAttribute(g->d[i], CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &c2, dim))
      continue; /* not a tensor */
    n += cnt == 1 && c2 == 4 && dt == io && dim[0] == k->B && dim[1] == k->H && dim[2] == k->S && dim[3] == k->Sk;
  }
  return n;
}

/* The real libcudnn, where the machine has it (no GPU needed): every
 * descriptor of our SDPA graphs, the operation graphs and their heuristics
 * pass its finalize. Engines, plans and execution need a GPU. Any device. */
static int real_graphs(void) {
  gpa__dnn d;
  if (!tu_real_cudnn_open(&d)) return 0;
  int fails = 0;
  /* forward; backward; backward with dQ's accumulator (non-deterministic);
   * the two backwards again with dS in the storage type (GPA_CUDNN_SDPA_DS=io) */
  for (int dir = 0; dir < 5; dir++)
    for (int dt = 0; dt < 2; dt++)
      for (int m = 0; m < 4; m++) {
        gpa__dnn_key k;
        memset(&k, 0, sizeof k);
        int bwd = dir > 0;
        d.tune.ds_io = dir >= 3;
        k.bwd = bwd, k.nondet = dir == 2 || dir == 4, k.dtype = dt ? GPA_F16 : GPA_BF16, k.causal = m >= 1,
        k.lens = m >= 2;
        k.B = 2, k.S = 100, k.Sk = m == 3 ? 100 : 160, k.H = 8, k.Hkv = m == 1 ? 2 : m == 3 ? 1 : 8, k.D = 64;
        gpa__dnn_descs g;
        char why[256] = "";
        int built = gpa__dnn_build_sdpa(&d, &k, &g, why, sizeof why);
        /* dS's type as asked: the one [B,H,S,Sk] tensor in the storage type */
        int io_scores = built ? storage_typed_scores(&d, &g, &k) : -1;
        cudnnStatus_t s = tu_real_cudnn_heur(&d, built, &g, why, sizeof why);
        if (!s && bwd && k.S != k.Sk && io_scores != d.tune.ds_io) { /* S = Sk: the views have its dims too */
          snprintf(why, sizeof why, "%d storage-typed [B,H,S,Sk] tensors, expected %d", io_scores, d.tune.ds_io);
          s = CUDNN_STATUS_BAD_PARAM;
        }
        printf("%s: real cuDNN %zu, %s%s %s causal=%d lengths=%d Hkv=%lld: %s\n", s ? "FAIL" : "ok", d.version,
               k.nondet ? "backward (non-deterministic)" : bwd ? "backward" : "forward",
               d.tune.ds_io ? " (dS in the storage type)" : "", gpa_dtype_name(k.dtype), k.causal, k.lens,
               (long long)k.Hkv, s ? why : "graph and heuristics finalized");
        fails += s != 0;
      }
  dlclose(d.api.lib);
  return fails;
}

int main(void) {
  if (real_graphs()) return 1;
  /* Before any actor: the environment is read at each actor's first op. */
  const char *dev = getenv("GPA_DEVICE");
  if (dev && !strcmp(dev, "sim")) {
    setenv("GPA_CUDNN", "/nonexistent/libcudnn.so.9", 1);
    unavailable("no library", "no cuDNN");
    unsetenv("GPA_CUDNN");
  }
  gpa_nt t;
  int rc = gpa_nt_open(&t);
  if (rc) return rc;
  const char *be = gpa_actor_backend(t.a);
  if (!strcmp(be, "cpu")) {
    /* the host's half: 16-bit outputs of the attention ops */
    storage_outputs(&t, GPA_BF16);
    storage_outputs(&t, GPA_F16);
    return gpa_nt_close(&t);
  }
  on_sim = !strcmp(be, "sim");
  register_ops(t.a);
  /* first op: loads cuDNN (or finds it missing on a GPU machine) */
  bufs probe = small(&t, GPA_BF16, 1, 8, 8, 2, 2, 16, GPA_BF16);
  gpa_status st = run_fwd(&t, &probe, NULL, 0);
  if (!on_sim && st == GPA_EUNSUPPORTED && strstr(gpa_nt_msg, "no cuDNN")) {
    gpa_nt_close(&t);
    fprintf(stderr, "skipped: %s\n", gpa_nt_msg);
    return 77;
  }
  expect(&t, "first op", st, GPA_OK, NULL);
  if (on_sim) sim_api();
  storage_outputs(&t, GPA_BF16);
  storage_outputs(&t, GPA_F16);

  static const acase cases[] = {
      {2, 19, 19, 4, 4, 32, 0, 0, 0}, /* MHA */
      {3, 29, 29, 4, 2, 16, 1, 0, 0}, /* GQA, causal (lengths decline: see declines) */
      {2, 13, 29, 4, 2, 16, 1, 0, 0}, /* GQA, causal S < Sk (the shifted diagonal) */
      {1, 33, 33, 4, 1, 64, 1, 0, 0}, /* MQA, causal S = Sk */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int dt = 0; dt < 2; dt++)
      if (!t.quick || dt == (int)(i & 1)) parity(&t, &cases[i], dt ? GPA_F16 : GPA_BF16, 100 + i);
  steady_state(&t);
  cache_and_engines(&t);
  knobs();
  declines(&t);
  if (on_sim) {
    faults(&t);
    f32_never_loads();
    simc.create(1);
    unavailable("cudnnCreate fails", "cudnnCreate: CUDNN_STATUS_NOT_INITIALIZED");
    simc.version(90100);
    unavailable("too old", "older than 90600");
    simc.version(91400);
  }
  rc = gpa_nt_close(&t);
  if (on_sim) {
    long long live = simc.live();
    if (live) {
      fprintf(stderr, "cuDNN descriptors alive after shutdown: %lld\n", live);
      rc = 1;
    }
    dlclose(sim_lib);
  }
  return rc;
}
#endif
