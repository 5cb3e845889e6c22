/* attention_fwd / attention_bwd through cuDNN's fused SDPA
 * (backends/cuda/cudnn*.c, docs/cuda.md "cuDNN fused attention"): the
 * first implementation the CUDA adapter (cuda.c) tries. GPA_SKIP when
 * cuDNN does not take the call (f32, f32 outputs, shapes or masks it lacks,
 * no library, key lengths): the adapter's own kernels run next, with their
 * own check of the lengths. */
#include <math.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cudnn.h"
#include "ops/attention/attention.h"
#include "ops/cuda_kernels.h"

gpa_status gpa__attn_cudnn_cu(const gpa_op_exec *x, int bwd) {
  const gpa__attn_params *p = x->params;
  const gpa_tensor *q = &x->inputs[bwd ? 1 : 0], *k = &x->inputs[bwd ? 2 : 1];
  gpa__sdpa_args a = {.B = q->shape[0], .S = q->shape[1], .H = q->shape[2], .D = q->shape[3], .Sk = k->shape[1],
                      .Hkv = k->shape[2], .dtype = q->dtype, .causal = (int)p->causal,
                      .nondeterministic = bwd && !p->deterministic};
  a.scale = p->scale > 0 ? (float)p->scale : (float)(1.0 / sqrt((double)a.D));
  if (bwd) {
    a.dout = x->in[0], a.q = x->in[1], a.k = x->in[2], a.v = x->in[3], a.o = x->in[4], a.lse = x->in[5];
    a.lens = x->n_inputs > 6 ? x->in[6] : NULL;
    a.dq = x->out[0], a.dk = x->out[1], a.dv = x->out[2];
    a.o_dtype = x->inputs[4].dtype;
    int same = x->outputs[1].dtype == x->outputs[0].dtype && x->outputs[2].dtype == x->outputs[0].dtype;
    a.out_dtype = same ? x->outputs[0].dtype : -1;
  } else {
    a.q = x->in[0], a.k = x->in[1], a.v = x->in[2], a.lens = x->n_inputs > 3 ? x->in[3] : NULL;
    a.o = x->out[0], a.lse = x->out[1];
    a.out_dtype = a.o_dtype = x->outputs[0].dtype;
  }
  return bwd ? gpa__cudnn_sdpa_bwd(x, &a) : gpa__cudnn_sdpa_fwd(x, &a);
}
