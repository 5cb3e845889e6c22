/* Tile GEMM: see tgemm.h. The AVX2 kernel keeps a 6x16 block of C in 12
 * registers and streams B rows; column edges use masked loads/stores, row
 * edges a smaller block, so every element takes the same FMA path. The
 * AVX-512F kernel is the same with 6x32 blocks in 12 zmm (and mask
 * registers at the column edges): on Intel cores with two 512-bit FMA
 * units twice the AVX2 kernel's work per cycle, where OpenBLAS's sgemm
 * (the rate attention is measured against) uses them too; on AMD Zen 4,
 * whose 512-bit FMAs take its two 256-bit pipes, half the loads and
 * instructions for the same FMA work. Each element is the same FMA chain
 * in either kernel: the same bits. */
#include "kernels/host/tgemm.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/host/simd_exp.h"

static int isa_cap; /* gpa__tgemm_isa: 0 auto, 1 AVX2 at most, 2 plain C */

void gpa__tgemm_isa(int cap) { __atomic_store_n(&isa_cap, cap, __ATOMIC_RELAXED); }

/* 2: AVX-512F, 1: AVX2+FMA, 0: plain C. GPA_TGEMM_AVX512=0 (the options
 * table) keeps the AVX2 kernel through gpa__tgemm_isa (benches). */
static int isa(void) {
#ifdef GPA__HAVE_AVX2_PATH
  static int cached = -1;
  int cap = __atomic_load_n(&isa_cap, __ATOMIC_RELAXED), c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = gpa__cpu_avx2() ? (__builtin_cpu_supports("avx512f") ? 2 : 1) : 0;
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return cap == 2 ? 0 : cap == 1 && c > 1 ? 1 : c;
#else
  return 0;
#endif
}

int gpa__tgemm_kernel(void) { return isa(); }

void gpa__transpose(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst, int64_t ldd) {
  /* 8x8 blocks keep both sides within a few cache lines. */
  for (int64_t r0 = 0; r0 < rows; r0 += 8)
    for (int64_t c0 = 0; c0 < cols; c0 += 8) {
      int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
      for (int64_t c = c0; c < c1; c++)
        for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
    }
}

static void tgemm_scalar(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                         int64_t ldb, float *C, int64_t ldc, int acc) {
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * ldc;
    if (!acc)
      for (int64_t j = 0; j < N; j++) c[j] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      float a = A[i * ars + k * acs];
      const float *b = B + k * ldb;
      for (int64_t j = 0; j < N; j++) c[j] = fmaf(a, b[j], c[j]);
    }
  }
}

#ifdef GPA__HAVE_AVX2_PATH
/* One MR x 16 block; MR and MASKED are constants after inlining. */
GPA__AVX2_ATTR static inline __attribute__((always_inline)) void block(const int MR, const int MASKED, int64_t K,
                                                                       const float *A, int64_t ars, int64_t acs,
                                                                       const float *B,
                                                                       int64_t ldb, float *C, int64_t ldc, int acc,
                                                                       __m256i m0, __m256i m1) {
  __m256 c0[6], c1[6];
#pragma GCC unroll 6
  for (int r = 0; r < MR; r++) {
    if (acc) {
      c0[r] = MASKED ? _mm256_maskload_ps(C + r * ldc, m0) : _mm256_loadu_ps(C + r * ldc);
      c1[r] = MASKED ? _mm256_maskload_ps(C + r * ldc + 8, m1) : _mm256_loadu_ps(C + r * ldc + 8);
    } else {
      c0[r] = _mm256_setzero_ps();
      c1[r] = _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < K; k++) {
    const float *b = B + k * ldb;
    __m256 b0 = MASKED ? _mm256_maskload_ps(b, m0) : _mm256_loadu_ps(b);
    __m256 b1 = MASKED ? _mm256_maskload_ps(b + 8, m1) : _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
      __m256 a = _mm256_broadcast_ss(A + r * ars + k * acs);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; r++) {
    if (MASKED) {
      _mm256_maskstore_ps(C + r * ldc, m0, c0[r]);
      _mm256_maskstore_ps(C + r * ldc + 8, m1, c1[r]);
    } else {
      _mm256_storeu_ps(C + r * ldc, c0[r]);
      _mm256_storeu_ps(C + r * ldc + 8, c1[r]);
    }
  }
}

#define GPA__BLOCK_CASES(MASKED)                                                           \
  switch (mr) {                                                                            \
    case 6: block(6, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, m0, m1); break;               \
    case 5: block(5, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, m0, m1); break;               \
    case 4: block(4, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, m0, m1); break;               \
    case 3: block(3, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, m0, m1); break;               \
    case 2: block(2, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, m0, m1); break;               \
    default: block(1, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, m0, m1); break;              \
  }

GPA__AVX2_ATTR static void tgemm_avx2(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars,
                                      int64_t acs, const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t j = 0; j < N; j += 16) {
    int64_t nc = N - j < 16 ? N - j : 16;
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nc), iota);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nc - 8), iota);
    const float *b = B + j;
    for (int64_t i = 0; i < M; i += 6) {
      int mr = M - i < 6 ? (int)(M - i) : 6;
      const float *a = A + i * ars;
      float *c = C + i * ldc + j;
      if (nc == 16) {
        GPA__BLOCK_CASES(0)
      } else {
        GPA__BLOCK_CASES(1)
      }
    }
  }
}

