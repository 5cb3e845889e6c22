/* The optimizers on CUDA (kernels/cuda/elementwise.cu): one fused
 * grid-stride kernel per step; bias corrections and constants are folded on
 * the host in double, as the host implementation does. */
#include <math.h>

#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/adamw_multi.h"
#include "ops/cuda_kernels.h"
#include "ops/optim/optim.h"

gpa__adamw_cu_factors gpa__adamw_cu_fold(double lr, double b1, double b2, double eps, double wd, int64_t step) {
  double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
  return (gpa__adamw_cu_factors){(float)(1.0 - lr * wd), (float)b1, (float)(1.0 - b1), (float)b2, (float)(1.0 - b2),
                                 (float)(lr / bc1), (float)(1.0 / sqrt(bc2)), (float)eps};
}

gpa_status gpa__adamw_cu(const gpa_op_exec *x) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  const gpa__opt_params *pa = x->params;
  gpa__adamw_cu_factors f = gpa__adamw_cu_fold(pa->lr, pa->beta1, pa->beta2, pa->eps, pa->weight_decay, pa->step);
  float decay = f.decay, fb1 = f.b1, c1 = f.c1, fb2 = f.b2, c2 = f.c2, ss = f.step_size, ib = f.inv_bc2_sqrt,
        fe = f.eps;
  void *po = x->out[0], *mo = x->out[1], *vo = x->out[2], *p = x->in[0], *g = x->in[1], *m = x->in[2], *v = x->in[3];
  int pbf = x->inputs[0].dtype == GPA_BF16, gbf = x->inputs[1].dtype == GPA_BF16, vec = gpa__cu_aligned16(x);
  void *pw = x->n_outputs == 4 ? x->out[3] : NULL; /* the bf16 copy of an f32 param' */
  if (pw && !gbf) {
    /* adamw_multi's kernel over this one tensor: its 16-byte path writes the
     * copy; the grid adamw's own launch would take; the same bits */
    if (n == 0) return GPA_OK;
    gpa_adamw_multi_args a;
    memset(&a, 0, sizeof a);
    a.count = 1;
    a.b1 = fb1, a.c1 = c1, a.b2 = fb2, a.c2 = c2, a.step_size = ss, a.inv_bc2_sqrt = ib, a.eps = fe;
    a.t[0] = (gpa_adamw_multi_tensor){po, mo, vo, p, g, m, v, pw, n, 0, decay, vec};
    void *args[] = {&a};
    unsigned blocks = gpa__cu_blocks(x, vec ? (n + 3) / 4 : n, GPA__CU_THREADS);
    return gpa__cu_launch(x, GPA__K_ADAMW_MULTI, blocks, 1, 1, GPA__CU_THREADS, 1, 0, args);
  }
  if (!pbf && !gbf) {
    void *args[] = {&po, &mo, &vo, &p, &g, &m, &v, &n, &decay, &fb1, &c1, &fb2, &c2, &ss, &ib, &fe, &vec};
    return gpa__cu_launch1d(x, GPA__K_ADAMW, vec ? (n + 3) / 4 : n, args);
  }
  void *args[] = {&po, &mo, &vo, &p, &g, &m, &v, &n, &decay, &fb1, &c1, &fb2, &c2, &ss, &ib, &fe, &pbf, &gbf, &pw};
  return gpa__cu_launch1d(x, GPA__K_ADAMW_BF, n, args);
}

gpa_status gpa__sgd_cu(const gpa_op_exec *x) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  const gpa__opt_params *pa = x->params;
  float lr = (float)pa->lr, mu = (float)pa->momentum, wd = (float)pa->weight_decay;
  int nest = (int)pa->nesterov;
  void *po = x->out[0], *bo = x->out[1], *p = x->in[0], *g = x->in[1], *b = x->in[2];
  int pbf = x->inputs[0].dtype == GPA_BF16, gbf = x->inputs[1].dtype == GPA_BF16, vec = gpa__cu_aligned16(x);
  if (!pbf && !gbf) {
    void *args[] = {&po, &bo, &p, &g, &b, &n, &lr, &mu, &wd, &nest, &vec};
    return gpa__cu_launch1d(x, GPA__K_SGD, vec ? (n + 3) / 4 : n, args);
  }
  void *args[] = {&po, &bo, &p, &g, &b, &n, &lr, &mu, &wd, &nest, &pbf, &gbf};
  return gpa__cu_launch1d(x, GPA__K_SGD_BF, n, args);
}
