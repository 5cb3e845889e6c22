/* Attention ops (host), flash style (kernels/host/attention.c).
 *   attention_fwd  in: q [B,S,H,D], k [B,Sk,Hkv,D], v [B,Sk,Hkv,D], lengths [B] (optional)
 *                  out: o [B,S,H,D], lse [B,H,S]
 *   attention_bwd  in: dout [B,S,H,D], q, k, v, o, lse (as the forward wrote them), lengths (optional)
 *                  out: dq [B,S,H,D], dk [B,Sk,Hkv,D], dv [B,Sk,Hkv,D]
 * dtypes: q, k, v (and dout) are f32, bf16 or f16, all alike; lengths i32;
 * lse f32; o, dq, dk, dv each f32 or the storage type of q (bf16/f16: half
 * the bytes, what cuDNN and the FlashAttention kernels write; the
 * backward's o input likewise). The host widens bf16/f16 inputs to f32
 * (exact), runs the f32 kernels and rounds 16-bit outputs once (to nearest
 * even): the reference of the CUDA tensor-core kernels.
 * attrs: scale (float; <= 0 or absent: 1/sqrt(D)), causal (int 0/1),
 * deterministic (int 0/1, default 1: the backward gives the same bits every
 * run; 0 allows cuDNN's faster non-deterministic backward engine and our
 * bf16/fp16 CUDA kernels' atomic dQ, ops/attention/cuda.c).
 * H must be a multiple of Hkv (MHA: Hkv = H, GQA, MQA: Hkv = 1); query head
 * h uses kv head h / (H/Hkv). 1 <= D <= 256.
 * Masking: key j is visible to query i of batch b iff j < lengths[b] (when
 * given; each value must lie in [0, Sk], checked when the op runs: ERANGE)
 * and, with causal=1, j <= i + Sk - S (aligned bottom-right: the last query
 * sees every key; when S > Sk the first S - Sk queries see none). A query
 * that sees no key gets o = 0 and lse = -inf, and zero gradients.
 * lse is the natural-log sum of exp(scale * q.k) over visible keys. The
 * host backward is deterministic (no atomics; fixed tile order). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/host/attention.h"
#include "kernels/host/bf16.h"
#include "kernels/host/f16.h"
#include "ops/attention/attention.h"
#include "ops/nn_util.h"

#define MAX_HEAD_DIM 256

typedef gpa__attn_params attn_params;

static const gpa_attr_spec attn_attrs[] = {
    {"scale", GPA_ATTR_FLOAT, 0, offsetof(attn_params, scale), 0, 0.0, 1, 0},
    {"causal", GPA_ATTR_INT, 0, offsetof(attn_params, causal), 0, 0.0, 0, 1},
    {"deterministic", GPA_ATTR_INT, 0, offsetof(attn_params, deterministic), 1, 0.0, 0, 1},
};

/* q: f32, bf16 or f16; k and v alike. */
static gpa_status check_qkv(const char *op, const gpa_tensor *q, const gpa_tensor *k, const gpa_tensor *v,
                            const gpa_tensor *lens, char *msg, size_t ms) {
  if (q->dtype != GPA_F32 && q->dtype != GPA_BF16 && q->dtype != GPA_F16) {
    snprintf(msg, ms, "%s: q has dtype %s, expected f32, bf16 or f16", op, gpa_dtype_name(q->dtype));
    return GPA_EDTYPE;
  }
  GPA__CHK(gpa__chk_rank(op, "q", q, 4, "([B,S,H,D])", msg, ms));
  GPA__CHK(gpa__chk_dtype(op, "k", k, q->dtype, 0, msg, ms));
  GPA__CHK(gpa__chk_rank(op, "k", k, 4, "([B,Sk,Hkv,D])", msg, ms));
  int64_t B = q->shape[0], H = q->shape[2], D = q->shape[3], Hkv = k->shape[2];
  if (D < 1 || D > MAX_HEAD_DIM) {
    snprintf(msg, ms, "%s: head dim D = %lld (q.shape[3]) is outside [1, %d]", op, (long long)D, MAX_HEAD_DIM);
    return GPA_ESHAPE;
  }
  if (H < 1 || Hkv < 1 || H % Hkv) {
    snprintf(msg, ms, "%s: k has %lld heads, not a divisor of q's %lld heads", op, (long long)Hkv, (long long)H);
    return GPA_ESHAPE;
  }
  if (k->shape[0] != B || k->shape[3] != D) {
    snprintf(msg, ms, "%s: k has shape [%lld,%lld,%lld,%lld], expected [%lld,Sk,Hkv,%lld] (B and D of q)", op,
             (long long)k->shape[0], (long long)k->shape[1], (long long)k->shape[2], (long long)k->shape[3],
             (long long)B, (long long)D);
    return GPA_ESHAPE;
  }
  if (q->dtype == GPA_F32) {
    GPA__CHK(gpa__chk_f32_like(op, "v", v, k, "k", msg, ms));
  } else {
    GPA__CHK(gpa__chk_dtype(op, "v", v, q->dtype, 0, msg, ms));
    GPA__CHK(gpa__chk_shape(op, "v", v, 4, k->shape, "the shape of k", msg, ms));
  }
  if (lens) {
    GPA__CHK(gpa__chk_dtype(op, "lengths", lens, GPA_I32, 0, msg, ms));
    GPA__CHK(gpa__chk_shape(op, "lengths", lens, 1, &B, "B of q", msg, ms));
  }
  return GPA_OK;
}

