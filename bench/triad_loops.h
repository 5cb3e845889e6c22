/* The STREAM triad's loops, a[i] = b[i] + 3 c[i] for i in [0, n): ordinary
 * stores (gcc vectorizes them; the AVX2 build where the CPU has it) and
 * non-temporal stores (AVX2+FMA, or SSE on CPUs without; arrays 32-byte
 * aligned, n a multiple of 8); and a non-temporal copy a[i] = b[i], the
 * memory pattern of an op with one input and one output; gpa_triad_nt and
 * gpa_copy_nt pick the form for this CPU. Shared by gpa-bench's reference
 * (bench/triad.c) and the bench/ab tools (bench/ab/ab_triad.h), so that both
 * measure the same loops. Header-only: the ab tools are single translation
 * units built outside CMake. */
#ifndef GPA_BENCH_TRIAD_LOOPS_H
#define GPA_BENCH_TRIAD_LOOPS_H
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GPA_TRIAD_X86 1
#endif

/* The ordinary-store loop, compiled twice (AVX2 and the baseline) and
 * chosen per call from the CPU's feature bits, as the non-temporal forms
 * below are. Not target_clones: its ifunc resolver runs while the program
 * is relocated, before a sanitizer's runtime has started, and under TSan
 * the instrumented resolver killed gpa-bench at load. */
static void gpa_triad_plain_base(float *restrict a, const float *restrict b, const float *restrict c, int64_t n) {
  for (int64_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
}
#ifdef GPA_TRIAD_X86
__attribute__((target("avx2"))) static void gpa_triad_plain_avx2(float *restrict a, const float *restrict b,
                                                                  const float *restrict c, int64_t n) {
  for (int64_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
}
#endif

static inline void gpa_triad_plain(float *restrict a, const float *restrict b, const float *restrict c, int64_t n) {
#ifdef GPA_TRIAD_X86
  if (__builtin_cpu_supports("avx2")) {
    gpa_triad_plain_avx2(a, b, c, n);
    return;
  }
#endif
  gpa_triad_plain_base(a, b, c, n);
}

#ifdef GPA_TRIAD_X86
__attribute__((target("avx2,fma"))) static void gpa_triad_nt_avx2(float *a, const float *b, const float *c,
                                                                   int64_t n) {
  const __m256 k = _mm256_set1_ps(3.0f);
  for (int64_t i = 0; i < n; i += 8)
    _mm256_stream_ps(a + i, _mm256_fmadd_ps(k, _mm256_load_ps(c + i), _mm256_load_ps(b + i)));
  _mm_sfence();
}
static void gpa_triad_nt_sse(float *a, const float *b, const float *c, int64_t n) {
  const __m128 k = _mm_set1_ps(3.0f);
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(k, _mm_load_ps(c + i))));
  _mm_sfence();
}
__attribute__((target("avx2"))) static void gpa_copy_nt_avx2(float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) _mm256_stream_ps(a + i, _mm256_load_ps(b + i));
  _mm_sfence();
}
static void gpa_copy_nt_sse(float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(a + i, _mm_load_ps(b + i));
  _mm_sfence();
}
#endif

/* The non-temporal forms for this CPU (ordinary stores off x86) */
static inline void gpa_triad_nt(float *a, const float *b, const float *c, int64_t n) {
#ifdef GPA_TRIAD_X86
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    gpa_triad_nt_avx2(a, b, c, n);
  else
    gpa_triad_nt_sse(a, b, c, n);
#else
  gpa_triad_plain(a, b, c, n);
#endif
}

static inline void gpa_copy_nt(float *a, const float *b, int64_t n) {
#ifdef GPA_TRIAD_X86
  if (__builtin_cpu_supports("avx2"))
    gpa_copy_nt_avx2(a, b, n);
  else
    gpa_copy_nt_sse(a, b, n);
#else
  memcpy(a, b, (size_t)n * sizeof *a);
#endif
}

#endif