#define GPA__512 __attribute__((target("avx512f")))
/* One MR x 32 block in zmm; MR and MASKED are constants after inlining.
 * Column edges through the masks k0, k1 (MASKED; full blocks use plain
 * loads and stores). */
GPA__512 static inline __attribute__((always_inline)) void block512(const int MR, const int MASKED, int64_t K,
                                                                   const float *A,
                                                                   int64_t ars, int64_t acs, const float *B,
                                                                   int64_t ldb, float *C, int64_t ldc, int acc,
                                                                   __mmask16 k0, __mmask16 k1) {
  __m512 c0[6], c1[6];
#pragma GCC unroll 6
  for (int r = 0; r < MR; r++) {
    c0[r] = !acc ? _mm512_setzero_ps() : MASKED ? _mm512_maskz_loadu_ps(k0, C + r * ldc) : _mm512_loadu_ps(C + r * ldc);
    c1[r] = !acc     ? _mm512_setzero_ps()
            : MASKED ? _mm512_maskz_loadu_ps(k1, C + r * ldc + 16)
                     : _mm512_loadu_ps(C + r * ldc + 16);
  }
  for (int64_t k = 0; k < K; k++) {
    const float *b = B + k * ldb;
    __m512 b0 = MASKED ? _mm512_maskz_loadu_ps(k0, b) : _mm512_loadu_ps(b);
    __m512 b1 = MASKED ? _mm512_maskz_loadu_ps(k1, b + 16) : _mm512_loadu_ps(b + 16);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
      __m512 a = _mm512_set1_ps(A[r * ars + k * acs]);
      c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; r++) {
    if (MASKED) {
      _mm512_mask_storeu_ps(C + r * ldc, k0, c0[r]);
      _mm512_mask_storeu_ps(C + r * ldc + 16, k1, c1[r]);
    } else {
      _mm512_storeu_ps(C + r * ldc, c0[r]);
      _mm512_storeu_ps(C + r * ldc + 16, c1[r]);
    }
  }
}

#define GPA__BLOCK512_CASES(MASKED)                                                    \
  switch (mr) {                                                                        \
    case 6: block512(6, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, k0, k1); break;  \
    case 5: block512(5, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, k0, k1); break;  \
    case 4: block512(4, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, k0, k1); break;  \
    case 3: block512(3, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, k0, k1); break;  \
    case 2: block512(2, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, k0, k1); break;  \
    default: block512(1, MASKED, K, a, ars, acs, b, ldb, c, ldc, acc, k0, k1); break; \
  }

GPA__512 static void tgemm_avx512(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs,
                                  const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
  for (int64_t j = 0; j < N; j += 32) {
    int64_t nc = N - j < 32 ? N - j : 32;
    __mmask16 k0 = (__mmask16)(nc >= 16 ? 0xffff : (1u << nc) - 1);
    __mmask16 k1 = (__mmask16)(nc >= 32 ? 0xffff : nc > 16 ? (1u << (nc - 16)) - 1 : 0);
    for (int64_t i = 0; i < M; i += 6) {
      const float *a = A + i * ars, *b = B + j;
      float *c = C + i * ldc + j;
      int mr = M - i < 6 ? (int)(M - i) : 6;
      if (nc == 32) {
        GPA__BLOCK512_CASES(0)
      } else {
        GPA__BLOCK512_CASES(1)
      }
    }
  }
}
#endif

void gpa__tgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t ars, int64_t acs, const float *B,
                int64_t ldb, float *C, int64_t ldc, int acc) {
  if (M <= 0 || N <= 0) return;
#ifdef GPA__HAVE_AVX2_PATH
  int i = isa();
  if (i == 2) { tgemm_avx512(M, N, K, A, ars, acs, B, ldb, C, ldc, acc); return; }
  if (i == 1) { tgemm_avx2(M, N, K, A, ars, acs, B, ldb, C, ldc, acc); return; }
#endif
  tgemm_scalar(M, N, K, A, ars, acs, B, ldb, C, ldc, acc);
}
