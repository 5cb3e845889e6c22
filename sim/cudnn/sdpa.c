/* gpa-sim cuDNN subset: the SDPA graphs, recognized by their structure and
 * computed on the host (design in cudnn.c).
 *
 * Recognition is by roles, not by our uids or op order: the forward is the
 * graph with two matmuls, S = Q KT on two real tensors and O = P V with P
 * made by the softmax's division; the backward has five (Q KT, dO VT, and
 * the three gradients). Masks are read from the pointwise ops: a CMP_GE of
 * a row index (plus a by-value shift) against a column index is the causal
 * mask, CMP_LT of the column index against a real int32 tensor the key
 * lengths. The computation is the graph's math in double, with the
 * roundings the graph's tensor types imply: P and dS to the storage type
 * before the products that read them, o/dq/dk/dv once at the end; stats
 * and delta fp32. Visible keys of query i: j < lengths[b] (if any) and
 * j <= i + shift (if causal). A row that sees no key gets o = 0,
 * lse = -inf and no gradient: what our kernels do; what real cuDNN writes
 * there is not verified (docs/sim.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpa_sim_hooks.h"
#include "half16.h"
#include "internal.h"

typedef const sdesc *T;

static int is_op(T o, int type) { return o->type == type; }
static int pw_mode(T o) { return is_op(o, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) ? o->desc->mode : -1; }
static int real(T t) { return t && !t->virt && !t->byval; }

static T producer(const sdesc *const *ops, int n, T t) {
  for (int i = 0; i < n; i++)
    if (ops[i]->y == t) return ops[i];
  return NULL;
}

static int dims_are(T t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return t && t->nd == 4 && t->dim[0] == a && t->dim[1] == b && t->dim[2] == c && t->dim[3] == d;
}

/* The masks, the scale (the MUL of the scores by a by-value scalar) and
 * their scalars. */
static void masks(const sdesc *const *ops, int n, T scores, sdpa_spec *s) {
  for (int i = 0; i < n; i++) {
    T o = ops[i];
    int m = pw_mode(o);
    if (m == CUDNN_POINTWISE_MUL && o->x == scores && o->b && o->b->byval) s->scale = o->b;
    if (m == CUDNN_POINTWISE_CMP_GE) s->causal = 1;
    if (m == CUDNN_POINTWISE_ADD && o->b && o->b->byval && o->b->dt == CUDNN_DATA_INT32) s->shift = o->b;
    if (m == CUDNN_POINTWISE_BINARY_SELECT && o->b && o->b->byval) s->neg = o->b;
    if (m == CUDNN_POINTWISE_CMP_LT && real(o->b) && o->b->dt == CUDNN_DATA_INT32) {
      T idx = producer(ops, n, o->x);
      if (idx && pw_mode(idx) == CUDNN_POINTWISE_GEN_INDEX) {
        if (idx->desc->axis == 3) s->seq_kv = o->b;
        if (idx->desc->axis == 2) s->seq_q = o->b;
      }
    }
  }
  s->lens = s->seq_kv != NULL;
}

/* The gradient a matmul with B = b produces: its C, or the reduction of
 * its C over the query heads of a group (GQA). */
static T grad_of(const sdesc *const *ops, int n, T b) {
  for (int i = 0; i < n; i++) {
    T o = ops[i];
    if (!is_op(o, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) || o->b != b) continue;
    if (real(o->y)) return o->y;
    for (int j = 0; j < n; j++)
      if (is_op(ops[j], CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) && ops[j]->x == o->y && real(ops[j]->y))
        return ops[j]->y;
  }
  return NULL;
}

