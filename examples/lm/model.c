/* The language model as a sequence of op messages on one queue.
 *
 *   x0 = embedding(ids)                                   embedding_fwd
 *   for each conv block (dilation 1, 2, 4, ...):
 *     u  = layernorm(x)                                   layernorm_fwd   [N,D]
 *     c  = causal dilated conv1d(u), channels last        conv1d_fwd (layout nlc) [B,L,D]
 *     x' = x + gelu(c)                                    gelu_fwd, add
 *   attention block:
 *     u = layernorm(x); q, k, v = u Wq^T, u Wk^T, u Wv^T  layernorm_fwd, linear_fwd x3
 *     o = causal attention(q, k, v)  (heads of D/H)       attention_fwd
 *     x' = x + o Wo^T + bo                                linear_fwd, add
 *   logits = layernorm(x) Wh^T + bh                       layernorm_fwd, linear_fwd
 *   loss = cross_entropy(logits, targets)                 cross_entropy_fwd
 *
 * conv1d reads and writes [B,L,D] itself (layout nlc, docs/ops.md): no
 * transpose around it. (Before, u went to [B,D,L] and c back by transpose
 * ops, and before those by embedding gathers: 16 launches a step with 4
 * blocks, 77 us of a 1733 us step on an H100.)
 *
 * The backward runs the chain in reverse with the ops' _bwd forms; the
 * residual stream's gradient lives in dx and each branch's gradient is added
 * into it (add, in place). The three projections' input gradients are summed
 * the same way. Every submit is checked; the first failure is kept in
 * m->err and later submits are skipped.
 *
 * Mixed precision (cfg.bf16, `gpa-train-lm --bf16`), as PyTorch's autocast
 * would run this model: the parameters, their gradients and the AdamW state
 * stay fp32 (the masters); the weights and biases of the GEMMs (conv1d, the
 * four projections, the head) have bf16 copies (p->w), cast from the masters
 * once at init and then written by the AdamW step itself, each rounded from
 * the updated master as a cast would round it (adamw_multi's bf16_copies:
 * no cast launch per weight a step; --cast-weights casts them at the start
 * of every forward instead, the same bits), and conv1d, linear and attention
 * take bf16 inputs and write bf16 outputs (fp32 accumulation inside), as do
 * the ops between them (GELU, the q/k/v gradient sums), their
 * backward forms likewise (dW and db f32, straight into the fp32 gradients). What stays fp32: the
 * residual stream and its gradient (each block adds a small update to it; in
 * bf16 the updates would round away), layernorm (its statistics and math in
 * fp32: autocast runs layer_norm in fp32), its parameters (tiny, and their
 * gradients are sums over every token), the embedding table (a lookup, no
 * GEMM; its gradient sums over every position) and the loss (cross-entropy
 * widens bf16 logits and sums in double). Where fp32 and bf16 meet, the op
 * at the boundary takes both dtypes (its mixed form, docs/ops.md), as a
 * fused kernel would, instead of a cast beside it (22 casts a step with 4
 * blocks before): layernorm_fwd writes its output in bf16; the residual
 * update adds the bf16 branch into the fp32 stream (add f32 + bf16 -> f32);
 * layernorm_bwd reads the bf16 gradient of its output and writes dx in fp32
 * (at the head also its bf16 copy, the Wo backward's input); gelu_bwd
 * reads the fp32 residual gradient beside its bf16 input. Each is the fp32
 * op's result rounded once, bit for bit what the op beside the cast gave,
 * except gelu_bwd, which no longer rounds dy to bf16 first. In fp32 the lp
 * tensors are the fp32 ones: the op sequence is the one above. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lm.h"

static void fail(lm_model *m, gpa_status st, const char *what) {
  if (m->err) return;
  m->err = st;
  snprintf(m->err_msg, sizeof m->err_msg, "%s: %s (%s)", what, gpa_status_name(st), gpa_last_error_message());
}

int lm_failed(const lm_model *m, const char *prog) {
  if (!m->err) return 0;
  fprintf(stderr, "%s: %s\n", prog, m->err_msg);
  return 1;
}

static gpa_tensor view(gpa_tensor t, uint32_t rank, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t d[4] = {d0, d1, d2, d3};
  t.rank = rank;
  memset(t.shape, 0, sizeof t.shape);
  for (uint32_t i = 0; i < rank; i++) t.shape[i] = d[i];
  return t;
}

static gpa_tensor tensor(lm_model *m, const char *label, int dtype, uint32_t rank, int64_t d0, int64_t d1,
                         int64_t d2) {
  gpa_tensor t;
  memset(&t, 0, sizeof t);
  t = view(t, rank, d0, d1, d2, 0);
  t.dtype = dtype;
  int64_t n = gpa_tensor_numel(&t);
  if (m->err || n <= 0 || m->n_bufs == LM_MAX_BUFS) {
    if (!m->err) fail(m, GPA_EINVAL, label);
    return t;
  }
  gpa_status st = gpa_buffer_acquire(m->a, label, (uint64_t)n * gpa_dtype_size(dtype), &t.buffer);
  if (st) fail(m, st, label);
  else m->bufs[m->n_bufs++] = t.buffer;
  return t;
}

static void op(lm_model *m, const char *name, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
               uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs) {
  if (m->err) return;
  gpa_op_call c = {name, in, n_in, out, n_out, attrs, n_attrs};
  gpa_status st = gpa_submit(m->q, &c, NULL);
  if (st) fail(m, st, name);
}

static void upload(lm_model *m, const gpa_tensor *t, const void *src, uint64_t version) {
  if (m->err) return;
  uint64_t bytes = (uint64_t)gpa_tensor_numel(t) * gpa_dtype_size(t->dtype);
  gpa_status st = gpa_upload(m->q, t, src, bytes, version, NULL);
  if (st) fail(m, st, "gpa_upload");
}

/* The dtype of activations that meet the GEMMs. */
static int act(const lm_model *m) { return m->cfg.bf16 ? GPA_BF16 : GPA_F32; }

