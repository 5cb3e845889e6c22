/* Vectorized float math over arrays, for the host kernels: AVX-512 through
 * glibc's libmvec (max 4 ulp) when the CPU has it, libm otherwise. dst may
 * equal src. Any thread. */
#ifndef GPA_KERNELS_HOST_VMATH_H
#define GPA_KERNELS_HOST_VMATH_H
#include <stdint.h>

/* dst[i] = expf(src[i]) */
void gpa__vexpf(float *dst, const float *src, int64_t n);
/* dst[i] = erfcf(src[i]) */
void gpa__verfcf(float *dst, const float *src, int64_t n);

#endif
