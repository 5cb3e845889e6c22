/* cuDNN execution plans, cached by the actor (design in cudnn.h).
 *
 * Building the operation graph, asking the heuristics and finalizing a plan
 * costs milliseconds on a GPU; executing a cached plan costs a variant pack.
 * So plans are kept per key (shapes, dtypes, flags, lengths present,
 * device) in a list ordered by last use, at most `bound` of them: a miss
 * past the bound destroys the least recently used plan. Everything here
 * runs on the actor thread.
 *
 * Engine choice: the heuristics' candidates (mode A, as cudnn-frontend and
 * PyTorch ask) in their order; unless the key allows it, an engine whose
 * numerical notes include NONDETERMINISTIC is skipped (the deterministic
 * backward is the default). The first candidate whose plan finalizes wins,
 * as cudnn-frontend's build_plans does; none is a decline, never an error.
 * SDPA keys follow the actor's experiment knobs (gpa__dnn_tune): another
 * heuristics list, the backward's candidates from the N-th on, the
 * candidates on stderr.
 *
 * A key cuDNN refused (graph, heuristics or plan) is cached too, with the
 * reason, so that a shape it never takes costs a lookup per call, not a
 * graph build (milliseconds) per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cuda/cudnn.h"

/* Engine configs read from the heuristics: convolutions list many, and the
 * deterministic non-tensor-core ones an exact f32 key needs come late. */
#define CANDIDATES 32

/* One finalized variant pack of a plan and the pointers it holds. */
typedef struct dnn_pack {
  cudnnBackendDescriptor_t vp;
  uint64_t used; /* the plan's tick at its last use (LRU) */
  void *ws;
  void *ptr[GPA__DNN_VP_MAX];
  /* GPA_CUDNN_GRAPHS=1: the execute captured as a graph (NULL: not yet),
   * or no_graph when its capture failed (plain executes from then on).
   * cuDNN reads the by-value scalars at the execute and a capture keeps
   * their values, so with graphs they are part of the pack's identity. */
  CUgraphExec exec;
  int no_graph;
  gpa__dnn_scalars sc;
} dnn_pack;

struct gpa__dnn_plan {
  gpa__dnn_key key;
  cudnnBackendDescriptor_t plan, cfg; /* plan NULL: cuDNN refused this key (why) */
  gpa__dnn_descs g;
  int64_t workspace;
  char *why;
  struct gpa__dnn_plan *next;
  gpa__dnn_scalars sc;
  /* The variant packs (gpa__dnn_plan_pack): the uids are the plan's, the
   * same for every call (its key fixes which tensors a call passes). */
  int vp_n, n_packs, last_pack;
  int64_t vp_uid[GPA__DNN_VP_MAX];
  uint64_t tick;
  dnn_pack packs[GPA__DNN_PACKS];
  char info[256]; /* gpa__cudnn_plan_info */
};

gpa__dnn_scalars *gpa__dnn_plan_scalars(gpa__dnn_plan *p) { return &p->sc; }

/* One pack's descriptor and graph (a graph still running is freed by the
 * driver when it completes). */
static void pack_free(gpa__dnn *d, dnn_pack *k) {
  if (k->exec) d->C->cu.cuGraphExecDestroy(k->exec);
  d->api.cudnnBackendDestroyDescriptor(k->vp);
  k->exec = NULL, k->no_graph = 0;
}

static void packs_free(gpa__dnn *d, gpa__dnn_plan *p) {
  for (int i = 0; i < p->n_packs; i++) pack_free(d, &p->packs[i]);
  p->n_packs = 0, p->last_pack = 0;
}

static int pack_is(const gpa__dnn *d, const gpa__dnn_plan *p, const dnn_pack *k, int n, void *const *ptr,
                   void *ws) {
  return k->ws == ws && !memcmp(k->ptr, ptr, sizeof *ptr * (size_t)n) &&
         (!d->tune.graphs || !memcmp(&k->sc, &p->sc, sizeof p->sc));
}