static int fwd(const sdesc *const *ops, int n, T *mm, sdpa_spec *s, char *why, size_t wn) {
  T b1 = real(mm[0]->x) && real(mm[0]->b) ? mm[0] : mm[1], b2 = b1 == mm[0] ? mm[1] : mm[0];
  T p = producer(ops, n, b2->x);
  if (!real(b1->x) || !real(b1->b) || !real(b2->b) || !real(b2->y) || !p || pw_mode(p) != CUDNN_POINTWISE_DIV) {
    snprintf(why, wn, "two matmuls that are not Q KT and softmax(S) V");
    return 0;
  }
  s->q = b1->x, s->k = b1->b, s->v = b2->b, s->o = b2->y, s->kt = 1;
  for (int i = 0; i < n; i++)
    if (pw_mode(ops[i]) == CUDNN_POINTWISE_ADD && real(ops[i]->y) && ops[i]->y->dt == CUDNN_DATA_FLOAT)
      s->stats = ops[i]->y;
  masks(ops, n, b1->y, s);
  return 1;
}

static int bwd(const sdesc *const *ops, int n, T *mm, sdpa_spec *s, char *why, size_t wn) {
  for (int i = 0; i < n; i++) {
    T o = ops[i];
    int m = pw_mode(o);
    if (m == CUDNN_POINTWISE_MUL && real(o->x) && real(o->b)) s->dout = o->x, s->o = o->b;
    if (m == CUDNN_POINTWISE_MUL && real(o->y) && o->y->dt == CUDNN_DATA_FLOAT) s->delta = o->y, s->one = o->b;
  }
  T qk = NULL, dp = NULL;
  for (int i = 0; i < 5; i++) {
    if (mm[i]->x == s->dout && real(mm[i]->b) && s->dout) dp = mm[i];
    else if (real(mm[i]->x) && real(mm[i]->b)) qk = mm[i];
  }
  if (!s->dout || !qk || !dp || !s->delta) {
    snprintf(why, wn, "five matmuls without the Q KT / dO VT / dO . O structure of an SDPA backward");
    return 0;
  }
  s->q = qk->x, s->k = qk->b, s->v = dp->b, s->kt = s->vt = 1;
  for (int i = 0; i < n; i++)
    if (pw_mode(ops[i]) == CUDNN_POINTWISE_SUB && real(ops[i]->b) && ops[i]->b != s->delta) s->stats = ops[i]->b;
  s->dv = grad_of(ops, n, s->dout);
  s->dk = grad_of(ops, n, s->q);
  for (int i = 0; i < 5; i++) {
    T r = producer(ops, n, mm[i]->b);
    if (r && is_op(r, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) && r->x == s->k && real(mm[i]->y)) s->dq = mm[i]->y;
  }
  /* dQ through an fp32 accumulator: the product's output copied out */
  for (int i = 0; s->dq && i < n; i++)
    if (pw_mode(ops[i]) == CUDNN_POINTWISE_IDENTITY && ops[i]->x == s->dq && real(ops[i]->y)) {
      s->dq_accum = s->dq, s->dq = ops[i]->y;
      break;
    }
  masks(ops, n, qk->y, s);
  return 1;
}

