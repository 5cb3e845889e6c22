/* One handler call: check the call frame against the handler's signature,
 * wrap XLA's buffers, submit the op and await it (host), or order it with
 * XLA's stream by events and return (CUDA, cuda.c). */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gpuactor/handle.h"
#include "gpuactor/op.h"
#include "xla_internal.h"

#define MAX_BUFS (GPA_MAX_INPUTS + GPA_MAX_OUTPUTS)
#define MAX_ATTRS 16
#define NAME_MAX_ 64

typedef struct call {
  XLA_FFI_CallFrame *f;
  const gpa_xla_sig *sig;
  gpa_actor *actor;
  gpa_xla_dev *dev; /* CUDA: XLA's device; NULL: the host */
  void *stream;     /* CUDA: XLA's stream */
  char op[NAME_MAX_];
  gpa_tensor in[GPA_MAX_INPUTS], out[GPA_MAX_OUTPUTS];
  gpa_xla_wrap wraps[MAX_BUFS];
  uint32_t n_in, n_out, n_wraps;
  gpa_attr attrs[MAX_ATTRS];
  char attr_names[MAX_ATTRS][NAME_MAX_];
  uint32_t n_attrs;
} call;

static int dtype_of(XLA_FFI_DataType t) {
  switch (t) {
  case XLA_FFI_DataType_F32: return GPA_F32;
  case XLA_FFI_DataType_F16: return GPA_F16;
  case XLA_FFI_DataType_BF16: return GPA_BF16;
  case XLA_FFI_DataType_S32: return GPA_I32;
  case XLA_FFI_DataType_U8: return GPA_U8;
  case XLA_FFI_DataType_S64: return GPA_I64;
  default: return GPA_DTYPE_INVALID;
  }
}

static const char *xla_dtype_name(XLA_FFI_DataType t) {
  switch (t) {
  case XLA_FFI_DataType_PRED: return "pred";
  case XLA_FFI_DataType_S8: return "s8";
  case XLA_FFI_DataType_S16: return "s16";
  case XLA_FFI_DataType_U16: return "u16";
  case XLA_FFI_DataType_U32: return "u32";
  case XLA_FFI_DataType_U64: return "u64";
  case XLA_FFI_DataType_F64: return "f64";
  case XLA_FFI_DataType_C64: return "c64";
  case XLA_FFI_DataType_C128: return "c128";
  default: return "an XLA type without a gpuactor dtype";
  }
}

XLA_FFI_Error_Code gpa_xla_code_of(gpa_status st) {
  switch (st) {
  case GPA_EINVAL: case GPA_ESHAPE: case GPA_EDTYPE: case GPA_ERANGE: case GPA_EOVERFLOW:
    return XLA_FFI_Error_Code_INVALID_ARGUMENT;
  case GPA_ENOTFOUND: return XLA_FFI_Error_Code_NOT_FOUND;
  case GPA_ENOMEM: return XLA_FFI_Error_Code_RESOURCE_EXHAUSTED;
  case GPA_ETIMEDOUT: return XLA_FFI_Error_Code_DEADLINE_EXCEEDED;
  case GPA_ECANCELED: return XLA_FFI_Error_Code_CANCELLED;
  case GPA_EUNSUPPORTED: return XLA_FFI_Error_Code_UNIMPLEMENTED;
  case GPA_ESHUTDOWN: case GPA_ECLOSED: return XLA_FFI_Error_Code_UNAVAILABLE;
  default: return XLA_FFI_Error_Code_INTERNAL;
  }
}

/* The i-th argument (is_ret 0) or result's name for messages. */
static void buf_name(const call *c, int is_ret, uint32_t i, char *out, size_t n) {
  const char *const *names = is_ret ? c->sig->rets : c->sig->args;
  if (names) snprintf(out, n, "%s", names[i]);
  else snprintf(out, n, "%s %u", is_ret ? "result" : "operand", i);
}

