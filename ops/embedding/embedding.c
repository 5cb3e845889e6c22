/* Embedding ops (host).
 *   embedding_fwd  in: ids [B,L] i32, table [V,D] f32         out: y [B,L,D] = table[ids]
 *   embedding_bwd  in: dy [B,L,D] f32, ids [B,L] i32          out: dtable [V,D] (V is taken
 *                  from the dtable the caller passes)          attr accumulate (int 0..1, default 0):
 *                  0: dtable = scatter-add of dy by id (rows no id names are zeroed);
 *                  1: the sums are added to dtable's prior contents (gradient accumulation;
 *                     rows no id names are left as they are).
 * An id outside [0, V) fails the op at execution with GPA_ERANGE and a message naming its
 * position: "embedding_fwd: ids[3,17] = 40000 out of range [0, 32000)" (the first such
 * position in row-major order). The backward is deterministic: ids are bucketed by value and
 * each vocabulary row is summed by one thread in position order (double accumulation).
 * bf16 storage (docs/ops.md): table may be bf16 (then y is bf16: a copy, exact); dy may be
 * bf16, and dtable stays f32 (fp32 sums of the widened dy, for the fp32 optimizers; a bf16
 * dtable would round sums of many rows and could not accumulate across steps). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/host/bf16.h"
#include "kernels/host/embedding.h"
#include "ops/embedding/embedding.h"

typedef gpa__emb_params emb_params;

static const gpa_attr_spec bwd_attrs[] = {
    {"accumulate", GPA_ATTR_INT, 0, offsetof(emb_params, accumulate), 0, 0.0, 0, 1},
};

static gpa_status check_ids(const char *op, const gpa_tensor *ids, char *msg, size_t ms) {
  GPA__CHK(gpa__chk_dtype(op, "ids", ids, GPA_I32, 0, msg, ms));
  return gpa__chk_rank(op, "ids", ids, 2, "([B,L])", msg, ms);
}

static gpa_status fwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *ids = &s->inputs[0], *tab = &s->inputs[1];
  GPA__CHK(check_ids("embedding_fwd", ids, msg, ms));
  GPA__CHK(gpa__chk_float("embedding_fwd", "table", tab, msg, ms));
  GPA__CHK(gpa__chk_rank("embedding_fwd", "table", tab, 2, "([V,D])", msg, ms));
  int64_t sh[3] = {ids->shape[0], ids->shape[1], tab->shape[1]};
  gpa__chk_set(e, tab->dtype, 3, sh);
  return GPA_OK;
}

static gpa_status bwd_shape(const gpa_op_sig *s, gpa_tensor *e, char *msg, size_t ms) {
  const gpa_tensor *dy = &s->inputs[0], *ids = &s->inputs[1];
  GPA__CHK(gpa__chk_float("embedding_bwd", "dy", dy, msg, ms));
  GPA__CHK(gpa__chk_rank("embedding_bwd", "dy", dy, 3, "([B,L,D])", msg, ms));
  GPA__CHK(check_ids("embedding_bwd", ids, msg, ms));
  GPA__CHK(gpa__chk_shape("embedding_bwd", "ids", ids, 2, dy->shape, "[B,L] of dy", msg, ms));
  if (dy->shape[0] * dy->shape[1] > INT32_MAX) {
    snprintf(msg, ms, "embedding_bwd: ids has %lld positions, more than %d", (long long)(dy->shape[0] * dy->shape[1]),
             INT32_MAX);
    return GPA_EOVERFLOW;
  }
  const gpa_tensor *dt = s->n_outputs ? &s->outputs[0] : NULL;
  if (!dt || dt->rank != 2) {
    snprintf(msg, ms, "embedding_bwd: dtable must be given as [V,D] (V = vocabulary size, D = %lld of dy)",
             (long long)dy->shape[2]);
    return GPA_ESHAPE;
  }
  int64_t sh[2] = {dt->shape[0], dy->shape[2]};
  gpa__chk_set(e, GPA_F32, 2, sh);
  return GPA_OK;
}

/* Reports the first out-of-range id; GPA_OK if none. */
static gpa_status range_error(const gpa_op_exec *x, const char *op, const gpa_tensor *ids, const int32_t *idv,
                              int64_t V) {
  int64_t L = ids->shape[1];
  int64_t bad = gpa__embedding_first_bad_id(idv, ids->shape[0] * L, V);
  if (bad < 0) return GPA_OK;
  snprintf(x->msg, x->msg_size, "%s: ids[%lld,%lld] = %d out of range [0, %lld)", op, (long long)(bad / L),
           (long long)(bad % L), idv[bad], (long long)V);
  return GPA_ERANGE;
}

