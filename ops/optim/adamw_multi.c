/* adamw_multi: one AdamW step over up to 16 tensors in one message (and one
 * kernel launch on CUDA), as torch.optim.AdamW(fused=True) or
 * foreach=True does for a parameter group. A trainer's optimizer step is
 * otherwise one message per parameter tensor (the main job's: 28 a step).
 *   in:  param_k, grad_k, m_k, v_k for k = 0..count-1 (f32; each tensor's
 *        four of one shape; shapes differ between tensors)
 *   out: param_k', m_k', v_k' (3 per tensor; the same tensor as the input
 *        to update in place, as adamw)
 *   attrs: adamw's (lr, beta1, beta2, eps, weight_decay, step), shared,
 *        decay_mask (int, default -1 = all): bit k set = tensor k takes
 *        weight_decay, clear = none (PyTorch's no-decay parameter group,
 *        for norms and biases, in the same call), and bf16_copies (int,
 *        default 0): bit k set = tensor k also writes param_k' rounded to
 *        bf16 (as the cast op rounds) into one more output, bf16 of param's
 *        shape; those outputs follow the 3 * count, in tensor order. A
 *        mixed-precision trainer's bf16 weight copies come out of the update
 *        instead of a cast per weight (gpa-train-lm --bf16: 15 a step).
 * Each tensor's result is adamw's on it, bit for bit: the host runs adamw's
 * kernel per tensor; CUDA runs adamw's per-element code (elementwise.cu).
 * The tensors must not overlap each other's memory (they are updated in
 * parallel); bf16 storage stays with adamw. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/adamw_multi.h"
#include "kernels/host/bf16.h"
#include "kernels/host/optim.h"
#include "ops/optim/optim.h"

typedef gpa__adamw_multi_params mparams;

#define OFF(f) offsetof(mparams, f)
static const gpa_attr_spec multi_attrs[] = {
    GPA__ADAMW_ATTR_SPECS(mparams),
    {"decay_mask", GPA_ATTR_INT, 0, OFF(decay_mask), -1, 0.0, -1.0, (double)((1 << GPA_ADAMW_MULTI_MAX) - 1)},
    {"bf16_copies", GPA_ATTR_INT, 0, OFF(bf16_copies), 0, 0.0, 0.0, (double)((1 << GPA_ADAMW_MULTI_MAX) - 1)},
};

/* a tensor's roles: inputs 0..3, outputs 4..6 and its bf16 copy 7 (written) */
enum { ROLES = 8, COPY = 7 };
static const char *const role_name[ROLES] = {"param", "grad", "m", "v", "param'", "m'", "v'", "param_bf16"};

static uint32_t popcount16(int64_t mask) {
  uint32_t n = 0;
  for (int k = 0; k < GPA_ADAMW_MULTI_MAX; k++) n += (uint32_t)(mask >> k & 1);
  return n;
}

/* tensor k's bf16 copy among the outputs (bit k of bf16_copies set) */
static const gpa_tensor *copy_of(const gpa_op_sig *s, uint32_t count, int64_t copies, uint32_t k) {
  return &s->outputs[3 * count + popcount16(copies & ((1 << k) - 1))];
}

/* The tensors run in parallel on CUDA: a byte that one tensor writes and
 * another reads or writes would make the result depend on the schedule.
 * Reads may share (two tensors reading one gradient are fine, if odd).
 * Every view goes into a small hash table by buffer id and is compared
 * only with the earlier views of its buffer: a pairwise scan of 16 tensors'
 * 7 views each measured ~20 us a call, the cost of a message. */
enum { SPANS = ROLES * GPA_ADAMW_MULTI_MAX, SLOTS = 256 };
typedef struct span {
  gpa_buffer_id b;
  uint64_t lo, hi;
  uint8_t k, role;
  int16_t next; /* the previous view in this slot, -1: none */
} span;

