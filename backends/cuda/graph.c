/* Repeated batches replayed as CUDA graphs: see graph.h for the scheme and
 * docs/graphs.md for the user's side. Everything here runs on the actor
 * thread.
 *
 * Why per-message child graphs: a replay must be able to change one
 * message's kernel arguments (AdamW's step and lr change every step) without
 * capturing the whole batch again. Each message's work is one child node of
 * a chain; a message whose params changed is captured alone and its node
 * updated with cuGraphExecChildGraphNodeSetParams. Device pointers and
 * shapes must match exactly: they are baked into the nodes.
 *
 * Why hold instead of launching as messages arrive: the point is one launch
 * per batch. The held messages are deferred for the actor; they start when
 * the sequence completes, at the batch's end (a barrier), when someone
 * waits on one of them (the actor releases on a waiter's kick), or on
 * divergence (eagerly). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/graph.h"

#define GPA__CU_GRAPHS 8 /* labels with a graph per queue (LRU beyond) */
/* Messages per graph segment. A batch's graph is a chain of segments, each
 * launched as soon as its messages have matched (or been recorded): the GPU
 * runs a segment while the host matches the next, instead of idling until
 * the whole batch was submitted. One launch per 32 messages. */
#define GPA__CU_GRAPH_SEG 32
#define GPA__CU_GRAPH_FAILS 2 /* failed recordings before a label stays eager */

enum { STEP_OP, STEP_UP, STEP_DOWN };
enum { PH_EAGER, PH_COUNT, PH_RECORD, PH_REPLAY, PH_LAUNCHED };

/* One message of a recorded sequence: what must match, and its node. */
typedef struct gstep {
  uint8_t kind;
  uint8_t skips; /* registrations that declined before d accepted */
  const gpa_op_desc *d;
  uint64_t shape_sig; /* the tensors' dtypes and shapes */
  uint32_t n_ptrs;
  void *ptrs[GPA__MAX_TENSORS]; /* ops: device pointers; copies: [0] = device address */
  uint64_t n;                   /* copies: bytes */
  unsigned char params[GPA_OP_PARAMS_MAX];
  size_t n_nodes;      /* its child graph's nodes; 0: no device work, no node */
  CUgraphNode node;
  gpa__cu_stage *stage; /* copies: the graph's own pinned staging */
  gpa__cu_post post;    /* a device-computed check: its stage is the graph's */
} gstep;

/* A held message: enough to run it eagerly, and a pending node update. */
typedef struct ghold {
  gpa__work w;
  const gpa_op_desc *d;
  gpa_op_impl_fn impl;
  gpa_op_exec x;
  void *ptrs[GPA__MAX_TENSORS];
  void *host; /* copies */
  CUdeviceptr dev;
  uint64_t n;
  bool up;
  CUgraph child; /* recording: its capture; replay: a re-capture (params changed) */
  gpa__cu_post post; /* the re-capture's check */
} ghold;

/* A segment of a recorded batch: steps [first, first + n), one graph. */
typedef struct gseg {
  uint32_t first, n;
  CUgraph g;
  CUgraphExec exec;
} gseg;

typedef struct gentry {
  char label[64];
  uint64_t used;     /* LRU tick */
  uint64_t sig;      /* automatic mode: the last eager batch's sequence */
  uint32_t repeats;  /* ... and how many batches in a row had it */
  uint32_t fails;
  gstep *steps;
  uint32_t n_steps, cap_steps;
  gseg *segs;
  uint32_t n_segs, cap_segs;
  bool complete;        /* recorded to its end: it can replay */
  uint64_t scratch_gen; /* the queue's scratch block the nodes point into */
  bool stale;           /* diverged: dropped at its label's next batch (its launches may still run) */
} gentry;

struct gpa__cu_gq {
  gentry ent[GPA__CU_GRAPHS];
  uint32_t n_ent;
  uint64_t tick;
  int phase;
  int32_t mode; /* of the open batch: -1 on, N > 0 after N repeats */
  gentry *cur;
  uint32_t pos; /* replay: the next step to match */
  uint32_t seg; /* replay: the segment being matched */
  ghold *hold;  /* the held messages: the current segment's, from its first step on */
  uint32_t n_hold, cap_hold;
  uint64_t sig;
  uint32_t outcome; /* 0 eager, 1 recorded, 2 replayed */
  const gpa__msg *cur_m; /* the message whose registrations are being tried */
  uint32_t declined;     /* ... and how many declined so far */
};

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