/* dst = src in dst's dtype; nothing when they are one tensor (fp32 runs). */
static void cast(lm_model *m, gpa_tensor src, gpa_tensor dst) {
  if (src.dtype == dst.dtype && src.buffer == dst.buffer && src.offset == dst.offset) return;
  op(m, "cast", &src, 1, &dst, 1, NULL, 0);
  m->casts++;
}

/* A parameter of the given shape, initialised N(0, std^2) (std 0: `fill`).
 * gemm: read by conv1d or linear (a bf16 copy under cfg.bf16). */
static lm_param *param(lm_model *m, lm_rng *rng, const char *name, uint32_t rank, int64_t d0, int64_t d1,
                       int64_t d2, double std, float fill, int decay, int gemm) {
  if (m->n_params == LM_MAX_PARAMS) {
    fail(m, GPA_EINVAL, "too many parameters");
    return &m->params[0];
  }
  lm_param *p = &m->params[m->n_params++];
  snprintf(p->name, sizeof p->name, "%s", name);
  char label[64];
  snprintf(label, sizeof label, "lm.%s", name);
  p->p = tensor(m, label, GPA_F32, rank, d0, d1, d2);
  p->w = p->p;
  if (gemm && m->cfg.bf16) {
    snprintf(label, sizeof label, "lm.%s.bf16", name);
    p->w = tensor(m, label, GPA_BF16, rank, d0, d1, d2);
  }
  p->g = view(p->p, rank, d0, d1, d2, 0); /* its buffer: grads_alloc */
  snprintf(label, sizeof label, "lm.%s.adam_m", name);
  p->m = tensor(m, label, GPA_F32, rank, d0, d1, d2);
  snprintf(label, sizeof label, "lm.%s.adam_v", name);
  p->v = tensor(m, label, GPA_F32, rank, d0, d1, d2);
  p->n = gpa_tensor_numel(&p->p);
  p->decay = decay;
  m->n_weights += p->n;
  p->host = malloc(sizeof(float) * (size_t)p->n);
  float *zero = calloc((size_t)p->n, sizeof(float));
  if (!p->host || !zero) {
    free(zero);
    fail(m, GPA_ENOMEM, name);
    return p;
  }
  for (int64_t i = 0; i < p->n; i++) p->host[i] = std > 0 ? (float)(std * lm_rng_normal(rng)) : fill;
  upload(m, &p->p, p->host, 0);
  upload(m, &p->m, zero, 0);
  upload(m, &p->v, zero, 0);
  free(zero);
  return p;
}

