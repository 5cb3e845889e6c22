/* Typed calls for the basic op library: elementwise, GELU, LayerNorm,
 * embedding, metrics and optimizers (docs/ops.md has the semantics).
 *
 * Each call fills a gpa_op_call from its argument struct and goes through
 * gpa_submit: the same validation and the same errors but ENOTFOUND (the name
 * is fixed): Errors: EINVAL, ESHAPE, EDTYPE, ERANGE, EOVERFLOW, ESTALE,
 * ECLOSED, ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. The message names the
 * offending argument; the same ordering within the queue.
 * Errors found while the op runs (an id or target out of range: ERANGE)
 * complete the handle with that status and message.
 *
 * Threads: any thread may call these, as gpa_submit (not from inside an op
 * implementation). The argument struct is read during the call only.
 * out may be NULL: the message is then tracked by the batch only.
 *
 * Argument structs: `size` = sizeof the struct, or 0. Fields marked
 * "0 = default" take the default when zero; every other field is used as
 * given (a zero lr is a zero learning rate). All tensors are f32 except ids,
 * targets (i32) and masks (u8 or i32). */
#ifndef GPUACTOR_OPS_BASIC_H
#define GPUACTOR_OPS_BASIC_H
#include <stdint.h>

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* ---- elementwise ---------------------------------------------------------- */

/* y = a + b (same shapes). Op "add". */
typedef struct gpa_add_args {
  uint32_t size;
  gpa_tensor a, b, y;
} gpa_add_args;
gpa_status gpa_add(gpa_queue *q, const gpa_add_args *args, gpa_handle **out);

/* y = alpha * x. Op "scale". */
typedef struct gpa_scale_args {
  uint32_t size;
  gpa_tensor x, y;
  double alpha;
} gpa_scale_args;
gpa_status gpa_scale(gpa_queue *q, const gpa_scale_args *args, gpa_handle **out);

/* y = alpha * x + y0; pass y0 == y to update in place. Op "axpy". */
typedef struct gpa_axpy_args {
  uint32_t size;
  gpa_tensor x, y0, y;
  double alpha;
} gpa_axpy_args;
gpa_status gpa_axpy(gpa_queue *q, const gpa_axpy_args *args, gpa_handle **out);

/* y = x where mask != 0, else 0; x [B,L,D] or [B,L], mask [B,L]. Op "mask_zero". */
typedef struct gpa_mask_zero_args {
  uint32_t size;
  gpa_tensor x, mask, y;
} gpa_mask_zero_args;
gpa_status gpa_mask_zero(gpa_queue *q, const gpa_mask_zero_args *args, gpa_handle **out);

/* y[B,D] = mean of x[B,L,D] over the l with mask[b,l] != 0 (0 when none).
 * Op "masked_mean_fwd". */
typedef struct gpa_masked_mean_fwd_args {
  uint32_t size;
  gpa_tensor x, mask, y;
} gpa_masked_mean_fwd_args;
gpa_status gpa_masked_mean_fwd(gpa_queue *q, const gpa_masked_mean_fwd_args *args, gpa_handle **out);

/* dx[B,L,D] from dy[B,D] and mask[B,L]. Op "masked_mean_bwd". */
typedef struct gpa_masked_mean_bwd_args {
  uint32_t size;
  gpa_tensor dy, mask, dx;
} gpa_masked_mean_bwd_args;
gpa_status gpa_masked_mean_bwd(gpa_queue *q, const gpa_masked_mean_bwd_args *args, gpa_handle **out);

/* y[B,L,D] = x + v[B,D] broadcast over L. Op "add_broadcast_fwd". */
typedef struct gpa_add_broadcast_fwd_args {
  uint32_t size;
  gpa_tensor x, v, y;
} gpa_add_broadcast_fwd_args;
gpa_status gpa_add_broadcast_fwd(gpa_queue *q, const gpa_add_broadcast_fwd_args *args, gpa_handle **out);

/* dv[B,D] = sum over L of dy[B,L,D] (dx = dy). Op "add_broadcast_bwd". */
typedef struct gpa_add_broadcast_bwd_args {
  uint32_t size;
  gpa_tensor dy, dv;
} gpa_add_broadcast_bwd_args;
gpa_status gpa_add_broadcast_bwd(gpa_queue *q, const gpa_add_broadcast_bwd_args *args, gpa_handle **out);

/* y[..., N, M] = x[..., M, N]: the last two dims swapped, leading dims as
 * batches; any dtype (y's is x's); y must not overlap x (EINVAL). Op
 * "transpose". */
typedef struct gpa_transpose_args {
  uint32_t size;
  gpa_tensor x, y;
} gpa_transpose_args;
gpa_status gpa_transpose(gpa_queue *q, const gpa_transpose_args *args, gpa_handle **out);

/* ---- GELU ----------------------------------------------------------------- */

/* approximate: 0 = erf form (default), 1 = tanh form. Ops "gelu_fwd", "gelu_bwd". */
typedef struct gpa_gelu_fwd_args {
  uint32_t size;
  gpa_tensor x, y;
  int32_t approximate;
} gpa_gelu_fwd_args;
gpa_status gpa_gelu_fwd(gpa_queue *q, const gpa_gelu_fwd_args *args, gpa_handle **out);