static uint64_t shape_sig(const gpa_op_exec *x) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < x->n_inputs + x->n_outputs; i++) {
    const gpa_tensor *t = i < x->n_inputs ? &x->inputs[i] : &x->outputs[i - x->n_inputs];
    h = mix(h, (uint64_t)t->dtype << 32 | t->rank);
    for (uint32_t k = 0; k < t->rank; k++) h = mix(h, (uint64_t)t->shape[k]);
  }
  return h;
}

static void stage_free(gpa__cu_ctx *C, gpa__cu_stage *s) {
  if (!s) return;
  C->cu.cuMemFreeHost(s->p);
  free(s);
}

/* A pinned block the graph owns (gpa__cu_stage_put leaves it alone). */
static gpa__cu_stage *stage_own(gpa__cu_ctx *C, uint64_t n) {
  gpa__cu_stage *s = gpa__cu_stage_get(C, n);
  if (s) s->graph = true;
  return s;
}

/* Nothing of the entry may be in flight (its queue has no records). */
static void entry_clear(gpa__cu_ctx *C, gentry *e) {
  for (uint32_t i = 0; i < e->n_segs; i++) {
    if (e->segs[i].exec) C->cu.cuGraphExecDestroy(e->segs[i].exec);
    if (e->segs[i].g) C->cu.cuGraphDestroy(e->segs[i].g);
  }
  e->n_segs = 0;
  for (uint32_t i = 0; i < e->n_steps; i++) {
    stage_free(C, e->steps[i].stage);
    stage_free(C, e->steps[i].post.stage);
  }
  e->n_steps = 0;
  e->complete = false;
  e->stale = false;
}

static void hold_drop(gpa__cu_ctx *C, ghold *h) {
  if (h->child) C->cu.cuGraphDestroy(h->child);
  h->child = NULL;
  stage_free(C, h->post.stage);
  h->post = (gpa__cu_post){0};
}

/* q's graph state, made (and q put on C's list) at its first graph batch. */
static struct gpa__cu_gq *gq_of(gpa__cu_ctx *C, gpa__cu_queue *q) {
  if (q->gq || !(q->gq = calloc(1, sizeof *q->gq))) return q->gq;
  q->graph_next = C->graph_queues;
  C->graph_queues = q;
  return q->gq;
}

/* The label's entry, made (evicting the least recently used) if new. NULL:
 * the table is full of entries that may still be running. */
static gentry *entry_for(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g, const char *label) {
  gentry *lru = NULL;
  for (uint32_t i = 0; i < g->n_ent; i++) {
    gentry *e = &g->ent[i];
    if (!strncmp(e->label, label, sizeof e->label - 1)) {
      e->used = ++g->tick;
      return e;
    }
    if (!lru || e->used < lru->used) lru = e;
  }
  gentry *e;
  if (g->n_ent < GPA__CU_GRAPHS) {
    e = &g->ent[g->n_ent++];
  } else {
    /* Its last launch may still run and its readbacks land from its staging. */
    if (q->head) return NULL;
    e = lru;
    entry_clear(C, e);
  }
  gstep *steps = e->steps;
  gseg *segs = e->segs;
  uint32_t cap = e->cap_steps, cap_segs = e->cap_segs;
  memset(e, 0, sizeof *e);
  e->steps = steps;
  e->cap_steps = cap;
  e->segs = segs;
  e->cap_segs = cap_segs;
  snprintf(e->label, sizeof e->label, "%s", label);
  e->used = ++g->tick;
  return e;
}

/* Completes w with st on the actor thread, without a record (cu_complete
 * counts these on the queue). */
static void complete_direct(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, gpa_status st) {
  if (st == GPA_SKIP) {
    snprintf(w->err, w->err_cap, "graph replay: the implementation that ran this op before declined it now");
    st = GPA_EINTERNAL;
  }
  q->direct++;
  C->host.complete(C->host.actor, w->m, st);
}

