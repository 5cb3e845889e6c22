/* Parity harness; the API and the tolerance rules are in harness.h.
 *
 * Each case runs twice: "direct" (the registered host implementation called
 * inline through a private registry, after the op's own shape check, with
 * the attributes parsed here) and "actor" (buffers, uploads, gpa_submit,
 * readbacks and a batch sync on the backend GPA_DEVICE selects). Both are
 * compared with the reference; on the cpu backend they must also agree bit
 * for bit. Gradients are in harness_grad.c. */
#define _GNU_SOURCE
#include "tests/parity/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/bf16.h"
#include "actor/registry.h"
#include "tests/parity/harness_internal.h"

/* ---- specs ---------------------------------------------------------------- */

gpa_pt gpa_pt_spec(int dtype, uint32_t rank, const int64_t *shape) {
  gpa_pt t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  for (uint32_t i = 0; i < rank && i < GPA_MAX_RANK; i++) t.shape[i] = shape[i];
  return t;
}

gpa_pt gpa_pt_f32(uint32_t rank, const int64_t *shape, double lo, double hi) {
  gpa_pt t = gpa_pt_spec(GPA_F32, rank, shape);
  t.fill = GPA_PFILL_UNIFORM;
  t.lo = lo;
  t.hi = hi;
  return t;
}

gpa_pt gpa_pt_bf16(uint32_t rank, const int64_t *shape, double lo, double hi) {
  gpa_pt t = gpa_pt_f32(rank, shape, lo, hi);
  t.dtype = GPA_BF16;
  return t;
}

gpa_pt gpa_pt_int(int dtype, uint32_t rank, const int64_t *shape, int64_t lo, int64_t hi) {
  gpa_pt t = gpa_pt_spec(dtype, rank, shape);
  t.fill = GPA_PFILL_INT;
  t.lo = (double)lo;
  t.hi = (double)hi;
  return t;
}

gpa_pt gpa_pt_mask(int dtype, uint32_t rank, const int64_t *shape, double p_keep) {
  gpa_pt t = gpa_pt_spec(dtype, rank, shape);
  t.fill = GPA_PFILL_MASK;
  t.lo = p_keep;
  t.hi = -1.0; /* rows may be all masked */
  return t;
}

gpa_pcase gpa_pcase_make(const char *op, gpa_pref_fn ref) {
  gpa_pcase c;
  memset(&c, 0, sizeof c);
  c.op = op;
  c.ref = ref;
  return c;
}

void gpa_pcase_in(gpa_pcase *c, gpa_pt t) {
  if (c->n_in < GPA_PMAX) c->in[c->n_in++] = t;
}

void gpa_pcase_out(gpa_pcase *c, gpa_pt t) {
  if (c->n_out < GPA_PMAX) c->out[c->n_out++] = t;
}

void gpa_pcase_out_alias(gpa_pcase *c, uint32_t k) {
  if (c->n_out < GPA_PMAX && k < c->n_in) {
    c->alias[c->n_out] = (int32_t)k + 1;
    c->out[c->n_out] = c->in[k];
    c->out[c->n_out++].fill = GPA_PFILL_NONE;
  }
}

void gpa_pcase_attr_int(gpa_pcase *c, const char *name, int64_t v) {
  if (c->n_attrs < GPA_PMAX) c->attrs[c->n_attrs++] = (gpa_attr){name, GPA_ATTR_INT, v, 0.0};
}

void gpa_pcase_attr_float(gpa_pcase *c, const char *name, double v) {
  if (c->n_attrs < GPA_PMAX) c->attrs[c->n_attrs++] = (gpa_attr){name, GPA_ATTR_FLOAT, 0, v};
}

static const gpa_attr *find_attr(const gpa_attr *a, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (a[i].name && !strcmp(a[i].name, name)) return &a[i];
  return NULL;
}

double gpa_pcase_get_f(const gpa_pcase *c, const char *name, double dflt) {
  const gpa_attr *a = find_attr(c->attrs, c->n_attrs, name);
  return a ? (a->type == GPA_ATTR_FLOAT ? a->f : (double)a->i) : dflt;
}

