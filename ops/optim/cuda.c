/* The optimizers on CUDA (kernels/cuda/elementwise.cu): one fused
 * grid-stride kernel per step; bias corrections and constants are folded on
 * the host in double, as the host implementation does. */
#include <math.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/cuda_kernels.h"
#include "ops/optim/optim.h"

gpa_status gpa__adamw_cu(const gpa_op_exec *x) {
  long long n = gpa__cu_numel(&x->inputs[0]);
  const gpa__opt_params *pa = x->params;
  double lr = pa->lr, b1 = pa->beta1, b2 = pa->beta2, eps = pa->eps, wd = pa->weight_decay;
  int64_t step = pa->step;
  double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
  float decay = (float)(1.0 - lr * wd), fb1 = (float)b1, c1 = (float)(1.0 - b1), fb2 = (float)b2,
        c2 = (float)(1.0 - b2), ss = (float)(lr / bc1), ib = (float)(1.0 / sqrt(bc2)), fe = (float)eps;
  void *po = x->out[0], *mo = x->out[1], *vo = x->out[2], *p = x->in[0], *g = x->in[1], *m = x->in[2], *v = x->in[3];
  int pbf = x->inputs[0].dtype == GPA_BF16, gbf = x->inputs[1].dtype == GPA_BF16, vec = gpa__cu_aligned16(x);
  if (!pbf && !gbf) {
    void *args[] = {&po, &mo, &vo, &p, &g, &m, &v, &n, &decay, &fb1, &c1, &fb2, &c2, &ss, &ib, &fe, &vec};
    return gpa__cu_launch1d(x, GPA__K_ADAMW, vec ? (n + 3) / 4 : n, args);
  }
  void *args[] = {&po, &mo, &vo, &p, &g, &m, &v, &n, &decay, &fb1, &c1, &fb2, &c2, &ss, &ib, &fe, &pbf, &gbf};
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