/* Runs the held messages eagerly, in order (their work was never
 * launched); each completes as eager work does. */
static void run_held(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g) {
  for (uint32_t i = 0; i < g->n_hold; i++) {
    ghold *h = &g->hold[i];
    hold_drop(C, h);
    gpa_status st;
    if (h->d) {
      h->x.in = h->ptrs;
      h->x.out = h->ptrs + h->x.n_inputs;
      st = gpa__cu_run_eager(C, &h->w, h->d, h->impl, &h->x);
    } else {
      st = gpa__cu_copy(C, q, &h->w, h->up, h->host, h->dev, h->n);
    }
    if (st != GPA__DEFERRED) complete_direct(C, q, &h->w, st);
  }
  g->n_hold = 0;
}

/* Leaves graph mode for the rest of the batch: held work runs eagerly. */
static void diverge(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g, const char *why) {
  if (g->cur) {
    gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: batch '%s' runs eagerly: %s", g->cur->label, why);
    if (g->phase == PH_RECORD) {
      /* An op needing more scratch than the block has is no fault of the
       * batch: its eager run grows the block, and the next batch records. */
      if (!q->scratch_refused) g->cur->fails++;
      q->scratch_refused = false;
      if (g->cur->fails == GPA__CU_GRAPH_FAILS)
        gpa__log(GPA_LOG_INFO, C->host.log_level, "cuda: batch '%s' stays eager (no graph): %s", g->cur->label, why);
    }
    g->cur->stale = true; /* segments launched already may still run: cleared later */
  }
  run_held(C, q, g);
  g->phase = PH_EAGER;
  g->outcome = 0;
}

/* Room for element n of a growing array (doubling from `first`); the
 * element is zeroed. NULL: out of memory. */
static void *grow(void **v, uint32_t *cap, uint32_t n, size_t size, uint32_t first) {
  if (n == *cap) {
    uint32_t c = *cap ? *cap * 2 : first;
    void *p = realloc(*v, (size_t)c * size);
    if (!p) return NULL;
    *v = p;
    *cap = c;
  }
  return memset((char *)*v + (size_t)n * size, 0, size);
}

static ghold *hold_next(struct gpa__cu_gq *g) {
  return grow((void **)&g->hold, &g->cap_hold, g->n_hold, sizeof *g->hold, 64);
}

static gstep *step_next(gentry *e) {
  return grow((void **)&e->steps, &e->cap_steps, e->n_steps, sizeof *e->steps, 64);
}

/* Captures impl(x) alone on q's stream. GPA_OK with *out (NULL when it
 * enqueued nothing), GPA_SKIP when the implementation declined, else
 * GPA__CU_EAGER (not capturable, or it failed: the eager run reports it). */
static gpa_status capture_op(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, const gpa_op_desc *d,
                             gpa_op_impl_fn impl, gpa_op_exec *x, CUgraph *out, size_t *n_nodes,
                             gpa__cu_post *post) {
  *out = NULL;
  *n_nodes = 0;
  *post = (gpa__cu_post){0};
  if (impl == gpa__cu_fallback) return GPA__CU_EAGER; /* synchronous host work */
  gpa__cu_enter_op(C, q, w, d, impl, x);
  C->post = (gpa__cu_post){0};
  if (C->cu.cuStreamBeginCapture(q->s, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS) return GPA__CU_EAGER;
  gpa_status st = impl(x);
  CUgraph g = NULL;
  CUresult e = C->cu.cuStreamEndCapture(q->s, &g);
  *post = C->post;
  C->post = (gpa__cu_post){0};
  if (post->stage) post->stage->graph = true;
  if (e == CUDA_SUCCESS && g) e = C->cu.cuGraphGetNodes(g, NULL, n_nodes);
  if (st != GPA_OK || e != CUDA_SUCCESS) {
    char b[160];
    gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: graph capture of %s: %s%s%s", d->name,
             st != GPA_OK ? gpa_status_name(st) : gpa__cu_errstr(&C->cu, e, b, sizeof b), st != GPA_OK ? ": " : "",
             st != GPA_OK ? x->msg : "");
    if (g) C->cu.cuGraphDestroy(g);
    stage_free(C, post->stage);
    *post = (gpa__cu_post){0};
    x->msg[0] = 0;
    return st == GPA_SKIP ? GPA_SKIP : GPA__CU_EAGER;
  }
  if (!*n_nodes) {
    C->cu.cuGraphDestroy(g);
    g = NULL;
  }
  *out = g;
  return GPA_OK;
}

