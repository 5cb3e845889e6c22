/* 16-bit float conversions of the tests, written independently of the
 * library's (kernels/host/f16.h, bf16.h) so that a test's expected rounding
 * does not share a bug with the code under test. Round to nearest even;
 * finite values in range (the tests' values). */
#ifndef GPA_TEST_HALF_H
#define GPA_TEST_HALF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t tu_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
  uint32_t m = u & 0x7fffffu;
  if (e <= 0) { /* subnormal: m * 2^-24 with the implicit bit */
    if (e < -10) return sign;
    m |= 0x800000u;
    uint32_t sh = (uint32_t)(14 - e), h = m >> sh, rem = m & ((1u << sh) - 1), mid = 1u << (sh - 1);
    if (rem > mid || (rem == mid && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static inline float tu_from_f16(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f = e ? ldexpf((float)(m | 0x400u), (int)e - 25) : ldexpf((float)m, -24);
  return (h & 0x8000u) ? -f : f;
}

static inline uint16_t tu_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float tu_from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#endif
