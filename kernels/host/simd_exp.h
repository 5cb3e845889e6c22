/* exp of 8 floats in AVX2+FMA registers, for the host kernels' hot loops
 * (attention softmax, fused GELU). Include only from functions compiled with
 * GPA__AVX2_ATTR. Cephes-style: x = n*ln2 + r with n = round(x*log2e), a
 * degree-6 polynomial for e^r (about 1 ulp on [-87, 88]), 2^n through the
 * exponent bits. Inputs below -87.3 give exactly 0 (so masked and -inf
 * scores vanish), inputs above 88 give e^88 (1.65e38), NaN stays NaN. */
#ifndef GPA_KERNELS_HOST_SIMD_EXP_H
#define GPA_KERNELS_HOST_SIMD_EXP_H

#if defined(__x86_64__) && defined(__GNUC__)
#define GPA__HAVE_AVX2_PATH 1
#include <immintrin.h>
#define GPA__AVX2_ATTR __attribute__((target("avx2,fma")))

/* Whether the CPU runs the AVX2+FMA paths. Any thread. */
static inline int gpa__cpu_avx2(void) {
  static int cached = -1; /* every writer stores the same value; relaxed atomics keep TSan quiet */
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
}

/* exp for x already in [-87.33, 88] (no clamps, no special cases; NaN in
 * gives NaN out): the core of gpa__exp8, for callers that bound their
 * arguments themselves. */
GPA__AVX2_ATTR static inline __m256 gpa__exp8_in_range(__m256 xc) {
  __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

GPA__AVX2_ATTR static inline __m256 gpa__exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.0f);
  const __m256 lo = _mm256_set1_ps(-87.3365447505531f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 xc = _mm256_min_ps(x, hi);
  xc = _mm256_max_ps(xc, lo);
  __m256 y = gpa__exp8_in_range(xc);
  y = _mm256_andnot_ps(under, y);
  /* NaN in -> NaN out (min/max above dropped it) */
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#else
static inline int gpa__cpu_avx2(void) { return 0; } /* no AVX2 paths built */
#endif

#endif