static gpa_status capture_copy(gpa__cu_ctx *C, gpa__cu_queue *q, bool up, gpa__cu_stage *s, CUdeviceptr dev,
                               uint64_t n, CUgraph *out) {
  *out = NULL;
  if (C->cu.cuStreamBeginCapture(q->s, CU_STREAM_CAPTURE_MODE_RELAXED) != CUDA_SUCCESS) return GPA__CU_EAGER;
  CUresult e = up ? C->cu.cuMemcpyHtoDAsync(dev, s->p, n, q->s) : C->cu.cuMemcpyDtoHAsync(s->p, dev, n, q->s);
  CUgraph g = NULL;
  CUresult e2 = C->cu.cuStreamEndCapture(q->s, &g);
  if (e != CUDA_SUCCESS || e2 != CUDA_SUCCESS || !g) {
    if (g) C->cu.cuGraphDestroy(g);
    return GPA__CU_EAGER;
  }
  *out = g;
  return GPA_OK;
}

static gseg *seg_next(gentry *e) { return grow((void **)&e->segs, &e->cap_segs, e->n_segs, sizeof *e->segs, 8); }

/* Chains the held children (the segment's steps, recorded) into one graph
 * and instantiates it. */
static bool build(gpa__cu_ctx *C, struct gpa__cu_gq *g, gentry *e, gseg *sg) {
  CUresult r = C->cu.cuGraphCreate(&sg->g, 0);
  CUgraphNode prev = NULL;
  const char *who = "the segment"; /* the op whose capture the driver refused, for the log */
  for (uint32_t i = 0; r == CUDA_SUCCESS && i < sg->n; i++) {
    if (!g->hold[i].child) continue;
    gstep *st = &e->steps[sg->first + i];
    r = C->cu.cuGraphAddChildGraphNode(&st->node, sg->g, prev ? &prev : NULL, prev ? 1 : 0, g->hold[i].child);
    if (r != CUDA_SUCCESS && g->hold[i].d) who = g->hold[i].d->name;
    prev = st->node;
  }
  for (uint32_t i = 0; i < g->n_hold; i++) {
    if (g->hold[i].child) C->cu.cuGraphDestroy(g->hold[i].child);
    g->hold[i].child = NULL;
  }
  if (r == CUDA_SUCCESS) r = C->cu.cuGraphInstantiateWithFlags(&sg->exec, sg->g, 0);
  if (r == CUDA_SUCCESS) return true;
  char msg[200];
  gpa__cu_check(C, r, "graph: build/instantiate", msg, sizeof msg);
  gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: batch '%s': %s (%s)", e->label, msg, who);
  return false;
}

/* Launches segment sg for the held messages (its steps): one record each,
 * in one group, as if they had been launched one by one. False: nothing
 * was launched (the caller runs them eagerly). */
