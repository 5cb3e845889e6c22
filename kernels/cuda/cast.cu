/* cast (ops/cast): float storage conversions, bit for bit the host's
 * (kernels/host/bf16.h, f16.h): widening exact, narrowing to nearest even,
 * NaN kept quiet, overflow to +-inf; f16 <-> bf16 through fp32 (exact), so
 * one rounding. Part of module "ew" (one translation unit with
 * elementwise.cu). Each thread moves eight values per step as 16-byte
 * accesses when the host found both pointers 16-byte aligned (`vec`): one
 * uint4 of 16-bit words, two float4s of fp32; a memory-bound op needs the
 * bytes in flight (issue 25). The tail, or everything when unaligned, one
 * value at a time. */
#include "gpa_bf16.h"

enum { GPA_CAST_F32 = 0, GPA_CAST_BF16 = 1, GPA_CAST_F16 = 2 };

static __device__ __forceinline__ float gpa_h2f(unsigned short h) {
  const unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13)); /* inf, NaN */
  if (e) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
  return __uint_as_float(__float_as_uint((float)m * 5.9604644775390625e-8f) | sign); /* m * 2^-24, exact */
}

static __device__ __forceinline__ unsigned short gpa_f2h(float f) {
  const unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); /* rounds to 65520 or more */
  if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded to nearest even in integers */
    const unsigned e = a >> 23, shift = 126u - e;
    if (e == 0u || shift > 25u) return (unsigned short)sign;
    const unsigned m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rem = m & ((1u << shift) - 1u),
                   half = 1u << (shift - 1u);
    return (unsigned short)(sign | (q + (rem > half || (rem == half && (q & 1u)))));
  }
  const unsigned r = a + 0xfffu + ((a >> 13) & 1u);
  return (unsigned short)(sign | ((r - 0x38000000u) >> 13));
}

template <int S>
static __device__ __forceinline__ float gpa_cast_ld(const void *p, long long i) {
  if (S == GPA_CAST_F32) return static_cast<const float *>(p)[i];
  const unsigned short h = static_cast<const unsigned short *>(p)[i];
  return S == GPA_CAST_BF16 ? gpa_bf2f(h) : gpa_h2f(h);
}

template <int D>
static __device__ __forceinline__ void gpa_cast_st(void *p, long long i, float v) {
  if (D == GPA_CAST_F32) static_cast<float *>(p)[i] = v;
  else static_cast<unsigned short *>(p)[i] = D == GPA_CAST_BF16 ? gpa_f2bf(v) : gpa_f2h(v);
}

/* v[0..8) = p[i0 .. i0+8), p + i0 16-byte aligned */
template <int S>
static __device__ __forceinline__ void gpa_cast_ld8(const void *p, long long i0, float *v) {
  if (S == GPA_CAST_F32) {
    const float4 a = *reinterpret_cast<const float4 *>(static_cast<const float *>(p) + i0);
    const float4 b = *reinterpret_cast<const float4 *>(static_cast<const float *>(p) + i0 + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
  const uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const unsigned short *>(p) + i0);
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
GPA_UNROLL
  for (int k = 0; k < 4; k++) {
    const unsigned short lo = (unsigned short)(w[k] & 0xffffu), hi = (unsigned short)(w[k] >> 16);
    v[2 * k] = S == GPA_CAST_BF16 ? gpa_bf2f(lo) : gpa_h2f(lo);
    v[2 * k + 1] = S == GPA_CAST_BF16 ? gpa_bf2f(hi) : gpa_h2f(hi);
  }
}

template <int D>
static __device__ __forceinline__ unsigned gpa_cast_pack2(float lo, float hi) {
  return D == GPA_CAST_BF16 ? ((unsigned)gpa_f2bf(lo) | ((unsigned)gpa_f2bf(hi) << 16))
                            : ((unsigned)gpa_f2h(lo) | ((unsigned)gpa_f2h(hi) << 16));
}

template <int D>
static __device__ __forceinline__ void gpa_cast_st8(void *p, long long i0, const float *v) {
  if (D == GPA_CAST_F32) {
    float *q = static_cast<float *>(p) + i0;
    *reinterpret_cast<float4 *>(q) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4 *>(q + 4) = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  uint4 u;
  u.x = gpa_cast_pack2<D>(v[0], v[1]);
  u.y = gpa_cast_pack2<D>(v[2], v[3]);
  u.z = gpa_cast_pack2<D>(v[4], v[5]);
  u.w = gpa_cast_pack2<D>(v[6], v[7]);
  *reinterpret_cast<uint4 *>(static_cast<unsigned short *>(p) + i0) = u;
}

template <int S, int D>
static __device__ __forceinline__ void gpa_cast_body(void *y, const void *x, long long n, int vec) {
#define CH(i0)                   \
  float v_[8];                   \
  gpa_cast_ld8<S>(x, (i0), v_);  \
  gpa_cast_st8<D>(y, (i0), v_);
#define ONE(i) gpa_cast_st<D>(y, (i), gpa_cast_ld<S>(x, (i)));
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* Written out one by one: the simulator's kernel scan (sim/emu) reads the
 * extern "C" declarations. */
extern "C" __global__ void gpa_cast_f32_bf16(void *y, const void *x, long long n, int vec) {
  gpa_cast_body<GPA_CAST_F32, GPA_CAST_BF16>(y, x, n, vec);
}
extern "C" __global__ void gpa_cast_bf16_f32(void *y, const void *x, long long n, int vec) {
  gpa_cast_body<GPA_CAST_BF16, GPA_CAST_F32>(y, x, n, vec);
}
extern "C" __global__ void gpa_cast_f32_f16(void *y, const void *x, long long n, int vec) {
  gpa_cast_body<GPA_CAST_F32, GPA_CAST_F16>(y, x, n, vec);
}
extern "C" __global__ void gpa_cast_f16_f32(void *y, const void *x, long long n, int vec) {
  gpa_cast_body<GPA_CAST_F16, GPA_CAST_F32>(y, x, n, vec);
}
extern "C" __global__ void gpa_cast_bf16_f16(void *y, const void *x, long long n, int vec) {
  gpa_cast_body<GPA_CAST_BF16, GPA_CAST_F16>(y, x, n, vec);
}
extern "C" __global__ void gpa_cast_f16_bf16(void *y, const void *x, long long n, int vec) {
  gpa_cast_body<GPA_CAST_F16, GPA_CAST_BF16>(y, x, n, vec);
}
