/* conv1d_fwd / conv1d_bwd(_nobias) through cuDNN's convolutions
 * (backends/cuda/cudnn_conv.c, docs/cuda.md "cuDNN convolutions"). cuDNN
 * computes y, dx and dW; the bias of an f32 forward and db stay on our
 * kernels (kernels/cuda/linear.cu), launched only once cuDNN has taken the
 * call, so a decline leaves nothing enqueued for our implementation to
 * race with. db: a block per channel summing B Lout terms in a fixed tree
 * (deterministic, as the rest). */
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cudnn_conv.h"
#include "ops/conv1d/conv1d.h"
#include "ops/conv1d/conv1d_cudnn.h"
#include "ops/cuda_kernels.h"


gpa_status gpa__conv_cudnn_cu(const gpa_op_exec *x, int bwd) {
  const gpa__conv_params *p = x->params;
  const gpa_tensor *xt = &x->inputs[bwd ? 1 : 0], *W = &x->inputs[bwd ? 2 : 1];
  const int nlc = p->layout == GPA_CONV1D_NLC, ci = nlc ? 2 : 1, li = nlc ? 1 : 2;
  gpa__conv_dnn_args a = {.B = xt->shape[0], .Cin = xt->shape[ci], .L = xt->shape[li], .Cout = W->shape[0],
                          .K = W->shape[2], .stride = p->stride, .dil = p->dilation, .G = p->groups,
                          .dtype = xt->dtype, .nlc = nlc};
  a.pad_l = p->causal ? (a.K - 1) * a.dil : p->padding;
  a.pad_r = p->causal ? 0 : p->padding;
  if (!bwd) {
    a.Lout = x->outputs[0].shape[li];
    a.x = x->in[0], a.W = x->in[1], a.b = x->n_inputs > 2 ? x->in[2] : NULL, a.y = x->out[0];
    int bias_done = 0;
    gpa_status st = gpa__cudnn_conv_fwd(x, &a, &bias_done);
    if (st != GPA_OK || !a.b || bias_done) return st;
    /* y [B,Lout,Cout]: channel i % Cout, as ncl's with one position a row */
    long long n = a.B * a.Cout * a.Lout, cout = a.Cout, lout = nlc ? 1 : a.Lout;
    void *yp = a.y, *bp = (void *)a.b;
    void *args[] = {&yp, &bp, &n, &cout, &lout};
    return gpa__cu_launch1d(x, GPA__K_CONV_BIAS, n, args);
  }
  a.Lout = x->inputs[0].shape[li];
  a.dy = x->in[0], a.x = x->in[1], a.W = x->in[2], a.dx = x->out[0], a.dW = x->out[1];
  gpa_status st = gpa__cudnn_conv_bwd(x, &a);
  if (st != GPA_OK) return st;
  return nlc ? gpa__conv_db_rows_cu(x, a.B * a.Lout, a.Cout) : gpa__conv_db_cu(x, a.B, a.Cout, a.Lout);
}
