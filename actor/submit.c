/* gpa_submit: validation on the calling thread, then one message. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "actor/ctx.h"


/* Matches each given attribute to its spec: one name comparison each when
 * they come in the spec's order (wrappers and most callers give them so),
 * instead of every name against every spec and every other given one (the
 * optimizer's nine attributes were over a hundred strcmp calls a message).
 * Spec names are unique (registry.c), so a name found twice is given twice.
 * at[j]: the attribute given for spec j, or NULL. */
static gpa_status match_attrs(const gpa_op_desc *d, const gpa_op_call *call, const gpa_attr **at) {
  const uint32_t n = d->n_attrs;
  for (uint32_t j = 0; j < n; j++) at[j] = NULL;
  uint32_t next = 0; /* where the next name is looked for first */
  for (uint32_t i = 0; i < call->n_attrs; i++) {
    const gpa_attr *a = &call->attrs[i];
    if (!a->name) return gpa__fail(GPA_EINVAL, "%s: attrs[%u] has no name", d->name, i);
    uint32_t j = next, k = 0;
    for (; k < n; k++, j = j + 1 == n ? 0 : j + 1)
      if (!strcmp(d->attrs[j].name, a->name)) break;
    if (k == n) return gpa__fail(GPA_EINVAL, "%s: unknown attribute '%s'", d->name, a->name);
    if (at[j]) return gpa__fail(GPA_EINVAL, "%s: attribute '%s' given twice", d->name, a->name);
    at[j] = a;
    next = j + 1 == n ? 0 : j + 1;
  }
  return GPA_OK;
}

__attribute__((noinline)) static gpa_status parse_attrs(const gpa__op *op, const gpa_op_call *call, unsigned char *params) {
  const gpa_op_desc *d = &op->d;
  /* registry.c bounds n_attrs: each attribute has its own 8 bytes of params */
  const gpa_attr *given[GPA_OP_PARAMS_MAX / 8];
  gpa_status st = match_attrs(d, call, given);
  if (st != GPA_OK) return st;
  for (uint32_t j = 0; j < d->n_attrs; j++) {
    const gpa_attr_spec *s = &d->attrs[j];
    const gpa_attr *at = given[j];
    if (!at && s->required) return gpa__fail(GPA_EINVAL, "%s: missing required attribute '%s'", d->name, s->name);
    bool ranged = s->min <= s->max;
    if (s->type == GPA_ATTR_INT) {
      int64_t v = s->default_i;
      if (at) {
        if (at->type != GPA_ATTR_INT)
          return gpa__fail(GPA_EINVAL, "%s: attribute '%s' must be an int", d->name, s->name);
        v = at->i;
      }
      if (ranged && ((double)v < s->min || (double)v > s->max))
        return gpa__fail(GPA_ERANGE, "%s: attribute '%s' = %" PRId64 " outside [%g, %g]", d->name, s->name, v, s->min,
                         s->max);
      memcpy(params + s->offset, &v, sizeof v);
    } else {
      double v = s->default_f;
      if (at) {
        if (at->type == GPA_ATTR_FLOAT) v = at->f;
        else if (at->type == GPA_ATTR_INT) v = (double)at->i; /* ints widen to floats */
        else return gpa__fail(GPA_EINVAL, "%s: attribute '%s' must be a float", d->name, s->name);
      }
      if (!isfinite(v)) return gpa__fail(GPA_ERANGE, "%s: attribute '%s' is not finite", d->name, s->name);
      if (ranged && (v < s->min || v > s->max))
        return gpa__fail(GPA_ERANGE, "%s: attribute '%s' = %g outside [%g, %g]", d->name, s->name, v, s->min, s->max);
      memcpy(params + s->offset, &v, sizeof v);
    }
  }
  return GPA_OK;
}

static void fmt_shape(char *buf, size_t cap, const gpa_tensor *t) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < t->rank && i < GPA_MAX_RANK && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ",%" PRId64 : "%" PRId64, t->shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

__attribute__((noinline)) static gpa_status check_outputs(const gpa__op *op, const gpa_op_call *call, const void *params) {
  const gpa_op_desc *d = &op->d;
  gpa_tensor expect[GPA__MAX_OUT];
  memset(expect, 0, sizeof(gpa_tensor) * call->n_outputs);
  gpa_op_sig sig = {call->inputs, call->n_inputs, call->outputs, call->n_outputs, params, d->user_data};
  char msg[GPA__ERR_MAX];
  msg[0] = 0; /* not the whole array: a valid call writes nothing here */
  gpa_status st = d->shape(&sig, expect, msg, sizeof msg);
  if (st != GPA_OK) return gpa__fail(st, "%s", msg[0] ? msg : gpa_strerror(st));
  for (uint32_t i = 0; i < call->n_outputs; i++) {
    const gpa_tensor *o = &call->outputs[i], *e = &expect[i];
    if (e->dtype && o->dtype != e->dtype)
      return gpa__fail(GPA_EDTYPE, "%s: outputs[%u] has dtype %s, expected %s", d->name, i, gpa_dtype_name(o->dtype),
                       gpa_dtype_name(e->dtype));
    bool same = o->rank == e->rank;
    for (uint32_t k = 0; same && k < e->rank; k++) same = o->shape[k] == e->shape[k];
    if (!same) {
      char got[96], want[96];
      fmt_shape(got, sizeof got, o);
      fmt_shape(want, sizeof want, e);
      return gpa__fail(GPA_ESHAPE, "%s: outputs[%u] has shape %s, expected %s", d->name, i, got, want);
    }
  }
  return GPA_OK;
}

