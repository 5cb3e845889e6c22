/* Warp-level tensor-core building blocks for sm_80+ (PTX ISA: mma.sync
 * m16n8k16, ldmatrix, cp.async), as inline PTX under nvcc and as emulated
 * collectives on the simulated device (sim/emu/gpa_sim_mma.h), where each
 * lane holds only its own fragment registers, exactly as on the device. So
 * a kernel written against these helpers depends on the documented
 * per-lane layouts the same way under both compilers, and the sim checks
 * that dependence instead of hiding it (the wmma shadow cannot).
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
 * floating point type"); g = lane / 4, t = lane % 4; a .b32 register holds
 * two 16-bit elements, the lower column (or k) in its low half:
 *   A 16x16 (row): a[0] = (g,   2t..2t+1)  a[1] = (g+8, 2t..2t+1)
 *                  a[2] = (g,   2t+8..9)   a[3] = (g+8, 2t+8..9)
 *   B 16x8  (col): b[0] = (k 2t..2t+1, n g)  b[1] = (k 2t+8..9, n g)
 *   C/D 16x8 f32:  d[0..1] = (g, 2t..2t+1)  d[2..3] = (g+8, 2t..2t+1)
 * ldmatrix .x4: lanes 8m..8m+7 give the row addresses (16 contiguous bytes
 * each) of 8x8 matrix m; register m of lane l then holds row l/4, elements
 * 2(l%4) and 2(l%4)+1 of matrix m (.trans: of its transpose). */
#ifndef GPA_MMA_H
#define GPA_MMA_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string.h>

#include <type_traits>

#include "gpa_kernel.h"

#ifdef GPA_SIM_EMU
#include "gpa_sim_mma.h"
#endif

/* Two values rounded to T, packed as one fragment register (lo first). */
template <class T>
static __device__ __forceinline__ unsigned gpa_pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned gpa_pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &v, 4);
  return u;
}
template <>
__device__ __forceinline__ unsigned gpa_pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  unsigned u;
  memcpy(&u, &v, 4);
  return u;
}

