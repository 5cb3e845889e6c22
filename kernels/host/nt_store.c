/* See nt_store.h. */
#include "kernels/host/nt_store.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NT_X86 1
#endif

/* The L3 size: sysfs first (sysconf reported 256 MiB for a 32 MiB L3 in a
 * KVM guest), then sysconf; 0 when unknown. */
static int64_t l3_bytes(void) {
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (f) {
    long long v = 0;
    char unit = 0;
    int got = fscanf(f, "%lld%c", &v, &unit);
    fclose(f);
    if (got >= 1 && v > 0) return (int64_t)v << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
  }
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? (int64_t)l3 : 0;
}

static _Atomic int64_t gpa__nt_threshold = -1;

void gpa__nt_force(int always) {
  atomic_store_explicit(&gpa__nt_threshold, always ? 0 : INT64_MAX, memory_order_relaxed);
}

/* Last-level cache size in bytes, read once; 32 MiB when unknown, unless
 * gpa__nt_force chose. */
static int64_t threshold(void) {
  int64_t t = atomic_load_explicit(&gpa__nt_threshold, memory_order_relaxed);
  if (t < 0) {
    t = l3_bytes();
    if (t <= 0) t = (int64_t)32 << 20;
    int64_t unset = -1; /* a concurrent force wins */
    if (!atomic_compare_exchange_strong_explicit(&gpa__nt_threshold, &unset, t, memory_order_relaxed,
                                                 memory_order_relaxed))
      t = unset;
  }
  return t;
}

int gpa__nt_worth(uint64_t bytes) { return bytes >= (uint64_t)threshold() && bytes > 0; }

#ifdef NT_X86
/* SSE2 is baseline on x86-64; memory-bound, so 16-byte stores suffice. */
static int64_t head(const float *dst, int64_t n) {
  int64_t h = (int64_t)((16 - ((uintptr_t)dst & 15)) & 15) / 4;
  return h < n ? h : n;
}

void gpa__nt_copy(float *dst, const float *src, int64_t n) {
  int64_t h = head(dst, n), i = h;
  if ((uintptr_t)dst & 3) { /* not float-aligned: no streaming */
    memcpy(dst, src, (size_t)n * sizeof *dst);
    return;
  }
  memcpy(dst, src, (size_t)h * sizeof *dst);
  for (; i + 16 <= n; i += 16) {
    _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    _mm_stream_ps(dst + i + 4, _mm_loadu_ps(src + i + 4));
    _mm_stream_ps(dst + i + 8, _mm_loadu_ps(src + i + 8));
    _mm_stream_ps(dst + i + 12, _mm_loadu_ps(src + i + 12));
  }
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  memcpy(dst + i, src + i, (size_t)(n - i) * sizeof *dst);
}

void gpa__nt_zero(float *dst, int64_t n) {
  int64_t h = head(dst, n), i = h;
  if ((uintptr_t)dst & 3) {
    memset(dst, 0, (size_t)n * sizeof *dst);
    return;
  }
  memset(dst, 0, (size_t)h * sizeof *dst);
  const __m128 z = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, z);
  memset(dst + i, 0, (size_t)(n - i) * sizeof *dst);
}

void gpa__nt_fence(void) { _mm_sfence(); }
#else
void gpa__nt_copy(float *dst, const float *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }
void gpa__nt_zero(float *dst, int64_t n) { memset(dst, 0, (size_t)n * sizeof *dst); }
void gpa__nt_fence(void) {}
#endif
