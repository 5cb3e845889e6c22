/* Index checks on the device, shared by the families that take indices
 * (embedding ids, cross-entropy targets, attention lengths). The kernels
 * (embedding.cu) record the first bad position and its value; the outcome is
 * read when the op completes (gpa__cu_post_check), so nothing synchronizes
 * on the way. */
#include "ops/cuda_kernels.h"

gpa_status gpa__cu_check_index(const gpa_op_exec *x, CUdeviceptr res, const void *idx, long long n, long long v,
                               long long ignore, int use_ignore, int kind, const char *op, long long a, long long b) {
  if (n <= 0) return GPA_OK;
  gpa__cu_ctx *C = gpa__cu_of(x);
  GPA__CU_TRY(gpa__cu_check(C, C->cu.cuMemsetD32Async(res, 0xffffffffu, 4, (CUstream)x->stream), "cuMemsetD32Async",
                            x->msg, x->msg_size));
  void *ix = (void *)idx;
  void *a1[] = {&ix, &n, &v, &ignore, &use_ignore, &res};
  GPA__CU_TRY(
      gpa__cu_launch(x, GPA__K_IDX_CHECK, gpa__cu_blocks(x, n, GPA__CU_THREADS), 1, 1, GPA__CU_THREADS, 1, 0, a1));
  void *a2[] = {&ix, &res};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_IDX_FETCH, 1, 1, 1, 32, 1, 0, a2));
  return gpa__cu_post_check(x, kind, op, res, a, b);
}

gpa_status gpa__cu_index_fused_begin(const gpa_op_exec *x, CUdeviceptr res) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  return gpa__cu_check(C, C->cu.cuMemsetD32Async(res, 0xffffffffu, 4, (CUstream)x->stream), "cuMemsetD32Async",
                       x->msg, x->msg_size);
}

gpa_status gpa__cu_index_fused_end(const gpa_op_exec *x, CUdeviceptr res, int kind, const char *op, long long a,
                                   long long b) {
  return gpa__cu_post_check(x, kind | GPA__CU_POST_PACKED, op, res, a, b);
}