static XLA_FFI_Error *take_buffer(call *c, int is_ret, uint32_t i, void *raw, int32_t raw_type) {
  char name[NAME_MAX_];
  buf_name(c, is_ret, i, name, sizeof name);
  const char *t = c->sig->target;
  if (raw_type != 1 /* XLA_FFI_ArgType_BUFFER == XLA_FFI_RetType_BUFFER */)
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s is not a buffer", t, name);
  const XLA_FFI_Buffer *b = raw;
  int dt = dtype_of(b->dtype);
  if (!dt)
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                         "%s: %s has dtype %s; gpuactor takes f32, f16, bf16, s32, u8 or s64", t, name,
                         xla_dtype_name(b->dtype));
  const int8_t *want = is_ret ? c->sig->ret_rank : c->sig->arg_rank;
  if (want && want[i] != GPA_XLA_ANY_RANK && b->rank != want[i])
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s has rank %lld, not %d", t, name,
                         (long long)b->rank, want[i]);
  if (b->rank > GPA_MAX_RANK)
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s has rank %lld, more than gpuactor's %d",
                         t, name, (long long)b->rank, GPA_MAX_RANK);
  gpa_tensor *x = is_ret ? &c->out[c->n_out++] : &c->in[c->n_in++];
  memset(x, 0, sizeof *x);
  x->dtype = dt;
  x->rank = (uint32_t)b->rank;
  uint64_t n = 1;
  for (int64_t d = 0; d < b->rank; d++) n *= (uint64_t)(x->shape[d] = b->dims[d]);
  if (n == 0)
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s has no elements", t, name);
  gpa_xla_wrap *w = &c->wraps[c->n_wraps];
  gpa_status st = gpa_xla_wrap_get(c->actor, b->data, n * gpa_dtype_size(dt), w);
  if (st != GPA_OK)
    return gpa_xla_error(c->f, gpa_xla_code_of(st), "%s: cannot use %s in place: %s (%s)", t, name, gpa_strerror(st),
                         gpa_last_error_message());
  c->n_wraps++;
  x->buffer = w->id;
  x->offset = w->offset;
  return NULL;
}

static const gpa_xla_attr_spec *spec_of(const gpa_xla_sig *s, const char *name) {
  for (uint32_t i = 0; i < s->n_attrs; i++)
    if (!strcmp(s->attrs[i].name, name)) return &s->attrs[i];
  return NULL;
}

/* A scalar attribute as gpuactor's int or float; 0 if it is neither. */
static int scalar_value(const XLA_FFI_Scalar *v, gpa_attr *a) {
  switch (v->dtype) {
  case XLA_FFI_DataType_PRED: a->type = GPA_ATTR_INT, a->i = *(const uint8_t *)v->value != 0; return 1;
  case XLA_FFI_DataType_S8: a->type = GPA_ATTR_INT, a->i = *(const int8_t *)v->value; return 1;
  case XLA_FFI_DataType_S16: a->type = GPA_ATTR_INT, a->i = *(const int16_t *)v->value; return 1;
  case XLA_FFI_DataType_S32: a->type = GPA_ATTR_INT, a->i = *(const int32_t *)v->value; return 1;
  case XLA_FFI_DataType_S64: a->type = GPA_ATTR_INT, a->i = *(const int64_t *)v->value; return 1;
  case XLA_FFI_DataType_U8: a->type = GPA_ATTR_INT, a->i = *(const uint8_t *)v->value; return 1;
  case XLA_FFI_DataType_U16: a->type = GPA_ATTR_INT, a->i = *(const uint16_t *)v->value; return 1;
  case XLA_FFI_DataType_U32: a->type = GPA_ATTR_INT, a->i = *(const uint32_t *)v->value; return 1;
  case XLA_FFI_DataType_U64: a->type = GPA_ATTR_INT, a->i = (int64_t) * (const uint64_t *)v->value; return 1;
  case XLA_FFI_DataType_F32: a->type = GPA_ATTR_FLOAT, a->f = *(const float *)v->value; return 1;
  case XLA_FFI_DataType_F64: a->type = GPA_ATTR_FLOAT, a->f = *(const double *)v->value; return 1;
  default: return 0;
  }
}

static XLA_FFI_Error *take_attrs(call *c) {
  const XLA_FFI_Attrs *at = &c->f->attrs;
  const char *t = c->sig->target;
  int generic = c->sig->args == NULL;
  for (int64_t i = 0; i < at->size; i++) {
    const XLA_FFI_ByteSpan *nm = at->names[i];
    char name[NAME_MAX_];
    if (nm->len >= sizeof name)
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: attribute name '%.*s...' is too long", t,
                           (int)(sizeof name - 1), nm->ptr);
    memcpy(name, nm->ptr, nm->len);
    name[nm->len] = 0;
    if (generic && !strcmp(name, "op")) {
      const XLA_FFI_ByteSpan *v = at->attrs[i];
      if (at->types[i] != XLA_FFI_AttrType_STRING || v->len == 0 || v->len >= sizeof c->op)
        return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                             "%s: attribute 'op' must be a non-empty string of at most %d bytes", t,
                             (int)sizeof c->op - 1);
      memcpy(c->op, v->ptr, v->len);
      c->op[v->len] = 0;
      continue;
    }
    const gpa_xla_attr_spec *sp = generic ? NULL : spec_of(c->sig, name);
    if (!generic && !sp)
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: unknown attribute '%s'", t, name);
    if (c->n_attrs == MAX_ATTRS)
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: more than %d attributes", t, MAX_ATTRS);
    gpa_attr *a = &c->attrs[c->n_attrs];
    if (at->types[i] != XLA_FFI_AttrType_SCALAR || !scalar_value(at->attrs[i], a))
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                           "%s: attribute '%s' must be an integer or floating-point scalar", t, name);
    if (sp && sp->type == GPA_ATTR_FLOAT && a->type == GPA_ATTR_INT) a->type = GPA_ATTR_FLOAT, a->f = (double)a->i;
    if (sp && sp->type == GPA_ATTR_INT && a->type == GPA_ATTR_FLOAT)
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: attribute '%s' must be an integer", t,
                           name);
    memcpy(c->attr_names[c->n_attrs], name, nm->len + 1);
    a->name = c->attr_names[c->n_attrs++];
  }
  if (generic && !c->op[0])
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                         "%s: missing attribute 'op' (the name of the gpuactor op to run)", t);
  for (uint32_t k = 0; k < c->sig->n_attrs; k++) {
    int found = 0;
    for (uint32_t j = 0; j < c->n_attrs; j++) found |= !strcmp(c->attrs[j].name, c->sig->attrs[k].name);
    if (!found && c->sig->attrs[k].required)
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: missing attribute '%s'", t,
                           c->sig->attrs[k].name);
  }
  return NULL;
}

