/* Elementwise, GELU and optimizer ops on CUDA (kernels/cuda/elementwise.cu).
 * Shapes were validated at submit; the kernels are launched on the queue's
 * stream with a capped grid-stride grid. bf16 tensors (the dtype of input 0
 * decides; submit checked the others match) take the _bf16 kernels, which
 * move eight values per 16-byte access when every pointer is aligned. */
#include <math.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernel_list.h"

#define THREADS 256

static gpa_status launch1d(const gpa_op_exec *x, int id, long long n, void **args) {
  if (n <= 0) return GPA_OK;
  return gpa__cu_launch(x, id, gpa__cu_blocks(x, n, THREADS), 1, 1, THREADS, 1, 0, args);
}

static long long numel(const gpa_tensor *t) { return (long long)gpa_tensor_numel(t); }

static int is_bf16(const gpa_op_exec *x) { return x->inputs[0].dtype == GPA_BF16; }

/* 16-byte alignment of every tensor of x (the bf16 kernels' 8-wide path). */
static int all_aligned16(const gpa_op_exec *x) {
  int ok = 1;
  for (uint32_t i = 0; i < x->n_inputs; i++) ok &= ((uintptr_t)x->in[i] & 15) == 0;
  for (uint32_t i = 0; i < x->n_outputs; i++) ok &= ((uintptr_t)x->out[i] & 15) == 0;
  return ok;
}

/* A bf16 launch over n items, 8 per thread when vec. */
static gpa_status launch_bf(const gpa_op_exec *x, int id, long long n, int vec, void **args) {
  return launch1d(x, id, vec ? (n + 7) / 8 : n, args);
}

static gpa_status add_cu(const gpa_op_exec *x) {
  long long n = numel(&x->inputs[0]);
  void *y = x->out[0], *a = x->in[0], *b = x->in[1];
  int vec = all_aligned16(x);
  void *args[] = {&y, &a, &b, &n, &vec};
  if (is_bf16(x)) return launch_bf(x, GPA__K_ADD_BF, n, vec, args);
  return launch1d(x, GPA__K_ADD, n, args);
}

static gpa_status axpy_common(const gpa_op_exec *x, void *y0) {
  long long n = numel(&x->inputs[0]);
  float alpha = (float)gpa__cu_attr_f(x, "alpha", 1.0);
  void *y = x->out[0], *xx = x->in[0];
  int vec = all_aligned16(x);
  void *args[] = {&y, &xx, &y0, &alpha, &n, &vec};
  if (is_bf16(x)) return launch_bf(x, GPA__K_AXPY_BF, n, vec, args);
  return launch1d(x, GPA__K_AXPY, n, args);
}
static gpa_status scale_cu(const gpa_op_exec *x) { return axpy_common(x, NULL); }
static gpa_status axpy_cu(const gpa_op_exec *x) { return axpy_common(x, x->in[1]); }

static int mask_i32(const gpa_tensor *m) { return m->dtype == GPA_I32; }

static gpa_status mask_zero_cu(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  long long rows = t->shape[0] * t->shape[1], d = t->rank == 3 ? t->shape[2] : 1;
  int i32 = mask_i32(&x->inputs[1]);
  void *y = x->out[0], *xx = x->in[0], *m = x->in[1];
  int vec = d % 8 == 0 && ((uintptr_t)y & 15) == 0 && ((uintptr_t)xx & 15) == 0;
  void *args[] = {&y, &xx, &m, &i32, &rows, &d, &vec};
  if (is_bf16(x)) return launch_bf(x, GPA__K_MASK_ZERO_BF, rows * d, vec, args);
  return launch1d(x, GPA__K_MASK_ZERO, rows * d, args);
}

static gpa_status sum_over_l(const gpa_op_exec *x, const void *mask, int i32, int mean) {
  const gpa_tensor *t = &x->inputs[0];
  long long B = t->shape[0], L = t->shape[1], D = t->shape[2];
  void *y = x->out[0], *xx = x->in[0];
  void *args[] = {&y, &xx, (void *)&mask, &i32, &B, &L, &D, &mean};
  return launch1d(x, is_bf16(x) ? GPA__K_SUM_OVER_L_BF : GPA__K_SUM_OVER_L, B * D, args);
}
static gpa_status mm_fwd_cu(const gpa_op_exec *x) {
  return sum_over_l(x, x->in[1], mask_i32(&x->inputs[1]), 1);
}
static gpa_status bc_bwd_cu(const gpa_op_exec *x) { return sum_over_l(x, NULL, 0, 0); }

static gpa_status mm_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *dy = &x->inputs[0], *m = &x->inputs[1];
  long long B = m->shape[0], L = m->shape[1], D = dy->shape[1];
  int i32 = mask_i32(m);
  void *dx = x->out[0], *g = x->in[0], *mk = x->in[1];
  void *args[] = {&dx, &g, &mk, &i32, &B, &L, &D};
  return launch1d(x, is_bf16(x) ? GPA__K_MM_BWD_BF : GPA__K_MM_BWD, B * D, args);
}

