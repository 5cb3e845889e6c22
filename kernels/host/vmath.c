/* Array math: libmvec's vector variants (glibc >= 2.35 for erfcf) called
 * directly: AVX-512 (_ZGVeN16v_*) or AVX2 (_ZGVdN8v_*), chosen once from the
 * CPU's features, with a scalar libm fallback. libmvec documents at most
 * 4 ulp of error for these. */
#include "kernels/host/vmath.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)) && !defined(GPA_NO_MVEC)
#define GPA__HAVE_MVEC 1
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

__m512 _ZGVeN16v_expf(__m512 x);
__m512 _ZGVeN16v_erfcf(__m512 x);
__m256 _ZGVdN8v_expf(__m256 x);
__m256 _ZGVdN8v_erfcf(__m256 x);

#define GPA__MVEC512(NAME, FN)                                                   \
  __attribute__((target("avx512f"))) static void NAME(float *dst, const float *src, int64_t n) { \
    int64_t i = 0;                                                               \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, FN(_mm512_loadu_ps(src + i))); \
    if (i < n) {                                                                 \
      __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);                           \
      _mm512_mask_storeu_ps(dst + i, k, FN(_mm512_maskz_loadu_ps(k, src + i)));  \
    }                                                                            \
  }

/* the tail goes through a zero-padded block (no masked loads before AVX-512) */
#define GPA__MVEC256(NAME, FN)                                                   \
  __attribute__((target("avx2,fma"))) static void NAME(float *dst, const float *src, int64_t n) { \
    int64_t i = 0;                                                               \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, FN(_mm256_loadu_ps(src + i))); \
    if (i < n) {                                                                 \
      float t[8] = {0};                                                          \
      memcpy(t, src + i, (size_t)(n - i) * sizeof *t);                           \
      _mm256_storeu_ps(t, FN(_mm256_loadu_ps(t)));                               \
      memcpy(dst + i, t, (size_t)(n - i) * sizeof *t);                           \
    }                                                                            \
  }

GPA__MVEC512(vexp_512, _ZGVeN16v_expf)
GPA__MVEC512(verfc_512, _ZGVeN16v_erfcf)
GPA__MVEC256(vexp_256, _ZGVdN8v_expf)
GPA__MVEC256(verfc_256, _ZGVdN8v_erfcf)

/* 2: AVX-512, 1: AVX2, 0: scalar. Read once; a race only repeats the check. */
static int isa(void) {
  static _Atomic int cached = -1;
  int c = atomic_load_explicit(&cached, memory_order_relaxed);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx512f") ? 2 : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 1 : 0;
    atomic_store_explicit(&cached, c, memory_order_relaxed);
  }
  return c;
}
#endif

void gpa__vexpf(float *dst, const float *src, int64_t n) {
#ifdef GPA__HAVE_MVEC
  switch (isa()) {
    case 2: vexp_512(dst, src, n); return;
    case 1: vexp_256(dst, src, n); return;
    default: break;
  }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = expf(src[i]);
}

void gpa__verfcf(float *dst, const float *src, int64_t n) {
#ifdef GPA__HAVE_MVEC
  switch (isa()) {
    case 2: verfc_512(dst, src, n); return;
    case 1: verfc_256(dst, src, n); return;
    default: break;
  }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = erfcf(src[i]);
}
