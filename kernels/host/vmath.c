/* Array math: libmvec's AVX-512 variants (_ZGVeN16v_*, glibc >= 2.35 for
 * erfcf) called directly, with a scalar libm fallback chosen once. */
#include "kernels/host/vmath.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)) && !defined(GPA_NO_MVEC)
#define GPA__HAVE_MVEC 1
#include <immintrin.h>
#include <stdatomic.h>

__m512 _ZGVeN16v_expf(__m512 x);
__m512 _ZGVeN16v_erfcf(__m512 x);

#define GPA__MVEC_LOOP(NAME, FN)                                                  \
  __attribute__((target("avx512f"))) static void NAME(float *dst, const float *src, int64_t n) { \
    int64_t i = 0;                                                                \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, FN(_mm512_loadu_ps(src + i))); \
    if (i < n) {                                                                  \
      __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);                            \
      _mm512_mask_storeu_ps(dst + i, k, FN(_mm512_maskz_loadu_ps(k, src + i)));   \
    }                                                                             \
  }
GPA__MVEC_LOOP(vexp_avx512, _ZGVeN16v_expf)
GPA__MVEC_LOOP(verfc_avx512, _ZGVeN16v_erfcf)

static int have_avx512(void) {
  /* Read once; the answer never changes, so a race only repeats the check. */
  static _Atomic int cached = -1;
  int c = atomic_load_explicit(&cached, memory_order_relaxed);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx512f") ? 1 : 0;
    atomic_store_explicit(&cached, c, memory_order_relaxed);
  }
  return c;
}
#endif

void gpa__vexpf(float *dst, const float *src, int64_t n) {
#ifdef GPA__HAVE_MVEC
  if (have_avx512()) { vexp_avx512(dst, src, n); return; }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = expf(src[i]);
}

void gpa__verfcf(float *dst, const float *src, int64_t n) {
#ifdef GPA__HAVE_MVEC
  if (have_avx512()) { verfc_avx512(dst, src, n); return; }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = erfcf(src[i]);
}
