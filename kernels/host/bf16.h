/* bf16 storage on the host: conversions between bf16 (the top 16 bits of an
 * IEEE fp32) and fp32. Widening is exact; narrowing rounds to nearest even,
 * keeps NaN a (quiet) NaN and rounds overflow to +-inf, as the device's
 * __float2bfloat16_rn does, so host and CUDA results of the same fp32 value
 * are the same bits. par NULL runs inline. */
#ifndef GPA_KERNELS_HOST_BF16_H
#define GPA_KERNELS_HOST_BF16_H
#include <stdint.h>
#include <string.h>

#include "kernels/host/host_par.h"

static inline float gpa__bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t gpa__f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void gpa__bf16_widen(const gpa__par *par, float *dst, const uint16_t *src, int64_t n);
void gpa__bf16_narrow(const gpa__par *par, uint16_t *dst, const float *src, int64_t n);
/* dst row i = table row ids[i] (n rows of d bf16 values; ids checked by the
 * caller): an embedding lookup moves bf16 words as they are, without
 * widening the table. */
void gpa__bf16_gather_rows(const gpa__par *par, uint16_t *dst, const int32_t *ids, const uint16_t *table, int64_t n,
                           int64_t d);

#endif
