/* Attention's params (host and CUDA adapters) and its CUDA kernels
 * (kernels/cuda/attention.cu fp32, attention_f32tc.cu and
 * attention_f32tc_bwd.cu fp32 in 3xTF32, attention_fa2.cu and attention_fa2_bwd.cu bf16/fp16; module
 * "attn"). */
#ifndef GPA_OPS_ATTENTION_H
#define GPA_OPS_ATTENTION_H
#include "ops/family.h"

typedef struct gpa__attn_params {
  double scale;   /* 0: 1/sqrt(D) */
  int64_t causal; /* bottom-right aligned when S != Sk */
  /* backward, default 1; 0 lets cuDNN pick a faster non-deterministic
   * engine and our bf16/fp16 kernels (head dims up to 128) add dQ with
   * atomics in FlashAttention-2's order, without the dQ pass (ops/attention/
   * cuda.c); the fp32 kernels are deterministic either way */
  int64_t deterministic;
} gpa__attn_params;

gpa_status gpa__attn_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__attn_bwd_cu(const gpa_op_exec *x);
/* Our own kernels only (fp32 flash; bf16/fp16 FlashAttention-2), then the
 * host fallback: what the two above run when cuDNN declines; gpa-bench
 * cuda_attention_fa2 calls them directly to force this path. */
gpa_status gpa__attn_own_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__attn_own_bwd_cu(const gpa_op_exec *x);
/* The fp32 forward on the SIMT kernels only (attention.cu), never the
 * 3xTF32 tensor-core ones that gpa__attn_own_fwd_cu prefers: gpa-bench
 * cuda_attention_fa2 measures both. */
gpa_status gpa__attn_simt32_fwd_cu(const gpa_op_exec *x);
/* The fp32 backward on the SIMT kernels only, likewise (the 3xTF32 ones of
 * attention_f32tc_bwd.cu are gpa__attn_own_bwd_cu's choice where the
 * forward's would be). */
gpa_status gpa__attn_simt32_bwd_cu(const gpa_op_exec *x);
/* fp32 forwards and backwards given to the 3xTF32 kernels so far (relaxed
 * atomics), so that tests/test_attention.c can tell which kernels ran a call. */
extern unsigned long long gpa__attn_tc32_calls, gpa__attn_tc32_bwd_calls;
/* Forwards and backwards given to the exact-head-dim FA2 kernels (bf16 and
 * fp16 at D 64, 96, 128 unless GPA_FA2_EXACT=0), for
 * tests/test_attention_lowp.c and the benchmark likewise. */
extern unsigned long long gpa__attn_fa2x_fwd_calls, gpa__attn_fa2x_bwd_calls;
/* Backwards given to the non-deterministic FA2 kernels (gpa_fa2n*_dkv_*,
 * deterministic = 0), likewise. */
extern unsigned long long gpa__attn_fa2nd_bwd_calls;
/* Backwards whose dK/dV ran on the 128-key kernels (gpa_fa2x_dkv128_*,
 * GPA_FA2_DKV128=1), likewise. */
extern unsigned long long gpa__attn_fa2k_bwd_calls;
/* cuDNN's fused SDPA (cuda_cudnn.c), bwd = 0 or 1: GPA_SKIP when cuDNN does
 * not take the call (nothing enqueued then). */
