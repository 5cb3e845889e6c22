/* Profilers: attaching them, and the hooks that feed them. */
#include <stdio.h>
#include <string.h>

#include "actor/internal.h"

const char *gpa__prof_msg_name(const gpa__msg *m) {
  switch (m->kind) {
    case GPA__MSG_OP: return m->op->d.name;
    case GPA__MSG_UPLOAD: return "upload";
    case GPA__MSG_READBACK: return "readback";
    case GPA__MSG_EXT: return m->cls->name;
    default: return "call";
  }
}

void gpa__prof_op(gpa_actor *a, gpa__msg *m, gpa_status st, int64_t end_ns) {
  gpa_queue *q = m->q;
  gpa_prof_op p = {gpa__prof_msg_name(m), q ? q->name : "", q ? q->id : 0, st, m->t_start, end_ns, m->device_ns,
                   st == GPA_OK ? m->bytes : 0, m->t, m->n_in, m->n_out, m->depth};
  for (uint32_t i = 0; i < a->n_profilers; i++)
    if (a->profilers[i].on_op) a->profilers[i].on_op(&p, a->profilers[i].user_data);
}

void gpa__prof_batch(gpa_actor *a, gpa_queue *q, const gpa_batch_stats *st, int64_t start_ns, int64_t end_ns) {
  gpa_prof_batch b = {q->name, q->id, st->label, start_ns, end_ns, st->device_ns, st->ops, st->errors,
                      st->bytes_moved};
  for (uint32_t i = 0; i < a->n_profilers; i++)
    if (a->profilers[i].on_batch) a->profilers[i].on_batch(&b, a->profilers[i].user_data);
}

static gpa_status add(gpa_actor *a, const gpa_profiler *p) {
  if (a->n_profilers == sizeof a->profilers / sizeof a->profilers[0]) return GPA_ENOMEM;
  a->profilers[a->n_profilers++] = *p;
  return GPA_OK;
}

gpa_status gpa__profilers_start(gpa_actor *a, char *msg, size_t cap) {
  gpa_profiler p;
  if (a->opts.trace_path[0]) {
    gpa_status st = gpa__trace_profiler(a->opts.trace_path, &p, msg, cap);
    if (st != GPA_OK) return st;
    add(a, &p);
  }
  if (a->opts.profile && gpa__summary_profiler(&p) == GPA_OK) add(a, &p);
  return GPA_OK;
}

void gpa__profilers_stop(gpa_actor *a) {
  for (uint32_t i = 0; i < a->n_profilers; i++) {
    gpa_profiler *p = &a->profilers[i];
    if (p->flush) p->flush(p->user_data);
    if (p->destroy) p->destroy(p->user_data);
  }
  a->n_profilers = 0;
}

static gpa_status add_fn(gpa_actor *a, gpa__msg *m) {
  if (add(a, (const gpa_profiler *)m->params) != GPA_OK) {
    snprintf(m->err, sizeof m->err, "gpa_actor_add_profiler: %zu profilers attached already",
             sizeof a->profilers / sizeof a->profilers[0]);
    return GPA_ENOMEM;
  }
  return GPA_OK;
}

static gpa_status flush_fn(gpa_actor *a, gpa__msg *m) {
  (void)m;
  for (uint32_t i = 0; i < a->n_profilers; i++)
    if (a->profilers[i].flush) a->profilers[i].flush(a->profilers[i].user_data);
  return GPA_OK;
}

static gpa_status profile_call(gpa_actor *a, gpa__call_fn fn, const gpa_profiler *p) {
  if (atomic_load(&a->closing)) return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  gpa__msg *m = gpa__msg_new(a, GPA__MSG_CALL);
  if (!m) return GPA_ENOMEM;
  if (p) memcpy(m->params, p, sizeof *p);
  m->fn = fn;
  gpa_status st = gpa__call(a, m);
  gpa__msg_unref(m);
  return st;
}

gpa_status gpa_actor_add_profiler(gpa_actor *a, const gpa_profiler *p) {
  if (!a || !p) return gpa__fail(GPA_EINVAL, "gpa_actor_add_profiler: NULL argument");
  if (p->size && p->size < sizeof *p) return gpa__fail(GPA_EINVAL, "gpa_actor_add_profiler: profiler.size too small");
  return profile_call(a, add_fn, p);
}

gpa_status gpa_actor_profile_flush(gpa_actor *a) {
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_actor_profile_flush: actor is NULL");
  return profile_call(a, flush_fn, NULL);
}