cudnnBackendDescriptor_t gpa__dnn_plan_pack(gpa__dnn *d, gpa__dnn_plan *p, int n, const int64_t *uid,
                                            void *const *ptr, void *ws, cudnnStatus_t *st) {
  const gpa__cudnn_api *A = &d->api;
  if (n < 1 || n > GPA__DNN_VP_MAX) {
    *st = CUDNN_STATUS_BAD_PARAM;
    return NULL;
  }
  /* another set of uids than the pool's (not for a plan's calls as built
   * today): the pool starts again with this one */
  if (p->n_packs && (p->vp_n != n || memcmp(p->vp_uid, uid, sizeof *uid * (size_t)n))) packs_free(d, p);
  p->tick++;
  /* the last pack used first: one call site reuses its buffers */
  if (p->n_packs && pack_is(d, p, &p->packs[p->last_pack], n, ptr, ws)) {
    p->packs[p->last_pack].used = p->tick;
    return p->packs[p->last_pack].vp;
  }
  int victim = p->n_packs < GPA__DNN_PACKS ? p->n_packs : 0;
  for (int i = 0; i < p->n_packs; i++) {
    if (pack_is(d, p, &p->packs[i], n, ptr, ws)) {
      p->packs[i].used = p->tick, p->last_pack = i;
      return p->packs[i].vp;
    }
    if (p->n_packs == GPA__DNN_PACKS && p->packs[i].used < p->packs[victim].used) victim = i;
  }
  cudnnBackendDescriptor_t vp = NULL;
  cudnnStatus_t s = A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (!s) s = A->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid);
  if (!s) s = A->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr);
  if (!s) s = A->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (!s) s = A->cudnnBackendFinalize(vp);
  if (s) {
    if (vp) A->cudnnBackendDestroyDescriptor(vp);
    *st = s;
    return NULL;
  }
  d->st.packs_built++;
  if (victim < p->n_packs) pack_free(d, &p->packs[victim]);
  else p->n_packs++;
  dnn_pack *k = &p->packs[victim];
  k->vp = vp, k->used = p->tick, k->ws = ws, k->sc = p->sc;
  memcpy(k->ptr, ptr, sizeof *ptr * (size_t)n);
  p->vp_n = n, p->last_pack = victim;
  memcpy(p->vp_uid, uid, sizeof *uid * (size_t)n);
  return vp;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* GPA_CUDNN_GRAPHS=1: the pack's execute captured on the handle's stream
 * (thread-local mode: an unsafe call of cuDNN's fails the capture instead
 * of slipping in) into k->exec; a capture that fails leaves the pack on
 * plain executes (no_graph) and runs nothing, its status then being the
 * capture's, not the op's. */
static void capture(gpa__dnn *d, const gpa__dnn_plan *p, dnn_pack *k) {
  const gpa__cu_api *cu = &d->C->cu;
  CUstream s = (CUstream)d->stream;
  CUgraph g = NULL;
  k->no_graph = 1;
  if (cu->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) return;
  cudnnStatus_t st = d->api.cudnnBackendExecute(d->h, p->plan, k->vp);
  CUresult r = cu->cuStreamEndCapture(s, &g);
  if (!st && r == CUDA_SUCCESS && g && cu->cuGraphInstantiateWithFlags(&k->exec, g, 0) == CUDA_SUCCESS) {
    k->no_graph = 0;
    d->st.graph_captures++;
  } else {
    k->exec = NULL;
    gpa__log(GPA_LOG_DEBUG, d->C->host.log_level,
             "cuda: GPA_CUDNN_GRAPHS: capture of an execute failed (%s): plain executes",
             st ? d->api.cudnnGetErrorString(st) : "the driver");
  }
  if (g) cu->cuGraphDestroy(g);
}

/* The graph of the pack just looked up, when the knob asks for graphs and
 * the stream is not being captured already; NULL: a plain execute. */
static CUgraphExec graph_of(gpa__dnn *d, gpa__dnn_plan *p, cudnnBackendDescriptor_t vp) {
  if (!d->is_capturing || !p->n_packs) return NULL;
  dnn_pack *k = &p->packs[p->last_pack];
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  if (k->vp != vp || k->no_graph || d->is_capturing((CUstream)d->stream, &cs) != CUDA_SUCCESS ||
      cs != CU_STREAM_CAPTURE_STATUS_NONE)
    return NULL;
  if (!k->exec) capture(d, p, k);
  return k->exec;
}

static cudnnStatus_t execute(gpa__dnn *d, gpa__dnn_plan *p, cudnnBackendDescriptor_t vp) {
  CUgraphExec e = graph_of(d, p, vp);
  if (!e) return d->api.cudnnBackendExecute(d->h, p->plan, vp);
  d->st.graph_launches++;
  /* a launch that fails is the op's failure: its work may be half queued */
  return d->C->cu.cuGraphLaunch(e, (CUstream)d->stream) == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS
                                                                          : CUDNN_STATUS_EXECUTION_FAILED;
}

