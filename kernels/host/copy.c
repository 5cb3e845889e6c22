#include "kernels/host/copy.h"

#include <string.h>

typedef struct copy_job {
  char *dst;
  const char *src;
} copy_job;

static void copy_range(int64_t b, int64_t e, void *ctx) {
  copy_job *j = ctx;
  memcpy(j->dst + b, j->src + b, (size_t)(e - b));
}

void gpa__host_copy(gpa_exec_env *env, void *dst, const void *src, uint64_t n) {
  if (!n) return; /* src may be NULL then (an empty upload) */
  const char *s = src, *d = dst;
  if (s < d + n && d < s + n) {
    memmove(dst, src, n);
    return;
  }
  copy_job j = {dst, src};
  gpa_exec_parallel_for(env, (int64_t)n, 1 << 20, copy_range, &j);
}
