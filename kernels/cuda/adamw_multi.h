/* adamw_multi's kernel argument (kernels/cuda/elementwise.cu,
 * ops/optim/cuda_multi.c): every tensor's pointers, size and first block in
 * one struct passed by value, so the launch needs no device-side table (no
 * allocation or copy before it, nothing to keep alive: a CUDA graph captures
 * it with the launch). 16 tensors of 88 bytes: about 1.4 KB of the 4 KB a
 * kernel's parameters may take. Both compilers include this file. */
#ifndef GPA_KERNELS_CUDA_ADAMW_MULTI_H
#define GPA_KERNELS_CUDA_ADAMW_MULTI_H

/* tensors per call: GPA_MAX_INPUTS (64) inputs, four per tensor */
#define GPA_ADAMW_MULTI_MAX 16

typedef struct gpa_adamw_multi_tensor {
  float *po, *mo, *vo;
  const float *p, *g, *m, *v;
  unsigned short *pw; /* param' rounded to bf16 as the cast op rounds (bf16_copies), or NULL */
  long long n;      /* elements */
  long long block0; /* its first block; its blocks end where the next tensor's begin (the last's at gridDim.x) */
  float decay;      /* 1 - lr * weight_decay, or 1 for a tensor outside decay_mask */
  int vec;          /* all pointers 16-byte aligned (pw too, when given): float4 accesses */
} gpa_adamw_multi_tensor;

typedef struct gpa_adamw_multi_args {
  gpa_adamw_multi_tensor t[GPA_ADAMW_MULTI_MAX];
  int count;
  float b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps;
} gpa_adamw_multi_args;

#endif
