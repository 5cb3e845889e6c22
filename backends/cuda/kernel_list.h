/* Kernel modules and kernels of the CUDA backend. A module is one
 * gpa_cuda_kernels(gpa_cu_<mod> ...) target of cmake/cuda_backend.cmake. */
#ifndef GPA_BACKENDS_CUDA_KERNEL_LIST_H
#define GPA_BACKENDS_CUDA_KERNEL_LIST_H

#define GPA__CU_MODULES(M) M(ew) M(norm) M(emb) M(met) M(lin) M(attn)

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS(K)                       \
  K(ADD, ew, gpa_ew_add_f32)                     \
  K(AXPY, ew, gpa_ew_axpy_f32)                   \
  K(MASK_ZERO, ew, gpa_ew_mask_zero_f32)         \
  K(SUM_OVER_L, ew, gpa_ew_sum_over_l_f32)       \
  K(MM_BWD, ew, gpa_ew_masked_mean_bwd_f32)      \
  K(ADD_BCAST, ew, gpa_ew_add_broadcast_f32)     \
  K(GELU_FWD, ew, gpa_gelu_fwd_f32)              \
  K(GELU_BWD, ew, gpa_gelu_bwd_f32)              \
  K(ADD_BF, ew, gpa_ew_add_bf16)                 \
  K(AXPY_BF, ew, gpa_ew_axpy_bf16)               \
  K(MASK_ZERO_BF, ew, gpa_ew_mask_zero_bf16)     \
  K(SUM_OVER_L_BF, ew, gpa_ew_sum_over_l_bf16)   \
  K(MM_BWD_BF, ew, gpa_ew_masked_mean_bwd_bf16)  \
  K(ADD_BCAST_BF, ew, gpa_ew_add_broadcast_bf16) \
  K(GELU_FWD_BF, ew, gpa_gelu_fwd_bf16)          \
  K(GELU_BWD_BF, ew, gpa_gelu_bwd_bf16)          \
  K(ADAMW, ew, gpa_adamw_f32)                    \
  K(SGD, ew, gpa_sgd_f32)                        \
  K(ADAMW_BF, ew, gpa_adamw_bf16)                \
  K(SGD_BF, ew, gpa_sgd_bf16)                    \
  K(LN_FWD, norm, gpa_ln_fwd_f32)                \
  K(LN_BWD_DX, norm, gpa_ln_bwd_dx_f32)          \
  K(LN_BWD_PART, norm, gpa_ln_bwd_part_f32)      \
  K(LN_BWD_COLS, norm, gpa_ln_bwd_cols_f32)      \
  K(LN_FWD_BF, norm, gpa_ln_fwd_bf16)            \
  K(LN_BWD_DX_BF, norm, gpa_ln_bwd_dx_bf16)      \
  K(LN_BWD_PART_BF, norm, gpa_ln_bwd_part_bf16)  \
  K(IDX_CHECK, emb, gpa_idx_check)               \
  K(IDX_FETCH, emb, gpa_idx_fetch)               \
  K(EMB_FWD, emb, gpa_emb_fwd_f32)               \
  K(EMB_KEYS, emb, gpa_emb_keys)                 \
  K(EMB_BITONIC, emb, gpa_emb_bitonic)           \
  K(EMB_BWD, emb, gpa_emb_bwd_f32)               \
  K(EMB_FWD_BF, emb, gpa_emb_fwd_bf16)           \
  K(EMB_BWD_BF, emb, gpa_emb_bwd_bf16)           \
  K(CE_ROWS, met, gpa_ce_rows)                   \
  K(SUM_FINAL, met, gpa_sum_final)               \
  K(CE_COUNT, met, gpa_ce_count)                 \
  K(CE_BWD, met, gpa_ce_bwd)                     \
  K(PAIR_ROWS, met, gpa_pair_rows)               \
  K(CE_ROWS_BF, met, gpa_ce_rows_bf16)           \
  K(CE_BWD_BF, met, gpa_ce_bwd_bf16)             \
  K(LIN_EPI, lin, gpa_lin_epilogue_f32)          \
  K(LIN_EPI_BF, lin, gpa_lin_epilogue_bf16)      \
  K(LIN_DB_BF, lin, gpa_lin_db_bf16)             \
  K(LIN_DGELU_BF, lin, gpa_lin_dgelu_split_bf16) \
  K(CONV_IM2COL, lin, gpa_conv_im2col_f32)       \
  K(CONV_COL2IM, lin, gpa_conv_col2im_f32)       \
  K(CONV_BIAS, lin, gpa_conv_bias_f32)           \
  K(CONV_DB, lin, gpa_conv_db_f32)              \
  /* attention: per head-dim class 32, 64, 96, 128, 256, in this order */ \
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
  /* bf16 then fp16, each D <= 64, D <= 128, D <= 256, in this order */ \
  K(ATT_FWD_BF64, attn, gpa_attn_fwd_bf16_d64)   \
  K(ATT_FWD_BF128, attn, gpa_attn_fwd_bf16_d128) \
  K(ATT_FWD_BF256, attn, gpa_attn_fwd_bf16_d256) \
  K(ATT_FWD_H64, attn, gpa_attn_fwd_f16_d64)     \
  K(ATT_FWD_H128, attn, gpa_attn_fwd_f16_d128)   \
  K(ATT_FWD_H256, attn, gpa_attn_fwd_f16_d256)   \
  K(ATT_DKV_BF64, attn, gpa_attn_dkv_bf16_d64)   \
  K(ATT_DKV_BF128, attn, gpa_attn_dkv_bf16_d128) \
  K(ATT_DKV_BF256, attn, gpa_attn_dkv_bf16_d256) \
  K(ATT_DKV_H64, attn, gpa_attn_dkv_f16_d64)     \
  K(ATT_DKV_H128, attn, gpa_attn_dkv_f16_d128)   \
  K(ATT_DKV_H256, attn, gpa_attn_dkv_f16_d256)   \
  K(ATT_DQ_BF64, attn, gpa_attn_dq_bf16_d64)     \
  K(ATT_DQ_BF128, attn, gpa_attn_dq_bf16_d128)   \
  K(ATT_DQ_BF256, attn, gpa_attn_dq_bf16_d256)   \
  K(ATT_DQ_H64, attn, gpa_attn_dq_f16_d64)       \
  K(ATT_DQ_H128, attn, gpa_attn_dq_f16_d128)     \
  K(ATT_DQ_H256, attn, gpa_attn_dq_f16_d256)     \
  K(ATT_DELTA_BF, attn, gpa_attn_bwd_delta_bf16) \
  K(ATT_DELTA_H, attn, gpa_attn_bwd_delta_f16)

enum {
#define GPA__CU_MENUM(mod) GPA__CU_MOD_##mod,
  GPA__CU_MODULES(GPA__CU_MENUM)
#undef GPA__CU_MENUM
  GPA__CU_NMODS
};
enum {
#define GPA__CU_KENUM(id, mod, name) GPA__K_##id,
  GPA__CU_KERNELS(GPA__CU_KENUM)
#undef GPA__CU_KENUM
  GPA__CU_NKERNELS
};
#endif
