/* gpa-sim cuBLAS/cuBLASLt subsets: fp16/bf16 <-> fp32 conversions (round to
 * nearest even) and the fp32 copies their GEMMs compute on. Header-only,
 * shared by cublas.c and cublaslt.c. */
#ifndef GPA_SIM_HALF16_H
#define GPA_SIM_HALF16_H
#include <library_types.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
  if (e == 0x1f) u = s | 0x7f800000u | (m << 13);
  else if (e) u = s | ((e + 112) << 23) | (m << 13);
  else if (!m) u = s;
  else {
    e = 113;
    while (!(m & 0x400)) {
      m <<= 1;
      e--;
    }
    u = s | (e << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t float_to_half(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t s = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(s | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00); /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {                               /* subnormal half */
    float v;
    memcpy(&v, &a, 4);
    return (uint16_t)(s | (uint32_t)(int)__builtin_rintf(v * 16777216.0f));
  }
  uint32_t r = a + 0xfff + ((a >> 13) & 1);
  return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}
static inline float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}


static inline size_t type_size(cudaDataType t) {
  return t == CUDA_R_32F ? 4 : (t == CUDA_R_16F || t == CUDA_R_16BF) ? 2 : 0;
}

/* element k of p (type t) as float */
static inline float elem_get(const void *p, cudaDataType t, size_t k) {
  if (t == CUDA_R_32F) return ((const float *)p)[k];
  uint16_t h = ((const uint16_t *)p)[k];
  return t == CUDA_R_16F ? half_to_float(h) : bf16_to_float(h);
}

static inline void elem_set(void *p, cudaDataType t, size_t k, float v) {
  if (t == CUDA_R_32F) ((float *)p)[k] = v;
  else ((uint16_t *)p)[k] = t == CUDA_R_16F ? float_to_half(v) : float_to_bf16(v);
}

/* fp32 copy of an (rows x cols, leading dimension ld) column-major matrix */
static inline float *to_float(const void *p, cudaDataType t, long rows, long cols, long ld) {
  float *f = malloc(sizeof(float) * (size_t)(ld * (cols - 1) + rows));
  if (!f) return NULL;
  for (long j = 0; j < cols; j++)
    for (long i = 0; i < rows; i++) f[(size_t)(i + j * ld)] = elem_get(p, t, (size_t)(i + j * ld));
  return f;
}
#endif
