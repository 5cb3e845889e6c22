/* Starting one message on the actor thread, and completing it. */
#include <stdio.h>
#include <string.h>

#include "actor/bufcache.h"
#include "actor/ctx.h"
#include "actor/fence.h"
#include "backends/backend.h"

extern const struct ck_ec_mode gpa__ec_mp;

static void *tensor_ptr(gpa_actor *a, const gpa_tensor *t) {
  gpa__slot *s = gpa__bufcache_slot(a->cache, t->buffer);
  return (char *)s->ptr + t->offset;
}

/* Runs x through the registrations of first's name (an implementation may
 * decline); *bytes gets what the one that ran moved. m is the message for a
 * backend's `run` hook (NULL only on a backend without one). */
GPA__HOT_INLINE gpa_status run_impl(gpa_actor *a, const gpa__op *first, gpa__msg *m, gpa_op_exec *x,
                                    uint64_t *bytes) {
  for (const gpa__op *op = first; op; op = op->next) {
    gpa_op_impl_fn impl = a->be->impl_of(&op->d);
    if (!impl) continue;
    x->user_data = op->d.user_data;
    gpa_status st;
    if (a->be->run) {
      gpa__work w = gpa__work_of(m);
      st = a->be->run(a->bctx, &w, &op->d, impl, x);
    } else {
      st = impl(x);
    }
    if (st == GPA_SKIP) {
      x->msg[0] = 0; /* what a declining implementation said is not the answer */
      continue;
    }
    if ((st == GPA_OK || st == GPA__DEFERRED || st == GPA__HELD) && op->d.bytes_moved) {
      gpa_op_sig sig = {x->inputs, x->n_inputs, x->outputs, x->n_outputs, x->params, x->user_data};
      *bytes = op->d.bytes_moved(&sig);
    }
    return st;
  }
  snprintf(x->msg, x->msg_size, "%s: no implementation for backend %s accepted these inputs", first->d.name,
           a->be->name);
  return GPA_EUNSUPPORTED;
}

GPA__HOT_INLINE gpa_status run_op(gpa_actor *a, gpa__msg *m) {
  void *ptrs[GPA__MAX_TENSORS];
  uint32_t n = m->n_in + m->n_out;
  for (uint32_t i = 0; i < n; i++) ptrs[i] = tensor_ptr(a, &m->t[i]);
  gpa_op_exec x = {m->t, m->n_in, m->t + m->n_in, m->n_out, ptrs, ptrs + m->n_in, m->params,
                   m->q ? m->q->s->bq : NULL, a->be->env ? a->be->env(a->bctx) : NULL, NULL, m->err, sizeof m->err};
  return run_impl(a, m->op, m, &x, &m->bytes);
}

/* An op sent by value, run straight from its ring record when nothing needs
 * a message: a synchronous backend without a run hook (the caller asks,
 * mailbox.c's runs_records: the CUDA backend never can), the op's turn on its
 * queue, nothing held, parked, cancelled, profiled or traced, and its
 * buffers live. It cannot be waited on and finishes before this returns, so
 * its buffers need no pins. Saves the copy into a message and the message's
 * passage through intake, dispatch and finish: the actor's side of a plain
 * op is most of the async messaging cost. False: the caller makes a message
 * of it instead (which reports a stale buffer, among others). */
bool gpa__run_record(gpa_actor *a, const gpa__rec *r) {
  gpa_queue *q = r->q;
  gpa__qstate *s = q->s; /* NULL: destroyed */
  if (a->cancelling || GPA__PROFILING(a) || a->nvtx_tool || !s || s->n_held ||
      r->ticket != s->expect || s->parked || s->poison)
    return false;
  const gpa_tensor *t = gpa__rec_tensors(r);
  uint32_t n = (uint32_t)r->n_in + r->n_out;
  void *ptrs[GPA__MSG_TENSORS];
  for (uint32_t i = 0; i < n; i++) {
    gpa__slot *s = gpa__bufcache_live(a->cache, t[i].buffer);
    if (!s) return false;
    ptrs[i] = (char *)s->ptr + t[i].offset;
  }
  char *err = a->scratch_err;
  err[0] = 0;
  gpa_op_exec x = {t, r->n_in, t + r->n_in, r->n_out, ptrs, ptrs + r->n_in, gpa__rec_params(r),
                   s->bq, a->be->env ? a->be->env(a->bctx) : NULL, NULL, err, GPA__ERR_MAX};
  if (a->run_q != q) gpa__run_switch(a, q);
  uint64_t bytes = 0;
  gpa_status st = run_impl(a, r->op, NULL, &x, &bytes);
  s->expect++;
  a->messages++;
  if (st == GPA__DEFERRED) st = GPA_OK; /* a host implementation has nothing to defer to */
  s->batch.ops++;
  if (st == GPA_OK) s->batch.bytes += bytes;
  else gpa__batch_fail(&s->batch, st, err[0] ? err : gpa_strerror(st));
  return true;
}

