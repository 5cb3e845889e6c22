/* bf16 storage in the CUDA kernels: values live in memory as raw 16-bit
 * words (the top half of an fp32) and are widened to fp32 for all math.
 * Widening is exact; narrowing rounds to nearest even with the same integer
 * steps as the host (kernels/host/bf16.h), so host and device round an fp32
 * value to the same bits, NaN included. Eight values move as one 16-byte
 * load/store (uint4) where the host checked alignment. */
#ifndef GPA_BF16_H
#define GPA_BF16_H
#include "gpa_kernel.h"

typedef unsigned short gpa_bf16;

/* Loops over the 8-value register arrays are unrolled (no local memory); the
 * host compiler of the emulated build does not know the pragma. */
#ifdef GPA_SIM_EMU
#define GPA_UNROLL
#else
#define GPA_UNROLL _Pragma("unroll")
#endif

static __device__ __forceinline__ float gpa_bf2f(gpa_bf16 h) { return __uint_as_float((unsigned)h << 16); }

static __device__ __forceinline__ gpa_bf16 gpa_f2bf(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (gpa_bf16)((u >> 16) | 0x40u);
  return (gpa_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* v[0..8) = p[0..8); p 16-byte aligned */
static __device__ __forceinline__ void gpa_bf8_load(const gpa_bf16 *p, float *v) {
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
GPA_UNROLL
  for (int k = 0; k < 4; k++) {
    v[2 * k] = __uint_as_float(w[k] << 16);
    v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}

static __device__ __forceinline__ unsigned gpa_bf2_pack(float lo, float hi) {
  return (unsigned)gpa_f2bf(lo) | ((unsigned)gpa_f2bf(hi) << 16);
}

static __device__ __forceinline__ void gpa_bf8_store(gpa_bf16 *p, const float *v) {
  uint4 u;
  u.x = gpa_bf2_pack(v[0], v[1]);
  u.y = gpa_bf2_pack(v[2], v[3]);
  u.z = gpa_bf2_pack(v[4], v[5]);
  u.w = gpa_bf2_pack(v[6], v[7]);
  *reinterpret_cast<uint4 *>(p) = u;
}

/* One value by the storage type T (float or gpa_bf16): p[i] widened to
 * fp32, v stored at p[i], and an fp32 value as a T (rounded for bf16); the
 * scalar forms of gpa_ld16 / gpa_st16 below. */
static __device__ __forceinline__ float gpa_ldf(const float *p, long long i) { return p[i]; }
static __device__ __forceinline__ float gpa_ldf(const gpa_bf16 *p, long long i) { return gpa_bf2f(p[i]); }
static __device__ __forceinline__ void gpa_stf(float *p, long long i, float v) { p[i] = v; }
static __device__ __forceinline__ void gpa_stf(gpa_bf16 *p, long long i, float v) { p[i] = gpa_f2bf(v); }
template <class T>
static __device__ __forceinline__ T gpa_f2t(float v);
template <>
__device__ __forceinline__ float gpa_f2t<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ gpa_bf16 gpa_f2t<gpa_bf16>(float v) {
  return gpa_f2bf(v);
}

/* One 16-byte vector as floats, by the storage type: 4 f32 or 8 bf16
 * values (p 16-byte aligned); the row kernels of layernorm (norm.cu) and
 * cross-entropy (metrics.cu) are templates over it. */
static __device__ __forceinline__ void gpa_ld16(const float *p, float *v) {
  const float4 a = *reinterpret_cast<const float4 *>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
static __device__ __forceinline__ void gpa_ld16(const gpa_bf16 *p, float *v) { gpa_bf8_load(p, v); }
static __device__ __forceinline__ void gpa_st16(float *p, const float *v) {
  *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
static __device__ __forceinline__ void gpa_st16(gpa_bf16 *p, const float *v) { gpa_bf8_store(p, v); }

/* Grid-stride over n items as n/8 chunks of 8 (vec) and a scalar tail; body
 * CHUNK(i0) handles [i0, i0+8), ONE(i) one element. */
#define GPA_BF8_LOOP(n, vec, CHUNK, ONE)                                                                   \
  do {                                                                                                     \
    const long long t0_ = (long long)blockIdx.x * blockDim.x + threadIdx.x;                                \
    const long long st_ = (long long)gridDim.x * blockDim.x;                                               \
    const long long n8_ = (vec) ? (n) / 8 : 0;                                                             \
    for (long long c_ = t0_; c_ < n8_; c_ += st_) { CHUNK(c_ * 8); }                                       \
    for (long long i_ = n8_ * 8 + t0_; i_ < (n); i_ += st_) { ONE(i_); }                                   \
  } while (0)
#endif