/* o, dq, dk, dv: the storage type of q when the caller gives that and it is
 * bf16/f16, else f32 (the expected dtype the caller's output is held to). */
static int out_dtype(const gpa_tensor *q, const gpa_tensor *given) {
  return q->dtype != GPA_F32 && given->dtype == q->dtype ? q->dtype : GPA_F32;
}

static gpa_status fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *q = &s->inputs[0];
  GPA__CHK(check_qkv("attention_fwd", q, &s->inputs[1], &s->inputs[2], s->n_inputs > 3 ? &s->inputs[3] : NULL, msg,
                     ms));
  int64_t lse[3] = {q->shape[0], q->shape[2], q->shape[1]};
  gpa__chk_set(&e[0], out_dtype(q, &s->outputs[0]), 4, q->shape);
  gpa__chk_set(&e[1], GPA_F32, 3, lse);
  return GPA_OK;
}

static gpa_status bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const char *op = "attention_bwd";
  const gpa_tensor *q = &s->inputs[1], *k = &s->inputs[2];
  GPA__CHK(check_qkv(op, q, k, &s->inputs[3], s->n_inputs > 6 ? &s->inputs[6] : NULL, msg, ms));
  GPA__CHK(gpa__chk_dtype(op, "dout", &s->inputs[0], q->dtype, 0, msg, ms));
  GPA__CHK(gpa__chk_shape(op, "dout", &s->inputs[0], 4, q->shape, "the shape of q", msg, ms));
  if (s->inputs[4].dtype != out_dtype(q, &s->inputs[4])) {
    snprintf(msg, ms, "%s: o has dtype %s, expected f32 or %s (q's)", op, gpa_dtype_name(s->inputs[4].dtype),
             gpa_dtype_name(q->dtype));
    return GPA_EDTYPE;
  }
  GPA__CHK(gpa__chk_shape(op, "o", &s->inputs[4], 4, q->shape, "the shape of q", msg, ms));
  int64_t lse[3] = {q->shape[0], q->shape[2], q->shape[1]};
  GPA__CHK(gpa__chk_dtype(op, "lse", &s->inputs[5], GPA_F32, 0, msg, ms));
  GPA__CHK(gpa__chk_shape(op, "lse", &s->inputs[5], 3, lse, "[B,H,S] of q", msg, ms));
  gpa__chk_set(&e[0], out_dtype(q, &s->outputs[0]), 4, q->shape);
  gpa__chk_set(&e[1], out_dtype(q, &s->outputs[1]), 4, k->shape);
  gpa__chk_set(&e[2], out_dtype(q, &s->outputs[2]), 4, k->shape);
  return GPA_OK;
}

