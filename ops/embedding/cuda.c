/* Embedding on CUDA (kernels/cuda/embedding.cu); a bf16 table (and dy)
 * selects the _bf16 kernels. The ids are checked on the device (by the
 * forward's own kernel, gpa__cu_index_fused_*; the backward's by
 * gpa__cu_check_index); the outcome is read when the op completes, so
 * nothing synchronizes here. The backward sorts (id, row) keys with a
 * bitonic network and sums each id's rows in chunks of sorted positions,
 * then the cut runs' parts in chunk order: deterministic. Small
 * vocabularies skip the sort (cuda_rows.c: the same sums, one launch). */
#include <limits.h>
#include <stdio.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/cuda_kernels.h"
#include "ops/embedding/embedding.h"
#include "kernels/cuda/launch_shapes.h"

/* Threads of embedding_fwd a row (embedding.cu emb_fwd_rows): a power of
 * two, enough for GPA_EMB_FWD_U accesses each, up to the block. */
static int emb_fwd_tpr(long long accesses) {
  int t = 1;
  while (t < GPA__CU_THREADS && (long long)t * GPA_EMB_FWD_U < accesses) t *= 2;
  return t;
}

gpa_status gpa__emb_fwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *ids = &x->inputs[0], *tab = &x->inputs[1];
  long long n = ids->shape[0] * ids->shape[1], d = tab->shape[1], v = tab->shape[0];
  if (n <= 0) return GPA_OK;
  CUdeviceptr res = gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES);
  if (!res) return GPA_ENOMEM;
  void *y = x->out[0], *ip = x->in[0], *tp = x->in[1];
  int bf = tab->dtype == GPA_BF16, w = bf ? 8 : 4; /* values per 16 bytes */
  if (d % w || ((uintptr_t)y & 15) || ((uintptr_t)tp & 15)) w = 1;
  if (d / w > INT_MAX) {
    snprintf(x->msg, x->msg_size, "embedding_fwd: rows of %lld values: more than the cuda kernel's 2^31 accesses", d);
    return GPA_EINVAL;
  }
  /* the kernel checks the ids itself where it runs and the rows fit its
   * packed result */
  const int fused = d > 0 && n < 0xffffffffLL;
  if (fused) GPA__CU_TRY(gpa__cu_index_fused_begin(x, res));
  else GPA__CU_TRY(gpa__cu_check_index(x, res, ip, n, v, 0, 0, GPA__CU_POST_IDS2D, "embedding_fwd", ids->shape[1], v));
  if (d <= 0) return GPA_OK;
  int tpr = emb_fwd_tpr(d / w);
  gpa__cu_ctx *C = gpa__cu_of(x);
  long long rpb = GPA__CU_THREADS / tpr, blocks = (n + rpb - 1) / rpb, cap = C->sim ? C->grid_cap : 1 << 30;
  CUdeviceptr kres = fused ? res : 0;
  void *args[] = {&y, &ip, &tp, &n, &d, &v, &w, &tpr, &kres};
  GPA__CU_TRY(gpa__cu_launch(x, bf ? GPA__K_EMB_FWD_BF : GPA__K_EMB_FWD, (unsigned)(blocks < cap ? blocks : cap), 1, 1,
                             GPA__CU_THREADS, 1, 0, args));
  return fused ? gpa__cu_index_fused_end(x, res, GPA__CU_POST_IDS2D, "embedding_fwd", ids->shape[1], v) : GPA_OK;
}

/* Keys sorted by a block in shared memory in tiles of up to this many (8
 * bytes each: 32 KiB, under the 48 KiB a block gets without opting in);
 * longer sequences merge tiles (kernels/cuda/embedding.cu). */
#define GPA__EMB_SORT_BLOCK_MAX 4096

