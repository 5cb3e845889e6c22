/* IEEE half (fp16) storage on the host: widening is exact; narrowing rounds
 * to nearest even, overflows to +-inf and keeps subnormals and NaN (as a
 * quiet NaN), as the device's __float2half_rn does. Portable: not every
 * compiler has _Float16 on x86. */
#ifndef GPA_KERNELS_HOST_F16_H
#define GPA_KERNELS_HOST_F16_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float gpa__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13); /* inf, NaN */
  } else if (e) {
    u = sign | ((e + 112u) << 23) | (m << 13);
  } else { /* zero or subnormal: m * 2^-24 */
    float f = (float)m * 0x1p-24f;
    memcpy(&u, &f, sizeof u);
    u |= sign;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t gpa__f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to 65520 or more: inf */
  if (a < 0x38800000u) {                                   /* subnormal: a multiple of 2^-24 */
    float v;
    memcpy(&v, &a, sizeof v);
    return (uint16_t)(sign | (uint32_t)(int)rintf(v * 0x1p24f));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

#endif