int64_t gpa_pcase_get_i(const gpa_pcase *c, const char *name, int64_t dflt) {
  const gpa_attr *a = find_attr(c->attrs, c->n_attrs, name);
  return a ? (a->type == GPA_ATTR_INT ? a->i : (int64_t)a->f) : dflt;
}

/* ---- data ---------------------------------------------------------------- */

int64_t gpa_pi_pt_numel(const gpa_pt *t) {
  int64_t n = 1;
  for (uint32_t i = 0; i < t->rank; i++) n *= t->shape[i];
  return n;
}

uint64_t gpa_pi_pt_bytes(const gpa_pt *t) { return (uint64_t)gpa_pi_pt_numel(t) * gpa_dtype_size(t->dtype); }

static gpa_tensor pt_tensor(const gpa_pt *t, gpa_buffer_id buf) {
  gpa_tensor x;
  memset(&x, 0, sizeof x);
  x.buffer = buf;
  x.dtype = t->dtype;
  x.rank = t->rank;
  memcpy(x.shape, t->shape, sizeof x.shape);
  return x;
}

uint64_t gpa_pi_rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

double gpa_pi_rng_unit(uint64_t *s) { return (double)(gpa_pi_rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

double gpa_pi_raw_get(const void *raw, int dtype, int64_t i) {
  switch (dtype) {
    case GPA_F32: return (double)((const float *)raw)[i];
    case GPA_I32: return (double)((const int32_t *)raw)[i];
    case GPA_U8: return (double)((const uint8_t *)raw)[i];
    case GPA_I64: return (double)((const int64_t *)raw)[i];
    case GPA_BF16: return (double)gpa__bf16_to_f32(((const uint16_t *)raw)[i]);
    default: return NAN;
  }
}

void gpa_pi_raw_set(void *raw, int dtype, int64_t i, double v) {
  switch (dtype) {
    case GPA_F32: ((float *)raw)[i] = (float)v; break;
    case GPA_I32: ((int32_t *)raw)[i] = (int32_t)v; break;
    case GPA_U8: ((uint8_t *)raw)[i] = (uint8_t)v; break;
    case GPA_I64: ((int64_t *)raw)[i] = (int64_t)v; break;
    case GPA_BF16: ((uint16_t *)raw)[i] = gpa__f32_to_bf16((float)v); break;
    default: break;
  }
}


void gpa_pi_pdata_alloc(pdata *x, const gpa_pt *t) {
  x->n = gpa_pi_pt_numel(t);
  x->raw = calloc(1, gpa_pi_pt_bytes(t) + 16);
  x->d = calloc((size_t)x->n + 1, sizeof(double));
}

void gpa_pi_pdata_free(pdata *x) {
  free(x->raw);
  free(x->d);
  x->raw = x->d = NULL;
}

void gpa_pi_fill(pdata *x, const gpa_pt *t, uint64_t *rng) {
  int64_t row = t->rank ? t->shape[t->rank - 1] : 1;
  for (int64_t i = 0; i < x->n; i++) {
    double v;
    switch (t->fill) {
      case GPA_PFILL_UNIFORM: v = t->lo + (t->hi - t->lo) * gpa_pi_rng_unit(rng); break;
      case GPA_PFILL_INT: v = t->lo + floor(gpa_pi_rng_unit(rng) * (t->hi - t->lo + 1.0)); break;
      case GPA_PFILL_MASK: v = (gpa_pi_rng_unit(rng) < t->lo || (t->hi >= 0 && row && i % row == 0)) ? 1.0 : 0.0; break;
      default: v = NAN; break;
    }
    gpa_pi_raw_set(x->raw, t->dtype, i, v);
    x->d[i] = gpa_pi_raw_get(x->raw, t->dtype, i); /* the rounded value the op sees */
  }
}

uint64_t gpa_pi_case_seed(const gpa_pcase *c) {
  if (c->seed) return c->seed;
  uint64_t h = 1469598103934665603ull;
  for (const char *s = c->op; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  for (uint32_t i = 0; i < c->n_in; i++)
    for (uint32_t k = 0; k < c->in[i].rank; k++) h = (h ^ (uint64_t)c->in[i].shape[k]) * 1099511628211ull;
  return h ? h : 1;
}

void gpa_pi_fmt_case(char *buf, size_t size, const gpa_pcase *c) {
  size_t k = (size_t)snprintf(buf, size, "%s", c->op);
  for (uint32_t i = 0; i < c->n_in && k < size; i++) {
    k += (size_t)snprintf(buf + k, size - k, "%s%s[", i ? " " : " ", gpa_dtype_name(c->in[i].dtype));
    for (uint32_t d = 0; d < c->in[i].rank && k < size; d++)
      k += (size_t)snprintf(buf + k, size - k, d ? ",%lld" : "%lld", (long long)c->in[i].shape[d]);
    if (k < size) k += (size_t)snprintf(buf + k, size - k, "]");
  }
  for (uint32_t i = 0; i < c->n_attrs && k < size; i++) {
    if (c->attrs[i].type == GPA_ATTR_INT)
      k += (size_t)snprintf(buf + k, size - k, " %s=%lld", c->attrs[i].name, (long long)c->attrs[i].i);
    else
      k += (size_t)snprintf(buf + k, size - k, " %s=%g", c->attrs[i].name, c->attrs[i].f);
  }
  if (c->label && k < size) snprintf(buf + k, size - k, " (%s)", c->label);
}

/* ---- running an op ------------------------------------------------------- */

/* Parses attributes into a params block as the runtime does. */
static gpa_status parse_attrs(const gpa__op *op, const gpa_pcase *c, unsigned char *params, char *msg, size_t ms) {
  memset(params, 0, GPA_OP_PARAMS_MAX);
  for (uint32_t i = 0; i < c->n_attrs; i++) {
    int known = 0;
    for (uint32_t k = 0; k < op->d.n_attrs; k++) known |= !strcmp(op->d.attrs[k].name, c->attrs[i].name);
    if (!known) {
      snprintf(msg, ms, "%s: unknown attribute '%s'", c->op, c->attrs[i].name);
      return GPA_EINVAL;
    }
  }
  for (uint32_t k = 0; k < op->d.n_attrs; k++) {
    const gpa_attr_spec *s = &op->d.attrs[k];
    const gpa_attr *a = find_attr(c->attrs, c->n_attrs, s->name);
    if (!a && s->required) {
      snprintf(msg, ms, "%s: attribute '%s' is required", c->op, s->name);
      return GPA_EINVAL;
    }
    double v = a ? (a->type == GPA_ATTR_FLOAT ? a->f : (double)a->i) : (s->type == GPA_ATTR_INT ? (double)s->default_i : s->default_f);
    if (a && s->type == GPA_ATTR_INT && a->type != GPA_ATTR_INT) {
      snprintf(msg, ms, "%s: attribute '%s' must be an int", c->op, s->name);
      return GPA_EINVAL;
    }
    if (a && s->min <= s->max && (v < s->min || v > s->max || v != v)) {
      snprintf(msg, ms, "%s: attribute '%s' = %g out of range [%g, %g]", c->op, s->name, v, s->min, s->max);
      return GPA_EINVAL;
    }
    if (s->type == GPA_ATTR_INT) {
      int64_t iv = a ? a->i : s->default_i;
      memcpy(params + s->offset, &iv, sizeof iv);
    } else {
      memcpy(params + s->offset, &v, sizeof v);
    }
  }
  return GPA_OK;
}

/* Direct run: outs[i] hold the outputs' initial bytes and get the results.
 * ins are not modified (aliased outputs work on outs[i]). */
gpa_status gpa_pi_run_direct(gpa_parity *p, const gpa_pcase *c, pdata *ins, pdata *outs, char *msg, size_t ms) {
  msg[0] = 0;
  if (!p->reg_ok) {
    snprintf(msg, ms, "%s: no registry", c->op);
    return GPA_EINTERNAL;
  }
  const gpa__op *op = gpa__registry_find(&p->reg, c->op);
  if (!op) {
    snprintf(msg, ms, "op '%s' not registered", c->op);
    return GPA_ENOTFOUND;
  }
  if (c->n_in < op->d.min_inputs || c->n_in > op->d.max_inputs || c->n_out < op->d.n_outputs ||
      c->n_out > op->d.max_outputs) {
    snprintf(msg, ms, "%s: takes %u..%u inputs and %u..%u outputs, got %u and %u", c->op, op->d.min_inputs,
             op->d.max_inputs, op->d.n_outputs, op->d.max_outputs, c->n_in, c->n_out);
    return GPA_EINVAL;
  }
  unsigned char params[GPA_OP_PARAMS_MAX];
  gpa_status st = parse_attrs(op, c, params, msg, ms);
  if (st != GPA_OK) return st;
  gpa_tensor ti[GPA_PMAX], to[GPA_PMAX], expect[GPA_PMAX];
  void *pi[GPA_PMAX], *po[GPA_PMAX];
  for (uint32_t i = 0; i < c->n_in; i++) {
    ti[i] = pt_tensor(&c->in[i], (gpa_buffer_id)(i + 1));
    pi[i] = ins[i].raw;
  }
  for (uint32_t i = 0; i < c->n_out; i++) {
    to[i] = pt_tensor(&c->out[i], (gpa_buffer_id)(c->alias[i] ? (uint64_t)c->alias[i] : 100u + i));
    po[i] = outs[i].raw;
    if (c->alias[i]) pi[c->alias[i] - 1] = outs[i].raw; /* in place: the op reads and writes one copy */
  }
  if (op->d.shape) {
    memset(expect, 0, sizeof expect);
    gpa_op_sig sig = {ti, c->n_in, to, c->n_out, params, op->d.user_data};
    st = op->d.shape(&sig, expect, msg, ms);
    if (st != GPA_OK) return st;
    for (uint32_t i = 0; i < c->n_out; i++) {
      int same = expect[i].dtype == to[i].dtype && expect[i].rank == to[i].rank;
      for (uint32_t d = 0; same && d < to[i].rank; d++) same = expect[i].shape[d] == to[i].shape[d];
      if (!same) {
        snprintf(msg, ms, "%s: output %u: shape function expects %s rank %u [%lld,...], test gives %s rank %u",
                 c->op, i, gpa_dtype_name(expect[i].dtype), expect[i].rank, (long long)expect[i].shape[0],
                 gpa_dtype_name(to[i].dtype), to[i].rank);
        return GPA_ESHAPE;
      }
    }
  }
  if (!op->d.host) {
    snprintf(msg, ms, "%s: no host implementation", c->op);
    return GPA_EUNSUPPORTED;
  }
  gpa_op_exec x = {ti, c->n_in, to, c->n_out, pi, po, params, NULL, NULL, op->d.user_data, msg, ms};
  return op->d.host(&x);
}

/* Actor run: same contract as run_direct. */
static gpa_status run_actor(gpa_parity *p, const gpa_pcase *c, pdata *ins, pdata *outs, int read_back, char *msg,
                            size_t ms) {
  gpa_tensor ti[GPA_PMAX], to[GPA_PMAX];
  gpa_buffer_id bi[GPA_PMAX] = {0}, bo[GPA_PMAX] = {0};
  gpa_handle *h = NULL, *rb[GPA_PMAX] = {0};
  gpa_status st = GPA_OK;
  msg[0] = 0;
  for (uint32_t i = 0; i < c->n_in && st == GPA_OK; i++) {
    uint64_t bytes = gpa_pi_pt_bytes(&c->in[i]);
    st = gpa_buffer_acquire(p->actor, NULL, bytes ? bytes : 4, &bi[i]);
    ti[i] = pt_tensor(&c->in[i], bi[i]);
  }
  for (uint32_t i = 0; i < c->n_out && st == GPA_OK; i++) {
    uint64_t bytes = gpa_pi_pt_bytes(&c->out[i]);
    if (c->alias[i]) {
      to[i] = ti[c->alias[i] - 1];
    } else {
      st = gpa_buffer_acquire(p->actor, NULL, bytes ? bytes : 4, &bo[i]);
      to[i] = pt_tensor(&c->out[i], bo[i]);
    }
  }
  if (st != GPA_OK) {
    snprintf(msg, ms, "buffer_acquire: %s %s", gpa_status_name(st), gpa_last_error_message());
    goto done;
  }
  st = gpa_batch_begin(p->q, "parity");
  if (st != GPA_OK) {
    snprintf(msg, ms, "batch_begin: %s %s", gpa_status_name(st), gpa_last_error_message());
    goto done;
  }
  for (uint32_t i = 0; i < c->n_in && st == GPA_OK; i++)
    if (gpa_pi_pt_bytes(&c->in[i])) st = gpa_upload(p->q, &ti[i], ins[i].raw, gpa_pi_pt_bytes(&c->in[i]), 0, NULL);
  for (uint32_t i = 0; i < c->n_out && st == GPA_OK; i++)
    if (gpa_pi_pt_bytes(&c->out[i]) && !c->alias[i]) st = gpa_upload(p->q, &to[i], outs[i].raw, gpa_pi_pt_bytes(&c->out[i]), 0, NULL);
  if (st != GPA_OK) {
    snprintf(msg, ms, "upload: %s %s", gpa_status_name(st), gpa_last_error_message());
    gpa_sync_batch(p->q, NULL);
    goto done;
  }
  gpa_op_call call = {c->op, ti, c->n_in, to, c->n_out, c->attrs, c->n_attrs};
  st = gpa_submit(p->q, &call, &h);
  if (st != GPA_OK) {
    snprintf(msg, ms, "%s", gpa_last_error_message());
    gpa_sync_batch(p->q, NULL);
    goto done;
  }
  for (uint32_t i = 0; read_back && i < c->n_out && st == GPA_OK; i++)
    if (gpa_pi_pt_bytes(&c->out[i])) st = gpa_readback(p->q, &to[i], &rb[i]);
  gpa_batch_stats bs;
  memset(&bs, 0, sizeof bs);
  bs.size = sizeof bs;
  gpa_status sst = gpa_sync_batch(p->q, &bs);
  if (st != GPA_OK) {
    snprintf(msg, ms, "readback: %s %s", gpa_status_name(st), gpa_last_error_message());
    goto done;
  }
  st = gpa_await(h, -1);
  if (st != GPA_OK) {
    snprintf(msg, ms, "%s", gpa_handle_error_message(h));
    goto done;
  }
  if (sst != GPA_OK) {
    snprintf(msg, ms, "sync_batch: %s %s", gpa_status_name(sst), bs.first_error_message);
    st = sst;
    goto done;
  }
  for (uint32_t i = 0; i < c->n_out && st == GPA_OK; i++) {
    if (!rb[i]) continue;
    const void *data;
    uint64_t size;
    st = gpa_handle_data(rb[i], &data, &size);
    if (st != GPA_OK || size != gpa_pi_pt_bytes(&c->out[i])) {
      snprintf(msg, ms, "readback of output %u: %s, %llu bytes", i, gpa_status_name(st), (unsigned long long)size);
      if (st == GPA_OK) st = GPA_EINTERNAL;
      break;
    }
    memcpy(outs[i].raw, data, size);
  }
done:
  gpa_handle_release(h);
  for (uint32_t i = 0; i < GPA_PMAX; i++) gpa_handle_release(rb[i]);
  for (uint32_t i = 0; i < c->n_in; i++)
    if (bi[i]) gpa_buffer_release(p->actor, bi[i]);
  for (uint32_t i = 0; i < c->n_out; i++)
    if (bo[i]) gpa_buffer_release(p->actor, bo[i]);
  return st;
}

/* An op the backend has no implementation of: reported, not a failure. */
static int backend_lacks(gpa_parity *p, const char *name, gpa_status st, const char *msg) {
  if (st != GPA_EUNSUPPORTED || !strstr(msg, "no implementation for backend")) return 0;
  p->unsupported++;
  printf("[%s] skip %s [%s]: %s\n", p->suite, name, p->backend, msg);
  return 1;
}

/* ---- harness ------------------------------------------------------------- */

gpa_parity *gpa_parity_open(const char *suite) {
  gpa_parity *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->suite = suite;
  p->reg_ok = gpa__registry_init(&p->reg) == GPA_OK;
  if (!p->reg_ok) fprintf(stderr, "[%s] FAIL: cannot build a registry of the built-in ops\n", suite);
  gpa_status st = gpa_actor_create(NULL, &p->actor);
  if (st != GPA_OK) {
    snprintf(p->skip_reason, sizeof p->skip_reason, "no actor on this backend: %s: %s", gpa_status_name(st),
             gpa_last_error_message());
    p->actor = NULL;
    p->backend = "none";
    printf("[%s] %s; direct runs only\n", suite, p->skip_reason);
  } else {
    p->q = gpa_actor_default_queue(p->actor);
    p->backend = gpa_actor_backend(p->actor);
    printf("[%s] backend %s\n", suite, p->backend);
  }
  return p;
}

int gpa_parity_large(const gpa_parity *p) {
  (void)p;
#if defined(GPA_ASAN) || defined(GPA_TSAN)
  return 0;
#else
  const char *q = getenv("GPA_PARITY_QUICK");
  return !(q && *q && strcmp(q, "0"));
#endif
}

void gpa_parity_fail(gpa_parity *p, const char *what) {
  p->failures++;
  printf("[%s] FAIL %s\n", p->suite, what);
}

int gpa_parity_close(gpa_parity *p) {
  int fails = p->failures + (p->reg_ok ? 0 : 1);
  printf("[%s] %d passed, %d failed%s%s\n", p->suite, p->passes, fails, p->actor ? "" : "; skipped: ",
         p->actor ? "" : p->skip_reason);
  if (p->unsupported)
    printf("[%s] %d case(s) not implemented on backend %s (checked directly only)\n", p->suite, p->unsupported,
           p->backend);
  if (p->actor) gpa_actor_destroy(p->actor);
  if (p->reg_ok) gpa__registry_fini(&p->reg);
  /* skipped (77): no actor, or not one case could run on its backend */
  int skipped = p->actor == NULL || (p->unsupported && !p->actor_ok);
  free(p);
  return fails ? 1 : (skipped ? 77 : 0);
}


void gpa_pi_pset_free(pset *s) {
  for (int i = 0; i < GPA_PMAX; i++) {
    gpa_pi_pdata_free(&s->in[i]);
    gpa_pi_pdata_free(&s->out[i]);
    gpa_pi_pdata_free(&s->ref[i]);
  }
}

/* Outputs' initial bytes: NaN poison, generated data, or the aliased input. */
void gpa_pi_init_outputs(const gpa_pcase *c, pset *s, uint64_t *rng) {
  for (uint32_t i = 0; i < c->n_out; i++) {
    pdata *o = &s->out[i];
    gpa_pi_pdata_alloc(o, &c->out[i]);
    if (c->alias[i]) {
      memcpy(o->raw, s->in[c->alias[i] - 1].raw, gpa_pi_pt_bytes(&c->out[i]));
      memcpy(o->d, s->in[c->alias[i] - 1].d, (size_t)o->n * sizeof(double));
    } else if (c->out[i].fill) {
      gpa_pi_fill(o, &c->out[i], rng);
    } else {
      for (int64_t k = 0; k < o->n; k++) {
        gpa_pi_raw_set(o->raw, c->out[i].dtype, k, NAN);
        o->d[k] = NAN;
      }
    }
  }
}

void gpa_pi_copy_pdata(pdata *dst, const pdata *src, const gpa_pt *t) {
  gpa_pi_pdata_alloc(dst, t);
  memcpy(dst->raw, src->raw, gpa_pi_pt_bytes(t));
  memcpy(dst->d, src->d, (size_t)src->n * sizeof(double));
}

void gpa_pi_pset_make(const gpa_pcase *c, pset *s, uint64_t *rng) {
  memset(s, 0, sizeof *s);
  for (uint32_t i = 0; i < c->n_in; i++) {
    gpa_pi_pdata_alloc(&s->in[i], &c->in[i]);
    gpa_pi_fill(&s->in[i], &c->in[i], rng);
  }
  gpa_pi_init_outputs(c, s, rng);
}

void gpa_pi_run_ref(const gpa_pcase *c, pset *s, pdata *ref) {
  gpa_parr in[GPA_PMAX], out[GPA_PMAX];
  for (uint32_t i = 0; i < c->n_in; i++) in[i] = (gpa_parr){s->in[i].d, s->in[i].n, &c->in[i]};
  for (uint32_t i = 0; i < c->n_out; i++) {
    gpa_pi_pdata_alloc(&ref[i], &c->out[i]);
    memcpy(ref[i].d, s->out[i].d, (size_t)ref[i].n * sizeof(double));
    out[i] = (gpa_parr){ref[i].d, ref[i].n, &c->out[i]};
  }
  c->ref(c, in, out);
}

/* Compares got (fp32 outputs) with the reference; prints the worst element. */
static int compare(gpa_parity *p, const gpa_pcase *c, const char *mode, pdata *got, pdata *ref) {
  int ok = 1;
  char name[512];
  gpa_pi_fmt_case(name, sizeof name, c);
  for (uint32_t i = 0; i < c->n_out; i++) {
    double maxref = 0;
    int64_t wi = 0, bad = 0;
    for (int64_t k = 0; k < ref[i].n; k++)
      if (fabs(ref[i].d[k]) > maxref) maxref = fabs(ref[i].d[k]);
    double rtol = c->rtol > 0 ? c->rtol : 1e-5;
    double atol = c->atol > 0 ? c->atol : rtol * 1e-2 * maxref;
    for (int64_t k = 0; k < ref[i].n; k++) {
      double g = gpa_pi_raw_get(got[i].raw, c->out[i].dtype, k), r = ref[i].d[k];
      int pass = fabs(g - r) <= rtol * fabs(r) + atol || g == r;
      if (isnan(g) != isnan(r)) pass = 0;
      if (!pass && bad++ == 0) wi = k;
    }
    if (bad) {
      ok = 0;
      char w[900];
      snprintf(w, sizeof w, "%s [%s] output %u: %lld of %lld elements off; e.g. [%lld] got %.9g ref %.9g (rtol %g atol %g)",
               name, mode, i, (long long)bad, (long long)ref[i].n, (long long)wi,
               gpa_pi_raw_get(got[i].raw, c->out[i].dtype, wi), ref[i].d[wi], rtol, atol);
      gpa_parity_fail(p, w);
    }
  }
  return ok;
}

static int bitwise_same(const gpa_pcase *c, pdata *a, pdata *b) {
  for (uint32_t i = 0; i < c->n_out; i++)
    if (memcmp(a[i].raw, b[i].raw, gpa_pi_pt_bytes(&c->out[i]))) return 0;
  return 1;
}

/* Runs the case directly and through the actor on the inputs of s; compares
 * both with the reference in s->ref. */
int gpa_pi_run_and_compare(gpa_parity *p, const gpa_pcase *c, pset *s) {
  char msg[512], name[512];
  gpa_pi_fmt_case(name, sizeof name, c);
  pdata dir[GPA_PMAX], act[GPA_PMAX];
  memset(dir, 0, sizeof dir);
  memset(act, 0, sizeof act);
  for (uint32_t i = 0; i < c->n_out; i++) gpa_pi_copy_pdata(&dir[i], &s->out[i], &c->out[i]);
  int ok = 1;
  gpa_status st = gpa_pi_run_direct(p, c, s->in, dir, msg, sizeof msg);
  if (st != GPA_OK) {
    char w[1100];
    snprintf(w, sizeof w, "%s [direct]: %s: %s", name, gpa_status_name(st), msg);
    gpa_parity_fail(p, w);
    ok = 0;
  } else {
    ok &= compare(p, c, "direct", dir, s->ref);
  }
  if (p->actor) {
    for (uint32_t i = 0; i < c->n_out; i++) gpa_pi_copy_pdata(&act[i], &s->out[i], &c->out[i]);
    st = run_actor(p, c, s->in, act, 1, msg, sizeof msg);
    if (st == GPA_OK) p->actor_ok++;
    if (st != GPA_OK && backend_lacks(p, name, st, msg)) {
      /* direct run still checked */
    } else if (st != GPA_OK) {
      char w[1100];
      snprintf(w, sizeof w, "%s [%s]: %s: %s", name, p->backend, gpa_status_name(st), msg);
      gpa_parity_fail(p, w);
      ok = 0;
    } else {
      ok &= compare(p, c, p->backend, act, s->ref);
      if (ok && !strcmp(p->backend, "cpu") && !bitwise_same(c, dir, act)) {
        char w[700];
        snprintf(w, sizeof w, "%s: the actor's result differs from the single-threaded one (not deterministic)", name);
        gpa_parity_fail(p, w);
        ok = 0;
      }
    }
  }
  for (uint32_t i = 0; i < GPA_PMAX; i++) {
    gpa_pi_pdata_free(&dir[i]);
    gpa_pi_pdata_free(&act[i]);
  }
  return ok;
}

int gpa_parity_check(gpa_parity *p, const gpa_pcase *c) {
  pset s;
  uint64_t rng = gpa_pi_case_seed(c);
  gpa_pi_pset_make(c, &s, &rng);
  gpa_pi_run_ref(c, &s, s.ref);
  int ok = gpa_pi_run_and_compare(p, c, &s);
  if (ok) {
    char name[512];
    gpa_pi_fmt_case(name, sizeof name, c);
    printf("[%s] ok   %s\n", p->suite, name);
    p->passes++;
  }
  gpa_pi_pset_free(&s);
  return ok;
}

int gpa_parity_expect_error(gpa_parity *p, const gpa_pcase *c, int status, const char *substring) {
  pset s;
  uint64_t rng = gpa_pi_case_seed(c);
  gpa_pi_pset_make(c, &s, &rng);
  char msg[512], name[512], w[1400];
  gpa_pi_fmt_case(name, sizeof name, c);
  int ok = 1;
  for (int mode = 0; mode < 2; mode++) {
    if (mode == 1 && !p->actor) break;
    gpa_status st = mode ? run_actor(p, c, s.in, s.out, 0, msg, sizeof msg) : gpa_pi_run_direct(p, c, s.in, s.out, msg, sizeof msg);
    const char *m = mode ? p->backend : "direct";
    if (mode && status != GPA_EUNSUPPORTED && backend_lacks(p, name, st, msg)) continue;
    if (mode && st != GPA_OK) p->actor_ok++;
    if (st == GPA_OK || (status && st != status) || (substring && !strstr(msg, substring))) {
      snprintf(w, sizeof w, "%s [%s]: expected %s with \"%s\", got %s: \"%s\"", name, m,
               status ? gpa_status_name(status) : "an error", substring ? substring : "", gpa_status_name(st), msg);
      gpa_parity_fail(p, w);
      ok = 0;
    } else {
      printf("[%s] ok   %s [%s] rejected: %s\n", p->suite, name, m, msg);
    }
  }
  if (ok) p->passes++;
  gpa_pi_pset_free(&s);
  return ok;
}

