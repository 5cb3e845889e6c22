/* conv1d through cuDNN's convolution operations (docs/cuda.md, "cuDNN
 * convolutions"): the first implementation the CUDA conv1d adapter tries
 * (ops/conv1d/cuda_cudnn.c), on the actor's run-time-loaded cuDNN and plan
 * cache (cudnn.h). Answers GPA_SKIP for anything cuDNN does not take, so
 * our own kernels run instead; a decline is logged at info level the first
 * time for an actor and for each refused plan, at debug level after. */
#ifndef GPA_BACKENDS_CUDA_CUDNN_CONV_H
#define GPA_BACKENDS_CUDA_CUDNN_CONV_H
#include "backends/cuda/cudnn.h"

/* GPA_CUDNN_CONV unset: a convolution below this many FLOPs (2 B Cout
 * Lout Cin/G K) runs on our kernels, cuDNN's host time per execute
 * outweighing its faster kernels there (the main job's 0.23 GFLOP ones on
 * an H100); from it on, cuDNN. */
#define GPA__CUDNN_CONV_MIN_FLOPS 1e9

/* The graphs a key names (gpa__dnn_key.conv). */
enum { GPA__DNN_CONV_FWD = 1, GPA__DNN_CONV_FWD_BIAS, GPA__DNN_CONV_DGRAD, GPA__DNN_CONV_WGRAD };

/* One conv1d call: x [B,Cin,L], W [Cout,Cin/G,K], y / dy [B,Cout,Lout]
 * (nlc: x [B,L,Cin], y / dy [B,Lout,Cout], described to cuDNN by strides);
 * dtype GPA_F32 (all f32) or GPA_BF16 (x, W, b, y, dy, dx bf16; dW f32).
 * Left and right zero padding pad_l / pad_r (causal: (K-1) dil and 0). */
typedef struct gpa__conv_dnn_args {
  int64_t B, Cin, L, Cout, K, stride, pad_l, pad_r, dil, G, Lout;
  int dtype;
  int nlc;
  const void *x, *W, *b, *dy; /* b: forward bias or NULL */
  void *y, *dx, *dW;
} gpa__conv_dnn_args;

/* y = conv(x, W) (+ b): bf16 adds b inside cuDNN's graph (one rounding of
 * y); f32 leaves b to the caller (*bias_done = 0), as an f32 add after an
 * f32 result is the same sum. */
gpa_status gpa__cudnn_conv_fwd(const gpa_op_exec *x, const gpa__conv_dnn_args *a, int *bias_done);
/* dx and dW (dy, x, W given); both plans are found before either runs. */
gpa_status gpa__cudnn_conv_bwd(const gpa_op_exec *x, const gpa__conv_dnn_args *a);

/* gpa__dnn_build_fn for conv keys. */
int gpa__dnn_build_conv(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_descs *g, char *why, size_t n);

#endif
