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

typedef struct gather_job {
  uint16_t *dst;
  const int32_t *ids;
  const uint16_t *table;
  int64_t d;
} gather_job;

static void gather_range(int64_t b, int64_t e, void *ctx) {
  gather_job *j = ctx;
  for (int64_t i = b; i < e; i++)
    memcpy(j->dst + i * j->d, j->table + (int64_t)j->ids[i] * j->d, (size_t)j->d * sizeof(uint16_t));
}

void gpa__bf16_gather_rows(const gpa__par *par, uint16_t *dst, const int32_t *ids, const uint16_t *table, int64_t n,
                           int64_t d) {
  gather_job j = {dst, ids, table, d};
  if (d > 0) gpa__pfor(par, n, (1 << 15) / d + 1, gather_range, &j);
}
