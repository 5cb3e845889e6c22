/* adamw_multi on CUDA: one launch of gpa_adamw_multi_f32
 * (kernels/cuda/elementwise.cu) for every tensor of the call. The table of
 * tensors is the kernel's by-value argument (kernels/cuda/adamw_multi.h):
 * nothing is allocated or copied before the launch, so the launch captures
 * into a CUDA graph like any other. Each tensor gets the blocks adamw's own
 * launch would give it (gpa__cu_blocks), in a run of the one grid, and the
 * factors adamw's launch gets (gpa__adamw_cu_fold): each tensor's bits are
 * adamw's. bf16_copies: the tensor's pw is its output after the 3 * count
 * (in tensor order), written in the same pass. */
#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/adamw_multi.h"
#include "ops/cuda_kernels.h"
#include "ops/optim/optim.h"

static int aligned16(void *const *p, uint32_t n) {
  int ok = 1;
  for (uint32_t i = 0; i < n; i++) ok &= ((uintptr_t)p[i] & 15) == 0;
  return ok;
}

gpa_status gpa__adamw_multi_cu(const gpa_op_exec *x) {
  const gpa__adamw_multi_params *pa = x->params;
  const uint32_t count = x->n_inputs / 4;
  /* decay with and without weight decay; the rest shared */
  const gpa__adamw_cu_factors f = gpa__adamw_cu_fold(pa->lr, pa->beta1, pa->beta2, pa->eps, pa->weight_decay, pa->step),
                              f0 = gpa__adamw_cu_fold(pa->lr, pa->beta1, pa->beta2, pa->eps, 0.0, pa->step);
  gpa_adamw_multi_args a;
  memset(&a, 0, sizeof a);
  a.count = (int)count;
  a.b1 = f.b1, a.c1 = f.c1, a.b2 = f.b2, a.c2 = f.c2, a.step_size = f.step_size, a.inv_bc2_sqrt = f.inv_bc2_sqrt;
  a.eps = f.eps;
  long long blocks = 0;
  uint32_t copy = 3 * count; /* the next bf16 copy among the outputs */
  for (uint32_t k = 0; k < count && k < GPA_ADAMW_MULTI_MAX; k++) {
    gpa_adamw_multi_tensor *t = &a.t[k];
    void *const *in = x->in + 4 * k, *const *out = x->out + 3 * k;
    t->po = out[0], t->mo = out[1], t->vo = out[2];
    t->p = in[0], t->g = in[1], t->m = in[2], t->v = in[3];
    t->pw = pa->bf16_copies >> k & 1 ? x->out[copy++] : NULL;
    t->n = gpa__cu_numel(&x->inputs[4 * k]);
    t->decay = gpa__adamw_multi_wd(pa, k) != 0.0 ? f.decay : f0.decay;
    t->vec = aligned16(in, 4) && aligned16(out, 3) && ((uintptr_t)t->pw & 15) == 0;
    t->block0 = blocks;
    if (t->n > 0) blocks += gpa__cu_blocks(x, t->vec ? (t->n + 3) / 4 : t->n, GPA__CU_THREADS);
  }
  if (!blocks) return GPA_OK; /* every tensor empty */
  void *args[] = {&a};
  return gpa__cu_launch(x, GPA__K_ADAMW_MULTI, (unsigned)blocks, 1, 1, GPA__CU_THREADS, 1, 0, args);
}