/* Geometry from q and k; the lengths' values checked (they are data). */
static gpa_status exec_geom(const gpa_op_exec *x, const char *op, const gpa_tensor *q, const gpa_tensor *k,
                            const int32_t *lens, gpa__attn_geom *g) {
  const attn_params *p = x->params;
  g->B = q->shape[0];
  g->S = q->shape[1];
  g->H = q->shape[2];
  g->D = q->shape[3];
  g->Sk = k->shape[1];
  g->Hkv = k->shape[2];
  g->scale = p->scale > 0 ? (float)p->scale : (float)(1.0 / sqrt((double)g->D));
  g->causal = (int)p->causal;
  g->bwd_path = 0;
  if (lens)
    for (int64_t b = 0; b < g->B; b++)
      if (lens[b] < 0 || lens[b] > g->Sk) {
        snprintf(x->msg, x->msg_size, "%s: lengths[%lld] = %d is outside [0, Sk = %lld]", op, (long long)b,
                 (int)lens[b], (long long)g->Sk);
        return GPA_ERANGE;
      }
  return GPA_OK;
}


/* A bf16 or f16 tensor widened to an f32 copy (exact): the f32 kernels then
 * run on it, the reference the CUDA tensor-core kernels are compared with. */
static float *widen(const gpa_tensor *t, const void *p) {
  int64_t n = gpa__chk_numel(t);
  float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!f) return NULL;
  const uint16_t *u = p;
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == GPA_F16) {
      f[i] = gpa__f16_to_f32(u[i]);
    } else {
      uint32_t w = (uint32_t)u[i] << 16;
      memcpy(&f[i], &w, sizeof w);
    }
  }
  return f;
}

/* f32 views of inputs [0, n) of x: the inputs themselves, or widened
 * copies of the bf16/f16 ones (freed by unwiden). */
static gpa_status widen_inputs(const gpa_op_exec *x, int n, const float **f, float **wide) {
  for (int i = 0; i < n; i++) {
    f[i] = x->in[i];
    wide[i] = NULL;
    if (x->inputs[i].dtype == GPA_BF16 || x->inputs[i].dtype == GPA_F16) {
      f[i] = wide[i] = widen(&x->inputs[i], x->in[i]);
      if (!wide[i]) return GPA_ENOMEM;
    }
  }
  return GPA_OK;
}

static void unwiden(float **wide, int n) {
  for (int i = 0; i < n; i++) free(wide[i]);
}


/* An fp32 buffer for output i of x when it is 16-bit (the kernels write
 * fp32), else the output itself; NULL when out of memory. */