int sim_sdpa_recognize(const sdesc *const *ops, int n, sdpa_spec *s, char *why, size_t wn) {
  memset(s, 0, sizeof *s);
  T mm[5];
  int nm = 0;
  for (int i = 0; i < n; i++)
    if (is_op(ops[i], CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)) {
      if (nm == 5) break;
      mm[nm++] = ops[i];
    }
  s->bwd = nm == 5;
  if (nm != 2 && nm != 5) {
    snprintf(why, wn, "%d matmuls: not an SDPA forward (2) or backward (5)", nm);
    return 0;
  }
  if (!(s->bwd ? bwd(ops, n, mm, s, why, wn) : fwd(ops, n, mm, s, why, wn))) return 0;
  if (!s->stats || !s->scale || (s->causal || s->lens ? !s->neg : 0) || (s->lens && !s->seq_q)) {
    snprintf(why, wn, "stats, scale or a mask's value missing");
    return 0;
  }
  s->B = s->q->dim[0], s->H = s->q->dim[1], s->S = s->q->dim[2], s->D = s->q->dim[3];
  s->Hkv = s->k->dim[1], s->Sk = s->k->dim[3], s->io = s->q->dt;
  int ok = dims_are(s->k, s->B, s->Hkv, s->D, s->Sk) && dims_are(s->o, s->B, s->H, s->S, s->D) &&
           dims_are(s->stats, s->B, s->H, s->S, 1) && s->Hkv >= 1 && s->H % s->Hkv == 0;
  if (s->bwd)
    ok = ok && dims_are(s->v, s->B, s->Hkv, s->D, s->Sk) && dims_are(s->dout, s->B, s->H, s->S, s->D) &&
         dims_are(s->dq, s->B, s->H, s->S, s->D) && dims_are(s->dk, s->B, s->Hkv, s->Sk, s->D) &&
         dims_are(s->dv, s->B, s->Hkv, s->Sk, s->D) && dims_are(s->delta, s->B, s->H, s->S, 1) &&
         (!s->dq_accum || (dims_are(s->dq_accum, s->B, s->H, s->S, s->D) && s->dq_accum->dt == CUDNN_DATA_FLOAT));
  else ok = ok && dims_are(s->v, s->B, s->Hkv, s->Sk, s->D);
  if (!ok) {
    snprintf(why, wn, "tensor shapes of the SDPA graph do not agree");
    return 0;
  }
  return 1;
}

const char *sim_sdpa_refuses(const sdpa_spec *s) {
  if (s->io != CUDNN_DATA_HALF && s->io != CUDNN_DATA_BFLOAT16) return "storage not fp16/bf16";
  if (s->D % 8 || s->D > 256) return "head dim not a multiple of 8, or over 256";
  if (s->causal && s->S > s->Sk && !s->lens) return "bottom-right causal with S > Sk needs a padding mask";
  return NULL;
}

/* ---- execution ------------------------------------------------------------------------------------ */

typedef struct job {
  sdpa_spec s;
  /* the tensors' descriptors as they were at the call: the caller may
   * destroy the plan (and its graph) while this job is queued */
  sdesc t[17];
  void *q, *k, *v, *o, *stats, *seq_kv, *dout, *dq, *dk, *dv, *delta, *dq_accum;
  float scale;
  int32_t shift;
} job;

static size_t at(T t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return (size_t)(a * t->str[0] + b * t->str[1] + c * t->str[2] + d * t->str[3]);
}
static double ld(T t, const void *p, size_t i) {
  uint16_t u = ((const uint16_t *)p)[i];
  return t->dt == CUDNN_DATA_BFLOAT16 ? bf16_to_float(u) : half_to_float(u);
}
static void st(T t, void *p, size_t i, double v) {
  ((uint16_t *)p)[i] = t->dt == CUDNN_DATA_BFLOAT16 ? float_to_bf16((float)v) : float_to_half((float)v);
}
/* v rounded to the storage type, as the graph's io-typed P and dS are. */
static double io_round(int dt, double v) {
  return dt == CUDNN_DATA_BFLOAT16 ? bf16_to_float(float_to_bf16((float)v)) : half_to_float(float_to_half((float)v));
}

/* Key j of kv head g: k is [b,hkv,d,sk] (transposed view). */
static double kval(const job *J, int64_t b, int64_t g, int64_t j, int64_t d) {
  return ld(J->s.k, J->k, at(J->s.k, b, g, d, j));
}
static double vval(const job *J, int64_t b, int64_t g, int64_t j, int64_t d) {
  T v = J->s.v;
  return ld(v, J->v, J->s.vt ? at(v, b, g, d, j) : at(v, b, g, j, d));
}

/* Scores of row (b, h, i) over visible keys: p[j] = scale q.k (NAN when
 * masked); returns how many are visible. */