static XLA_FFI_Error *check_arity(call *c) {
  const gpa_xla_sig *s = c->sig;
  int64_t na = c->f->args.size, nr = c->f->rets.size;
  if (!s->args) {
    if (na > GPA_MAX_INPUTS || nr < 1 || nr > GPA_MAX_OUTPUTS)
      return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                           "%s: %lld operands and %lld results; gpuactor takes at most %d and 1 to %d", s->target,
                           (long long)na, (long long)nr, GPA_MAX_INPUTS, GPA_MAX_OUTPUTS);
    return NULL;
  }
  if (na < s->min_args || na > s->max_args)
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %lld operands, expected %u to %u (%s%s...)",
                         s->target, (long long)na, s->min_args, s->max_args, s->args[0],
                         s->max_args > 1 ? ", " : "");
  if (nr < s->min_rets || nr > s->max_rets)
    return gpa_xla_error(c->f, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %lld results, expected %u to %u (%s%s...)",
                         s->target, (long long)nr, s->min_rets, s->max_rets, s->rets[0], s->max_rets > 1 ? ", " : "");
  return NULL;
}

/* gpa_await spins ~100 us before it yields; when XLA's thread and the
 * actor's share a core (a loaded machine, or XLA's pool pinned), that spin
 * is what the op waits for. A short spin, then yields, let the actor run at
 * once; a long op still ends in gpa_await's sleep. */
gpa_status gpa_xla_wait(gpa_handle *h) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (unsigned i = 0;; i++) {
    if (gpa_handle_status(h) != GPA_EPENDING) return gpa_await(h, -1);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 31) == 31) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      int64_t ns = (t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec);
      if (ns > 200000) return gpa_await(h, -1);
      if (ns > 5000) sched_yield();
    }
  }
}

/* Submits the op; then waits for it, or hands the wait to the async path
 * (*handed: the wraps are its to give back). */
static XLA_FFI_Error *submit(call *c, int *handed) {
  gpa_op_call oc = {c->op, c->in, c->n_in, c->out, c->n_out, c->attrs, c->n_attrs};
  gpa_handle *h = NULL;
  gpa_status st = gpa_submit(gpa_actor_default_queue(c->actor), &oc, &h);
  if (st != GPA_OK)
    return gpa_xla_error(c->f, gpa_xla_code_of(st), "%s: %s (%s)", c->sig->target, gpa_last_error_message(),
                         gpa_status_name(st));
  gpa_xla_count_call();
  if ((*handed = gpa_xla_async_hand_over(c->f, c->sig->target, c->actor, h, c->wraps, c->n_wraps)))
    return NULL;
  st = gpa_xla_wait(h);
  XLA_FFI_Error *e = NULL;
  if (st != GPA_OK)
    e = gpa_xla_error(c->f, gpa_xla_code_of(st), "%s: %s (%s)", c->sig->target, gpa_handle_error_message(h),
                      gpa_status_name(st));
  gpa_handle_release(h);
  return e;
}

/* CUDA: the stream's queue waits for XLA's stream, runs the op, and XLA's
 * stream waits for the queue; the handles go to the completion thread,
 * which gives the wraps back once the op has run and keeps a failure for
 * the device's next call. Nothing here waits for the GPU; the one wait is
 * the round trip of gpa_xla_cuda_end (cuda.c). */