typedef struct gpa_gelu_bwd_args {
  uint32_t size;
  gpa_tensor x, dy, dx;
  int32_t approximate;
} gpa_gelu_bwd_args;
gpa_status gpa_gelu_bwd(gpa_queue *q, const gpa_gelu_bwd_args *args, gpa_handle **out);

/* ---- LayerNorm ------------------------------------------------------------ */

/* x[N,D], gamma[D], beta[D] -> y[N,D], mean[N], rstd[N]. eps: 0 = default 1e-5.
 * Op "layernorm_fwd". */
typedef struct gpa_layernorm_fwd_args {
  uint32_t size;
  gpa_tensor x, gamma, beta;
  gpa_tensor y, mean, rstd;
  double eps;
} gpa_layernorm_fwd_args;
gpa_status gpa_layernorm_fwd(gpa_queue *q, const gpa_layernorm_fwd_args *args, gpa_handle **out);

/* x, dy, gamma, mean, rstd (from the forward) -> dx, dgamma, dbeta. Op "layernorm_bwd".
 * dx_bf16 (optional; buffer 0: none): dx rounded to bf16 as well, allowed
 * only in the mixed form (x and dx f32, dy bf16; docs/ops.md). A caller
 * built before the field (a smaller size) has none. */
typedef struct gpa_layernorm_bwd_args {
  uint32_t size;
  gpa_tensor x, dy, gamma, mean, rstd;
  gpa_tensor dx, dgamma, dbeta;
  gpa_tensor dx_bf16;
} gpa_layernorm_bwd_args;
gpa_status gpa_layernorm_bwd(gpa_queue *q, const gpa_layernorm_bwd_args *args, gpa_handle **out);

/* ---- embedding ------------------------------------------------------------ */

/* ids[B,L] (i32), table[V,D] -> y[B,L,D]. Op "embedding_fwd". */
typedef struct gpa_embedding_fwd_args {
  uint32_t size;
  gpa_tensor ids, table, y;
} gpa_embedding_fwd_args;
gpa_status gpa_embedding_fwd(gpa_queue *q, const gpa_embedding_fwd_args *args, gpa_handle **out);

/* dy[B,L,D], ids[B,L] -> dtable[V,D] (scatter-add; accumulate != 0 adds to
 * dtable's contents instead of overwriting). Op "embedding_bwd". */
typedef struct gpa_embedding_bwd_args {
  uint32_t size;
  gpa_tensor dy, ids, dtable;
  int32_t accumulate;
} gpa_embedding_bwd_args;
gpa_status gpa_embedding_bwd(gpa_queue *q, const gpa_embedding_bwd_args *args, gpa_handle **out);

/* ---- metrics -------------------------------------------------------------- */

/* logits[N,V], targets[N] (i32) -> loss [] or [1]. With use_ignore_index,
 * rows whose target equals ignore_index are left out (PyTorch uses -100);
 * without it no row is. Op "cross_entropy_fwd". */
typedef struct gpa_cross_entropy_fwd_args {
  uint32_t size;
  gpa_tensor logits, targets, loss;
  int32_t use_ignore_index;
  int64_t ignore_index;
} gpa_cross_entropy_fwd_args;
gpa_status gpa_cross_entropy_fwd(gpa_queue *q, const gpa_cross_entropy_fwd_args *args, gpa_handle **out);

/* -> dlogits[N,V] = scale * (softmax - onehot) / count. scale: 0 = default 1.
 * Op "cross_entropy_bwd". */
typedef struct gpa_cross_entropy_bwd_args {
  uint32_t size;
  gpa_tensor logits, targets, dlogits;
  int32_t use_ignore_index;
  int64_t ignore_index;
  double scale;
} gpa_cross_entropy_bwd_args;
gpa_status gpa_cross_entropy_bwd(gpa_queue *q, const gpa_cross_entropy_bwd_args *args, gpa_handle **out);

/* mean((y - t)^2) -> out [] or [1]. Op "mse". */
typedef struct gpa_mse_args {
  uint32_t size;
  gpa_tensor y, t, out;
} gpa_mse_args;
gpa_status gpa_mse(gpa_queue *q, const gpa_mse_args *args, gpa_handle **out);

/* mean over rows of cos(y, t) -> out [] or [1]. eps: 0 = default 1e-8. Op "cosine". */
typedef struct gpa_cosine_args {
  uint32_t size;
  gpa_tensor y, t, out;
  double eps;
} gpa_cosine_args;
gpa_status gpa_cosine(gpa_queue *q, const gpa_cosine_args *args, gpa_handle **out);

/* ---- optimizers (in place) ------------------------------------------------ */

/* param, m, v updated in place from grad. step >= 1. eps: 0 = default 1e-8;
 * lr, beta1, beta2, weight_decay as given (torch defaults: 0.9, 0.999, 0.01).
 * Op "adamw". */
typedef struct gpa_adamw_args {
  uint32_t size;
  gpa_tensor param, grad, m, v;
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
} gpa_adamw_args;
gpa_status gpa_adamw(gpa_queue *q, const gpa_adamw_args *args, gpa_handle **out);

/* param and momentum buffer updated in place from grad. Op "sgd". */
typedef struct gpa_sgd_args {
  uint32_t size;
  gpa_tensor param, grad, buf;
  double lr, momentum, weight_decay;
  int32_t nesterov;
} gpa_sgd_args;
gpa_status gpa_sgd(gpa_queue *q, const gpa_sgd_args *args, gpa_handle **out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