static int64_t row_scores(const job *J, int64_t b, int64_t h, int64_t i, double *p) {
  const sdpa_spec *s = &J->s;
  int64_t g = h / (s->H / s->Hkv), len = s->Sk, vis = 0;
  if (J->seq_kv) len = ((const int32_t *)J->seq_kv)[b * s->seq_kv->str[0]];
  for (int64_t j = 0; j < s->Sk; j++) {
    if (j >= len || (s->causal && j > i + J->shift)) {
      p[j] = NAN;
      continue;
    }
    double acc = 0;
    for (int64_t d = 0; d < s->D; d++) acc += ld(s->q, J->q, at(s->q, b, h, i, d)) * kval(J, b, g, j, d);
    p[j] = J->scale * acc;
    vis++;
  }
  return vis;
}

static int run_fwd(const job *J, double *p) {
  const sdpa_spec *s = &J->s;
  float *lse = J->stats;
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      for (int64_t i = 0; i < s->S; i++) {
        int64_t g = h / (s->H / s->Hkv), vis = row_scores(J, b, h, i, p);
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < s->Sk; j++)
          if (!isnan(p[j]) && p[j] > m) m = p[j];
        for (int64_t j = 0; j < s->Sk; j++) z += isnan(p[j]) ? 0 : exp(p[j] - m);
        lse[at(s->stats, b, h, i, 0)] = vis ? (float)(m + log(z)) : -INFINITY;
        for (int64_t d = 0; d < s->D; d++) {
          double acc = 0;
          for (int64_t j = 0; vis && j < s->Sk; j++)
            if (!isnan(p[j])) acc += io_round(s->io, exp(p[j] - m) / z) * vval(J, b, g, j, d);
          st(s->o, J->o, at(s->o, b, h, i, d), acc);
        }
      }
  return 0;
}

static int run_bwd(const job *J, double *p) {
  const sdpa_spec *s = &J->s;
  const float *lse = J->stats;
  float *delta = J->delta;
  int64_t gsz = s->H / s->Hkv;
  size_t nk = (size_t)(s->B * s->Hkv * s->Sk * s->D);
  double *dk = calloc(nk, sizeof *dk), *dv = calloc(nk, sizeof *dv), *dq = calloc((size_t)s->D, sizeof *dq);
  if (!dk || !dv || !dq) {
    free(dk), free(dv), free(dq);
    return 1;
  }
#define KI(b, g, j, d) ((((size_t)(b) * s->Hkv + (g)) * s->Sk + (j)) * s->D + (d))
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t h = 0; h < s->H; h++)
      for (int64_t i = 0; i < s->S; i++) {
        int64_t g = h / gsz, vis = row_scores(J, b, h, i, p);
        double dl = 0, l = lse[at(s->stats, b, h, i, 0)];
        for (int64_t d = 0; d < s->D; d++)
          dl += ld(s->dout, J->dout, at(s->dout, b, h, i, d)) * ld(s->o, J->o, at(s->o, b, h, i, d));
        delta[at(s->delta, b, h, i, 0)] = (float)dl;
        dl = (float)dl;
        memset(dq, 0, sizeof *dq * (size_t)s->D);
        for (int64_t j = 0; vis && j < s->Sk; j++) {
          if (isnan(p[j])) continue;
          double pj = exp(p[j] - l), dp = 0;
          for (int64_t d = 0; d < s->D; d++) dp += ld(s->dout, J->dout, at(s->dout, b, h, i, d)) * vval(J, b, g, j, d);
          double pr = io_round(s->io, pj), ds = io_round(s->io, J->scale * pj * (dp - dl));
          for (int64_t d = 0; d < s->D; d++) {
            dv[KI(b, g, j, d)] += pr * ld(s->dout, J->dout, at(s->dout, b, h, i, d));
            dk[KI(b, g, j, d)] += ds * ld(s->q, J->q, at(s->q, b, h, i, d));
            dq[d] += ds * kval(J, b, g, j, d);
          }
        }
        for (int64_t d = 0; d < s->D; d++) {
          double v = dq[d];
          if (s->dq_accum) { /* as the engines do: dQ lands in fp32 first, then is copied out */
            float *a = (float *)J->dq_accum + at(s->dq_accum, b, h, i, d);
            *a = (float)v;
            v = *a;
          }
          st(s->dq, J->dq, at(s->dq, b, h, i, d), v);
        }
      }
  for (int64_t b = 0; b < s->B; b++)
    for (int64_t g = 0; g < s->Hkv; g++)
      for (int64_t j = 0; j < s->Sk; j++)
        for (int64_t d = 0; d < s->D; d++) {
          st(s->dk, J->dk, at(s->dk, b, g, j, d), dk[KI(b, g, j, d)]);
          st(s->dv, J->dv, at(s->dv, b, g, j, d), dv[KI(b, g, j, d)]);
        }