static float *out_f32(const gpa_op_exec *x, uint32_t i) {
  if (x->outputs[i].dtype == GPA_F32) return x->out[i];
  int64_t n = gpa__chk_numel(&x->outputs[i]);
  return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* Rounds the fp32 results into the 16-bit output i and frees them. */
static void out_done(const gpa_op_exec *x, uint32_t i, float *f, int ok) {
  if (!f || f == x->out[i]) return;
  int64_t n = gpa__chk_numel(&x->outputs[i]);
  uint16_t *u = x->out[i];
  for (int64_t j = 0; ok && j < n; j++) u[j] = x->outputs[i].dtype == GPA_F16 ? gpa__f32_to_f16(f[j]) : gpa__f32_to_bf16(f[j]);
  free(f);
}

static gpa_status fwd_host(const gpa_op_exec *x) {
  gpa__attn_geom g;
  const int32_t *lens = x->n_inputs > 3 ? x->in[3] : NULL;
  GPA__CHK(exec_geom(x, "attention_fwd", &x->inputs[0], &x->inputs[1], lens, &g));
  gpa__par par = gpa__ops_par(x->env);
  const float *f[3];
  float *wide[3] = {0};
  gpa_status st = widen_inputs(x, 3, f, wide);
  float *o = out_f32(x, 0);
  if (st == GPA_OK && !o) st = GPA_ENOMEM;
  if (st == GPA_OK) st = gpa__attention_fwd(&par, &g, f[0], f[1], f[2], lens, o, x->out[1]);
  out_done(x, 0, o, st == GPA_OK);
  unwiden(wide, 3);
  if (st != GPA_OK) snprintf(x->msg, x->msg_size, "attention_fwd: no memory for the tile workspace");
  return st;
}

static gpa_status bwd_host(const gpa_op_exec *x) {
  gpa__attn_geom g;
  const int32_t *lens = x->n_inputs > 6 ? x->in[6] : NULL;
  GPA__CHK(exec_geom(x, "attention_bwd", &x->inputs[1], &x->inputs[2], lens, &g));
  gpa__par par = gpa__ops_par(x->env);
  const float *f[5]; /* dout, q, k, v, o */
  float *wide[5] = {0}, *d[3];
  gpa_status st = widen_inputs(x, 5, f, wide);
  for (uint32_t i = 0; i < 3; i++) {
    d[i] = out_f32(x, i);
    if (!d[i]) st = GPA_ENOMEM;
  }
  if (st == GPA_OK) st = gpa__attention_bwd(&par, &g, f[0], f[1], f[2], f[3], f[4], x->in[5], lens, d[0], d[1], d[2]);
  for (uint32_t i = 0; i < 3; i++) out_done(x, i, d[i], st == GPA_OK);
  unwiden(wide, 5);
  if (st != GPA_OK) snprintf(x->msg, x->msg_size, "attention_bwd: no memory for the tile workspace");
  return st;
}

static const gpa_op_desc attention_ops[] = {
    {sizeof(gpa_op_desc), "attention_fwd", 3, 4, 2, attn_attrs, 3, sizeof(attn_params), fwd_shape, fwd_host,
     GPA__CUDA(gpa__attn_fwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
    {sizeof(gpa_op_desc), "attention_bwd", 6, 7, 3, attn_attrs, 3, sizeof(attn_params), bwd_shape, bwd_host,
     GPA__CUDA(gpa__attn_bwd_cu), gpa__nn_io_bytes, NULL, NULL, NULL, NULL, 0},
};
GPA__FAMILY(attention, attention_ops);

gpa_status gpa_attention_fwd(gpa_queue *q, const gpa_attention_fwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_attention_fwd: args is NULL");
  gpa_tensor in[4] = {a->q, a->k, a->v, a->lengths}, o[2] = {a->o, a->lse};
  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, a->scale > 0 ? a->scale : 0.0},
                    {"causal", GPA_ATTR_INT, a->causal != 0, 0.0}};
  gpa_op_call c = {"attention_fwd", in, a->lengths.buffer ? 4u : 3u, o, 2, at, 2};
  return gpa_submit(q, &c, out);
}

gpa_status gpa_attention_bwd(gpa_queue *q, const gpa_attention_bwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_attention_bwd: args is NULL");
  gpa_tensor in[7] = {a->dout, a->q, a->k, a->v, a->o, a->lse, a->lengths}, o[3] = {a->dq, a->dk, a->dv};
  /* a struct from before nondeterministic (a smaller size) has none */
  int nondet = (!a->size || a->size >= offsetof(gpa_attention_bwd_args, nondeterministic) + sizeof(int32_t)) &&
               a->nondeterministic;
  gpa_attr at[3] = {{"scale", GPA_ATTR_FLOAT, 0, a->scale > 0 ? a->scale : 0.0},
                    {"causal", GPA_ATTR_INT, a->causal != 0, 0.0},
                    {"deterministic", GPA_ATTR_INT, !nondet, 0.0}};
  gpa_op_call c = {"attention_bwd", in, a->lengths.buffer ? 7u : 6u, o, 3, at, 3};
  return gpa_submit(q, &c, out);
}
