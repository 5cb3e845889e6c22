/* Parity harness; the API and the tolerance rules are in harness.h.
 *
 * Each case runs twice: "direct" (the registered host implementation called
 * inline through a private registry, after the op's own shape check, with
 * the attributes parsed here) and "actor" (buffers, uploads, gpa_submit,
 * readbacks and a batch sync on the backend GPA_DEVICE selects). Both are
 * compared with the reference; on the cpu backend they must also agree bit
 * for bit. */
#define _GNU_SOURCE
#include "tests/parity/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/registry.h"

struct gpa_parity {
  const char *suite;
  gpa_actor *actor;
  gpa_queue *q;
  const char *backend;
  gpa_registry reg;
  int reg_ok;
  int failures, passes;
  int actor_ok, unsupported; /* actor runs that ran / that the backend lacks */
  char skip_reason[256];
};

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

static int64_t pt_numel(const gpa_pt *t) {
  int64_t n = 1;
  for (uint32_t i = 0; i < t->rank; i++) n *= t->shape[i];
  return n;
}

static uint64_t pt_bytes(const gpa_pt *t) { return (uint64_t)pt_numel(t) * gpa_dtype_size(t->dtype); }

static gpa_tensor pt_tensor(const gpa_pt *t, gpa_buffer_id buf) {
  gpa_tensor x;
  memset(&x, 0, sizeof x);
  x.buffer = buf;
  x.dtype = t->dtype;
  x.rank = t->rank;
  memcpy(x.shape, t->shape, sizeof x.shape);
  return x;
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static double raw_get(const void *raw, int dtype, int64_t i) {
  switch (dtype) {
    case GPA_F32: return (double)((const float *)raw)[i];
    case GPA_I32: return (double)((const int32_t *)raw)[i];
    case GPA_U8: return (double)((const uint8_t *)raw)[i];
    case GPA_I64: return (double)((const int64_t *)raw)[i];
    default: return NAN;
  }
}

static void raw_set(void *raw, int dtype, int64_t i, double v) {
  switch (dtype) {
    case GPA_F32: ((float *)raw)[i] = (float)v; break;
    case GPA_I32: ((int32_t *)raw)[i] = (int32_t)v; break;
    case GPA_U8: ((uint8_t *)raw)[i] = (uint8_t)v; break;
    case GPA_I64: ((int64_t *)raw)[i] = (int64_t)v; break;
    default: break;
  }
}

/* raw (the op's bytes) + d (the same values in double) */
typedef struct pdata {
  void *raw;
  double *d;
  int64_t n;
} pdata;

static void pdata_alloc(pdata *x, const gpa_pt *t) {
  x->n = pt_numel(t);
  x->raw = calloc(1, pt_bytes(t) + 16);
  x->d = calloc((size_t)x->n + 1, sizeof(double));
}

static void pdata_free(pdata *x) {
  free(x->raw);
  free(x->d);
  x->raw = x->d = NULL;
}

static void fill(pdata *x, const gpa_pt *t, uint64_t *rng) {
  int64_t row = t->rank ? t->shape[t->rank - 1] : 1;
  for (int64_t i = 0; i < x->n; i++) {
    double v;
    switch (t->fill) {
      case GPA_PFILL_UNIFORM: v = t->lo + (t->hi - t->lo) * rng_unit(rng); break;
      case GPA_PFILL_INT: v = t->lo + floor(rng_unit(rng) * (t->hi - t->lo + 1.0)); break;
      case GPA_PFILL_MASK: v = (rng_unit(rng) < t->lo || (t->hi >= 0 && row && i % row == 0)) ? 1.0 : 0.0; break;
      default: v = NAN; break;
    }
    raw_set(x->raw, t->dtype, i, v);
    x->d[i] = raw_get(x->raw, t->dtype, i); /* the rounded value the op sees */
  }
}

static uint64_t case_seed(const gpa_pcase *c) {
  if (c->seed) return c->seed;
  uint64_t h = 1469598103934665603ull;
  for (const char *s = c->op; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  for (uint32_t i = 0; i < c->n_in; i++)
    for (uint32_t k = 0; k < c->in[i].rank; k++) h = (h ^ (uint64_t)c->in[i].shape[k]) * 1099511628211ull;
  return h ? h : 1;
}

static void fmt_case(char *buf, size_t size, const gpa_pcase *c) {
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
static gpa_status run_direct(gpa_parity *p, const gpa_pcase *c, pdata *ins, pdata *outs, char *msg, size_t ms) {
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
  if (c->n_in < op->d.min_inputs || c->n_in > op->d.max_inputs || c->n_out != op->d.n_outputs) {
    snprintf(msg, ms, "%s: takes %u..%u inputs and %u outputs, got %u and %u", c->op, op->d.min_inputs,
             op->d.max_inputs, op->d.n_outputs, c->n_in, c->n_out);
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
    uint64_t bytes = pt_bytes(&c->in[i]);
    st = gpa_buffer_acquire(p->actor, NULL, bytes ? bytes : 4, &bi[i]);
    ti[i] = pt_tensor(&c->in[i], bi[i]);
  }
  for (uint32_t i = 0; i < c->n_out && st == GPA_OK; i++) {
    uint64_t bytes = pt_bytes(&c->out[i]);
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
    if (pt_bytes(&c->in[i])) st = gpa_upload(p->q, &ti[i], ins[i].raw, pt_bytes(&c->in[i]), 0, NULL);
  for (uint32_t i = 0; i < c->n_out && st == GPA_OK; i++)
    if (pt_bytes(&c->out[i]) && !c->alias[i]) st = gpa_upload(p->q, &to[i], outs[i].raw, pt_bytes(&c->out[i]), 0, NULL);
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
    if (pt_bytes(&c->out[i])) st = gpa_readback(p->q, &to[i], &rb[i]);
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
    if (st != GPA_OK || size != pt_bytes(&c->out[i])) {
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
  p->reg_ok = gpa__registry_init(&p->reg) == GPA_OK && gpa__register_builtins(&p->reg) == GPA_OK;
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

typedef struct pset {
  pdata in[GPA_PMAX], out[GPA_PMAX], ref[GPA_PMAX];
} pset;

static void pset_free(pset *s) {
  for (int i = 0; i < GPA_PMAX; i++) {
    pdata_free(&s->in[i]);
    pdata_free(&s->out[i]);
    pdata_free(&s->ref[i]);
  }
}

/* Outputs' initial bytes: NaN poison, generated data, or the aliased input. */
static void init_outputs(const gpa_pcase *c, pset *s, uint64_t *rng) {
  for (uint32_t i = 0; i < c->n_out; i++) {
    pdata *o = &s->out[i];
    pdata_alloc(o, &c->out[i]);
    if (c->alias[i]) {
      memcpy(o->raw, s->in[c->alias[i] - 1].raw, pt_bytes(&c->out[i]));
      memcpy(o->d, s->in[c->alias[i] - 1].d, (size_t)o->n * sizeof(double));
    } else if (c->out[i].fill) {
      fill(o, &c->out[i], rng);
    } else {
      for (int64_t k = 0; k < o->n; k++) {
        raw_set(o->raw, c->out[i].dtype, k, NAN);
        o->d[k] = NAN;
      }
    }
  }
}

static void copy_pdata(pdata *dst, const pdata *src, const gpa_pt *t) {
  pdata_alloc(dst, t);
  memcpy(dst->raw, src->raw, pt_bytes(t));
  memcpy(dst->d, src->d, (size_t)src->n * sizeof(double));
}

static void run_ref(const gpa_pcase *c, pset *s, pdata *ref) {
  gpa_parr in[GPA_PMAX], out[GPA_PMAX];
  for (uint32_t i = 0; i < c->n_in; i++) in[i] = (gpa_parr){s->in[i].d, s->in[i].n, &c->in[i]};
  for (uint32_t i = 0; i < c->n_out; i++) {
    pdata_alloc(&ref[i], &c->out[i]);
    memcpy(ref[i].d, s->out[i].d, (size_t)ref[i].n * sizeof(double));
    out[i] = (gpa_parr){ref[i].d, ref[i].n, &c->out[i]};
  }
  c->ref(c, in, out);
}

/* Compares got (fp32 outputs) with the reference; prints the worst element. */
static int compare(gpa_parity *p, const gpa_pcase *c, const char *mode, pdata *got, pdata *ref) {
  int ok = 1;
  char name[512];
  fmt_case(name, sizeof name, c);
  for (uint32_t i = 0; i < c->n_out; i++) {
    double maxref = 0;
    int64_t wi = 0, bad = 0;
    for (int64_t k = 0; k < ref[i].n; k++)
      if (fabs(ref[i].d[k]) > maxref) maxref = fabs(ref[i].d[k]);
    double rtol = c->rtol > 0 ? c->rtol : 1e-5;
    double atol = c->atol > 0 ? c->atol : rtol * 1e-2 * maxref;
    for (int64_t k = 0; k < ref[i].n; k++) {
      double g = raw_get(got[i].raw, c->out[i].dtype, k), r = ref[i].d[k];
      int pass = fabs(g - r) <= rtol * fabs(r) + atol || g == r;
      if (isnan(g) != isnan(r)) pass = 0;
      if (!pass && bad++ == 0) wi = k;
    }
    if (bad) {
      ok = 0;
      char w[900];
      snprintf(w, sizeof w, "%s [%s] output %u: %lld of %lld elements off; e.g. [%lld] got %.9g ref %.9g (rtol %g atol %g)",
               name, mode, i, (long long)bad, (long long)ref[i].n, (long long)wi,
               raw_get(got[i].raw, c->out[i].dtype, wi), ref[i].d[wi], rtol, atol);
      gpa_parity_fail(p, w);
    }
  }
  return ok;
}

static int bitwise_same(const gpa_pcase *c, pdata *a, pdata *b) {
  for (uint32_t i = 0; i < c->n_out; i++)
    if (memcmp(a[i].raw, b[i].raw, pt_bytes(&c->out[i]))) return 0;
  return 1;
}

/* Runs the case directly and through the actor on the inputs of s; compares
 * both with the reference in s->ref. */
static int run_and_compare(gpa_parity *p, const gpa_pcase *c, pset *s) {
  char msg[512], name[512];
  fmt_case(name, sizeof name, c);
  pdata dir[GPA_PMAX], act[GPA_PMAX];
  memset(dir, 0, sizeof dir);
  memset(act, 0, sizeof act);
  for (uint32_t i = 0; i < c->n_out; i++) copy_pdata(&dir[i], &s->out[i], &c->out[i]);
  int ok = 1;
  gpa_status st = run_direct(p, c, s->in, dir, msg, sizeof msg);
  if (st != GPA_OK) {
    char w[1100];
    snprintf(w, sizeof w, "%s [direct]: %s: %s", name, gpa_status_name(st), msg);
    gpa_parity_fail(p, w);
    ok = 0;
  } else {
    ok &= compare(p, c, "direct", dir, s->ref);
  }
  if (p->actor) {
    for (uint32_t i = 0; i < c->n_out; i++) copy_pdata(&act[i], &s->out[i], &c->out[i]);
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
    pdata_free(&dir[i]);
    pdata_free(&act[i]);
  }
  return ok;
}

int gpa_parity_check(gpa_parity *p, const gpa_pcase *c) {
  pset s;
  memset(&s, 0, sizeof s);
  uint64_t rng = case_seed(c);
  for (uint32_t i = 0; i < c->n_in; i++) {
    pdata_alloc(&s.in[i], &c->in[i]);
    fill(&s.in[i], &c->in[i], &rng);
  }
  init_outputs(c, &s, &rng);
  run_ref(c, &s, s.ref);
  int ok = run_and_compare(p, c, &s);
  if (ok) {
    char name[512];
    fmt_case(name, sizeof name, c);
    printf("[%s] ok   %s\n", p->suite, name);
    p->passes++;
  }
  pset_free(&s);
  return ok;
}

int gpa_parity_expect_error(gpa_parity *p, const gpa_pcase *c, int status, const char *substring) {
  pset s;
  memset(&s, 0, sizeof s);
  uint64_t rng = case_seed(c);
  for (uint32_t i = 0; i < c->n_in; i++) {
    pdata_alloc(&s.in[i], &c->in[i]);
    fill(&s.in[i], &c->in[i], &rng);
  }
  init_outputs(c, &s, &rng);
  char msg[512], name[512], w[1400];
  fmt_case(name, sizeof name, c);
  int ok = 1;
  for (int mode = 0; mode < 2; mode++) {
    if (mode == 1 && !p->actor) break;
    gpa_status st = mode ? run_actor(p, c, s.in, s.out, 0, msg, sizeof msg) : run_direct(p, c, s.in, s.out, msg, sizeof msg);
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
  pset_free(&s);
  return ok;
}

/* ---- gradients ----------------------------------------------------------- */

/* loss = sum over the first n_dy outputs of w * out, forward reference in double */
static double fd_loss(const gpa_pcase *f, gpa_parr *in, pdata *w, uint32_t n_dy) {
  pdata out[GPA_PMAX];
  gpa_parr po[GPA_PMAX];
  memset(out, 0, sizeof out);
  for (uint32_t i = 0; i < f->n_out; i++) {
    pdata_alloc(&out[i], &f->out[i]);
    for (int64_t k = 0; k < out[i].n; k++) out[i].d[k] = NAN;
    po[i] = (gpa_parr){out[i].d, out[i].n, &f->out[i]};
  }
  f->ref(f, in, po);
  double L = 0;
  for (uint32_t i = 0; i < n_dy; i++)
    for (int64_t k = 0; k < out[i].n; k++) L += w[i].d[k] * out[i].d[k];
  for (uint32_t i = 0; i < f->n_out; i++) pdata_free(&out[i]);
  return L;
}

int gpa_parity_grad(gpa_parity *p, const gpa_pcase *f, const gpa_pgrad *g) {
  pset fs, bs;
  memset(&fs, 0, sizeof fs);
  memset(&bs, 0, sizeof bs);
  uint64_t rng = case_seed(f) ^ 0x9e3779b97f4a7c15ull;
  for (uint32_t i = 0; i < f->n_in; i++) {
    pdata_alloc(&fs.in[i], &f->in[i]);
    fill(&fs.in[i], &f->in[i], &rng);
  }
  init_outputs(f, &fs, &rng);
  run_ref(f, &fs, fs.ref);
  /* loss weights (dy), fp32-rounded; a scalar dy may go in an attribute */
  pdata w[GPA_PMAX];
  memset(w, 0, sizeof w);
  for (uint32_t i = 0; i < g->n_dy; i++) {
    gpa_pt t = f->out[i];
    t.fill = GPA_PFILL_UNIFORM;
    t.lo = -1;
    t.hi = 1;
    pdata_alloc(&w[i], &t);
    fill(&w[i], &t, &rng);
  }
  gpa_pcase b = gpa_pcase_make(g->op, g->ref);
  for (uint32_t i = 0; i < g->n_attrs; i++) b.attrs[b.n_attrs++] = g->attrs[i];
  if (g->dy_attr) gpa_pcase_attr_float(&b, g->dy_attr, w[0].d[0]);
  for (uint32_t i = 0; i < g->n_in; i++) {
    const gpa_psrc *src = &g->in[i];
    gpa_pt t;
    pdata *from;
    if (src->kind == GPA_PSRC_FWD_IN) {
      t = f->in[src->index];
      from = &fs.in[src->index];
    } else if (src->kind == GPA_PSRC_FWD_OUT) {
      t = f->out[src->index];
      from = &fs.ref[src->index];
    } else {
      t = f->out[src->index];
      from = &w[src->index];
    }
    t.fill = GPA_PFILL_NONE;
    gpa_pcase_in(&b, t);
    pdata_alloc(&bs.in[i], &t);
    for (int64_t k = 0; k < from->n; k++) {
      raw_set(bs.in[i].raw, t.dtype, k, from->d[k]);
      bs.in[i].d[k] = raw_get(bs.in[i].raw, t.dtype, k);
    }
  }
  for (uint32_t i = 0; i < g->n_out; i++) {
    gpa_pt t = f->in[g->grad_of[i]];
    t.fill = GPA_PFILL_NONE;
    t.dtype = GPA_F32;
    gpa_pcase_out(&b, t);
  }
  init_outputs(&b, &bs, &rng);
  char name[512];
  fmt_case(name, sizeof name, f);
  int ok = 1;
  /* analytic reference: parity of the backward op */
  pdata got[GPA_PMAX];
  memset(got, 0, sizeof got);
  if (g->ref) {
    run_ref(&b, &bs, bs.ref);
    ok &= run_and_compare(p, &b, &bs);
  }
  char msg[512];
  for (uint32_t i = 0; i < b.n_out; i++) copy_pdata(&got[i], &bs.out[i], &b.out[i]);
  gpa_status st = run_direct(p, &b, bs.in, got, msg, sizeof msg);
  if (st != GPA_OK) {
    char wmsg[1100];
    snprintf(wmsg, sizeof wmsg, "%s backward %s [direct]: %s: %s", name, g->op, gpa_status_name(st), msg);
    gpa_parity_fail(p, wmsg);
    ok = 0;
  }
  /* finite differences of the double forward reference */
  int64_t maxn = g->fd_max_numel > 0 ? g->fd_max_numel : 65536;
  double rtol = g->fd_rtol > 0 ? g->fd_rtol : 1e-4;
  int fd_done = 0;
  for (uint32_t i = 0; ok && i < g->n_out; i++) {
    uint32_t xi = (uint32_t)g->grad_of[i];
    pdata *x = &fs.in[xi];
    if (x->n == 0 || x->n > maxn) continue;
    double gmax = 0;
    for (int64_t k = 0; k < got[i].n; k++) {
      double v = fabs(raw_get(got[i].raw, GPA_F32, k));
      if (v > gmax) gmax = v;
    }
    gpa_parr in[GPA_PMAX];
    double *xd = malloc((size_t)x->n * sizeof(double));
    memcpy(xd, x->d, (size_t)x->n * sizeof(double));
    for (uint32_t k = 0; k < f->n_in; k++) in[k] = (gpa_parr){k == xi ? xd : fs.in[k].d, fs.in[k].n, &f->in[k]};
    int samples = x->n < 24 ? (int)x->n : 24;
    for (int s = 0; s < samples; s++) {
      int64_t e = x->n < 24 ? s : (s == 0 ? 0 : s == 1 ? x->n - 1 : (int64_t)(rng_next(&rng) % (uint64_t)x->n));
      double x0 = xd[e], h = 1e-4 * (fabs(x0) > 1 ? fabs(x0) : 1);
      xd[e] = x0 + h;
      double lp = fd_loss(f, in, w, g->n_dy);
      xd[e] = x0 - h;
      double lm = fd_loss(f, in, w, g->n_dy);
      xd[e] = x0;
      double fd = (lp - lm) / (2 * h), gv = raw_get(got[i].raw, GPA_F32, e);
      if (!(fabs(gv - fd) <= rtol * fabs(fd) + rtol * 0.1 * gmax + 1e-9)) {
        char wmsg[1100];
        snprintf(wmsg, sizeof wmsg, "%s: %s output %u (d/d input %u) [%lld] = %.9g, finite difference %.9g", name,
                 g->op, i, xi, (long long)e, gv, fd);
        gpa_parity_fail(p, wmsg);
        ok = 0;
        break;
      }
    }
    fd_done = 1;
    free(xd);
  }
  if (ok) {
    printf("[%s] ok   %s: %s%s\n", p->suite, name, g->op,
           fd_done ? " matches finite differences" : (g->ref ? " matches its reference (too large for FD)" : ""));
    p->passes++;
  }
  for (uint32_t i = 0; i < GPA_PMAX; i++) {
    pdata_free(&got[i]);
    pdata_free(&w[i]);
  }
  pset_free(&fs);
  pset_free(&bs);
  return ok;
}