static gpa_status run_transfer(gpa_actor *a, gpa__msg *m) {
  gpa__slot *s = gpa__bufcache_slot(a->cache, m->t[0].buffer);
  void *dev = (char *)s->ptr + m->t[0].offset;
  void *bq = m->q ? m->q->s->bq : NULL;
  gpa_status st;
  if (m->kind == GPA__MSG_UPLOAD) {
    if (m->version && s->version == m->version) {
      a->uploads_skipped++;
      if (m->q) m->q->s->batch.skipped++;
      return GPA_OK;
    }
    gpa__work w = gpa__work_of(m);
    st = a->be->upload(a->bctx, bq, &w, dev, m->payload, m->payload_size);
    /* The version is the buffer's from here on, in stream order. */
    if (st == GPA_OK || st == GPA__DEFERRED || st == GPA__HELD) s->version = m->version;
    a->bytes_uploaded += m->payload_size;
  } else {
    gpa__work w = gpa__work_of(m);
    st = a->be->readback(a->bctx, bq, &w, m->payload, dev, m->payload_size);
    a->bytes_read_back += m->payload_size;
  }
  m->bytes = m->payload_size;
  return st;
}

/* A synchronous backend's device time without a clock read per message:
 * consecutive messages of one queue form a run, timed as a whole (the
 * actor's own work between them included), and added to the queue's batch
 * when the run ends: at another queue's message, a control call (a batch
 * sync among them), or when the actor runs out of work. Profiling times each
 * op instead. */
void gpa__run_switch(gpa_actor *a, gpa_queue *q) {
  int64_t now = gpa__clock_ns();
  if (a->run_q) a->run_q->s->batch.device_ns += now - a->run_t0; /* a destroyed queue's run ended at its destroy */
  a->run_q = q;
  a->run_t0 = now;
}

GPA__HOT_INLINE void finish(gpa_actor *a, gpa__msg *m, gpa_status st) {
  if (m->kind == GPA__MSG_EXT && m->cls->settle) st = m->cls->settle(a, m, st);
  if (m->pinned) {
    for (uint32_t i = 0; i < m->n_in + m->n_out; i++)
      gpa__bufcache_unpin(a, gpa__bufcache_slot(a->cache, m->t[i].buffer));
    m->pinned = 0;
  }
  a->messages++;
  m->status = st;
  if (st != GPA_OK && !m->err[0]) snprintf(m->err, sizeof m->err, "%s", gpa_strerror(st));
  gpa_queue *q = m->q;
  if (q && q->s && m->kind != GPA__MSG_CALL) gpa__batch_account(q, m, m->device_ns, st == GPA_OK ? m->bytes : 0);
  if (GPA__PROFILING(a) && m->kind != GPA__MSG_CALL) gpa__prof_op(a, m, st, gpa__clock_ns());
  /* An extension's message may complete later (an outfeed at delivery). */
  if (m->kind == GPA__MSG_EXT && m->cls->finished(a, m, st)) return;
  /* Nobody else holds it: no one can wait or look, skip the wake-up. */
  if (atomic_load_explicit(&m->refs, memory_order_relaxed) != 1) gpa__msg_complete(m, st, m->err);
  gpa__msg_unref_actor(a, m); /* the actor's reference */
}

/* The backend holds m unlaunched until its batch ends (a graph replay). A
 * Dekker pair with a waiter about to sleep (wait_done, handle.c): either it
 * sees held and asks for the release, or we see it waiting and release now. */
static void held(gpa_actor *a, gpa__msg *m) {
  atomic_store_explicit(&m->held, 1, memory_order_relaxed);
  gpa__fence_light();
  if (atomic_load_explicit(&m->waiters, memory_order_relaxed)) a->be->release(a->bctx, m->q->s->bq, GPA__RELEASE_KICK);
}

/* A waiter's request (gpa__held_kick): the held message's queue releases
 * what it holds. The message cannot have been recycled: the request holds
 * a reference. */
