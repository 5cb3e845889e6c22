/* cuDNN execution plans, cached by the actor (design in cudnn.h).
 *
 * Building the operation graph, asking the heuristics and finalizing a plan
 * costs milliseconds on a GPU; executing a cached plan costs a variant pack.
 * So plans are kept per key (shapes, dtypes, flags, lengths present,
 * device) in a list ordered by last use, at most `bound` of them: a miss
 * past the bound destroys the least recently used plan. Everything here
 * runs on the actor thread.
 *
 * Engine choice: the heuristics' candidates in their order; unless the key
 * allows it, an engine whose numerical notes include NONDETERMINISTIC is
 * skipped (the deterministic backward is the default). The first candidate
 * whose plan finalizes wins; none is a decline, never an error.
 *
 * A key cuDNN refused (graph, heuristics or plan) is cached too, with the
 * reason, so that a shape it never takes costs a lookup per call, not a
 * graph build (milliseconds) per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cudnn.h"

/* Engine configs read from the heuristics: convolutions list many, and the
 * deterministic non-tensor-core ones an exact f32 key needs come late. */
#define CANDIDATES 32

struct gpa__dnn_plan {
  gpa__dnn_key key;
  cudnnBackendDescriptor_t plan, cfg; /* plan NULL: cuDNN refused this key (why) */
  gpa__dnn_descs g;
  int64_t workspace;
  char *why;
  struct gpa__dnn_plan *next;
  gpa__dnn_scalars sc;
  cudnnBackendDescriptor_t vp; /* the last variant pack and what it holds */
  int vp_n;
  int64_t vp_uid[GPA__DNN_VP_MAX];
  void *vp_ptr[GPA__DNN_VP_MAX], *vp_ws;
};

gpa__dnn_scalars *gpa__dnn_plan_scalars(gpa__dnn_plan *p) { return &p->sc; }

cudnnBackendDescriptor_t gpa__dnn_plan_pack(gpa__dnn *d, gpa__dnn_plan *p, int n, const int64_t *uid,
                                            void *const *ptr, void *ws, cudnnStatus_t *st) {
  const gpa__cudnn_api *A = &d->api;
  if (p->vp && p->vp_n == n && p->vp_ws == ws && !memcmp(p->vp_uid, uid, sizeof *uid * (size_t)n) &&
      !memcmp(p->vp_ptr, ptr, sizeof *ptr * (size_t)n))
    return p->vp;
  if (p->vp) A->cudnnBackendDestroyDescriptor(p->vp);
  p->vp = NULL;
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
  p->vp = vp, p->vp_n = n, p->vp_ws = ws;
  memcpy(p->vp_uid, uid, sizeof *uid * (size_t)n);
  memcpy(p->vp_ptr, ptr, sizeof *ptr * (size_t)n);
  return vp;
}

cudnnBackendDescriptor_t gpa__dnn_plan_desc(const gpa__dnn_plan *p) { return p->plan; }
int64_t gpa__dnn_plan_workspace(const gpa__dnn_plan *p) { return p->workspace; }

void gpa__dnn_descs_free(const gpa__cudnn_api *A, gpa__dnn_descs *g) {
  for (int i = g->n - 1; i >= 0; i--) A->cudnnBackendDestroyDescriptor(g->d[i]);
  g->n = 0;
  g->graph = NULL;
}

static void plan_free(gpa__dnn *d, gpa__dnn_plan *p) {
  if (p->vp) d->api.cudnnBackendDestroyDescriptor(p->vp);
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

/* A finalized plan for the graph (its engine config in *chosen, kept with
 * it), or NULL with why. */
static cudnnBackendDescriptor_t make_plan_mode(gpa__dnn *d, cudnnBackendDescriptor_t graph, int nondet_ok,
                                               int exact, cudnnBackendHeurMode_t mode, int64_t *workspace,
                                               cudnnBackendDescriptor_t *chosen, int *tried, char *why,
                                               size_t n) {
  const gpa__cudnn_api *A = &d->api;
  cudnnBackendDescriptor_t heur = NULL, cfg[CANDIDATES] = {0}, plan = NULL;
  int64_t found = 0;
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
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  int skipped = 0;
  for (int64_t i = 0; !s && i < found && i < CANDIDATES && !plan; i++) {
    if (!engine_ok(d, cfg[i], nondet_ok, exact)) {
      skipped++;
      continue;
    }
    cudnnBackendDescriptor_t p = NULL;
    cudnnHandle_t h = d->h;
    *tried = 1;
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
    if (!last) {
      plan = p;
      *chosen = cfg[i];
      cfg[i] = NULL;
    } else if (p) {
      A->cudnnBackendDestroyDescriptor(p);
    }
  }
  if (!s && found >= 1 && !plan) {
    if (skipped == found || skipped == CANDIDATES) snprintf(why, n, "no %s engine among %lld", exact ? "deterministic exact-fp32" : "deterministic", (long long)found);
    else snprintf(why, n, "execution plan: %s", dnn_err(d, last));
  }
  for (int i = 0; i < CANDIDATES; i++)
    if (cfg[i]) A->cudnnBackendDestroyDescriptor(cfg[i]);
  if (heur) A->cudnnBackendDestroyDescriptor(heur);
  return plan;
}

/* Mode A's candidates, then, for exact keys where mode A listed no engine
 * they accept (the plain fp32 engines may be listed only there), the
 * fallback list's. An accepted engine whose plan fails is not retried. */
static cudnnBackendDescriptor_t make_plan(gpa__dnn *d, cudnnBackendDescriptor_t graph, int nondet_ok, int exact,
                                          int64_t *workspace, cudnnBackendDescriptor_t *chosen, char *why,
                                          size_t n) {
  int tried = 0;
  cudnnBackendDescriptor_t p =
      make_plan_mode(d, graph, nondet_ok, exact, CUDNN_HEUR_MODE_A, workspace, chosen, &tried, why, n);
  if (!p && exact && !tried) {
    char w2[256];
    p = make_plan_mode(d, graph, nondet_ok, exact, CUDNN_HEUR_MODE_FALLBACK, workspace, chosen, &tried, w2,
                       sizeof w2);
    if (!p) {
      size_t l = strlen(why);
      snprintf(why + l, n - l, "; fallback list: %s", w2);
    }
  }
  return p;
}

gpa__dnn_plan *gpa__dnn_plan_get(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_build_fn build, char *why, size_t n) {
  for (gpa__dnn_plan **pp = &d->plans; *pp; pp = &(*pp)->next) {
    gpa__dnn_plan *p = *pp;
    if (memcmp(&p->key, k, sizeof *k)) continue;
    *pp = p->next; /* move to the front: most recently used */
    p->next = d->plans;
    d->plans = p;
    d->st.hits++;
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
  if (build(d, k, &p->g, why, n)) p->plan = make_plan(d, p->g.graph, k->nondet, k->exact, &p->workspace, &p->cfg, why, n);
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
  return p->plan ? p : NULL;
}