/* d += a b (m16n8k16, fp32 accumulate), T = __nv_bfloat16 or __half. */
template <class T>
static __device__ __forceinline__ void gpa_mma16816(float d[4], const unsigned a[4], const unsigned b[2]) {
#ifdef GPA_SIM_EMU
  gpa_sim_mma16816<T>(d, a, b);
#else
  if constexpr (std::is_same<T, __nv_bfloat16>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* Four 8x8 b16 matrices from shared memory; `row` is this lane's row
 * address (16-byte aligned). */
static __device__ __forceinline__ void gpa_ldmatrix_x4(unsigned r[4], const void *row) {
#ifdef GPA_SIM_EMU
  gpa_sim_ldmatrix_x4(r, row, false);
#else
  const unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#endif
}
static __device__ __forceinline__ void gpa_ldmatrix_x4_trans(unsigned r[4], const void *row) {
#ifdef GPA_SIM_EMU
  gpa_sim_ldmatrix_x4(r, row, true);
#else
  const unsigned s = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#endif
}

/* 16 bytes global -> shared, asynchronous (L2 only, .cg); zeros instead
 * when !valid (src-size 0: nothing is read, src need not be valid). Visible
 * to this thread after the wait of its group, to others after that wait
 * and a barrier. */
static __device__ __forceinline__ void gpa_cp_async16(void *dst, const void *src, bool valid) {
#ifdef GPA_SIM_EMU
  gpa_sim_cp_async16(dst, src, valid);
#else
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
#endif
}
static __device__ __forceinline__ void gpa_cp_async_commit(void) {
#ifdef GPA_SIM_EMU
  gpa_sim_cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/* Waits until at most N of this thread's committed groups are pending. */
template <int N>
static __device__ __forceinline__ void gpa_cp_async_wait(void) {
#ifdef GPA_SIM_EMU
  gpa_sim_cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
/* Double buffering, at a step: when there is a next step (more), its
 * copies go out as one group (load(), into the other buffer), then the
 * wait leaves at most that group pending: this step's copies have landed
 * for this thread (for all after a barrier). */
template <class F>
static __device__ __forceinline__ void gpa_cp_async_next(bool more, F &&load) {
  if (more) {
    load();
    gpa_cp_async_commit();
    gpa_cp_async_wait<1>();
  } else {
    gpa_cp_async_wait<0>();
  }
}

/* ---- tf32 (sm_80+): m16n8k8 with fp32 accumulation, and the split of an
 * fp32 value into two tf32 values for 3xTF32 products.
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8" with .tf32);
 * one 32-bit element per register, g = lane / 4, t = lane % 4:
 *   A 16x8 (row): a[0] = (g, t)  a[1] = (g+8, t)  a[2] = (g, t+4)  a[3] = (g+8, t+4)
 *   B 8x8  (col): b[0] = (k t, n g)  b[1] = (k t+4, n g)
 *   C/D 16x8 f32: as m16n8k16's.
 * The tensor core reads only the tf32 bits of an operand (sign, 8-bit
 * exponent, 10-bit mantissa); cvt.rna rounds to them (nearest, ties away
 * from zero) and zeroes the 13 low bits. */
static __device__ __forceinline__ unsigned gpa_cvt_tf32(float x) {
#ifdef GPA_SIM_EMU
  return gpa_sim_cvt_tf32(x);
#else
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#endif
}
/* cvt.rna.tf32.f32 in two integer instructions: add half a tf32 ulp to the
 * magnitude (sign-magnitude bits), drop the 13 low bits. The same value as
 * cvt.rna for every finite x and for inf (the carry into the exponent is
 * the correct rounding); a NaN may come out as inf, which the split's
 * x - big turns back into NaN. ptxas expands cvt.rna.tf32.f32 to about
 * four instructions on sm_90 (its NaN test and select): the split below
 * runs twice per operand element, so it uses this. */
static __device__ __forceinline__ unsigned gpa_rna_tf32_bits(float x) {
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}
/* x = big + small + O(2^-22 |x|): big = tf32(x), small = tf32(x - big),
 * both rounded to nearest, ties away (x - big is exact in fp32). */
static __device__ __forceinline__ void gpa_split_tf32(float x, unsigned &big, unsigned &small) {
  big = gpa_rna_tf32_bits(x);
  small = gpa_rna_tf32_bits(x - __uint_as_float(big));
}
/* d += a b, one m16n8k8 tf32 product. */
static __device__ __forceinline__ void gpa_mma1688_tf32(float d[4], const unsigned a[4], const unsigned b[2]) {
#ifdef GPA_SIM_EMU
  gpa_sim_mma1688_tf32(d, a, b, nullptr, nullptr);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
/* d += a b in 3xTF32 (what CUTLASS calls OpMultiplyAddFastF32): a = ab + as,
 * b = bb + bs split as above, d += as bb, d += ab bs, d += ab bb (the small
 * terms first; as bs, below 2^-22 |a b|, is left out). Each product of two
 * tf32 values is exact in fp32, so a term is off by about 3 * 2^-22 of
 * |a b| against fp32's 2^-24 rounding of the product: fp32 accuracy in
 * practice (tests/test_attention_f32tc.c measures it), where one tf32
 * product (2^-11) is not. */
static __device__ __forceinline__ void gpa_mma1688_3xtf32(float d[4], const unsigned ab[4], const unsigned as[4],
                                                          const unsigned bb[2], const unsigned bs[2]) {
#ifdef GPA_SIM_EMU
  gpa_sim_mma1688_tf32(d, ab, bb, as, bs); /* the three products in one exchange, in this order */
#else
  gpa_mma1688_tf32(d, as, bb);
  gpa_mma1688_tf32(d, ab, bs);
  gpa_mma1688_tf32(d, ab, bb);
#endif
}
#endif