cudnnStatus_t gpa__dnn_execute(gpa__dnn *d, gpa__dnn_plan *p, cudnnBackendDescriptor_t vp) {
  d->st.execs++;
  if (!d->timing) return execute(d, p, vp);
  uint64_t t0 = now_ns();
  cudnnStatus_t s = execute(d, p, vp);
  d->st.exec_ns += now_ns() - t0, d->st.timed++;
  return s;
}

int64_t gpa__dnn_plan_workspace(const gpa__dnn_plan *p) { return p->workspace; }

void gpa__dnn_descs_free(const gpa__cudnn_api *A, gpa__dnn_descs *g) {
  for (int i = g->n - 1; i >= 0; i--) A->cudnnBackendDestroyDescriptor(g->d[i]);
  g->n = 0;
  g->graph = NULL;
}

static void plan_free(gpa__dnn *d, gpa__dnn_plan *p) {
  if (d->last == p) d->last = NULL;
  packs_free(d, p);
  if (p->plan) d->api.cudnnBackendDestroyDescriptor(p->plan);
  if (p->cfg) d->api.cudnnBackendDestroyDescriptor(p->cfg);
  gpa__dnn_descs_free(&d->api, &p->g);
  free(p->why);
  free(p);
}

void gpa__dnn_plans_release(gpa__dnn *d) {
  for (gpa__dnn_plan *p = d->plans, *nx; p; p = nx) {
    nx = p->next;
    plan_free(d, p);
  }
  d->plans = NULL;
  d->n_plans = 0;
}

/* Drops least recently used plans until at most `keep` remain. */
static void trim(gpa__dnn *d, uint32_t keep) {
  while (d->n_plans > keep) {
    gpa__dnn_plan **pp = &d->plans;
    while ((*pp)->next) pp = &(*pp)->next;
    plan_free(d, *pp);
    *pp = NULL;
    d->n_plans--;
    d->st.evictions++;
  }
}

void gpa__cudnn_set_plan_bound(gpa__cu_ctx *C, uint32_t bound) {
  if (!C->dnn) return;
  C->dnn->bound = bound ? bound : 1;
  if (C->dnn->state > 0) trim(C->dnn, C->dnn->bound);
}

static const char *dnn_err(const gpa__dnn *d, cudnnStatus_t s) { return d->api.cudnnGetErrorString(s); }

/* A numerical note that refuses an engine for an exact key: f32 inputs
 * rounded (TF32 tensor cores, down-conversion), sums that are not plain
 * fp32 dot products (FFT, Winograd, reduced precision). */
static int inexact(cudnnBackendNumericalNote_t n, int exact) {
  if (!exact) return 0;
  if (n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS || n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
    return 1;
  /* exact == 2: f32 storage, where a tensor-core engine means TF32 */
  return exact == 2 && n != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && n != CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP;
}

/* Whether engine config `cfg` may be used: determinism unless allowed,
 * and exactness where the key asks for it. */
static int engine_ok(gpa__dnn *d, cudnnBackendDescriptor_t cfg, int nondet_ok, int exact) {
  if (nondet_ok && !exact) return 1;
  const gpa__cudnn_api *A = &d->api;
  cudnnBackendDescriptor_t eng = NULL;
  int64_t n = 0;
  int ok = 0;
  if (A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return 0;
  if (A->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
          CUDNN_STATUS_SUCCESS &&
      n == 1) {
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    if (A->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                    CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS) {
      ok = 1;
      for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        if ((notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && !nondet_ok) || inexact(notes[i], exact)) ok = 0;
    }
  }
  A->cudnnBackendDestroyDescriptor(eng);
  return ok;
}

/* "engine=G notes=[..] knobs=[type:value ..]" of an engine config, as far
 * as the library tells (the simulator has no knobs). */
static void describe(gpa__dnn *d, cudnnBackendDescriptor_t cfg, char *buf, size_t n) {
  const gpa__cudnn_api *A = &d->api;
  cudnnBackendDescriptor_t eng = NULL, kc[16] = {0};
  int64_t cnt = 0, gidx = -1, nk = 0;
  size_t l = 0;
  buf[0] = 0;
#define PUT(...) (l += l < n ? (size_t)snprintf(buf + l, n - l, __VA_ARGS__) : 0)
  if (!A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) &&
      !A->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng)) {
    if (A->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &gidx)) gidx = -1;
    PUT("engine=%lld notes=[", (long long)gidx);
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t nn = 0;
    if (!A->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes))
      for (int64_t i = 0; i < nn && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        PUT("%s%s", i ? " " : "",
            notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC ? "nondet"
            : notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE    ? "tc"
                                                              : "other");
    PUT("]");
  }
  if (eng) A->cudnnBackendDestroyDescriptor(eng);
  int made = 0;
  while (made < 16 && !A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &kc[made])) made++;
  if (made == 16 &&
      !A->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 16, &nk, kc)) {
    PUT(" knobs=[");
    for (int64_t i = 0; i < nk && i < 16; i++) {
      cudnnBackendKnobType_t t = 0;
      int64_t v = 0;
      if (!A->cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &t) &&
          !A->cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &v))
        PUT("%s%d:%lld", i ? " " : "", (int)t, (long long)v);
    }
    PUT("]");
  }
  for (int i = 0; i < made; i++) A->cudnnBackendDestroyDescriptor(kc[i]);
