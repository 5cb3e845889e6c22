/* Typed calls for attention (docs/ops.md, "attention"): flash-style, never
 * an S x Sk matrix in memory.
 *
 * Each call fills a gpa_op_call from its argument struct and goes through
 * gpa_submit: the same validation and the same errors but ENOTFOUND (the name
 * is fixed): Errors: EINVAL, ESHAPE, EDTYPE, ERANGE, EOVERFLOW, ESTALE,
 * ECLOSED, ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. The message names the
 * offending argument, e.g. "attention_fwd: k has 3 heads, not a divisor
 * of q's 8 heads". A lengths value outside [0, Sk] fails the op when it
 * runs: the handle completes with ERANGE and a message naming the element.
 *
 * Threads: any thread may call these, as gpa_submit (not from inside an op
 * implementation). The argument struct is read during the call only.
 * out may be NULL: the message is then tracked by the batch only.
 *
 * Layouts: q, o [B,S,H,D]; k, v [B,Sk,Hkv,D] with H a multiple of Hkv
 * (MHA, GQA, MQA; query head h uses kv head h / (H/Hkv)); lse [B,H,S];
 * lengths [B] i32, optional (buffer 0 = absent: every key visible).
 * dtypes: q, k, v (and dout) f32, bf16 or f16, all alike; lse f32; o, dq,
 * dk, dv each f32 or the storage type of q (bf16/f16 outputs halve the
 * bytes; the backward's o input likewise). 1 <= D <= 256.
 * Masking: key j is visible to query i of batch b iff j < lengths[b] and,
 * when causal, j <= i + Sk - S (bottom-right aligned). A query with no
 * visible key gets o = 0, lse = -inf and zero gradients.
 * scale <= 0 means 1/sqrt(D). */
#ifndef GPUACTOR_OPS_ATTENTION_H
#define GPUACTOR_OPS_ATTENTION_H
#include <stdint.h>

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* o = softmax(scale q k^T, masked) v and its log-sum-exp. Op "attention_fwd". */
typedef struct gpa_attention_fwd_args {
  uint32_t size;
  gpa_tensor q, k, v, lengths, o, lse;
  double scale;
  int32_t causal;
} gpa_attention_fwd_args;
gpa_status gpa_attention_fwd(gpa_queue *q, const gpa_attention_fwd_args *args, gpa_handle **out);

/* dq, dk, dv from dout and the forward's o and lse (same scale, causal and
 * lengths as the forward). Deterministic (the same bits every run) unless
 * nondeterministic = 1 (the op's attribute deterministic = 0), which lets
 * cuDNN take its faster backward engine and, where cuDNN does not take the
 * call, our bf16/fp16 CUDA kernels (head dims up to 128) add dq with fp32
 * atomics without a separate dq pass: dk and dv keep their bits, dq's last
 * bits may vary from run to run. Op "attention_bwd". */
typedef struct gpa_attention_bwd_args {
  uint32_t size;
  gpa_tensor dout, q, k, v, o, lse, lengths, dq, dk, dv;
  double scale;
  int32_t causal;
  int32_t nondeterministic; /* 0 = default: deterministic */
} gpa_attention_bwd_args;
gpa_status gpa_attention_bwd(gpa_queue *q, const gpa_attention_bwd_args *args, gpa_handle **out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
