/* conv1d's cuDNN implementation on CUDA (cuda_cudnn.c): the first one the
 * CUDA adapters (cuda.c) try. GPA_SKIP when cuDNN does not take the call
 * (backends/cuda/cudnn_conv.h): our own kernels run instead. */
#ifndef GPA_OPS_CONV1D_CUDNN_H
#define GPA_OPS_CONV1D_CUDNN_H
#include "ops/family.h"

gpa_status gpa__conv_cudnn_cu(const gpa_op_exec *x, int bwd);

#endif