#undef PUT
}

/* How make_plan_mode chooses, and what it chose. */
typedef struct choice {
  int nondet_ok, exact, first, verbose;
  cudnnBackendHeurMode_t mode;
  int tried; /* out: some candidate was tried */
  int64_t cand, found; /* out: the chosen candidate and the list's length */
} choice;

static const char *mode_name(cudnnBackendHeurMode_t m) {
  return m == CUDNN_HEUR_MODE_A ? "a" : m == CUDNN_HEUR_MODE_B ? "b" : m == CUDNN_HEUR_MODE_FALLBACK ? "fallback" : "?";
}

/* A finalized plan for the graph (its engine config in *chosen, kept with
 * it), or NULL with why. */
static cudnnBackendDescriptor_t make_plan_mode(gpa__dnn *d, cudnnBackendDescriptor_t graph, choice *c,
                                               int64_t *workspace, cudnnBackendDescriptor_t *chosen, char *why,
                                               size_t n) {
  const gpa__cudnn_api *A = &d->api;
  cudnnBackendDescriptor_t heur = NULL, cfg[CANDIDATES] = {0}, plan = NULL;
  int64_t found = 0;
  cudnnBackendHeurMode_t mode = c->mode;
  cudnnStatus_t s = A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
  if (!s) s = A->cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          1, &graph);
  if (!s) s = A->cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (!s) s = A->cudnnBackendFinalize(heur);
  for (int i = 0; i < CANDIDATES && !s; i++) s = A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]);
  if (!s)
    s = A->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, CANDIDATES,
                                    &found, cfg);
  if (s) snprintf(why, n, "engine heuristics: %s", dnn_err(d, s));
  else if (found < 1) snprintf(why, n, "no engine for this graph");
  else if (c->first >= found || c->first >= CANDIDATES)
    snprintf(why, n, "GPA_CUDNN_SDPA_BWD_ENGINE=%d: heuristics %s lists %lld engine configs", c->first, mode_name(mode),
             (long long)found);
  c->found = found;
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  int skipped = 0;
  for (int64_t i = c->first; !s && i < found && i < CANDIDATES && !plan; i++) {
    char desc[160] = "";
    if (c->verbose) describe(d, cfg[i], desc, sizeof desc);
    if (!engine_ok(d, cfg[i], c->nondet_ok, c->exact)) {
      skipped++;
      if (c->verbose) fprintf(stderr, "gpuactor cuDNN: heur %s candidate %lld/%lld: %s: skipped (notes)\n",
                              mode_name(mode), (long long)i, (long long)found, desc);
      continue;
    }
    cudnnBackendDescriptor_t p = NULL;
    cudnnHandle_t h = d->h;
    c->tried = 1;
    last = A->cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
    if (!last) last = A->cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (!last)
      last = A->cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &cfg[i]);
    if (!last) last = A->cudnnBackendFinalize(p);
    int64_t cnt = 0;
    if (!last)
      last = A->cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt,
                                         workspace);
    if (c->verbose)
      fprintf(stderr, "gpuactor cuDNN: heur %s candidate %lld/%lld: %s: %s, workspace %lld\n", mode_name(mode),
              (long long)i, (long long)found, desc, last ? dnn_err(d, last) : "plan finalized",
              last ? 0LL : (long long)*workspace);
    if (!last) {
      plan = p;
      *chosen = cfg[i];
      cfg[i] = NULL;
      c->cand = i;
    } else if (p) {
      A->cudnnBackendDestroyDescriptor(p);
    }
  }
  /* GPA_CUDNN_VERBOSE=2: the rest of the list too, not built */
  for (int64_t i = c->cand + 1; plan && c->verbose > 1 && i < found && i < CANDIDATES; i++) {
    char desc[160];
    describe(d, cfg[i], desc, sizeof desc);
    fprintf(stderr, "gpuactor cuDNN: heur %s candidate %lld/%lld: %s: not built\n", mode_name(mode), (long long)i,
            (long long)found, desc);
  }
  if (!s && found > c->first && !plan) {
    if (skipped == found - c->first || skipped == CANDIDATES - c->first)
      snprintf(why, n, "no %s engine among %lld", c->exact ? "deterministic exact-fp32" : "deterministic",
               (long long)found);
    else snprintf(why, n, "execution plan: %s", dnn_err(d, last));
  }
  for (int i = 0; i < CANDIDATES; i++)
    if (cfg[i]) A->cudnnBackendDestroyDescriptor(cfg[i]);
  if (heur) A->cudnnBackendDestroyDescriptor(heur);
  return plan;
}