gpa_status gpa__emb_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *ids = &x->inputs[1], *dt = &x->outputs[0];
  long long n = ids->shape[0] * ids->shape[1], v = dt->shape[0], d = dt->shape[1];
  int acc = (int)((const gpa__emb_params *)x->params)->accumulate;
  if (v <= 0 || d <= 0) return GPA_OK;
  if (gpa__emb_bwd_rows_pick(x, n, v)) return gpa__emb_bwd_rows_cu(x, n, v, d, acc); /* cuda_rows.c */
  if (!acc) GPA__CU_TRY(gpa__cu_zero_f32(x, x->out[0], v * d)); /* the runs add into dtable */
  if (n <= 0) return GPA_OK;
  long long npow2 = 1, chunks = (n + GPA_EMB_CHUNK - 1) / GPA_EMB_CHUNK;
  while (npow2 < n) npow2 *= 2;
  uint64_t key_bytes = (uint64_t)npow2 * 8, part_bytes = (uint64_t)chunks * 2 * (uint64_t)d * 8;
  CUdeviceptr scr = gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES + key_bytes + part_bytes);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr res = scr, keys = scr + GPA__CU_INDEX_RES_BYTES, part = keys + key_bytes;
  GPA__CU_TRY(gpa__cu_check_index(x, res, x->in[1], n, v, 0, 0, GPA__CU_POST_IDS2D, "embedding_bwd", ids->shape[1], v));
  void *ip = x->in[1], *dy = x->in[0], *out = x->out[0];
  long long tile = npow2 < GPA__EMB_SORT_BLOCK_MAX ? npow2 : GPA__EMB_SORT_BLOCK_MAX, tiles = npow2 / tile;
  unsigned smem = (unsigned)(tile * 8);
  void *ak[] = {&keys, &ip, &n, &tile};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_EMB_SORT_BLOCK, (unsigned)tiles, 1, 1, 1024, 1, smem, ak));
  for (long long k = 2 * tile; k <= npow2; k *= 2) {
    for (long long j = k / 2; j >= tile; j /= 2) {
      void *ab[] = {&keys, &npow2, &j, &k};
      GPA__CU_TRY(gpa__cu_launch(x, GPA__K_EMB_BITONIC, gpa__cu_blocks(x, npow2, GPA__CU_THREADS), 1, 1,
                                 GPA__CU_THREADS, 1, 0, ab));
    }
    void *am[] = {&keys, &tile, &k};
    GPA__CU_TRY(gpa__cu_launch(x, GPA__K_EMB_MERGE_BLOCK, (unsigned)tiles, 1, 1, 1024, 1, smem, am));
  }
  /* 16 bytes of dy a thread (embedding.cu emb_bwd_cols) when d and the
   * pointers allow; up to 256 threads a chunk then (the vectors of a 4096
   * row: 4 f32 or 2 bf16 a thread) */
  const int bf = x->inputs[0].dtype == GPA_BF16;
  int w = bf ? 8 : 4;
  if (d % w || ((uintptr_t)dy & 15) || ((uintptr_t)out & 15)) w = 1;
  long long cols = d / w;
  unsigned threads = w > 1 ? (cols >= 256 ? 256 : (unsigned)((cols + 31) / 32 * 32))
                           : (d >= 128 ? 128 : (unsigned)((d + 31) / 32 * 32));
  void *args[] = {&out, &part, &dy, &keys, &n, &v, &d, &w};
  int id = bf ? GPA__K_EMB_BWD_BF : GPA__K_EMB_BWD;
  GPA__CU_TRY(gpa__cu_launch(x, id, (unsigned)chunks, 1, 1, threads, 1, 0, args));
  if (chunks == 1) return GPA_OK; /* no run is cut */
  void *aj[] = {&out, &part, &keys, &n, &v, &d};
  return gpa__cu_launch(x, GPA__K_EMB_BWD_JOIN, gpa__cu_blocks(x, chunks * d, GPA__CU_THREADS), 1, 1,
                        GPA__CU_THREADS, 1, 0, aj);
}