static gpa_status check_apart(const gpa_op_sig *s, uint32_t count, int64_t copies, char *msg, size_t ms) {
  span sp[SPANS];
  int16_t head[SLOTS];
  memset(head, 0xff, sizeof head);
  int n = 0;
  for (uint32_t k = 0; k < count; k++)
    for (uint8_t r = 0; r < ROLES; r++) {
      if (r == COPY && !(copies >> k & 1)) continue;
      const gpa_tensor *t = r < 4 ? &s->inputs[4 * k + r] : r < COPY ? &s->outputs[3 * k + r - 4]
                                                                      : copy_of(s, count, copies, k);
      uint64_t bytes = (uint64_t)gpa__chk_numel(t) * (r == COPY ? 2u : 4u);
      if (!bytes) continue;
      uint32_t h = (uint32_t)(t->buffer * 0x9E3779B97F4A7C15ull >> 56);
      for (int e = head[h]; e >= 0; e = sp[e].next) {
        const span *o = &sp[e];
        /* a tensor's own param/param' and m/m' may be one memory (in place);
         * its bf16 copy, of another layout, may touch none of its memory */
        if (o->b != t->buffer || (o->k == k && r != COPY) || (o->role < 4 && r < 4)) continue;
        if (o->lo < t->offset + bytes && t->offset < o->hi) {
          int new_writes = r >= 4; /* name the writer first */
          snprintf(msg, ms, "adamw_multi: tensor %u's %s overlaps tensor %u's %s (the tensors are updated in "
                   "parallel: each needs memory of its own)", new_writes ? k : o->k, role_name[new_writes ? r : o->role],
                   new_writes ? o->k : k, role_name[new_writes ? o->role : r]);
          return GPA_EINVAL;
        }
      }
      sp[n] = (span){t->buffer, t->offset, t->offset + bytes, (uint8_t)k, r, head[h]};
      head[h] = (int16_t)n++;
    }
  return GPA_OK;
}

/* tensor k's four inputs f32 of param's shape (the fast path: names are
 * formatted only for a message, by tensor_why) */
static int tensor_ok(const gpa_op_sig *s, uint32_t k) {
  const gpa_tensor *p = &s->inputs[4 * k];
  for (int r = 0; r < 4; r++) {
    const gpa_tensor *t = p + r;
    if (t->dtype != GPA_F32 || t->rank != p->rank) return 0;
    for (uint32_t d = 0; d < p->rank; d++)
      if (t->shape[d] != p->shape[d]) return 0;
  }
  return 1;
}

static gpa_status tensor_why(const gpa_op_sig *s, uint32_t k, char *msg, size_t ms) {
  const gpa_tensor *p = &s->inputs[4 * k];
  char names[4][24];
  for (int r = 0; r < 4; r++) snprintf(names[r], sizeof names[r], "%s[%u]", role_name[r], k);
  if (p->dtype == GPA_BF16 || p[1].dtype == GPA_BF16) {
    snprintf(msg, ms, "adamw_multi: %s is bf16; adamw_multi takes f32 tensors (bf16 params or grads: adamw)",
             names[p->dtype == GPA_BF16 ? 0 : 1]);
    return GPA_EDTYPE;
  }
  GPA__CHK(gpa__chk_dtype("adamw_multi", names[0], p, GPA_F32, 0, msg, ms));
  for (int r = 1; r < 4; r++) GPA__CHK(gpa__chk_f32_like("adamw_multi", names[r], p + r, p, names[0], msg, ms));
  return GPA_OK;
}

