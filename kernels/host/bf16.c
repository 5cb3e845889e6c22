#include "kernels/host/bf16.h"

typedef struct conv_job {
  void *dst;
  const void *src;
} conv_job;

GPA__KCLONES static void widen_range(int64_t b, int64_t e, void *ctx) {
  conv_job *j = ctx;
  float *d = j->dst;
  const uint16_t *s = j->src;
  for (int64_t i = b; i < e; i++) d[i] = gpa__bf16_to_f32(s[i]);
}

GPA__KCLONES static void narrow_range(int64_t b, int64_t e, void *ctx) {
  conv_job *j = ctx;
  uint16_t *d = j->dst;
  const float *s = j->src;
  for (int64_t i = b; i < e; i++) d[i] = gpa__f32_to_bf16(s[i]);
}

void gpa__bf16_widen(const gpa__par *par, float *dst, const uint16_t *src, int64_t n) {
  conv_job j = {dst, src};
  gpa__pfor(par, n, 1 << 16, widen_range, &j);
}

void gpa__bf16_narrow(const gpa__par *par, uint16_t *dst, const float *src, int64_t n) {
  conv_job j = {dst, src};
  gpa__pfor(par, n, 1 << 16, narrow_range, &j);
}