/* Everything about a call that does not need the actor: arity, tensors,
 * attributes, shapes. */
GPA__HOT_INLINE gpa_status validate(gpa_actor *a, const gpa__op *op, const gpa_op_call *call, unsigned char *params) {
  const gpa_op_desc *d = &op->d;
  if (call->n_inputs < d->min_inputs || call->n_inputs > d->max_inputs) {
    if (d->min_inputs == d->max_inputs)
      return gpa__fail(GPA_EINVAL, "%s: takes %u inputs, got %u", d->name, d->min_inputs, call->n_inputs);
    return gpa__fail(GPA_EINVAL, "%s: takes %u to %u inputs, got %u", d->name, d->min_inputs, d->max_inputs,
                     call->n_inputs);
  }
  if (call->n_outputs < d->n_outputs || call->n_outputs > d->max_outputs) { /* max_outputs: registry.c */
    if (d->n_outputs == d->max_outputs)
      return gpa__fail(GPA_EINVAL, "%s: takes %u outputs, got %u", d->name, d->n_outputs, call->n_outputs);
    return gpa__fail(GPA_EINVAL, "%s: takes %u to %u outputs, got %u", d->name, d->n_outputs, d->max_outputs,
                     call->n_outputs);
  }
  if ((call->n_inputs && !call->inputs) || (call->n_outputs && !call->outputs) || (call->n_attrs && !call->attrs))
    return gpa__fail(GPA_EINVAL, "%s: a tensor or attribute array is NULL but its count is not 0", d->name);
  for (uint32_t i = 0; i < call->n_inputs; i++) {
    gpa_status st = gpa__check_tensor_at(a, &call->inputs[i], d->name, "inputs", i);
    if (st != GPA_OK) return st;
  }
  for (uint32_t i = 0; i < call->n_outputs; i++) {
    gpa_status st = gpa__check_tensor_at(a, &call->outputs[i], d->name, "outputs", i);
    if (st != GPA_OK) return st;
  }
  /* params is a pooled message's: zero what the op may read, attributes or
   * not (an op may declare params_size without any). */
  if (d->params_size) memset(params, 0, d->params_size);
  if (d->n_attrs || call->n_attrs) {
    gpa_status st = parse_attrs(op, call, params);
    if (st != GPA_OK) return st;
  }
  return d->shape ? check_outputs(op, call, params) : GPA_OK;
}

/* Without a handle the call goes by value in the ring (ctx.h, gpa__rec):
 * no pooled message whose lines would cross to the actor and back. */
static gpa_status submit_by_value(gpa_actor *a, gpa__ctx *c, gpa_queue *q, const gpa__op *op,
                                  const gpa_op_call *call, uint32_t cells) {
  _Alignas(16) unsigned char params[GPA_OP_PARAMS_MAX];
  gpa_status st = validate(a, op, call, params);
  if (st != GPA_OK) return st;
  gpa__sendv v = {.cells = cells, .q = q, .op = op, .call = call, .params = params,
                  .params_size = op->d.params_size};
  return gpa__send_inline(a, c, &v);
}

gpa_status gpa_submit(gpa_queue *q, const gpa_op_call *call, gpa_handle **out) {
  if (out) *out = NULL;
  gpa_status st = gpa__check_queue(q);
  if (st != GPA_OK) return st;
  if (!call || !call->op) return gpa__fail(GPA_EINVAL, "gpa_submit: call or call->op is NULL");
  gpa_actor *a = q->actor;
  gpa__ctx *c = gpa__ctx_get(a);
  if (!c) return GPA_ENOMEM;
  const gpa__op *op = gpa__ctx_find_op(c, &a->registry, call->op);
  if (!op) return gpa__fail(GPA_ENOTFOUND, "gpa_submit: no op named '%.64s'", call->op);
  uint32_t cells = out ? 0 : gpa__rec_cells(&c->ring, call->n_inputs + call->n_outputs, op->d.params_size);
  if (cells) return submit_by_value(a, c, q, op, call, cells);
  gpa__msg *m = gpa__msg_take(c, GPA__MSG_OP);
  if (!m) return GPA_ENOMEM;
  /* Attributes parse straight into the message: a failure returns it. */
  st = validate(a, op, call, m->params);
  if (st == GPA_OK && (call->n_inputs || call->n_outputs)) /* the pool's message has none */
    st = gpa__msg_set_tensors(m, call->inputs, call->n_inputs, call->outputs, call->n_outputs);
  if (st == GPA_OK) {
    m->op = op;
    m->q = q;
    gpa__sendv v = {.m = m, .keep = out != NULL, .cells = 1, .q = q};
    st = gpa__send_inline(a, c, &v);
  }
  if (st != GPA_OK) gpa__msg_unref(m);
  else if (out) gpa__handle_out(*out = m);
  return st;
}