static bool launch(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g, gentry *e, gseg *sg) {
  for (uint32_t i = 0; i < g->n_hold; i++) {
    ghold *h = &g->hold[i];
    if (!h->child) continue;
    gstep *s = &e->steps[sg->first + i];
    CUresult r = C->cu.cuGraphExecChildGraphNodeSetParams(sg->exec, s->node, h->child);
    C->cu.cuGraphDestroy(h->child);
    h->child = NULL;
    if (r != CUDA_SUCCESS) {
      char msg[200];
      gpa__cu_check(C, r, "cuGraphExecChildGraphNodeSetParams", msg, sizeof msg);
      gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: batch '%s': %s", e->label, msg);
      return false;
    }
    /* the node now reads its check into the new capture's stage */
    stage_free(C, s->post.stage);
    s->post = h->post;
    h->post = (gpa__cu_post){0};
  }
  gpa__cu_rec *first = NULL, *last = NULL;
  for (uint32_t i = 0; i < g->n_hold; i++) {
    gpa__cu_rec *r = gpa__cu_rec_get(C, &g->hold[i].w, g->hold[i].w.err, g->hold[i].w.err_cap);
    if (!r) {
      for (gpa__cu_rec *n; first; first = n) n = first->next, gpa__cu_rec_put(C, first);
      return false;
    }
    if (last) last->next = r;
    else first = r;
    last = r;
  }
  CUresult r = first ? gpa__cu_start_event(C, q, first) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) r = C->cu.cuGraphLaunch(sg->exec, q->s);
  if (r != CUDA_SUCCESS) {
    char msg[200];
    gpa__cu_check(C, r, "cuGraphLaunch", msg, sizeof msg);
    gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: batch '%s': %s", e->label, msg);
    for (gpa__cu_rec *n; first; first = n) n = first->next, gpa__cu_rec_put(C, first);
    return false;
  }
  uint32_t i = 0;
  for (gpa__cu_rec *rec = first, *n; rec; rec = n, i++) {
    n = rec->next;
    rec->next = NULL;
    gstep *s = &e->steps[sg->first + i];
    if (s->kind == STEP_DOWN) {
      s->stage->rb_dst = g->hold[i].host;
      s->stage->rb_n = s->n;
      s->stage->next = NULL;
      rec->stages = s->stage;
    }
    rec->post = s->post;
    /* The launch is enqueued: the record cannot fail to join its group. */
    gpa__cu_enqueue_done(C, q, rec, g->hold[i].w.err, g->hold[i].w.err_cap);
  }
  g->n_hold = 0;
  return true;
}

/* Recording: the held messages become the entry's next segment, launched
 * now. False: they were not (the caller diverges: they run eagerly). */
static bool record_segment(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g, gentry *e) {
  if (e->scratch_gen != q->scratch_gen) return false; /* the block moved under the recorded nodes */
  gseg *sg = seg_next(e);
  if (!sg) return false;
  sg->first = e->n_steps - g->n_hold;
  sg->n = g->n_hold;
  e->n_segs++;
  return build(C, g, e, sg) && launch(C, q, g, e, sg);
}

/* The batch's end (or a waiter, or other work on the stream): held
 * messages start now. */
void gpa__cu_release(void *bctx, void *bq, int why) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = bq;
  if (!q) {
    for (gpa__cu_queue *b = C->graph_queues; b; b = b->graph_next) gpa__cu_release(C, b, why);
    return;
  }
  struct gpa__cu_gq *g = q->gq;
  if (!g) return;
  gentry *e = g->cur;
  if (g->phase == PH_COUNT && why == GPA__RELEASE_END && e) {
    e->repeats = e->sig == g->sig ? e->repeats + 1 : 1;
    e->sig = g->sig;
  }
  bool end = why == GPA__RELEASE_END;
  if (g->n_hold && C->failed) {
    diverge(C, q, g, "device failed");
  } else if (g->phase == PH_RECORD && g->n_hold) {
    if (!end) diverge(C, q, g, "a message of the batch was waited on (or other work joined the stream) before its end");
    else if (!record_segment(C, q, g, e)) diverge(C, q, g, "the recorded graph could not be built or launched");
  } else if (g->phase == PH_REPLAY && (g->n_hold || (end && g->pos))) {
    /* held messages, or segments launched and the rest never came */
    diverge(C, q, g, end ? "the batch ended before its recorded sequence"
                         : "a message of the batch was waited on before the sequence completed");
  }
  if (g->phase == PH_RECORD && end && e->n_steps) {
    e->complete = true; /* every segment launched */
    e->fails = 0;
    g->outcome = 1;
  }
  /* After its end the queue's messages belong to no graph batch. */
  if (end) g->phase = PH_EAGER;
}