/* Under bf16 (not cast_weights) the optimizer keeps the bf16 copies: they
 * start as casts of the initial masters. */
static int optimizer_copies(const lm_model *m) { return m->cfg.bf16 && !m->cfg.cast_weights; }

/* One buffer for every gradient, the last parameter first, each padded to
 * 16 floats (64 bytes: every view starts aligned). */
static void grads_alloc(lm_model *m) {
  m->n_grads = 0;
  for (int i = m->n_params - 1; i >= 0; i--) {
    m->params[i].g_off = m->n_grads;
    m->n_grads += (m->params[i].n + 15) / 16 * 16;
  }
  m->grads = tensor(m, "lm.grads", GPA_F32, 1, m->n_grads, 0, 0);
  for (int i = 0; i < m->n_params; i++) {
    gpa_tensor *g = &m->params[i].g;
    g->buffer = m->grads.buffer;
    g->offset = (uint64_t)m->params[i].g_off * sizeof(float);
  }
}

/* Marks the gradients of up to three parameters written (their op was
 * submitted) and tells the hook. */
static void grads_ready(lm_model *m, lm_param *a, lm_param *b, lm_param *c) {
  lm_param *ps[3] = {a, b, c};
  for (int i = 0; i < 3; i++)
    if (ps[i]) ps[i]->ready = 1;
  if (m->on_grads && !m->err) m->on_grads(m, m->on_grads_user);
}