/* The key's heuristics list, then, for exact keys where it listed no engine
 * they accept (the plain fp32 engines may be listed only there), the
 * fallback list's. An accepted engine whose plan fails is not retried.
 * p->info says what was chosen. */
static cudnnBackendDescriptor_t make_plan(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_plan *p, char *why,
                                          size_t n) {
  static const cudnnBackendHeurMode_t modes[3] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
  int sdpa = !k->conv;
  choice c = {.nondet_ok = k->nondet, .exact = k->exact, .first = sdpa && k->bwd ? d->tune.first : 0,
              .verbose = d->tune.verbose, .mode = modes[sdpa ? d->tune.heur : 0]};
  cudnnBackendDescriptor_t plan = make_plan_mode(d, p->g.graph, &c, &p->workspace, &p->cfg, why, n);
  if (!plan && k->exact && !c.tried) {
    char w2[256];
    c.mode = CUDNN_HEUR_MODE_FALLBACK, c.first = 0;
    plan = make_plan_mode(d, p->g.graph, &c, &p->workspace, &p->cfg, w2, sizeof w2);
    if (!plan) {
      size_t l = strlen(why);
      snprintf(why + l, n - l, "; fallback list: %s", w2);
    }
  }
  if (plan) {
    char desc[160];
    describe(d, p->cfg, desc, sizeof desc);
    snprintf(p->info, sizeof p->info, "heur=%s cand=%lld/%lld %s ws=%lld", mode_name(c.mode), (long long)c.cand,
             (long long)c.found, desc, (long long)p->workspace);
  }
  return plan;
}

const char *gpa__cudnn_plan_info(gpa__cu_ctx *C) { return C->dnn && C->dnn->last ? C->dnn->last->info : ""; }

gpa__dnn_plan *gpa__dnn_plan_get(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_build_fn build, char *why, size_t n) {
  for (gpa__dnn_plan **pp = &d->plans; *pp; pp = &(*pp)->next) {
    gpa__dnn_plan *p = *pp;
    if (memcmp(&p->key, k, sizeof *k)) continue;
    *pp = p->next; /* move to the front: most recently used */
    p->next = d->plans;
    d->plans = p;
    d->st.hits++;
    d->last = p->plan ? p : NULL;
    if (!p->plan) {
      snprintf(why, n, "%s (cached)", p->why);
      return NULL;
    }
    return p;
  }
  d->st.misses++;
  gpa__dnn_plan *p = calloc(1, sizeof *p);
  if (!p) {
    snprintf(why, n, "no host memory for a plan");
    d->st.builds_failed++;
    return NULL;
  }
  if (build(d, k, &p->g, why, n)) p->plan = make_plan(d, k, p, why, n);
  if (!p->plan) {
    d->st.builds_failed++;
    gpa__dnn_descs_free(&d->api, &p->g);
    p->why = strdup(why);
    if (!p->why) {
      plan_free(d, p);
      return NULL;
    }
  }
  p->key = *k;
  trim(d, d->bound - 1);
  p->next = d->plans;
  d->plans = p;
  d->n_plans++;
  d->last = p->plan ? p : NULL;
  return p->plan ? p : NULL;
}
