/* Vectorized float math over arrays, for the host kernels (AVX2 when the CPU
 * has it, libm otherwise; see vmath.c for the accuracy). dst may equal src.
 * Any thread. */
#ifndef GPA_KERNELS_HOST_VMATH_H
#define GPA_KERNELS_HOST_VMATH_H
#include <stdint.h>

/* dst[i] = expf(src[i]) */
void gpa__vexpf(float *dst, const float *src, int64_t n);
/* dst[i] = erfcf(src[i]) */
void gpa__verfcf(float *dst, const float *src, int64_t n);

#endif