int lm_model_init(lm_model *m, gpa_actor *a, const lm_config *cfg, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  m->a = a;
  m->q = gpa_actor_default_queue(a);
  const int64_t B = cfg->batch, L = cfg->ctx, D = cfg->dim, V = cfg->vocab, H = cfg->heads, K = cfg->kernel;
  const int64_t N = B * L, ND = N * D;
  if (cfg->blocks < 0 || cfg->blocks > LM_MAX_BLOCKS || H < 1 || D % H || K < 1 || ND > INT32_MAX) {
    fail(m, GPA_EINVAL, "lm_model_init: bad configuration");
    return -1;
  }
  lm_rng rng = {seed};
  /* Scaled init: residual branches' output layers get 1/sqrt(2 * depth). */
  double branch = 1.0 / sqrt(2.0 * (cfg->blocks + 1));
  m->emb = param(m, &rng, "emb", 2, V, D, 0, 1.0, 0, 0, 0);
  char name[40];
  for (int i = 0; i < cfg->blocks; i++) {
    lm_conv_block *k = &m->blk[i];
    snprintf(name, sizeof name, "conv%d.ln_g", i);
    k->ln_g = param(m, &rng, name, 1, D, 0, 0, 0, 1.0f, 0, 0);
    snprintf(name, sizeof name, "conv%d.ln_b", i);
    k->ln_b = param(m, &rng, name, 1, D, 0, 0, 0, 0.0f, 0, 0);
    snprintf(name, sizeof name, "conv%d.W", i);
    k->W = param(m, &rng, name, 3, D, D, K, branch * sqrt(2.0 / (double)(D * K)), 0, 1, 1);
    snprintf(name, sizeof name, "conv%d.b", i);
    k->b = param(m, &rng, name, 1, D, 0, 0, 0, 0.0f, 0, 1);
    k->dilation = 1 << i;
  }
  double sd = 1.0 / sqrt((double)D);
  m->a_ln_g = param(m, &rng, "attn.ln_g", 1, D, 0, 0, 0, 1.0f, 0, 0);
  m->a_ln_b = param(m, &rng, "attn.ln_b", 1, D, 0, 0, 0, 0.0f, 0, 0);
  m->Wq = param(m, &rng, "attn.Wq", 2, D, D, 0, sd, 0, 1, 1);
  m->Wk = param(m, &rng, "attn.Wk", 2, D, D, 0, sd, 0, 1, 1);
  m->Wv = param(m, &rng, "attn.Wv", 2, D, D, 0, sd, 0, 1, 1);
  m->Wo = param(m, &rng, "attn.Wo", 2, D, D, 0, sd * branch, 0, 1, 1);
  m->bo = param(m, &rng, "attn.bo", 1, D, 0, 0, 0, 0.0f, 0, 1);
  m->f_ln_g = param(m, &rng, "head.ln_g", 1, D, 0, 0, 0, 1.0f, 0, 0);
  m->f_ln_b = param(m, &rng, "head.ln_b", 1, D, 0, 0, 0, 0.0f, 0, 0);
  m->Wh = param(m, &rng, "head.W", 2, V, D, 0, sd, 0, 1, 1);
  m->bh = param(m, &rng, "head.b", 1, V, 0, 0, 0, 0.0f, 0, 1);
  grads_alloc(m);
  if (optimizer_copies(m))
    for (int i = 0; i < m->n_params; i++) cast(m, m->params[i].p, m->params[i].w);

  m->ids = tensor(m, "lm.in.ids", GPA_I32, 2, B, L, 0);
  m->targets = tensor(m, "lm.in.targets", GPA_I32, 1, N, 0, 0);

  char label[64];
  for (int i = 0; i <= cfg->blocks; i++) {
    snprintf(label, sizeof label, "lm.act.x%d", i);
    gpa_tensor x = tensor(m, label, GPA_F32, 3, B, L, D);
    if (i < cfg->blocks) m->blk[i].x = x;
    else m->xa = x;
  }
  for (int i = 0; i < cfg->blocks; i++) {
    lm_conv_block *k = &m->blk[i];
    snprintf(label, sizeof label, "lm.act.conv%d.mean", i);
    k->mean = tensor(m, label, GPA_F32, 1, N, 0, 0);
    snprintf(label, sizeof label, "lm.act.conv%d.rstd", i);
    k->rstd = tensor(m, label, GPA_F32, 1, N, 0, 0);
    snprintf(label, sizeof label, "lm.act.conv%d.u", i);
    k->u = tensor(m, label, act(m), 3, B, L, D); /* bf16: layernorm's mixed form writes it */
    snprintf(label, sizeof label, "lm.act.conv%d.c", i);
    k->c = tensor(m, label, act(m), 3, B, L, D);
  }
  m->a_mean = tensor(m, "lm.act.attn.mean", GPA_F32, 1, N, 0, 0);
  m->a_rstd = tensor(m, "lm.act.attn.rstd", GPA_F32, 1, N, 0, 0);
  if (!cfg->bf16) m->ua = tensor(m, "lm.act.attn.u", GPA_F32, 3, B, L, D);
  m->q4 = view(tensor(m, "lm.act.attn.q", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->k4 = view(tensor(m, "lm.act.attn.k", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->v4 = view(tensor(m, "lm.act.attn.v", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->o4 = view(tensor(m, "lm.act.attn.o", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->lse = tensor(m, "lm.act.attn.lse", GPA_F32, 3, B, H, L);
  m->xb = tensor(m, "lm.act.xb", GPA_F32, 3, B, L, D);
  m->f_mean = tensor(m, "lm.act.head.mean", GPA_F32, 1, N, 0, 0);
  m->f_rstd = tensor(m, "lm.act.head.rstd", GPA_F32, 1, N, 0, 0);
  if (!cfg->bf16) m->uf = tensor(m, "lm.act.head.u", GPA_F32, 3, B, L, D);
  m->logits = tensor(m, "lm.act.logits", act(m), 2, N, V, 0);
  m->loss = tensor(m, "lm.act.loss", GPA_F32, 0, 0, 0, 0);

  m->dlogits = tensor(m, "lm.grad.logits", act(m), 2, N, V, 0);
  m->dx = tensor(m, "lm.grad.x", GPA_F32, 3, B, L, D);
  if (!cfg->bf16) {
    m->d1 = tensor(m, "lm.grad.d1", GPA_F32, 3, B, L, D);
    m->d2 = tensor(m, "lm.grad.d2", GPA_F32, 3, B, L, D);
  }
  m->d3 = tensor(m, "lm.grad.d3", GPA_F32, 3, B, L, D);
  m->dq4 = view(tensor(m, "lm.grad.q", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->dk4 = view(tensor(m, "lm.grad.k", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->dv4 = view(tensor(m, "lm.grad.v", act(m), 3, B, L, D), 4, B, L, H, D / H);
  m->do4 = view(tensor(m, "lm.grad.o", act(m), 3, B, L, D), 4, B, L, H, D / H);
  if (!cfg->bf16) m->tmp = tensor(m, "lm.tmp.bld", GPA_F32, 3, B, L, D);
  if (cfg->bf16) { /* no fp32 twins: the ops' mixed forms read and write these */
    m->ua_lp = tensor(m, "lm.act.attn.u.bf16", GPA_BF16, 3, B, L, D);
    m->uf_lp = tensor(m, "lm.act.head.u.bf16", GPA_BF16, 3, B, L, D);
    m->tlp = tensor(m, "lm.tmp.bld.bf16", GPA_BF16, 3, B, L, D);
    m->d1lp = tensor(m, "lm.grad.d1.bf16", GPA_BF16, 3, B, L, D);
    m->d2lp = tensor(m, "lm.grad.d2.bf16", GPA_BF16, 3, B, L, D);
    m->dxlp = tensor(m, "lm.grad.x.bf16", GPA_BF16, 3, B, L, D);
  } else { /* one tensor each: cast() submits nothing */
    m->ua_lp = m->ua, m->uf_lp = m->uf, m->tlp = m->tmp;
    m->d1lp = m->d1, m->d2lp = m->d2, m->dxlp = m->dx;
  }
  return m->err ? -1 : 0;
}

void lm_model_free(lm_model *m) {
  for (int i = 0; i < m->n_bufs; i++) gpa_buffer_release(m->a, m->bufs[i]);
  for (int i = 0; i < m->n_params; i++) free(m->params[i].host);
  m->n_bufs = m->n_params = 0;
}

void lm_upload_batch(lm_model *m, const int32_t *ids, const int32_t *targets) {
  upload(m, &m->ids, ids, 0);
  upload(m, &m->targets, targets, 0);
}

/* ---- shapes of the same buffers ------------------------------------------- */

static gpa_tensor rows(const lm_model *m, gpa_tensor t) { /* [N, D] */
  return view(t, 2, (int64_t)m->cfg.batch * m->cfg.ctx, m->cfg.dim, 0, 0);
}
static gpa_tensor flat3(const lm_model *m, gpa_tensor t) { /* [B, L, D] */
  return view(t, 3, m->cfg.batch, m->cfg.ctx, m->cfg.dim, 0);
}

static void layernorm(lm_model *m, gpa_tensor x, lm_param *g, lm_param *b, gpa_tensor y, gpa_tensor mean,
                      gpa_tensor rstd) {
  gpa_tensor in[3] = {rows(m, x), g->p, b->p}, out[3] = {rows(m, y), mean, rstd};
  op(m, "layernorm_fwd", in, 3, out, 3, NULL, 0);
}

/* dx_lp (nullable): dx's bf16 copy too (layernorm_bwd's dx_bf16) */
static void layernorm_bwd(lm_model *m, gpa_tensor x, gpa_tensor dy, lm_param *g, lm_param *b, gpa_tensor mean,
                          gpa_tensor rstd, gpa_tensor dx, const gpa_tensor *dx_lp) {
  gpa_tensor in[5] = {rows(m, x), rows(m, dy), g->p, mean, rstd};
  gpa_tensor out[4] = {rows(m, dx), g->g, b->g, dx_lp ? rows(m, *dx_lp) : dx};
  op(m, "layernorm_bwd", in, 5, out, dx_lp ? 4 : 3, NULL, 0);
}

static void add_into(lm_model *m, gpa_tensor acc, gpa_tensor t) { /* acc += t */
  gpa_tensor in[2] = {flat3(m, acc), flat3(m, t)}, out = flat3(m, acc);
  op(m, "add", in, 2, &out, 1, NULL, 0);
}

/* u [B,L,D] -> c [B,L,D]: channels last (layout nlc), as the rows around it */
static void conv_geometry(const lm_conv_block *k, gpa_attr at[3]) {
  at[0] = (gpa_attr){"causal", GPA_ATTR_INT, 1, 0};
  at[1] = (gpa_attr){"dilation", GPA_ATTR_INT, k->dilation, 0};
  at[2] = (gpa_attr){"layout", GPA_ATTR_INT, GPA_CONV1D_NLC, 0};
}

void lm_forward(lm_model *m) {
  const lm_config *c = &m->cfg;
  gpa_tensor x0 = c->blocks ? m->blk[0].x : m->xa;
  if (!optimizer_copies(m)) /* bf16 copies of the masters (none in fp32: w is p) */
    for (int i = 0; i < m->n_params; i++) cast(m, m->params[i].p, m->params[i].w);
  gpa_tensor ein[2] = {m->ids, m->emb->p};
  op(m, "embedding_fwd", ein, 2, &x0, 1, NULL, 0);
  for (int i = 0; i < c->blocks; i++) {
    lm_conv_block *k = &m->blk[i];
    gpa_tensor next = i + 1 < c->blocks ? m->blk[i + 1].x : m->xa;
    layernorm(m, k->x, k->ln_g, k->ln_b, k->u, k->mean, k->rstd); /* bf16: layernorm's mixed form */
    gpa_attr at[3];
    conv_geometry(k, at);
    gpa_tensor cin[3] = {k->u, k->W->w, k->b->w};
    op(m, "conv1d_fwd", cin, 3, &k->c, 1, at, 3);
    op(m, "gelu_fwd", &k->c, 1, &m->tlp, 1, NULL, 0);
    gpa_tensor ain[2] = {k->x, m->tlp}; /* bf16: add's mixed form (f32 + bf16 -> f32) */
    op(m, "add", ain, 2, &next, 1, NULL, 0);
  }
  /* attention block */
  layernorm(m, m->xa, m->a_ln_g, m->a_ln_b, m->ua_lp, m->a_mean, m->a_rstd);
  lm_param *W[3] = {m->Wq, m->Wk, m->Wv};
  gpa_tensor qkv[3] = {m->q4, m->k4, m->v4};
  for (int j = 0; j < 3; j++) {
    gpa_tensor in[2] = {m->ua_lp, W[j]->w}, out = flat3(m, qkv[j]);
    op(m, "linear_fwd", in, 2, &out, 1, NULL, 0);
  }
  gpa_attr causal = {"causal", GPA_ATTR_INT, 1, 0};
  gpa_tensor ain[3] = {m->q4, m->k4, m->v4}, aout[2] = {m->o4, m->lse};
  op(m, "attention_fwd", ain, 3, aout, 2, &causal, 1);
  gpa_tensor pin[3] = {flat3(m, m->o4), m->Wo->w, m->bo->w};
  op(m, "linear_fwd", pin, 3, &m->tlp, 1, NULL, 0);
  gpa_tensor rin[2] = {m->xa, m->tlp};
  op(m, "add", rin, 2, &m->xb, 1, NULL, 0);
  /* head */
  layernorm(m, m->xb, m->f_ln_g, m->f_ln_b, m->uf_lp, m->f_mean, m->f_rstd);
  gpa_tensor hin[3] = {rows(m, m->uf_lp), m->Wh->w, m->bh->w};
  op(m, "linear_fwd", hin, 3, &m->logits, 1, NULL, 0);
  gpa_tensor lin[2] = {m->logits, m->targets};
  op(m, "cross_entropy_fwd", lin, 2, &m->loss, 1, NULL, 0);
}

void lm_backward(lm_model *m) {
  const lm_config *c = &m->cfg;
  for (int i = 0; i < m->n_params; i++) m->params[i].ready = 0;
  gpa_tensor lin[2] = {m->logits, m->targets};
  op(m, "cross_entropy_bwd", lin, 2, &m->dlogits, 1, NULL, 0);
  /* head: dlogits -> d(uf) -> dx (gradient of xb) */
  gpa_tensor hin[3] = {m->dlogits, rows(m, m->uf_lp), m->Wh->w}, hout[3] = {rows(m, m->d1lp), m->Wh->g, m->bh->g};
  op(m, "linear_bwd", hin, 3, hout, 3, NULL, 0);
  grads_ready(m, m->Wh, m->bh, NULL);
  /* bf16: layernorm_bwd's mixed form (dy bf16, dx f32) also writes dx's
   * bf16 copy, the Wo backward's input */
  layernorm_bwd(m, m->xb, m->d1lp, m->f_ln_g, m->f_ln_b, m->f_mean, m->f_rstd, m->dx, c->bf16 ? &m->dxlp : NULL);
  grads_ready(m, m->f_ln_g, m->f_ln_b, NULL);
  /* attention block: xb = xa + (o Wo^T + bo) */
  gpa_tensor pin[3] = {m->dxlp, flat3(m, m->o4), m->Wo->w}, pout[3] = {flat3(m, m->do4), m->Wo->g, m->bo->g};
  op(m, "linear_bwd", pin, 3, pout, 3, NULL, 0);
  grads_ready(m, m->Wo, m->bo, NULL);
  gpa_attr causal = {"causal", GPA_ATTR_INT, 1, 0};
  gpa_tensor ain[6] = {m->do4, m->q4, m->k4, m->v4, m->o4, m->lse}, aout[3] = {m->dq4, m->dk4, m->dv4};
  op(m, "attention_bwd", ain, 6, aout, 3, &causal, 1);
  lm_param *W[3] = {m->Wq, m->Wk, m->Wv};
  gpa_tensor dqkv[3] = {m->dq4, m->dk4, m->dv4}, du[3] = {m->d1lp, m->d2lp, m->d2lp};
  for (int j = 0; j < 3; j++) {
    gpa_tensor in[3] = {flat3(m, dqkv[j]), m->ua_lp, W[j]->w}, out[2] = {du[j], W[j]->g};
    op(m, "linear_bwd_nobias", in, 3, out, 2, NULL, 0);
    grads_ready(m, W[j], NULL, NULL);
    if (j) add_into(m, m->d1lp, m->d2lp);
  }
  layernorm_bwd(m, m->xa, m->d1lp, m->a_ln_g, m->a_ln_b, m->a_mean, m->a_rstd, m->d3, NULL);
  grads_ready(m, m->a_ln_g, m->a_ln_b, NULL);
  add_into(m, m->dx, m->d3); /* dx: gradient of xa */
  /* conv blocks, last first: x' = x + gelu(c) */
  for (int i = c->blocks - 1; i >= 0; i--) {
    lm_conv_block *k = &m->blk[i];
    gpa_tensor gin[2] = {k->c, m->dx}; /* bf16: gelu_bwd's mixed form (dy f32) */
    op(m, "gelu_bwd", gin, 2, &m->d1lp, 1, NULL, 0); /* d1 = dc */
    gpa_attr at[3];
    conv_geometry(k, at);
    gpa_tensor cin[3] = {m->d1lp, k->u, k->W->w};
    gpa_tensor cout[3] = {m->d2lp, k->W->g, k->b->g}; /* d2 = du */
    op(m, "conv1d_bwd", cin, 3, cout, 3, at, 3);
    grads_ready(m, k->W, k->b, NULL);
    layernorm_bwd(m, k->x, m->d2lp, k->ln_g, k->ln_b, k->mean, k->rstd, m->d3, NULL);
    grads_ready(m, k->ln_g, k->ln_b, NULL);
    add_into(m, m->dx, m->d3); /* dx: gradient of the block's input */
  }
  gpa_tensor ein[2] = {m->dx, m->ids};
  op(m, "embedding_bwd", ein, 2, &m->emb->g, 1, NULL, 0);
  grads_ready(m, m->emb, NULL, NULL);
}

void lm_adamw(lm_model *m, double lr, double weight_decay, int step) {
  lm_adamw_range(m, m->q, 0, m->n_params - 1, lr, weight_decay, step);
}

/* adamw_multi over up to 16 parameters a message (its limit: 64 inputs,
 * four per tensor), matrices decayed through decay_mask: the main job's 28
 * tensors in 2 messages (one adamw message each before; the same bits).
 * Under bf16 the GEMM weights' bf16 copies are outputs too (bf16_copies,
 * after the 3 per tensor): the step writes them as a cast of the updated
 * master would, instead of 15 casts at the next forward. */
enum { LM_ADAMW_GROUP = 16 };

void lm_adamw_range(lm_model *m, gpa_queue *q, int lo, int hi, double lr, double weight_decay, int step) {
  for (int i0 = lo; i0 <= hi && !m->err; i0 += LM_ADAMW_GROUP) {
    int n = hi - i0 + 1 < LM_ADAMW_GROUP ? hi - i0 + 1 : LM_ADAMW_GROUP;
    gpa_tensor in[4 * LM_ADAMW_GROUP], out[4 * LM_ADAMW_GROUP];
    int64_t mask = 0, copies = 0;
    uint32_t n_out = 3 * (uint32_t)n;
    for (int k = 0; k < n; k++) {
      const lm_param *p = &m->params[i0 + k];
      in[4 * k] = p->p, in[4 * k + 1] = p->g, in[4 * k + 2] = p->m, in[4 * k + 3] = p->v;
      out[3 * k] = p->p, out[3 * k + 1] = p->m, out[3 * k + 2] = p->v;
      mask |= (int64_t)p->decay << k;
    }
    for (int k = 0; k < n && optimizer_copies(m); k++) {
      const lm_param *p = &m->params[i0 + k];
      if (p->w.buffer == p->p.buffer) continue; /* no bf16 copy */
      out[n_out++] = p->w;
      copies |= (int64_t)1 << k;
    }
    gpa_attr hp[5] = {{"lr", GPA_ATTR_FLOAT, 0, lr},
                      {"step", GPA_ATTR_INT, step, 0},
                      {"weight_decay", GPA_ATTR_FLOAT, 0, weight_decay},
                      {"decay_mask", GPA_ATTR_INT, mask, 0},
                      {"bf16_copies", GPA_ATTR_INT, copies, 0}};
    gpa_op_call c = {"adamw_multi", in, 4 * (uint32_t)n, out, n_out, hp, copies ? 5 : 4};
    gpa_status st = gpa_submit(q, &c, NULL);
    if (st) fail(m, st, "adamw_multi");
  }
}
