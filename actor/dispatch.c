/* Executing one message on the actor thread, and completing it. */
#include <stdio.h>
#include <string.h>

#include "actor/bufcache.h"
#include "backends/backend.h"

static void *tensor_ptr(gpa_actor *a, const gpa_tensor *t) {
  gpa__slot *s = gpa__bufcache_slot(a->cache, t->buffer);
  return (char *)s->ptr + t->offset;
}

static gpa_status run_op(gpa_actor *a, gpa__msg *m, uint64_t *bytes) {
  void *ptrs[128];
  uint32_t n = m->n_in + m->n_out;
  for (uint32_t i = 0; i < n; i++) ptrs[i] = tensor_ptr(a, &m->t[i]);
  gpa_op_exec x = {m->t, m->n_in, m->t + m->n_in, m->n_out, ptrs, ptrs + m->n_in, m->params,
                   m->q ? m->q->bq : NULL, a->be->env ? a->be->env(a->bctx) : NULL, NULL, m->err, sizeof m->err};
  /* Walk the registrations of this name: an implementation may decline. */
  for (const gpa__op *op = m->op; op; op = op->next) {
    gpa_op_impl_fn impl = a->be->impl_of(op);
    if (!impl) continue;
    x.user_data = op->d.user_data;
    m->err[0] = 0;
    gpa_status st = impl(&x);
    if (st == GPA_SKIP) continue;
    if (st == GPA_OK && op->d.bytes_moved) {
      gpa_op_sig sig = {x.inputs, x.n_inputs, x.outputs, x.n_outputs, x.params, x.user_data};
      *bytes = op->d.bytes_moved(&sig);
    }
    return st;
  }
  snprintf(m->err, sizeof m->err, "%s: no implementation for backend %s accepted these inputs", m->op->d.name,
           a->be->name);
  return GPA_EUNSUPPORTED;
}

static gpa_status run_transfer(gpa_actor *a, gpa__msg *m, uint64_t *bytes) {
  gpa__slot *s = gpa__bufcache_slot(a->cache, m->t[0].buffer);
  void *dev = (char *)s->ptr + m->t[0].offset;
  if (m->kind == GPA__MSG_UPLOAD) {
    if (m->version && s->version == m->version) {
      a->uploads_skipped++;
      if (m->q) m->q->batch.skipped++;
      return GPA_OK;
    }
    gpa_status st = a->be->upload(a->bctx, m->q ? m->q->bq : NULL, dev, m->payload, m->payload_size);
    if (st != GPA_OK) return st;
    s->version = m->version ? m->version : 0;
    a->bytes_uploaded += m->payload_size;
  } else {
    gpa_status st = a->be->readback(a->bctx, m->q ? m->q->bq : NULL, m->payload, dev, m->payload_size);
    if (st != GPA_OK) return st;
    a->bytes_read_back += m->payload_size;
  }
  *bytes = m->payload_size;
  return GPA_OK;
}

void gpa__dispatch(gpa_actor *a, gpa__msg *m) {
  gpa_status st = m->status;
  if (st == GPA_OK && a->cancelling) {
    st = GPA_ECANCELED;
    snprintf(m->err, sizeof m->err, "cancelled: actor destroyed with GPA_SHUTDOWN_CANCEL");
  }
  int64_t t0 = 0, dev_ns = 0;
  uint64_t bytes = 0;
  if (st == GPA_OK) {
    m->err[0] = 0;
    switch (m->kind) {
      case GPA__MSG_CALL: st = m->fn(a, m); break;
      case GPA__MSG_OP:
        t0 = gpa__now_ns();
        st = run_op(a, m, &bytes);
        dev_ns = gpa__now_ns() - t0;
        break;
      default:
        t0 = gpa__now_ns();
        st = run_transfer(a, m, &bytes);
        dev_ns = gpa__now_ns() - t0;
        break;
    }
  }
  if (m->pinned) {
    for (uint32_t i = 0; i < m->n_in + m->n_out; i++)
      gpa__bufcache_unpin(a, gpa__bufcache_slot(a->cache, m->t[i].buffer));
    m->pinned = 0;
  }
  a->messages++;
  m->status = st;
  if (st != GPA_OK && !m->err[0]) snprintf(m->err, sizeof m->err, "%s", gpa_strerror(st));
  if (m->q && m->kind != GPA__MSG_CALL) gpa__batch_account(m->q, m, dev_ns, bytes);
  gpa__msg_complete(m, st, m->err);
  gpa__msg_unref(m); /* the actor's reference */
}