static gpa_status fwd_host(const gpa_op_exec *x) {
  const gpa_tensor *ids = &x->inputs[0], *tab = &x->inputs[1];
  GPA__CHK(range_error(x, "embedding_fwd", ids, x->in[0], tab->shape[0]));
  gpa__par par = gpa__ops_par(x->env);
  gpa__embedding_fwd_f32(&par, x->out[0], x->in[0], x->in[1], ids->shape[0] * ids->shape[1], tab->shape[1]);
  return GPA_OK;
}

static gpa_status bwd_host(const gpa_op_exec *x) {
  const emb_params *p = x->params;
  const gpa_tensor *ids = &x->inputs[1], *dt = &x->outputs[0];
  int64_t n = ids->shape[0] * ids->shape[1], V = dt->shape[0], D = dt->shape[1];
  GPA__CHK(range_error(x, "embedding_bwd", ids, x->in[1], V));
  void *owned;
  void *scratch = gpa__ops_scratch(x->env, gpa__embedding_bwd_scratch(n, V), &owned);
  if (!scratch) {
    snprintf(x->msg, x->msg_size, "embedding_bwd: no scratch memory for V = %lld", (long long)V);
    return GPA_ENOMEM;
  }
  gpa__par par = gpa__ops_par(x->env);
  gpa__embedding_bwd_f32(&par, x->out[0], x->in[0], x->in[1], n, V, D, (int)p->accumulate, scratch);
  free(owned);
  return GPA_OK;
}

/* bf16 table: the rows are copied as they are (no fp32 copy of the table) */
static gpa_status fwd_host_any(const gpa_op_exec *x) {
  const gpa_tensor *ids = &x->inputs[0], *tab = &x->inputs[1];
  if (tab->dtype != GPA_BF16) return fwd_host(x);
  GPA__CHK(range_error(x, "embedding_fwd", ids, x->in[0], tab->shape[0]));
  gpa__par par = gpa__ops_par(x->env);
  gpa__bf16_gather_rows(&par, x->out[0], x->in[0], x->in[1], ids->shape[0] * ids->shape[1], tab->shape[1]);
  return GPA_OK;
}
GPA__BF16_HOST(bwd_host)

static uint64_t esize(const gpa_tensor *t) { return t->dtype == GPA_BF16 ? 2u : 4u; }
static uint64_t fwd_bytes(const gpa_op_sig *s) {
  uint64_t n = (uint64_t)gpa__chk_numel(&s->inputs[0]);
  return n * 4u + 2u * esize(&s->inputs[1]) * n * (uint64_t)s->inputs[1].shape[1];
}
static uint64_t bwd_bytes(const gpa_op_sig *s) {
  uint64_t n = (uint64_t)gpa__chk_numel(&s->inputs[1]);
  return n * 4u + esize(&s->inputs[0]) * (uint64_t)gpa__chk_numel(&s->inputs[0]) +
         (s->n_outputs ? 4u * (uint64_t)gpa__chk_numel(&s->outputs[0]) : 0u);
}

static const gpa_op_desc embedding_ops[] = {
    {.size = sizeof(gpa_op_desc), .name = "embedding_fwd", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
     .params_size = sizeof(emb_params),
     .shape = fwd_shape, .host = fwd_host_any, .cuda = GPA__CUDA(gpa__emb_fwd_cu), .bytes_moved = fwd_bytes},
    {.size = sizeof(gpa_op_desc), .name = "embedding_bwd", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
     .attrs = bwd_attrs, .n_attrs = 1,
     .params_size = sizeof(emb_params),
     .shape = bwd_shape, .host = bwd_host_any, .cuda = GPA__CUDA(gpa__emb_bwd_cu), .bytes_moved = bwd_bytes},
};
GPA__FAMILY(embedding, embedding_ops);

gpa_status gpa_embedding_fwd(gpa_queue *q, const gpa_embedding_fwd_args *args, gpa_handle **out) {
  return GPA__CALL("embedding_fwd", GPA__T(args->ids, args->table), 2, GPA__T(args->y), 1, NULL, 0);
}

gpa_status gpa_embedding_bwd(gpa_queue *q, const gpa_embedding_bwd_args *args, gpa_handle **out) {
  return GPA__CALL("embedding_bwd", GPA__T(args->dy, args->ids), 2, GPA__T(args->dtable), 1,
                   GPA__A(GPA__AI("accumulate", args->accumulate != 0)), 1);
}
