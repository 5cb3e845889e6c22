/* What the FlashAttention-2-structured kernels (attention_fa2.cu forward,
 * attention_fa2_bwd.cu backward) share: tile copies through cp.async, the
 * ldmatrix addressing of the three operand patterns, and the re-lay of an
 * fp32 accumulator pair as an A operand. Tiles live in shared memory as
 * rows of DM + 8 elements (DM: the head-dim class): a row is then 16 bytes
 * past a multiple of 128, so the 8 rows one ldmatrix phase reads start in
 * 8 different 16-byte bank groups (no conflicts), and every 16-byte chunk
 * stays aligned for cp.async. Tile sizes are named KT (keys) and QT
 * (queries): attention.cu, in the same translation unit (the attn module),
 * defines BC and BQ as macros. */
#ifndef GPA_ATTENTION_FA2_H
#define GPA_ATTENTION_FA2_H
#include "attention_common.h"
#include "gpa_mma.h"

/* Rows [0, ROWS) of a head (rows `ld` elements apart in global memory)
 * into dst [ROWS][LD], columns [0, D) (D % 8 == 0); rows >= nvalid are
 * zero-filled, so no garbage (NaN bits) reaches a product. NT threads. */
template <class T, int ROWS, int LD, int NT>
static __device__ __forceinline__ void fa2_load(T *dst, const T *src, long long ld, int nvalid, int D, int tid) {
  const int cpr = D >> 3;
  for (int e = tid; e < ROWS * cpr; e += NT) {
    const int r = e / cpr, c = (e - r * cpr) << 3;
    const bool ok = r < nvalid;
    gpa_cp_async16(dst + r * LD + c, ok ? src + r * ld + c : src, ok);
  }
}
/* A loop kept rolled (UNROLL's opposite; the emulated build's host
 * compiler knows neither pragma). */
#ifdef GPA_SIM_EMU
#define FA2_ROLLED
#else
#define FA2_ROLLED _Pragma("unroll 1")
#endif

/* The same copy with D = DC known at compile time (the exact-head-dim
 * kernels): the row/column split is a division by a constant (a multiply
 * and a shift), where fa2_load's run-time one takes a reciprocal, a
 * correction and a branch per 16-byte chunk. Not unrolled: unrolled, every
 * chunk's address stayed live across the loop and the D 128 kernels
 * spilled (ptxas -v). */
template <class T, int ROWS, int LD, int NT, int DC>
static __device__ __forceinline__ void fa2_load_c(T *dst, const T *src, long long ld, int nvalid, int tid) {
  constexpr int cpr = DC >> 3, n = ROWS * cpr;
  FA2_ROLLED
  for (int i = 0; i < (n + NT - 1) / NT; i++) {
    const int e = tid + i * NT, r = e / cpr, c = (e - r * cpr) << 3;
    if (n % NT == 0 || e < n) {
      const bool ok = r < nvalid;
      gpa_cp_async16(dst + r * LD + c, ok ? src + r * ld + c : src, ok);
    }
  }
}

/* fa2_load_c for the exact kernels (EX, D == DC), else fa2_load. */
template <class T, int ROWS, int LD, int NT, bool EX, int DC>
static __device__ __forceinline__ void fa2_load_x(T *dst, const T *src, long long ld, int nvalid, int D, int tid) {
  if constexpr (EX)
    fa2_load_c<T, ROWS, LD, NT, DC>(dst, src, ld, nvalid, tid);
  else
    fa2_load<T, ROWS, LD, NT>(dst, src, ld, nvalid, D, tid);
}

/* 1 when compiling for sm_8x: its ptxas schedules the unguarded k-steps of
 * the exact D 128 kernels into spills (ptxas -v), so there those keep the
 * run-time column test that bounds how far it hoists the next step's loads
 * (attention_fa2.cu, attention_fa2_bwd.cu). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FA2_SM8X 1
#else
#define FA2_SM8X 0
#endif

/* 2^x. The exact kernels (EX) take ex2.approx.ftz (one MUFU.EX2; a result
 * below 2^-126 flushes to 0, far under the rounding of P to T that follows);
 * exp2f without fast math adds a range test and two multiplies around it
 * for subnormal results. The emulated build computes exp2f either way. */
template <bool EX>
static __device__ __forceinline__ float fa2_exp2(float x) {
#ifndef GPA_SIM_EMU
  if constexpr (EX) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
  }
#endif
  return exp2f(x);
}

/* A operand (16 rows x 16 k, row-major at a, row stride LD). */
template <int LD, class T>
static __device__ __forceinline__ void fa2_lda(unsigned r[4], const T *a, int lane) {
  gpa_ldmatrix_x4(r, a + (lane & 15) * LD + (lane >> 4) * 8);
}
/* Two B operands (k 16 x n 8 each) from a tile stored n-major [n][k]
 * (K for Q K^T): r[0..1] columns n 0-7, r[2..3] columns 8-15. */
template <int LD, class T>
static __device__ __forceinline__ void fa2_ldb_nk(unsigned r[4], const T *b, int lane) {
  gpa_ldmatrix_x4(r, b + ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8);
}
/* Two B operands from a tile stored k-major [k][n] (V for P V). */
template <int LD, class T>
static __device__ __forceinline__ void fa2_ldb_kn(unsigned r[4], const T *b, int lane) {
  gpa_ldmatrix_x4_trans(r, b + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8);
}
/* Two A operands (16 rows x 16 k each, rows are the tile's columns) from a
 * tile stored k-major [k][m] (Q^T or dO^T in the backward): r[0..3] rows
 * 0-15 of the transpose, k 0-15. */
template <int LD, class T>
static __device__ __forceinline__ void fa2_lda_t(unsigned r[4], const T *a, int lane) {
  /* matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15) */
  gpa_ldmatrix_x4_trans(r, a + ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8);
}

/* The accumulators of two adjacent n-tiles (16 x 8 each: columns c, c+8)
 * as the A operand over k = those 16 columns: the C layout of mma's rows g
 * and g+8, columns 2t, 2t+1 is the A layout's, so P never leaves the
 * registers (FlashAttention-2's re-lay). Rounded to T. */
template <class T>
static __device__ __forceinline__ void fa2_acc_to_a(unsigned a[4], const float lo[4], const float hi[4]) {
  a[0] = gpa_pack2<T>(lo[0], lo[1]);
  a[1] = gpa_pack2<T>(lo[2], lo[3]);
  a[2] = gpa_pack2<T>(hi[0], hi[1]);
  a[3] = gpa_pack2<T>(hi[2], hi[3]);
}

/* Two adjacent gradient values at element `at` of an array in fp32 or,
 * when grads_t, in T (each rounded once from its fp32 sum): the backward's
 * pair stores (attention_fa2_bwd.cu, attention_fa2_dkv128.cu). */
template <class T>
static __device__ __forceinline__ void fa2_store2(void *base, long long at, float a, float b, int grads_t) {
  if (grads_t)
    *reinterpret_cast<unsigned *>(static_cast<T *>(base) + at) = gpa_pack2<T>(a, b);
  else
    *reinterpret_cast<float2 *>(static_cast<float *>(base) + at) = make_float2(a, b);
}
#endif