void gpa__cu_batch_begin(void *bctx, void *bq, const char *label, int32_t graph) {
  gpa__cu_ctx *C = bctx;
  gpa__cu_queue *q = bq;
  if (!graph && !q->gq) return;
  gpa__cu_release(C, q, GPA__RELEASE_END);
  struct gpa__cu_gq *g = gq_of(C, q);
  if (!g) return; /* out of memory: eager */
  g->phase = PH_EAGER;
  g->cur = NULL;
  g->outcome = 0;
  g->pos = 0;
  g->mode = graph;
  g->cur_m = NULL;
  if (!graph || C->failed) return;
  gentry *e = entry_for(C, q, g, label ? label : "");
  if (!e || e->fails >= GPA__CU_GRAPH_FAILS) return;
  g->cur = e;
  if (e->n_steps) {
    /* Its staging is free once nothing of this queue is in flight (its last
     * launch's readbacks have landed); its nodes point into the scratch
     * block of the time it was recorded. */
    if (q->head) return;
    if (e->stale || !e->complete || e->scratch_gen != q->scratch_gen) {
      entry_clear(C, e);
    } else {
      g->phase = PH_REPLAY;
      g->seg = 0;
      return;
    }
  }
  if (graph < 0 || (uint32_t)graph <= e->repeats) {
    entry_clear(C, e);
    e->scratch_gen = q->scratch_gen;
    g->phase = PH_RECORD;
    return;
  }
  g->phase = PH_COUNT;
  g->sig = 1469598103934665603ull;
}

uint32_t gpa__cu_batch_graph(void *bctx, void *bq) {
  (void)bctx;
  gpa__cu_queue *q = bq;
  if (!q || !q->gq) return 0;
  uint32_t o = q->gq->outcome;
  q->gq->outcome = 0;
  return o;
}

/* Which registration of the message this call tries: a message is tried
 * registration by registration (the actor's chain walk) while they decline. */
static uint32_t declined_before(struct gpa__cu_gq *g, const gpa__work *w) {
  if (g->cur_m != w->m) {
    g->cur_m = w->m;
    g->declined = 0;
  }
  return g->declined;
}

static bool ptrs_equal(const gstep *s, const gpa_op_exec *x) {
  uint32_t n = x->n_inputs + x->n_outputs;
  if (s->n_ptrs != n) return false;
  for (uint32_t i = 0; i < n; i++)
    if (s->ptrs[i] != (i < x->n_inputs ? x->in[i] : x->out[i - x->n_inputs])) return false;
  return true;
}

static void hold_op(ghold *h, const gpa__work *w, const gpa_op_desc *d, gpa_op_impl_fn impl, const gpa_op_exec *x) {
  h->w = *w;
  h->d = d;
  h->impl = impl;
  h->x = *x;
  for (uint32_t i = 0; i < x->n_inputs; i++) h->ptrs[i] = x->in[i];
  for (uint32_t i = 0; i < x->n_outputs; i++) h->ptrs[x->n_inputs + i] = x->out[i];
}

static gpa_status record_op(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g, const gpa__work *w,
                            const gpa_op_desc *d, gpa_op_impl_fn impl, gpa_op_exec *x) {
  gentry *e = g->cur;
  uint32_t skips = declined_before(g, w);
  ghold *h = hold_next(g);
  gstep *s = h ? step_next(e) : NULL;
  if (!s) {
    diverge(C, q, g, "out of host memory");
    return GPA__CU_EAGER;
  }
  CUgraph child;
  size_t n_nodes;
  gpa__cu_post post;
  gpa_status st = capture_op(C, q, w, d, impl, x, &child, &n_nodes, &post);
  if (st == GPA_SKIP) {
    g->declined++;
    return GPA_SKIP;
  }
  if (st != GPA_OK) {
    diverge(C, q, g, impl == gpa__cu_fallback ? "an op runs on the host fallback"
                     : q->scratch_refused             ? "an op needs a larger scratch block"
                                                      : "an op could not be captured");
    return GPA__CU_EAGER;
  }
  s->kind = STEP_OP;
  s->skips = (uint8_t)skips;
  s->d = d;
  s->shape_sig = shape_sig(x);
  s->n_ptrs = x->n_inputs + x->n_outputs;
  for (uint32_t i = 0; i < s->n_ptrs; i++) s->ptrs[i] = i < x->n_inputs ? x->in[i] : x->out[i - x->n_inputs];
  memcpy(s->params, x->params, d->params_size);
  s->n_nodes = n_nodes;
  s->post = post;
  e->n_steps++;
  hold_op(h, w, d, impl, x);
  h->child = child;
  g->n_hold++;
  return GPA__HELD;
}

