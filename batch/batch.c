/* Batches: begin, sync (with stats and the readback guard), and accounting.
 *
 * A batch is a span of one queue. Begin and sync travel as queue-ordered
 * control messages, so "everything submitted before the sync" means exactly
 * the queue's earlier tickets, whichever thread submitted them. The actor
 * accumulates stats as messages finish; the sync message carries them back
 * together with the batch's readbacks, which the syncing thread marks
 * readable before gpa_sync_batch returns: a readback becomes readable at a
 * point the program chose, never by a race with the device. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "actor/internal.h"

typedef struct begin_args {
  char label[64];
  int64_t t0;
  uint32_t graph; /* gpa_graph_mode */
} begin_args;

typedef struct sync_result {
  gpa_batch_stats stats;
  gpa__msg *readbacks;
} sync_result;

/* snprintf(dst, cap, "%s", src) without the formatter: a batch's begin and
 * sync copy its label and first error each time (a trainer's every step;
 * about 90 instructions a message of the main job went to these). */
static void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = 0;
}

static void batch_reset(gpa__batch *b, const char *label, int64_t t0) {
  memset(b, 0, sizeof *b);
  copy_str(b->label, sizeof b->label, label ? label : "");
  b->t0_ns = t0;
}

void gpa__batch_fail(gpa__batch *b, gpa_status st, const char *msg) {
  b->errors++;
  if (!b->first_error) {
    b->first_error = st;
    copy_str(b->first_msg, sizeof b->first_msg, msg);
  }
}

void gpa__batch_note(gpa__batch *b, gpa__msg *m) {
  if (m->status != GPA_OK) gpa__batch_fail(b, m->status, m->err);
  if (m->kind == GPA__MSG_READBACK) {
    gpa__msg_ref(m);
    m->next = b->readbacks;
    b->readbacks = m;
  }
}

static gpa_status begin_fn(gpa_actor *a, gpa__msg *m) {
  (void)a;
  const begin_args *args = (const begin_args *)m->params;
  gpa_queue *q = m->q;
  /* Work since the last sync that was not synced stays in the new batch:
   * nothing is dropped, its readbacks too. */
  gpa__batch *b = &q->s->batch, old = *b;
  q->s->poison = 0; /* a parked message's timeout taints its batch only */
  batch_reset(b, args->label, args->t0);
  b->ops = old.ops;
  b->errors = old.errors;
  b->bytes = old.bytes;
  b->skipped = old.skipped;
  b->device_ns = old.device_ns;
  b->first_error = old.first_error;
  memcpy(b->first_msg, old.first_msg, sizeof old.first_msg);
  b->readbacks = old.readbacks;
  if (a->be->batch_begin) {
    /* graphs: -1 on, N > 0 after N alike batches; never while ops are timed
     * or traced one by one */
    int32_t g = args->graph == GPA_GRAPH_ON ? -1 : args->graph == GPA_GRAPH_OFF ? 0 : (int32_t)a->opts.graphs;
    if (GPA__PROFILING(a) || a->nvtx_tool) g = 0;
    a->be->batch_begin(a->bctx, q->s->bq, args->label, g);
  }
  return GPA_OK;
}

/* A destroyed queue's batch: the one its destroy left (q->last, then
 * freed: the queue keeps nothing more), or none (zero stats). */
static gpa_status sync_fn(gpa_actor *a, gpa__msg *m) {
  gpa_queue *q = m->q;
  gpa__qstate *s = q->s ? q->s : q->last;
  sync_result *r = m->payload; /* allocated by the syncing thread */
  int64_t now = gpa__clock_ns();
  memset(&r->stats, 0, sizeof r->stats);
  r->stats.size = sizeof r->stats;
  r->readbacks = NULL;
  if (!s) return GPA_OK;
  gpa__batch *b = &s->batch;
  r->stats.ops = b->ops;
  r->stats.errors = b->errors;
  r->stats.bytes_moved = b->bytes;
  r->stats.uploads_skipped = b->skipped;
  r->stats.host_ns = b->t0_ns ? now - b->t0_ns : 0;
  r->stats.device_ns = b->device_ns;
  r->stats.first_error = b->first_error;
  copy_str(r->stats.first_error_message, sizeof r->stats.first_error_message, b->first_msg);
  copy_str(r->stats.label, sizeof r->stats.label, b->label);
  r->stats.graph = a->be->batch_graph && q->s ? a->be->batch_graph(a->bctx, q->s->bq) : 0;
  r->readbacks = b->readbacks;
  if (GPA__PROFILING(a)) gpa__prof_batch(a, q, &r->stats, b->t0_ns, now);
  s->poison = 0;
  batch_reset(b, NULL, now);
  if (s == q->last) {
    free(s);
    q->last = NULL;
  }
  return GPA_OK;
}