gpa_status gpa__attn_cudnn_cu(const gpa_op_exec *x, int bwd);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_ATTENTION(K)                                      \
  /* per head-dim class 32, 64, 96, 128, 256, in this order */ \
  K(ATT_FWD32, attn, gpa_attn_fwd_d32)           \
  K(ATT_FWD64, attn, gpa_attn_fwd_d64)           \
  K(ATT_FWD96, attn, gpa_attn_fwd_d96)           \
  K(ATT_FWD128, attn, gpa_attn_fwd_d128)         \
  K(ATT_FWD256, attn, gpa_attn_fwd_d256)         \
  K(ATT_DKV32, attn, gpa_attn_dkv_d32)           \
  K(ATT_DKV64, attn, gpa_attn_dkv_d64)           \
  K(ATT_DKV96, attn, gpa_attn_dkv_d96)           \
  K(ATT_DKV128, attn, gpa_attn_dkv_d128)         \
  K(ATT_DKV256, attn, gpa_attn_dkv_d256)         \
  K(ATT_DQ32, attn, gpa_attn_dq_d32)             \
  K(ATT_DQ64, attn, gpa_attn_dq_d64)             \
  K(ATT_DQ96, attn, gpa_attn_dq_d96)             \
  K(ATT_DQ128, attn, gpa_attn_dq_d128)           \
  K(ATT_DQ256, attn, gpa_attn_dq_d256)           \
  K(ATT_DELTA, attn, gpa_attn_bwd_delta)         \
  /* FA2 kernels (attention_fa2*.cu): bf16 then fp16, D <= 64, 96, 128, 256 */  \
  K(FA2_FWD_BF64, attn, gpa_fa2_fwd_bf16_d64)                                   \
  K(FA2_FWD_BF96, attn, gpa_fa2_fwd_bf16_d96)                                   \
  K(FA2_FWD_BF128, attn, gpa_fa2_fwd_bf16_d128)                                 \
  K(FA2_FWD_BF256, attn, gpa_fa2_fwd_bf16_d256)                                 \
  K(FA2_FWD_H64, attn, gpa_fa2_fwd_f16_d64)                                     \
  K(FA2_FWD_H96, attn, gpa_fa2_fwd_f16_d96)                                     \
  K(FA2_FWD_H128, attn, gpa_fa2_fwd_f16_d128)                                   \
  K(FA2_FWD_H256, attn, gpa_fa2_fwd_f16_d256)                                   \
  K(FA2_DKV_BF64, attn, gpa_fa2_dkv_bf16_d64)                                   \
  K(FA2_DKV_BF96, attn, gpa_fa2_dkv_bf16_d96)                                   \
  K(FA2_DKV_BF128, attn, gpa_fa2_dkv_bf16_d128)                                 \
  K(FA2_DKV_BF256, attn, gpa_fa2_dkv_bf16_d256)                                 \
  K(FA2_DKV_H64, attn, gpa_fa2_dkv_f16_d64)                                     \
  K(FA2_DKV_H96, attn, gpa_fa2_dkv_f16_d96)                                     \
  K(FA2_DKV_H128, attn, gpa_fa2_dkv_f16_d128)                                   \
  K(FA2_DKV_H256, attn, gpa_fa2_dkv_f16_d256)                                   \
  K(FA2_DQ_BF64, attn, gpa_fa2_dq_bf16_d64)                                     \
  K(FA2_DQ_BF96, attn, gpa_fa2_dq_bf16_d96)                                     \
  K(FA2_DQ_BF128, attn, gpa_fa2_dq_bf16_d128)                                   \
  K(FA2_DQ_BF256, attn, gpa_fa2_dq_bf16_d256)                                   \
  K(FA2_DQ_H64, attn, gpa_fa2_dq_f16_d64)                                       \
  K(FA2_DQ_H96, attn, gpa_fa2_dq_f16_d96)                                       \
  K(FA2_DQ_H128, attn, gpa_fa2_dq_f16_d128)                                     \
  K(FA2_DQ_H256, attn, gpa_fa2_dq_f16_d256)                                     \
  K(FA2_DELTA32_BF, attn, gpa_fa2_delta32_bf16)                                 \
  K(FA2_DELTA32_H, attn, gpa_fa2_delta32_f16)                                   \
  K(FA2_DELTA_BF, attn, gpa_fa2_delta_bf16)                                     \
  K(FA2_DELTA_H, attn, gpa_fa2_delta_f16)                                       \
  /* the exact-head-dim variant, D 64/96/128 (default; GPA_FA2_EXACT=0: off) */ \
  K(FA2X_FWD_BF64, attn, gpa_fa2x_fwd_bf16_d64)                                 \
  K(FA2X_FWD_BF96, attn, gpa_fa2x_fwd_bf16_d96)                                 \
  K(FA2X_FWD_BF128, attn, gpa_fa2x_fwd_bf16_d128)                               \
  K(FA2X_FWD_H64, attn, gpa_fa2x_fwd_f16_d64)                                   \
  K(FA2X_FWD_H96, attn, gpa_fa2x_fwd_f16_d96)                                   \
  K(FA2X_FWD_H128, attn, gpa_fa2x_fwd_f16_d128)                                 \
  K(FA2X_DKV_BF64, attn, gpa_fa2x_dkv_bf16_d64)                                 \
  K(FA2X_DKV_BF96, attn, gpa_fa2x_dkv_bf16_d96)                                 \
  K(FA2X_DKV_BF128, attn, gpa_fa2x_dkv_bf16_d128)                               \
  K(FA2X_DKV_H64, attn, gpa_fa2x_dkv_f16_d64)                                   \
  K(FA2X_DKV_H96, attn, gpa_fa2x_dkv_f16_d96)                                   \
  K(FA2X_DKV_H128, attn, gpa_fa2x_dkv_f16_d128)                                 \
  K(FA2X_DQ_BF64, attn, gpa_fa2x_dq_bf16_d64)                                   \
  K(FA2X_DQ_BF96, attn, gpa_fa2x_dq_bf16_d96)                                   \
  K(FA2X_DQ_BF128, attn, gpa_fa2x_dq_bf16_d128)                                 \
  K(FA2X_DQ_H64, attn, gpa_fa2x_dq_f16_d64)                                     \
  K(FA2X_DQ_H96, attn, gpa_fa2x_dq_f16_d96)                                     \
  K(FA2X_DQ_H128, attn, gpa_fa2x_dq_f16_d128)                                   \
  /* the non-deterministic backward's dK/dV/dQ kernels (deterministic = 0):  \
   * class 64, 96, 128, bf16 then fp16, then the exact ones likewise, and  \
   * the fp32 dQ accumulator's rounding to T */                              \
  K(FA2N_DKV_BF64, attn, gpa_fa2n_dkv_bf16_d64)                                 \
  K(FA2N_DKV_BF96, attn, gpa_fa2n_dkv_bf16_d96)                                 \
  K(FA2N_DKV_BF128, attn, gpa_fa2n_dkv_bf16_d128)                               \
  K(FA2N_DKV_H64, attn, gpa_fa2n_dkv_f16_d64)                                   \
  K(FA2N_DKV_H96, attn, gpa_fa2n_dkv_f16_d96)                                   \
  K(FA2N_DKV_H128, attn, gpa_fa2n_dkv_f16_d128)                                 \
  K(FA2NX_DKV_BF64, attn, gpa_fa2nx_dkv_bf16_d64)                               \
  K(FA2NX_DKV_BF96, attn, gpa_fa2nx_dkv_bf16_d96)                               \
  K(FA2NX_DKV_BF128, attn, gpa_fa2nx_dkv_bf16_d128)                             \
  K(FA2NX_DKV_H64, attn, gpa_fa2nx_dkv_f16_d64)                                 \
  K(FA2NX_DKV_H96, attn, gpa_fa2nx_dkv_f16_d96)                                 \
  K(FA2NX_DKV_H128, attn, gpa_fa2nx_dkv_f16_d128)                               \
  K(FA2_DQ_OUT_BF, attn, gpa_fa2_dq_out_bf16)                                   \
  K(FA2_DQ_OUT_H, attn, gpa_fa2_dq_out_f16)                                     \
  /* the 128-key dK/dV pass (attention_fa2_dkv128.cu; GPA_FA2_DKV128=1):      \
   * D 64, 96, 128 exactly, bf16 then fp16 */                                  \
  K(FA2K_DKV_BF64, attn, gpa_fa2x_dkv128_bf16_d64)                              \
  K(FA2K_DKV_BF96, attn, gpa_fa2x_dkv128_bf16_d96)                              \
  K(FA2K_DKV_BF128, attn, gpa_fa2x_dkv128_bf16_d128)                            \
  K(FA2K_DKV_H64, attn, gpa_fa2x_dkv128_f16_d64)                                \
  K(FA2K_DKV_H96, attn, gpa_fa2x_dkv128_f16_d96)                                \
  K(FA2K_DKV_H128, attn, gpa_fa2x_dkv128_f16_d128)                              \
  /* fp32 forward in 3xTF32 (attention_f32tc.cu): D <= 64, 96, 128 */             \
  K(TC32_FWD64, attn, gpa_tc32_fwd_d64)                                         \
  K(TC32_FWD96, attn, gpa_tc32_fwd_d96)                                         \
  K(TC32_FWD128, attn, gpa_tc32_fwd_d128)                                       \
  /* fp32 backward in 3xTF32 (attention_f32tc_bwd.cu): D <= 32, 64, 96, 128 */  \
  K(TC32_DKV32, attn, gpa_tc32_dkv_d32)                                         \
  K(TC32_DKV64, attn, gpa_tc32_dkv_d64)                                         \
  K(TC32_DKV96, attn, gpa_tc32_dkv_d96)                                         \
  K(TC32_DKV128, attn, gpa_tc32_dkv_d128)                                       \
  K(TC32_DQ32, attn, gpa_tc32_dq_d32)                                           \
  K(TC32_DQ64, attn, gpa_tc32_dq_d64)                                           \
  K(TC32_DQ96, attn, gpa_tc32_dq_d96)                                           \
  K(TC32_DQ128, attn, gpa_tc32_dq_d128)

#endif
