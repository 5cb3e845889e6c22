/* Embedding's params (host and CUDA adapters) and its CUDA kernels
 * (kernels/cuda/embedding.cu, module "emb"; the index-check kernels there
 * serve every family that checks indices: ops/cuda_index.c). */
#ifndef GPA_OPS_EMBEDDING_H
#define GPA_OPS_EMBEDDING_H
#include "ops/family.h"

typedef struct gpa__emb_params {
  int64_t accumulate; /* backward: add into dtable instead of overwriting it */
} gpa__emb_params;

gpa_status gpa__emb_fwd_cu(const gpa_op_exec *x);
gpa_status gpa__emb_bwd_cu(const gpa_op_exec *x);

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS_EMBEDDING(K)   \
  K(IDX_CHECK, emb, gpa_idx_check)     \
  K(IDX_FETCH, emb, gpa_idx_fetch)     \
  K(EMB_FWD, emb, gpa_emb_fwd_f32)     \
  K(EMB_BITONIC, emb, gpa_emb_bitonic) \
  K(EMB_SORT_BLOCK, emb, gpa_emb_sort_block) \
  K(EMB_MERGE_BLOCK, emb, gpa_emb_merge_block) \
  K(EMB_BWD, emb, gpa_emb_bwd_f32)     \
  K(EMB_BWD_JOIN, emb, gpa_emb_bwd_join) \
  K(EMB_FWD_BF, emb, gpa_emb_fwd_bf16) \
  K(EMB_BWD_BF, emb, gpa_emb_bwd_bf16)

#endif
