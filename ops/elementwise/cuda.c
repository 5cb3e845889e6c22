/* Elementwise ops on CUDA (kernels/cuda/elementwise.cu). Shapes were
 * validated at submit; the kernels are launched on the queue's stream with a
 * capped grid-stride grid. bf16 tensors (the dtype of input 0 decides;
 * submit checked the others match) take the _bf16 kernels, which move eight
 * values per 16-byte access when every pointer is aligned; the f32 kernels
 * move four (float4) under the same condition. */
#include <limits.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/cuda_kernels.h"
#include "ops/elementwise/elementwise.h"

gpa_status gpa__ew_add_cu(const gpa_op_exec *x) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  void *y = x->out[0], *a = x->in[0], *b = x->in[1];
  int vec = gpa__cu_aligned16(x);
  int ta = x->inputs[0].dtype, tb = x->inputs[1].dtype;
  if (ta != tb) { /* the mixed form: the f32 operand first (a + b is b + a, bit for bit) */
    void *f = ta == GPA_F32 ? a : b, *h = ta == GPA_F32 ? b : a;
    void *margs[] = {&y, &f, &h, &n, &vec};
    return gpa__cu_launch1d(x, GPA__K_ADD_MIX, vec ? (n + 3) / 4 : n, margs);
  }
  void *args[] = {&y, &a, &b, &n, &vec};
  if ((x->inputs[0].dtype == GPA_BF16)) return gpa__cu_launch_bf(x, GPA__K_ADD_BF, n, vec, args);
  return gpa__cu_launch1d(x, GPA__K_ADD, vec ? (n + 3) / 4 : n, args);
}

static gpa_status axpy_common(const gpa_op_exec *x, void *y0) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  float alpha = (float)((const gpa__ew_params *)x->params)->alpha;
  void *y = x->out[0], *xx = x->in[0];
  int vec = gpa__cu_aligned16(x);
  void *args[] = {&y, &xx, &y0, &alpha, &n, &vec};
  if ((x->inputs[0].dtype == GPA_BF16)) return gpa__cu_launch_bf(x, GPA__K_AXPY_BF, n, vec, args);
  return gpa__cu_launch1d(x, GPA__K_AXPY, vec ? (n + 3) / 4 : n, args);
}
gpa_status gpa__ew_scale_cu(const gpa_op_exec *x) { return axpy_common(x, NULL); }
gpa_status gpa__ew_axpy_cu(const gpa_op_exec *x) { return axpy_common(x, x->in[1]); }

static int mask_i32(const gpa_tensor *m) { return m->dtype == GPA_I32; }

gpa_status gpa__ew_mask_zero_cu(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  long long rows = t->shape[0] * t->shape[1], d = t->rank == 3 ? t->shape[2] : 1;
  int i32 = mask_i32(&x->inputs[1]);
  void *y = x->out[0], *xx = x->in[0], *m = x->in[1];
  int bf = x->inputs[0].dtype == GPA_BF16;
  int vec = d % (bf ? 8 : 4) == 0 && ((uintptr_t)y & 15) == 0 && ((uintptr_t)xx & 15) == 0;
  void *args[] = {&y, &xx, &m, &i32, &rows, &d, &vec};
  if (bf) return gpa__cu_launch_bf(x, GPA__K_MASK_ZERO_BF, rows * d, vec, args);
  return gpa__cu_launch1d(x, GPA__K_MASK_ZERO, vec ? (rows * d + 3) / 4 : rows * d, args);
}

static gpa_status sum_over_l(const gpa_op_exec *x, const void *mask, int i32, int mean) {
  const gpa_tensor *t = &x->inputs[0];
  long long B = t->shape[0], L = t->shape[1], D = t->shape[2];
  void *y = x->out[0], *xx = x->in[0];
  void *args[] = {&y, &xx, (void *)&mask, &i32, &B, &L, &D, &mean};
  return gpa__cu_launch1d(x, (x->inputs[0].dtype == GPA_BF16) ? GPA__K_SUM_OVER_L_BF : GPA__K_SUM_OVER_L, B * D, args);
}
gpa_status gpa__ew_mm_fwd_cu(const gpa_op_exec *x) {
  return sum_over_l(x, x->in[1], mask_i32(&x->inputs[1]), 1);
}
gpa_status gpa__ew_bc_bwd_cu(const gpa_op_exec *x) { return sum_over_l(x, NULL, 0, 0); }

gpa_status gpa__ew_mm_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *dy = &x->inputs[0], *m = &x->inputs[1];
  long long B = m->shape[0], L = m->shape[1], D = dy->shape[1];
  int i32 = mask_i32(m);
  void *dx = x->out[0], *g = x->in[0], *mk = x->in[1];
  void *args[] = {&dx, &g, &mk, &i32, &B, &L, &D};
  return gpa__cu_launch1d(x, (x->inputs[0].dtype == GPA_BF16) ? GPA__K_MM_BWD_BF : GPA__K_MM_BWD, B * D, args);
}

gpa_status gpa__ew_bc_fwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  long long L = t->shape[1], D = t->shape[2], n = gpa__cu_numel(t);
  void *y = x->out[0], *xx = x->in[0], *v = x->in[1];
  int bf = x->inputs[0].dtype == GPA_BF16;
  int vec = D % (bf ? 8 : 4) == 0 && gpa__cu_aligned16(x);
  void *args[] = {&y, &xx, &v, &L, &D, &n, &vec};
  if (bf) return gpa__cu_launch_bf(x, GPA__K_ADD_BCAST_BF, n, vec, args);
  return gpa__cu_launch1d(x, GPA__K_ADD_BCAST, vec ? (n + 3) / 4 : n, args);
}

/* One block of 32 x 8 threads per 32 x 32 tile of every batch
 * (kernels/cuda/elementwise.cu); a grid past the launch limit goes to the
 * host fallback. */
gpa_status gpa__ew_transpose_cu(const gpa_op_exec *x) {
  int64_t b, m, n;
  gpa__transpose_dims(&x->inputs[0], &b, &m, &n);
  if (b <= 0 || m <= 0 || n <= 0) return GPA_OK;
  int64_t tm = (m + 31) / 32, tn = (n + 31) / 32; /* the kernel reads them as long long: 8 bytes too */
  if (tm * tn > INT_MAX / b) return gpa__cu_fallback(x);
  uint32_t es = gpa_dtype_size(x->inputs[0].dtype);
  int id = es == 1 ? GPA__K_TRANSPOSE1 : es == 2 ? GPA__K_TRANSPOSE2 : es == 4 ? GPA__K_TRANSPOSE4 : GPA__K_TRANSPOSE8;
  void *y = x->out[0], *xx = x->in[0];
  void *args[] = {&y, &xx, &m, &n, &tm, &tn};
  return gpa__cu_launch(x, id, (unsigned)(b * tm * tn), 1, 1, 32, 8, 32 * 33 * es, args);
}