gpa_status gpa_batch_begin(gpa_queue *q, const char *label) { return gpa_batch_begin_opts(q, label, NULL); }

gpa_status gpa_batch_begin_opts(gpa_queue *q, const char *label, const gpa_batch_options *opts) {
  gpa_status st = gpa__check_queue(q);
  if (st != GPA_OK) return st;
  uint32_t graph = opts ? opts->graph : GPA_GRAPH_DEFAULT;
  if (opts && opts->size && opts->size < sizeof *opts)
    return gpa__fail(GPA_EINVAL, "gpa_batch_begin_opts: opts.size %u is smaller than this version's %zu", opts->size,
                     sizeof *opts);
  if (graph > GPA_GRAPH_ON)
    return gpa__fail(GPA_EINVAL, "gpa_batch_begin_opts: graph = %u is not a gpa_graph_mode (0 default, 1 off, 2 on)",
                     graph);
  int expect = 0;
  if (!atomic_compare_exchange_strong(&q->batch_open, &expect, 1))
    return gpa__fail(GPA_EBUSY, "gpa_batch_begin: a batch is already open on queue '%s'", q->name);
  gpa__msg *m = gpa__msg_new(q->actor, GPA__MSG_CALL);
  if (!m) {
    atomic_store(&q->batch_open, 0);
    return GPA_ENOMEM;
  }
  begin_args *args = (begin_args *)m->params;
  copy_str(args->label, sizeof args->label, label ? label : "");
  args->t0 = gpa__clock_ns();
  args->graph = graph;
  m->fn = begin_fn;
  m->q = q;
  st = gpa__send_owned(q->actor, m);
  if (st != GPA_OK) {
    gpa__msg_unref(m);
    atomic_store(&q->batch_open, 0);
  }
  return st;
}

gpa_status gpa_sync_batch(gpa_queue *q, gpa_batch_stats *stats) {
  if (!q) return gpa__fail(GPA_EINVAL, "gpa_sync_batch: queue is NULL");
  /* A caller built against the struct before `graph` passes its size. */
  if (stats && stats->size && stats->size < offsetof(gpa_batch_stats, graph))
    return gpa__fail(GPA_EINVAL, "gpa_sync_batch: stats.size %u is smaller than %zu", stats->size,
                     offsetof(gpa_batch_stats, graph));
  /* A destroyed queue can still be synced: its last batch is not lost. */
  if (atomic_load_explicit(&q->actor->closing, memory_order_acquire))
    return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m = gpa__msg_new(q->actor, GPA__MSG_CALL);
  if (!m) return GPA_ENOMEM;
  m->payload = malloc(sizeof(sync_result)); /* stats outgrow the params block */
  if (!m->payload) {
    gpa__msg_unref(m);
    return gpa__fail(GPA_ENOMEM, "gpa_sync_batch: out of memory");
  }
  m->fn = sync_fn;
  m->q = q;
  m->barrier = GPA__BARRIER_SYNC; /* runs once the queue's earlier device work completed */
  gpa_status st = gpa__call(q->actor, m);
  atomic_store(&q->batch_open, 0);
  if (st != GPA_OK) {
    gpa__msg_unref(m);
    return st;
  }
  sync_result *r = m->payload;
  for (gpa__msg *rb = r->readbacks; rb;) {
    gpa__msg *next = rb->next;
    atomic_store_explicit(&rb->synced, 1, memory_order_release);
    gpa__msg_unref(rb);
    rb = next;
  }
  if (stats) {
    size_t n = stats->size && stats->size < sizeof *stats ? stats->size : sizeof *stats;
    r->stats.size = (uint32_t)n;
    memcpy(stats, &r->stats, n);
  }
  st = r->stats.first_error;
  if (st != GPA_OK) gpa__fail(st, "%s", r->stats.first_error_message);
  gpa__msg_unref(m);
  return st;
}
