/* Array math for the host kernels. With AVX2+FMA (checked once at run time):
 * our own 8-lane exp below, and glibc's libmvec AVX2 erfcf (glibc >= 2.35;
 * at most 4 ulp); scalar libm otherwise (and for erfc on older glibc).
 *
 * exp8: x = k ln2 + r (Cody-Waite split of ln2; k rounded with the 1.5*2^23
 *   trick), exp(r) by its Taylor polynomial of degree 7 (|r| <= ln2/2:
 *   truncation 5e-9), times 2^k built in the exponent bits. Max error 1.3 ulp
 *   over [-87, 88]; inputs are clamped there (exp(-87) = 1.6e-38 stands for
 *   the denormals and 0 below it; exp(88) for overflow), NaN passes through.
 *   Measured 1.1-1.5x the throughput of libmvec's AVX2 expf (CPU time). */
#include "kernels/host/vmath.h"

#include <math.h>

/* GCC only: clang rejects the libmvec call below without an AVX ABI. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GPA_NO_VMATH)
#define GPA__HAVE_VMATH 1
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma")))

TARGET static inline __m256 exp8(__m256 x) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x); /* NaN: min/max return x */
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
  __m256 v = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
  __m256 k = _mm256_sub_ps(v, magic);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_sub_epi32(_mm256_castps_si256(v), _mm256_set1_epi32(0x4B400000 - 127));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
/* glibc's libmvec (in libm's link script): AVX2 erfcf, at most 4 ulp */
__m256 _ZGVdN8v_erfcf(__m256 x);
#define erfc8 _ZGVdN8v_erfcf
#else
TARGET static inline __m256 erfc8(__m256 x) {
  float t[8];
  _mm256_storeu_ps(t, x);
  for (int i = 0; i < 8; i++) t[i] = erfcf(t[i]);
  return _mm256_loadu_ps(t);
}
#endif

/* the tail goes through a zero-padded block */
#define GPA__VLOOP(NAME, FN)                                                     \
  TARGET static void NAME(float *dst, const float *src, int64_t n) {             \
    int64_t i = 0;                                                               \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, FN(_mm256_loadu_ps(src + i))); \
    if (i < n) {                                                                 \
      float t[8] = {0};                                                          \
      memcpy(t, src + i, (size_t)(n - i) * sizeof *t);                           \
      _mm256_storeu_ps(t, FN(_mm256_loadu_ps(t)));                               \
      memcpy(dst + i, t, (size_t)(n - i) * sizeof *t);                           \
    }                                                                            \
  }

GPA__VLOOP(vexp_256, exp8)
GPA__VLOOP(verfc_256, erfc8)

/* 1: AVX2 + FMA. Read once; a race only repeats the check. */
static int have_avx2(void) {
  static _Atomic int cached = -1;
  int c = atomic_load_explicit(&cached, memory_order_relaxed);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    atomic_store_explicit(&cached, c, memory_order_relaxed);
  }
  return c;
}
#endif

void gpa__vexpf(float *dst, const float *src, int64_t n) {
#ifdef GPA__HAVE_VMATH
  if (have_avx2()) {
    vexp_256(dst, src, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = expf(src[i]);
}

void gpa__verfcf(float *dst, const float *src, int64_t n) {
#ifdef GPA__HAVE_VMATH
  if (have_avx2()) {
    verfc_256(dst, src, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) dst[i] = erfcf(src[i]);
}