static gpa_status replay_op(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g, const gpa__work *w,
                            const gpa_op_desc *d, gpa_op_impl_fn impl, gpa_op_exec *x) {
  gentry *e = g->cur;
  if (g->pos >= e->n_steps) {
    diverge(C, q, g, "more messages than recorded");
    return GPA__CU_EAGER;
  }
  gstep *s = &e->steps[g->pos];
  uint32_t skips = declined_before(g, w);
  if (s->kind != STEP_OP || !ptrs_equal(s, x) || s->shape_sig != shape_sig(x)) {
    diverge(C, q, g, "a message differs from the recorded one");
    return GPA__CU_EAGER;
  }
  if (skips < s->skips) { /* this registration declined these inputs when recorded */
    g->declined++;
    return GPA_SKIP;
  }
  if (d != s->d) {
    diverge(C, q, g, "another implementation runs the op now");
    return GPA__CU_EAGER;
  }
  ghold *h = hold_next(g);
  if (!h) {
    diverge(C, q, g, "out of host memory");
    return GPA__CU_EAGER;
  }
  if (memcmp(s->params, x->params, d->params_size)) {
    /* A changed scalar: capture the message again for its node. */
    CUgraph child;
    size_t n_nodes;
    gpa__cu_post post;
    gpa_status st = capture_op(C, q, w, d, impl, x, &child, &n_nodes, &post);
    if (st != GPA_OK || n_nodes != s->n_nodes) {
      if (child) C->cu.cuGraphDestroy(child);
      if (post.stage) stage_free(C, post.stage);
      diverge(C, q, g, "a message's params changed its work's shape");
      return st == GPA_SKIP ? GPA_SKIP : GPA__CU_EAGER;
    }
    if (child) {
      h->child = child;
      h->post = post;
    }
    memcpy(s->params, x->params, d->params_size);
  }
  hold_op(h, w, d, impl, x);
  g->n_hold++;
  g->pos++;
  return GPA__HELD;
}

/* A message was held. Replay: a segment that has matched to its end is
 * launched now. Record: a full segment is built and launched. If that
 * fails, the held messages run eagerly, the one just held among them: the
 * actor still sees it deferred, and its completion follows. */
static gpa_status held(gpa__cu_ctx *C, gpa__cu_queue *q, struct gpa__cu_gq *g) {
  gentry *e = g->cur;
  if (g->phase == PH_RECORD) {
    if (g->n_hold == GPA__CU_GRAPH_SEG && !record_segment(C, q, g, e))
      diverge(C, q, g, "a segment of the graph could not be built or launched");
    return GPA__HELD;
  }
  gseg *sg = &e->segs[g->seg];
  if (g->pos < sg->first + sg->n) return GPA__HELD;
  if (!launch(C, q, g, e, sg)) {
    diverge(C, q, g, "the graph could not be launched");
    return GPA__HELD;
  }
  if (++g->seg == e->n_segs) {
    g->outcome = 2;
    g->phase = PH_LAUNCHED;
  }
  return GPA__HELD;
}

static void count(struct gpa__cu_gq *g, uint64_t kind, const void *d, const gpa_op_exec *x, uint64_t dev,
                  uint64_t n) {
  g->sig = mix(g->sig, kind);
  g->sig = mix(g->sig, (uint64_t)(uintptr_t)d);
  if (x) {
    g->sig = mix(g->sig, shape_sig(x));
    for (uint32_t i = 0; i < x->n_inputs; i++) g->sig = mix(g->sig, (uint64_t)(uintptr_t)x->in[i]);
    for (uint32_t i = 0; i < x->n_outputs; i++) g->sig = mix(g->sig, (uint64_t)(uintptr_t)x->out[i]);
  }
  g->sig = mix(mix(g->sig, dev), n);
}

