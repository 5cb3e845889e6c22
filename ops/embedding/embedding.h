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
/* ops/embedding/cuda_rows.c: the backward without a sort. _pick: 1 when
 * it takes n ids into v rows (the actor's GPA_EMB_BWD_ROWS, else the size
 * rule); _cu runs it (n > 0, v > 0, d > 0). */
int gpa__emb_bwd_rows_pick(const gpa_op_exec *x, long long n, long long v);
gpa_status gpa__emb_bwd_rows_cu(const gpa_op_exec *x, long long n, long long v, long long d, int accumulate);

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
  K(EMB_BWD_BF, emb, gpa_emb_bwd_bf16) \
  K(EMB_BWD_ROWS, emb, gpa_emb_bwd_rows_f32) \
  K(EMB_BWD_ROWS_BF, emb, gpa_emb_bwd_rows_bf16)

#endif