static gpa_status multi_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const mparams *pa = s->params;
  const uint32_t count = s->n_inputs / 4;
  if (s->n_inputs % 4) {
    snprintf(msg, ms, "adamw_multi: inputs come in fours (param, grad, m, v per tensor), got %u", s->n_inputs);
    return GPA_EINVAL;
  }
  if (pa->decay_mask >= 0 && pa->decay_mask >> count) {
    snprintf(msg, ms, "adamw_multi: decay_mask 0x%" PRIx64 " names tensors past the call's %u", (uint64_t)pa->decay_mask,
             count);
    return GPA_EINVAL;
  }
  if (pa->bf16_copies >> count) {
    snprintf(msg, ms, "adamw_multi: bf16_copies 0x%" PRIx64 " names tensors past the call's %u",
             (uint64_t)pa->bf16_copies, count);
    return GPA_EINVAL;
  }
  const uint32_t n_copies = popcount16(pa->bf16_copies);
  if (n_copies && s->n_outputs != 3 * count + n_copies) {
    snprintf(msg, ms, "adamw_multi: %u tensors with bf16_copies 0x%" PRIx64 " take %u outputs (param', m', v' per "
             "tensor, then %u bf16 copies), got %u", count, (uint64_t)pa->bf16_copies, 3 * count + n_copies, n_copies,
             s->n_outputs);
    return GPA_EINVAL;
  }
  if (!n_copies && s->n_outputs != 3 * count) {
    snprintf(msg, ms, "adamw_multi: %u tensors take %u outputs (param', m', v' per tensor), got %u", count,
             3 * count, s->n_outputs);
    return GPA_EINVAL;
  }
  for (uint32_t k = 0; k < count; k++) {
    const gpa_tensor *p = &s->inputs[4 * k];
    if (!tensor_ok(s, k)) GPA__CHK(tensor_why(s, k, msg, ms));
    for (int o = 0; o < 3; o++) gpa__chk_set(&e[3 * k + o], GPA_F32, p->rank, p->shape);
    if (pa->bf16_copies >> k & 1) {
      const gpa_tensor *c = copy_of(s, count, pa->bf16_copies, k);
      if (c->dtype != GPA_BF16 || !gpa__chk_shape_is(c, p->rank, p->shape)) {
        char name[48];
        snprintf(name, sizeof name, "param_bf16[%u] (outputs[%u])", k, (unsigned)(c - s->outputs));
        GPA__CHK(gpa__chk_dtype("adamw_multi", name, c, GPA_BF16, 0, msg, ms));
        GPA__CHK(gpa__chk_shape("adamw_multi", name, c, p->rank, p->shape, "param's", msg, ms));
      }
      gpa__chk_set(&e[c - s->outputs], GPA_BF16, p->rank, p->shape);
    }
  }
  /* outputs of the wrong shape fail the runtime's comparison before any
   * kernel runs; overlap is judged on the outputs given */
  for (uint32_t k = 0; k < count; k++)
    for (int o = 0; o < 3; o++)
      if (gpa__chk_numel(&s->outputs[3 * k + o]) != gpa__chk_numel(&s->inputs[4 * k])) return GPA_OK;
  return check_apart(s, count, pa->bf16_copies, msg, ms);
}

static gpa_status multi_host(const gpa_op_exec *x) {
  const mparams *pa = x->params;
  gpa__par par = gpa__ops_par(x->env);
  const uint32_t count = x->n_inputs / 4;
  uint32_t copy = 3 * count;
  for (uint32_t k = 0; k < count; k++) {
    gpa__adamw_hp hp = {pa->lr, pa->beta1, pa->beta2, pa->eps, gpa__adamw_multi_wd(pa, k), pa->step};
    void *const *in = x->in + 4 * k, *const *out = x->out + 3 * k;
    const int64_t n = gpa__chk_numel(&x->inputs[4 * k]);
    gpa__adamw_f32(&par, out[0], out[1], out[2], in[0], in[1], in[2], in[3], n, &hp);
    /* the cast op's f32 -> bf16 loop (ops/cast/cast.c) over param': its bits */
    if (pa->bf16_copies >> k & 1) gpa__bf16_narrow(&par, x->out[copy++], out[0], n);
  }
  return GPA_OK;
}

static uint64_t multi_bytes(const gpa_op_sig *s) {
  const gpa__adamw_multi_params *pa = s->params;
  uint64_t n = 0, c = 0;
  for (uint32_t k = 0; k + 4 <= s->n_inputs; k += 4) {
    n += (uint64_t)gpa__chk_numel(&s->inputs[k]);
    if (pa && pa->bf16_copies >> (k / 4) & 1) c += (uint64_t)gpa__chk_numel(&s->inputs[k]);
  }
  return 28u * n + 2u * c;
}

static const gpa_op_desc multi_ops[] = {
    {.size = sizeof(gpa_op_desc), .name = "adamw_multi", .min_inputs = 4, .max_inputs = 4 * GPA_ADAMW_MULTI_MAX,
     .n_outputs = 3, .max_outputs = 4 * GPA_ADAMW_MULTI_MAX, .attrs = multi_attrs, .n_attrs = 8,
     .params_size = sizeof(mparams), .shape = multi_shape, .host = multi_host,
     .cuda = GPA__CUDA(gpa__adamw_multi_cu), .bytes_moved = multi_bytes},
};
GPA__FAMILY(optim_multi, multi_ops);