gpa_status gpa__held_release(gpa_actor *a, gpa__msg *kick) {
  gpa__msg *m;
  memcpy(&m, kick->params, sizeof m);
  if (!atomic_load_explicit(&m->state, memory_order_acquire) && m->q && m->q->s && a->be->release)
    a->be->release(a->bctx, m->q->s->bq, GPA__RELEASE_KICK);
  gpa__msg_unref(m);
  return GPA_OK;
}

void gpa__dispatch(gpa_actor *a, gpa__msg *m) {
  gpa_status st = m->status;
  if (__builtin_expect(m->kind == GPA__MSG_OP && st == GPA_OK && !a->cancelling && !GPA__PROFILING(a) && !a->nvtx_tool,
                       1)) {
    /* The common case, sorted out by one test: a plain op, nothing to time
     * per op, trace or cancel. */
    if (a->be->synchronous && a->run_q != m->q) gpa__run_switch(a, m->q);
    st = run_op(a, m);
  } else if (st == GPA_OK && a->cancelling) {
    st = GPA_ECANCELED;
    snprintf(m->err, sizeof m->err, "cancelled: actor shut down with GPA_SHUTDOWN_CANCEL");
    m->t_start = gpa__clock_ns();
  } else if (st == GPA_OK) {
    bool prof = GPA__PROFILING(a) && m->kind != GPA__MSG_CALL;
    int64_t t0 = prof ? gpa__clock_ns() : 0;
    gpa_queue *run_q = m->kind == GPA__MSG_CALL ? NULL : m->q;
    if (!prof && a->be->synchronous && a->run_q != run_q) gpa__run_switch(a, run_q);
    if (prof) {
      m->t_start = t0;
      m->depth = m->q ? m->q->s->n_held : 0;
    }
    bool range = (prof || a->nvtx_tool) && m->kind != GPA__MSG_CALL;
    if (range) gpa__nvtx_push(gpa__prof_msg_name(m));
    switch (m->kind) {
      case GPA__MSG_CALL: st = m->fn(a, m); break;
      case GPA__MSG_OP: st = run_op(a, m); break;
      case GPA__MSG_EXT: st = m->cls->run(a, m); break;
      default: st = run_transfer(a, m); break;
    }
    if (range) gpa__nvtx_pop();
    /* Synchronous backends: the time on the actor is the device time. An
     * asynchronous one measures with events and sets device_ns itself,
     * also for work it does on the actor (the CUDA host fallback). */
    if (prof && st != GPA__DEFERRED && st != GPA__HELD) m->device_ns = gpa__clock_ns() - t0;
  } else {
    m->t_start = gpa__clock_ns();
  }
  if (st == GPA__DEFERRED || st == GPA__HELD) {
    m->deferred = 1;
    if (m->q) m->q->s->inflight++;
    a->inflight_total++;
    if (st == GPA__HELD) held(a, m);
    return;
  }
  finish(a, m, st);
}

void gpa__complete_async(gpa_actor *a, gpa__msg *m, gpa_status st) {
  m->status = st;
  gpa__msg *head = atomic_load_explicit(&a->done, memory_order_relaxed);
  do {
    m->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&a->done, &head, m, memory_order_release, memory_order_relaxed));
  gpa__fence_light(); /* the push before the look at idle (fence.h) */
  if (atomic_load_explicit(&a->idle, memory_order_relaxed)) ck_ec32_inc(&a->ec, &gpa__ec_mp);
}

uint32_t gpa__drain_completions(gpa_actor *a) {
  /* Look before the exchange: a locked instruction per pass of the loop
   * costs the host backend, which never completes anything here. */
  if (!atomic_load_explicit(&a->done, memory_order_relaxed)) return 0;
  gpa__msg *m = atomic_exchange_explicit(&a->done, NULL, memory_order_acquire);
  if (!m) return 0;
  /* The stack is newest first: reverse it to finish in completion order. */
  gpa__msg *fifo = NULL;
  while (m) {
    gpa__msg *next = m->next;
    m->next = fifo;
    fifo = m;
    m = next;
  }
  uint32_t n = 0;
  for (m = fifo; m; n++) {
    gpa__msg *next = m->next;
    gpa_queue *q = m->q;
    a->inflight_total--;
    gpa_status st = m->status;
    if (a->be->complete) {
      gpa__work w = gpa__work_of(m);
      st = a->be->complete(a->bctx, &w, st);
    }
    finish(a, m, st);
    if (q && --q->s->inflight == 0) gpa__queue_advance(a, q); /* in flight: not destroyed (a barrier) */
    m = next;
  }
  gpa__msg_return_held(a);
  return n;
}
