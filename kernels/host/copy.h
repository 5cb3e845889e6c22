/* Large host copies on the backend's threads: one core does not saturate
 * memory bandwidth here. */
#ifndef GPA_KERNELS_HOST_COPY_H
#define GPA_KERNELS_HOST_COPY_H
#include <stdint.h>

#include "gpuactor/op.h"

/* memmove semantics: overlapping ranges are copied on one thread. */
void gpa__host_copy(gpa_exec_env *env, void *dst, const void *src, uint64_t n);

#endif