gpa_status gpa__cu_graph_op(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, const gpa_op_desc *d,
                            gpa_op_impl_fn impl, gpa_op_exec *x) {
  struct gpa__cu_gq *g = q->gq;
  switch (g->phase) {
    case PH_COUNT: count(g, STEP_OP, d, x, 0, 0); return GPA__CU_EAGER;
    case PH_RECORD:
    case PH_REPLAY: {
      gpa_status st = g->phase == PH_RECORD ? record_op(C, q, g, w, d, impl, x) : replay_op(C, q, g, w, d, impl, x);
      return st == GPA__HELD ? held(C, q, g) : st;
    }
    case PH_LAUNCHED:
      if (g->cur) g->cur->stale = true; /* more than recorded: record again */
      g->phase = PH_EAGER;
      return GPA__CU_EAGER;
    default: return GPA__CU_EAGER;
  }
}

gpa_status gpa__cu_graph_copy(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, bool up, void *host,
                              CUdeviceptr dev, uint64_t n) {
  struct gpa__cu_gq *g = q->gq;
  uint8_t kind = up ? STEP_UP : STEP_DOWN;
  if (g->phase == PH_COUNT) {
    count(g, kind, NULL, NULL, dev, n);
    return GPA__CU_EAGER;
  }
  if (g->phase == PH_LAUNCHED) {
    if (g->cur) g->cur->stale = true;
    g->phase = PH_EAGER;
  }
  if ((g->phase != PH_RECORD && g->phase != PH_REPLAY) || !w || !n) {
    /* copies without a message of their own (feeds) join the stream now */
    if (g->phase == PH_RECORD || g->phase == PH_REPLAY) diverge(C, q, g, "a feed's copies joined the stream");
    return GPA__CU_EAGER;
  }
  ghold *h = hold_next(g);
  if (!h) {
    diverge(C, q, g, "out of host memory");
    return GPA__CU_EAGER;
  }
  gentry *e = g->cur;
  if (g->phase == PH_RECORD) {
    gstep *s = step_next(e);
    gpa__cu_stage *stage = s ? stage_own(C, n) : NULL;
    CUgraph child = NULL;
    if (!stage || capture_copy(C, q, up, stage, dev, n, &child) != GPA_OK) {
      stage_free(C, stage);
      diverge(C, q, g, "a copy could not be captured");
      return GPA__CU_EAGER;
    }
    if (up) memcpy(stage->p, host, n);
    s->kind = kind;
    s->n_ptrs = 1;
    s->ptrs[0] = (void *)(uintptr_t)dev;
    s->n = n;
    s->n_nodes = 1;
    s->stage = stage;
    e->n_steps++;
    h->child = child;
  } else {
    gstep *s = g->pos < e->n_steps ? &e->steps[g->pos] : NULL;
    if (!s || s->kind != kind || s->ptrs[0] != (void *)(uintptr_t)dev || s->n != n) {
      diverge(C, q, g, s ? "a copy differs from the recorded one" : "more messages than recorded");
      return GPA__CU_EAGER;
    }
    if (up) memcpy(s->stage->p, host, n); /* the last launch has finished with it (batch_begin) */
    g->pos++;
  }
  h->w = *w;
  h->d = NULL;
  h->host = host;
  h->dev = dev;
  h->n = n;
  h->up = up;
  g->n_hold++;
  return held(C, q, g);
}

void gpa__cu_graph_free(gpa__cu_ctx *C, gpa__cu_queue *q) {
  struct gpa__cu_gq *g = q->gq;
  if (!g) return;
  for (uint32_t i = 0; i < g->n_hold; i++) hold_drop(C, &g->hold[i]);
  for (uint32_t i = 0; i < g->n_ent; i++) {
    entry_clear(C, &g->ent[i]);
    free(g->ent[i].steps);
    free(g->ent[i].segs);
  }
  free(g->hold);
  free(g);
  q->gq = NULL;
  gpa__cu_queue **pp = &C->graph_queues;
  while (*pp && *pp != q) pp = &(*pp)->graph_next;
  if (*pp) *pp = q->graph_next;
}