#undef KI
  free(dk), free(dv), free(dq);
  return 0;
}

static int job_run(void *arg, char *why, size_t n) {
  const job *J = arg;
  double *p = malloc(sizeof *p * (size_t)J->s.Sk);
  if (!p) {
    snprintf(why, n, "gpa-sim cudnn: no host memory for a row of scores");
    return 1;
  }
  int r = J->s.bwd ? run_bwd(J, p) : run_fwd(J, p);
  if (r) snprintf(why, n, "gpa-sim cudnn: no host memory for the backward's sums");
  free(p);
  return r;
}

cudnnStatus_t sim_sdpa_execute(const sdpa_spec *s, const sdesc *vp, int64_t workspace, CUstream stream, char *why,
                               size_t wn) {
  job *J = calloc(1, sizeof *J);
  if (!J) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  J->s = *s;
  const sdesc **fields[] = {&J->s.q,      &J->s.k,   &J->s.v,    &J->s.o,  &J->s.stats, &J->s.scale,
                            &J->s.shift,  &J->s.seq_q, &J->s.seq_kv, &J->s.neg, &J->s.dout, &J->s.dq,
                            &J->s.dk,     &J->s.dv,  &J->s.delta, &J->s.one, &J->s.dq_accum};
  for (int i = 0; i < 17; i++)
    if (*fields[i]) {
      J->t[i] = **fields[i];
      J->t[i].n_attrs = 0; /* the copy owns no attribute data */
      *fields[i] = &J->t[i];
    }
  T real_t[] = {s->q, s->k, s->v, s->o, s->stats, s->seq_q, s->seq_kv, s->dout, s->dq, s->dk, s->dv, s->delta,
                s->dq_accum};
  void **dst[] = {&J->q,  &J->k,  &J->v,  &J->o,  &J->stats, NULL,       &J->seq_kv,
                  &J->dout, &J->dq, &J->dk, &J->dv, &J->delta, &J->dq_accum};
  for (size_t i = 0; i < sizeof real_t / sizeof real_t[0]; i++) {
    if (!real_t[i]) continue;
    void *ptr = sd_find(vp, real_t[i]);
    if (!sd_covers(real_t[i], ptr, why, wn)) {
      free(J);
      return CUDNN_STATUS_BAD_PARAM;
    }
    if (dst[i]) *dst[i] = ptr;
  }
  const float *sc = sd_find(vp, s->scale);
  const int32_t *sh = sd_find(vp, s->shift);
  if (!sc || (s->shift && !sh) || (s->neg && !sd_find(vp, s->neg)) || (s->one && !sd_find(vp, s->one))) {
    snprintf(why, wn, "a by-value scalar is missing from the variant pack");
    free(J);
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!sd_workspace_ok(vp, workspace, why, wn)) {
    free(J);
    return CUDNN_STATUS_BAD_PARAM;
  }
  J->scale = *sc; /* by-value scalars are read at the call, as cuDNN does */
  J->shift = sh ? *sh : 0;
  if (gpa_sim__enqueue(stream, job_run, J, free) != CUDA_SUCCESS) {
    snprintf(why, wn, "the stream does not take work (sticky error or no context)");
    free(J);
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}
