/* Element sizes, inline for the per-message paths: every tensor of every
 * message is sized at submit (validate.c) and again by its op's bytes_moved
 * on the actor (ops/nn_util.h). gpa_dtype_size is the exported form. */
#ifndef GPA_ACTOR_DTYPE_H
#define GPA_ACTOR_DTYPE_H
#include <stdint.h>

#include "gpuactor/tensor.h"

/* 0 for an invalid dtype. */
static inline uint32_t gpa__dtype_size(int dtype) {
  switch (dtype) {
    case GPA_F32:
    case GPA_I32: return 4;
    case GPA_F16:
    case GPA_BF16: return 2;
    case GPA_U8: return 1;
    case GPA_I64: return 8;
    default: return 0;
  }
}

#endif