static XLA_FFI_Error *submit_cuda(call *c, int *handed) {
  gpa_queue *q = gpa_xla_cuda_queue(c->dev, c->stream);
  const char *t = c->sig->target;
  gpa_xla_order o;
  XLA_FFI_Error *e = gpa_xla_cuda_begin(c->f, t, c->dev, c->stream, q, &o);
  if (e) return e;
  gpa_op_call oc = {c->op, c->in, c->n_in, c->out, c->n_out, c->attrs, c->n_attrs};
  gpa_handle *h = NULL;
  gpa_status st = gpa_submit(q, &oc, &h);
  if (st != GPA_OK) {
    /* The queue's wait for XLA's stream is harmless: it orders nothing
     * more. Its handle is dropped (it completes all the same). */
    e = gpa_xla_error(c->f, gpa_xla_code_of(st), "%s: %s (%s)", t, gpa_last_error_message(), gpa_status_name(st));
    XLA_FFI_Error *e2 = gpa_xla_cuda_end(c->f, t, c->dev, c->stream, q, &o);
    if (e2) {
      XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, .error = e2};
      c->f->api->XLA_FFI_Error_Destroy(&d);
    }
    gpa_handle_release(o.pre);
    return e;
  }
  gpa_xla_count_call();
  e = gpa_xla_cuda_end(c->f, t, c->dev, c->stream, q, &o);
  if (gpa_xla_watch(c->f->api, NULL, c->dev, t, c->actor, o.pre, h, c->wraps, c->n_wraps) == 0) {
    *handed = 1;
    return e;
  }
  /* No completion thread: wait here (correct, but the call then waits for
   * the GPU). */
  st = o.pre ? gpa_xla_wait(o.pre) : GPA_OK;
  gpa_handle *first = st != GPA_OK ? o.pre : h;
  gpa_status st_op = gpa_xla_wait(h);
  if (st == GPA_OK) st = st_op;
  if (st != GPA_OK && !e)
    e = gpa_xla_error(c->f, gpa_xla_code_of(st), "%s: %s (%s)", t, gpa_handle_error_message(first),
                      gpa_status_name(st));
  gpa_handle_release(o.pre);
  gpa_handle_release(h);
  return e;
}

static const XLA_FFI_Api *_Atomic last_api;

const XLA_FFI_Api *gpa_xla_api(void) { return atomic_load_explicit(&last_api, memory_order_relaxed); }

XLA_FFI_Error *gpa_xla_run(XLA_FFI_CallFrame *f, const gpa_xla_sig *sig, int cuda) {
  XLA_FFI_Error *e;
  if (f->api) atomic_store_explicit(&last_api, f->api, memory_order_relaxed); /* the metadata query passes none */
  if (gpa_xla_metadata(f, &e)) return e;
  if (f->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
  call c;
  c.f = f, c.sig = sig, c.n_in = c.n_out = c.n_wraps = c.n_attrs = 0, c.op[0] = 0, c.dev = NULL, c.stream = NULL;
  if ((e = check_arity(&c)) || (e = take_attrs(&c))) return e;
  if (sig->op) snprintf(c.op, sizeof c.op, "%s", sig->op);
  if (sig->pick_op)
    snprintf(c.op, sizeof c.op, "%s", sig->pick_op(sig, (uint32_t)f->args.size, (uint32_t)f->rets.size, c.attrs,
                                                    &c.n_attrs));
  const char *why = "";
  int ordinal = 0;
  if (cuda) {
    if ((e = gpa_xla_cuda_stream(f, sig->target, &c.stream, &ordinal))) return e;
    if (!(c.dev = gpa_xla_cuda_device(ordinal, &why)))
      return gpa_xla_error(f, XLA_FFI_Error_Code_UNAVAILABLE, "%s: %s", sig->target, why);
    if ((e = gpa_xla_cuda_take_deferred(f, sig->target, c.dev))) return e;
    c.actor = gpa_xla_cuda_actor(c.dev);
  } else if (!(c.actor = gpa_xla_host_actor(&why))) {
    return gpa_xla_error(f, XLA_FFI_Error_Code_UNAVAILABLE, "%s: %s", sig->target, why);
  }
  for (int64_t i = 0; i < f->args.size && !e; i++) e = take_buffer(&c, 0, (uint32_t)i, f->args.args[i], f->args.types[i]);
  for (int64_t i = 0; i < f->rets.size && !e; i++) e = take_buffer(&c, 1, (uint32_t)i, f->rets.rets[i], f->rets.types[i]);
  int handed = 0;
  if (!e) e = cuda ? submit_cuda(&c, &handed) : submit(&c, &handed);
  for (uint32_t i = 0; i < c.n_wraps && !handed; i++) gpa_xla_wrap_put(c.actor, &c.wraps[i]);
  return e;
}