static gpa_status bc_fwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  long long L = t->shape[1], D = t->shape[2], n = numel(t);
  void *y = x->out[0], *xx = x->in[0], *v = x->in[1];
  int vec = D % 8 == 0 && all_aligned16(x);
  void *args[] = {&y, &xx, &v, &L, &D, &n, &vec};
  if (is_bf16(x)) return launch_bf(x, GPA__K_ADD_BCAST_BF, n, vec, args);
  return launch1d(x, GPA__K_ADD_BCAST, n, args);
}

static gpa_status gelu_fwd_cu(const gpa_op_exec *x) {
  long long n = numel(&x->inputs[0]);
  int approx = (int)gpa__cu_attr_i(x, "approximate", 0);
  void *y = x->out[0], *xx = x->in[0];
  int vec = all_aligned16(x);
  void *args[] = {&y, &xx, &n, &approx, &vec};
  if (is_bf16(x)) return launch_bf(x, GPA__K_GELU_FWD_BF, n, vec, args);
  return launch1d(x, GPA__K_GELU_FWD, n, args);
}

static gpa_status gelu_bwd_cu(const gpa_op_exec *x) {
  long long n = numel(&x->inputs[0]);
  int approx = (int)gpa__cu_attr_i(x, "approximate", 0);
  void *dx = x->out[0], *xx = x->in[0], *dy = x->in[1];
  int vec = all_aligned16(x);
  void *args[] = {&dx, &xx, &dy, &n, &approx, &vec};
  if (is_bf16(x)) return launch_bf(x, GPA__K_GELU_BWD_BF, n, vec, args);
  return launch1d(x, GPA__K_GELU_BWD, n, args);
}

static gpa_status adamw_cu(const gpa_op_exec *x) {
  long long n = numel(&x->inputs[0]);
  double lr = gpa__cu_attr_f(x, "lr", 0), b1 = gpa__cu_attr_f(x, "beta1", 0.9), b2 = gpa__cu_attr_f(x, "beta2", 0.999);
  double eps = gpa__cu_attr_f(x, "eps", 1e-8), wd = gpa__cu_attr_f(x, "weight_decay", 0.01);
  int64_t step = gpa__cu_attr_i(x, "step", 1);
  double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
  float decay = (float)(1.0 - lr * wd), fb1 = (float)b1, c1 = (float)(1.0 - b1), fb2 = (float)b2,
        c2 = (float)(1.0 - b2), ss = (float)(lr / bc1), ib = (float)(1.0 / sqrt(bc2)), fe = (float)eps;
  void *po = x->out[0], *mo = x->out[1], *vo = x->out[2], *p = x->in[0], *g = x->in[1], *m = x->in[2], *v = x->in[3];
  int pbf = x->inputs[0].dtype == GPA_BF16, gbf = x->inputs[1].dtype == GPA_BF16;
  void *args[] = {&po, &mo, &vo, &p, &g, &m, &v, &n, &decay, &fb1, &c1, &fb2, &c2, &ss, &ib, &fe, &pbf, &gbf};
  return launch1d(x, pbf || gbf ? GPA__K_ADAMW_BF : GPA__K_ADAMW, n, args);
}

static gpa_status sgd_cu(const gpa_op_exec *x) {
  long long n = numel(&x->inputs[0]);
  float lr = (float)gpa__cu_attr_f(x, "lr", 0), mu = (float)gpa__cu_attr_f(x, "momentum", 0),
        wd = (float)gpa__cu_attr_f(x, "weight_decay", 0);
  int nest = (int)gpa__cu_attr_i(x, "nesterov", 0);
  void *po = x->out[0], *bo = x->out[1], *p = x->in[0], *g = x->in[1], *b = x->in[2];
  int pbf = x->inputs[0].dtype == GPA_BF16, gbf = x->inputs[1].dtype == GPA_BF16;
  void *args[] = {&po, &bo, &p, &g, &b, &n, &lr, &mu, &wd, &nest, &pbf, &gbf};
  return launch1d(x, pbf || gbf ? GPA__K_SGD_BF : GPA__K_SGD, n, args);
}

const gpa__cu_impl gpa__cu_ops_ew[] = {
    {"add", add_cu},
    {"scale", scale_cu},
    {"axpy", axpy_cu},
    {"mask_zero", mask_zero_cu},
    {"masked_mean_fwd", mm_fwd_cu},
    {"masked_mean_bwd", mm_bwd_cu},
    {"add_broadcast_fwd", bc_fwd_cu},
    {"add_broadcast_bwd", bc_bwd_cu},
    {"gelu_fwd", gelu_fwd_cu},
    {"gelu_bwd", gelu_bwd_cu},
    {"adamw", adamw_cu},
    {"sgd", sgd_cu},
    {NULL, NULL},
};
