/* embedding_bwd on CUDA without a sort (kernels/cuda/embedding.cu
 * emb_rows): a block per vocabulary row scans the ids for its own, so the
 * whole op is one launch (the index check fused into it) where the sort
 * path takes five (index check and fetch, block sort, chunk sums, join)
 * and a memset of dtable, and its block sort is one SM's serial work. The
 * sums round exactly as the sort path's: both give the same bits.
 *
 * The size rule: this path when v <= GPA__EMB_ROWS_MAX_V rows and
 * n <= GPA_EMB_ROWS_MAX_N ids. Every block reads all n ids twice (a count,
 * then its row's positions), so the rows path costs v x n id reads where
 * the sort costs about n log^2 n compare-exchanges:
 *  - n: the positions must fit the block's shared memory (8192 as 16-bit
 *    values, 16 KiB), and a warp's scan is n / 256 chunks of 32 ids a
 *    pass: 32 at 8192, a few microseconds, while the sort of 4096 ids (the
 *    main job's 32 x 128) is one block's 78 bitonic stages, 56 us on an
 *    H100 by Nsight Compute (issue 25);
 *  - v: a block a row, so the grid is v blocks of 256 threads; an H100
 *    keeps 5 such blocks an SM resident (48 registers a thread on sm_90,
 *    64 for bf16 dy: 4), 660 blocks (528), so 1024 rows are at most two
 *    waves, the rescans in parallel (v x n = 2^23 id reads at the corner,
 *    32 MiB from L1/L2 spread over every SM). Past that, the waves add up
 *    and the time grows with v while the sort's does not: a 32000-row
 *    vocabulary with 128 ids would be some 50 waves of blocks that each
 *    find one or no id, where the sort is a 128-key block sort.
 * The main job (v 256, n 4096) is well inside. The bounds are an estimate
 * until a GPU times both sides at the corner (gpa-bench cuda_emb_bwd:
 * docs/benchmarks.md); GPA_EMB_BWD_ROWS (the options table, read at
 * actor creation) forces either path for that. */

#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/launch_shapes.h"
#include "ops/cuda_kernels.h"
#include "ops/embedding/embedding.h"

#define GPA__EMB_ROWS_MAX_V 1024

int gpa__emb_bwd_rows_pick(const gpa_op_exec *x, long long n, long long v) {
  const int mode = gpa__cu_of(x)->host.emb_bwd_rows; /* 0 unset, 1 "0", 2 "1", 3 "auto" */
  const int fits = n > 0 && n <= GPA_EMB_ROWS_MAX_N && v > 0;
  if (mode == 1 || mode == 2) return mode == 2 && fits;
  return fits && v <= GPA__EMB_ROWS_MAX_V;
}

gpa_status gpa__emb_bwd_rows_cu(const gpa_op_exec *x, long long n, long long v, long long d, int accumulate) {
  const gpa_tensor *ids = &x->inputs[1];
  /* the pieces of runs longer than a chunk, in the sort path's layout:
   * two slots of d doubles per chunk of GPA_EMB_CHUNK sorted positions */
  const long long chunks = (n + GPA_EMB_CHUNK - 1) / GPA_EMB_CHUNK;
  CUdeviceptr scr = gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES + (uint64_t)chunks * 2 * (uint64_t)d * 8);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, part = scr + GPA__CU_INDEX_RES_BYTES;
  void *ip = x->in[1], *dy = x->in[0], *out = x->out[0];
  const int bf = x->inputs[0].dtype == GPA_BF16;
  int w = bf ? 8 : 4; /* 16 bytes of dy a load, as the sort path's sums */
  if (d % w || ((uintptr_t)dy & 15) || ((uintptr_t)out & 15)) w = 1;
  gpa__cu_ctx *C = gpa__cu_of(x);
  const long long cap = C->sim ? C->grid_cap : v;
  GPA__CU_TRY(gpa__cu_index_fused_begin(x, res));
  void *args[] = {&out, &part, &dy, &ip, &n, &v, &d, &w, &accumulate, &res};
  GPA__CU_TRY(gpa__cu_launch(x, bf ? GPA__K_EMB_BWD_ROWS_BF : GPA__K_EMB_BWD_ROWS, (unsigned)(v < cap ? v : cap), 1,
                             1, GPA_EMB_ROWS_THREADS, 1, 0, args));
  return gpa__cu_index_fused_end(x, res, GPA__CU_POST_IDS2D, "embedding_bwd", ids->shape[1], v);
}
