/* Host reductions of the collectives. The local engine accumulates every
 * rank in rank order in f32 (i32 for i32) and rounds once, so every rank
 * gets bit-identical results; MPI's user ops on f16/bf16 round each step
 * (MPI hands us two operands at a time). */
#include <stdint.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "kernels/host/bf16.h"
#include "kernels/host/f16.h"

static inline float widen(int dtype, const void *src, uint64_t i) {
  switch (dtype) {
    case GPA_F32: return ((const float *)src)[i];
    case GPA_F16: return gpa__f16_to_f32(((const uint16_t *)src)[i]);
    default: return gpa__bf16_to_f32(((const uint16_t *)src)[i]);
  }
}

static inline float fop(int op, float a, float b) {
  switch (op) {
    case GPA_REDUCE_MAX: return a != a ? a : b != b ? b : a > b ? a : b; /* NaN wins */
    case GPA_REDUCE_MIN: return a != a ? a : b != b ? b : a < b ? a : b;
    default: return a + b;
  }
}

static inline int32_t iop(int op, int32_t a, int32_t b) {
  switch (op) {
    case GPA_REDUCE_MAX: return a > b ? a : b;
    case GPA_REDUCE_MIN: return a < b ? a : b;
    default: return (int32_t)((uint32_t)a + (uint32_t)b); /* wraps, as MPI_SUM on MPI_INT32_T does in practice */
  }
}

void gpa__comm_acc_load(int dtype, void *acc, const void *src, uint64_t n) {
  if (dtype == GPA_I32) {
    memcpy(acc, src, n * 4);
    return;
  }
  float *a = acc;
  for (uint64_t i = 0; i < n; i++) a[i] = widen(dtype, src, i);
}

void gpa__comm_acc_combine(int op, int dtype, void *acc, const void *src, uint64_t n) {
  if (dtype == GPA_I32) {
    int32_t *a = acc;
    const int32_t *s = src;
    for (uint64_t i = 0; i < n; i++) a[i] = iop(op, a[i], s[i]);
    return;
  }
  float *a = acc;
  if (dtype == GPA_F32 && op == GPA_REDUCE_SUM) {
    const float *s = src;
    for (uint64_t i = 0; i < n; i++) a[i] += s[i];
    return;
  }
  for (uint64_t i = 0; i < n; i++) a[i] = fop(op, a[i], widen(dtype, src, i));
}

void gpa__comm_acc_store(int dtype, void *dst, const void *acc, uint64_t n, float scale) {
  if (dtype == GPA_I32 || (dtype == GPA_F32 && scale == 1.0f)) {
    memmove(dst, acc, n * 4);
    return;
  }
  const float *a = acc;
  for (uint64_t i = 0; i < n; i++) {
    float v = a[i] * scale;
    if (dtype == GPA_F32) ((float *)dst)[i] = v;
    else if (dtype == GPA_F16) ((uint16_t *)dst)[i] = gpa__f32_to_f16(v);
    else ((uint16_t *)dst)[i] = gpa__f32_to_bf16(v);
  }
}

void gpa__comm_combine16(int op, int dtype, void *inout, const void *in, uint64_t n) {
  uint16_t *d = inout;
  for (uint64_t i = 0; i < n; i++) {
    float v = fop(op, widen(dtype, d, i), widen(dtype, in, i));
    d[i] = dtype == GPA_F16 ? gpa__f32_to_f16(v) : gpa__f32_to_bf16(v);
  }
}

void gpa__comm_scale(int dtype, void *x, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; i++) {
    float v = widen(dtype, x, i) * scale;
    if (dtype == GPA_F32) ((float *)x)[i] = v;
    else if (dtype == GPA_F16) ((uint16_t *)x)[i] = gpa__f32_to_f16(v);
    else ((uint16_t *)x)[i] = gpa__f32_to_bf16(v);
  }
}
