/* Memory-bound kernels of the CUDA backend: elementwise ops, GELU and the
 * optimizers (fp32), and bf16 storage variants of the elementwise ops and
 * GELU (fp32 math, eight values per 16-byte access) and of the optimizers
 * (bf16 grad and/or param, scalar loads; the fp32 optimizers take 16-byte
 * accesses when aligned). Grid-stride loops over 64-bit indices; the host side caps the grid
 * (backends/cuda/kernels.c). Semantics and formulas follow kernels/host/. */
#include "adamw_multi.h"
#include "gelu_tanh.h"
#include "gpa_bf16.h"

#define GS_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

/* Grid-stride over n floats as n/4 float4 chunks when `vec` (every pointer
 * 16-byte aligned: the host checks) and a scalar tail; CHUNK(i0) handles
 * [i0, i0+4), ONE(i) one element. A 16-byte access per thread keeps 4x the
 * bytes in flight of a scalar loop at the same occupancy (the fp32 GELU ran
 * at 0.77 of PyTorch on an H100 with 4-byte accesses, issue 25). Each
 * element's math is the scalar path's: the same bits either way. */
#define GPA_F4_LOOP(n, vec, CHUNK, ONE) GPA_F4_LOOP_IN(n, vec, blockIdx.x, gridDim.x, CHUNK, ONE)
/* The same over blocks [0, nblk) of a range of the grid (blk: this block's
 * index in it): adamw_multi gives each tensor its own blocks. */
#define GPA_F4_LOOP_IN(n, vec, blk, nblk, CHUNK, ONE)                                                      \
  do {                                                                                                     \
    const long long t0_ = (long long)(blk) * blockDim.x + threadIdx.x;                                    \
    const long long st_ = (long long)(nblk) * blockDim.x;                                                  \
    const long long n4_ = (vec) ? (n) / 4 : 0;                                                             \
    for (long long c_ = t0_; c_ < n4_; c_ += st_) { CHUNK(c_ * 4); }                                       \
    for (long long i_ = n4_ * 4 + t0_; i_ < (n); i_ += st_) { ONE(i_); }                                   \
  } while (0)

/* ---- basic elementwise ---------------------------------------------------------------------------- */

#define F4(a, i0) (*reinterpret_cast<const float4 *>((a) + (i0)))
#define ST4(a, i0) (*reinterpret_cast<float4 *>((a) + (i0)))

extern "C" __global__ void gpa_ew_add_f32(float *y, const float *a, const float *b, long long n, int vec) {
#define CH(i0)                                          \
  const float4 u = F4(a, i0), w = F4(b, i0);            \
  ST4(y, i0) = make_float4(u.x + w.x, u.y + w.y, u.z + w.z, u.w + w.w);
#define ONE(i) y[i] = a[i] + b[i];
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* The mixed form (ops/elementwise): y f32 = a f32 + b bf16, four values a
 * step (a and y float4, b 8 bytes) as gpa_ew_add_f32: the bits of the add
 * beside a cast of b. */
extern "C" __global__ void gpa_ew_add_f32_bf16(float *y, const float *a, const gpa_bf16 *b, long long n, int vec) {
#define CH(i0)                                                                                              \
  const float4 u = F4(a, i0);                                                                               \
  const uint2 w = *reinterpret_cast<const uint2 *>(b + (i0));                                               \
  ST4(y, i0) = make_float4(u.x + __uint_as_float(w.x << 16), u.y + __uint_as_float(w.x & 0xffff0000u),      \
                           u.z + __uint_as_float(w.y << 16), u.w + __uint_as_float(w.y & 0xffff0000u));
#define ONE(i) y[i] = a[i] + gpa_bf2f(b[i]);
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* y = alpha * x (+ y0 when y0 != NULL) */
extern "C" __global__ void gpa_ew_axpy_f32(float *y, const float *x, const float *y0, float alpha, long long n,
                                           int vec) {
  if (y0) {
#define CH(i0)                                          \
  const float4 u = F4(x, i0), w = F4(y0, i0);           \
  ST4(y, i0) = make_float4(alpha * u.x + w.x, alpha * u.y + w.y, alpha * u.z + w.z, alpha * u.w + w.w);
#define ONE(i) y[i] = alpha * x[i] + y0[i];
    GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
  } else {
#define CH(i0)                                          \
  const float4 u = F4(x, i0);                           \
  ST4(y, i0) = make_float4(alpha * u.x, alpha * u.y, alpha * u.z, alpha * u.w);
#define ONE(i) y[i] = alpha * x[i];
    GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
  }
}

static __device__ __forceinline__ int mask_at(const void *mask, int i32, long long i) {
  return i32 ? ((const int *)mask)[i] != 0 : ((const unsigned char *)mask)[i] != 0;
}

/* rows x d: y = x where mask[row] != 0, else 0 (vec: d % 4 == 0, so a
 * chunk lies in one row) */
extern "C" __global__ void gpa_ew_mask_zero_f32(float *y, const float *x, const void *mask, int mask_i32,
                                                long long rows, long long d, int vec) {
  const long long n = rows * d;
#define CH(i0) ST4(y, i0) = mask_at(mask, mask_i32, (i0) / d) ? F4(x, i0) : make_float4(0.f, 0.f, 0.f, 0.f);
#define ONE(i) y[i] = mask_at(mask, mask_i32, (i) / d) ? x[i] : 0.0f;
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* One thread per (b, column): y[b,d] = sum (or mean) over l of x[b,l,d],
 * masked when mask != NULL. Double accumulation in l order (deterministic,
 * as the host); f32 or bf16 storage. */
template <class T>
static __device__ __forceinline__ void sum_over_l(T *y, const T *x, const void *mask, int mask_i32, long long B,
                                                  long long L, long long D, int mean) {
  GS_LOOP(i, B * D) {
    const long long b = i / D, d = i % D;
    double acc = 0.0;
    long long count = 0;
    for (long long l = 0; l < L; l++) {
      if (mask && !mask_at(mask, mask_i32, b * L + l)) continue;
      count++;
      acc += (double)gpa_ldf(x, (b * L + l) * D + d);
    }
    y[i] = gpa_f2t<T>(mean ? (count ? (float)(acc * (1.0 / (double)count)) : 0.0f) : (float)acc);
  }
}

extern "C" __global__ void gpa_ew_sum_over_l_f32(float *y, const float *x, const void *mask, int mask_i32,
                                                 long long B, long long L, long long D, int mean) {
  sum_over_l(y, x, mask, mask_i32, B, L, D, mean);
}

/* One thread per (b, column): dx[b,l,d] = dy[b,d] / count(b) where masked
 * in; g rounded to the storage type once. */
template <class T>
static __device__ __forceinline__ void masked_mean_bwd(T *dx, const T *dy, const void *mask, int mask_i32, long long B,
                                                       long long L, long long D) {
  GS_LOOP(i, B * D) {
    const long long b = i / D, d = i % D;
    long long count = 0;
    for (long long l = 0; l < L; l++) count += mask_at(mask, mask_i32, b * L + l);
    const float inv = count ? (float)(1.0 / (double)count) : 0.0f;
    const T g = gpa_f2t<T>(gpa_ldf(dy, i) * inv);
    for (long long l = 0; l < L; l++) dx[(b * L + l) * D + d] = count && mask_at(mask, mask_i32, b * L + l) ? g : (T)0;
  }
}

extern "C" __global__ void gpa_ew_masked_mean_bwd_f32(float *dx, const float *dy, const void *mask, int mask_i32,
                                                      long long B, long long L, long long D) {
  masked_mean_bwd(dx, dy, mask, mask_i32, B, L, D);
}

/* vec: D % 4 == 0 (a chunk lies in one row; v's chunk is aligned too) */
extern "C" __global__ void gpa_ew_add_broadcast_f32(float *y, const float *x, const float *v, long long L,
                                                    long long D, long long n, int vec) {
#define CH(i0)                                                              \
  const float4 u = F4(x, i0), w = F4(v, (((i0) / D) / L) * D + (i0) % D);   \
  ST4(y, i0) = make_float4(u.x + w.x, u.y + w.y, u.z + w.z, u.w + w.w);
#define ONE(i) y[i] = x[i] + v[((i) / D / L) * D + (i) % D];
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* ---- GELU ------------------------------------------------------------------------------------------ */

#define INV_SQRT2PI 0.3989422804014327f

/* erf form, a = |x| clamped to 13, phi the normal density:
 *   Phi(-a) = 0.5 erfc(a / sqrt2) = phi(a) R(a),  phi(a) = exp(-a^2/2) / sqrt(2pi),
 * R the Mills ratio as P/Q, P of degree 4, Q monic of degree 5 (relative
 * minimax fit on [0, 13.2], scripts/fit_gelu_mills.py 4 5: 2.5e-8 with the
 * float coefficients; all positive, so Horner does not cancel), one
 * MUFU.EX2 and one MUFU.RCP (ex2_normal, rcp_normal); Phi(x) = 1 -
 * Phi(-a) for x >= 0. Relative, not absolute: the negative tail keeps its
 * digits (no 1 + erf). Why not erfcf and expf: CUDA's erfcf alone is ~55
 * instructions with two MUFU.RCP and an EX2 per value (SASS, sm_90), and at
 * that count the bf16 kernels (4 or 6 bytes per value) were bound by issue,
 * not memory, on an H100 (0.69 / 0.76 of PyTorch, issue 25); this is ~20.
 * Error: ex2.approx's (2 ulp) and a^2's roundings in its argument (|y| 1.2e-7,
 * 2e-6 relative at |x| = 6, where |Phi(x) x| is 6e-9); R, the divide and
 * the rest a few ulp. gelu'(x) = Phi(x) + x phi(x): both terms carry the
 * same exp, so its error cancels where they do (x = -0.75). */
#define MP0 1.245921549e+02f
#define MP1 1.085170056e+02f
#define MP2 4.514279988e+01f
#define MP3 9.951410237e+00f
#define MP4 1.000014442e+00f
#define MQ0 9.941015631e+01f
#define MQ1 1.659019076e+02f
#define MQ2 1.186838279e+02f
#define MQ3 4.612624007e+01f
#define MQ4 9.952151882e+00f
#define NEG_HALF_LOG2E (-0.72134752044448170368f) /* -log2(e) / 2 */

/* 2^y for y in [-126, 0] and 1/q for q in [1, 2^126]: the MUFU
 * instructions alone. exp2f and __fdividef add a compare and two predicated
 * multiplies each for subnormal operands, which gelu_phi's never are (6 of
 * its ~25 instructions a value). The emulated build (sim) computes them
 * exactly. */
static __device__ __forceinline__ float ex2_normal(float y) {
#ifdef GPA_SIM_EMU
  return exp2f(y);
#else
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
#endif
}

static __device__ __forceinline__ float rcp_normal(float q) {
#ifdef GPA_SIM_EMU
  return 1.0f / q;
#else
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(q));
  return r;
#endif
}

/* |x| clamped to 13; a NaN x keeps a NaN a (fminf would give 13), which
 * every result then carries */
static __device__ __forceinline__ float gelu_abs(float v) { return fabsf(v) > 13.0f ? 13.0f : fabsf(v); }

/* Phi(-a), and phi(a) in *phi */
static __device__ __forceinline__ float gelu_tail(float a, float *phi) {
  const float e = ex2_normal(a * a * NEG_HALF_LOG2E) * INV_SQRT2PI;
  const float p = fmaf(fmaf(fmaf(fmaf(MP4, a, MP3), a, MP2), a, MP1), a, MP0);
  const float q = fmaf(fmaf(fmaf(fmaf(a + MQ4, a, MQ3), a, MQ2), a, MQ1), a, MQ0);
  *phi = e;
  return e * (p * rcp_normal(q));
}

static __device__ __forceinline__ float gelu_f(float v, int approximate) {
  if (approximate) return gpa_gelu_tanh(v);
  /* y = max(x, 0) - a Phi(-a) for either sign (the host's form: one FMA,
   * no select); below -13, -13 Phi(-13) (~1e-37) stands for x Phi(x):
   * -inf gives ~0, not -inf */
  const float a = gelu_abs(v);
  float phi;
  return fmaf(-a, gelu_tail(a, &phi), fmaxf(v, 0.0f));
}

static __device__ __forceinline__ float gelu_grad(float v, int approximate) {
  if (approximate) return gpa_gelu_tanh_grad(v);
  /* Phi(x) + x phi(x), x clamped as a: finite at +-inf (gelu' -> 1, 0) */
  const float a = gelu_abs(v);
  float phi;
  const float t = gelu_tail(a, &phi);
  return fmaf(copysignf(a, v), phi, v >= 0.0f ? 1.0f - t : t);
}

extern "C" __global__ void gpa_gelu_fwd_f32(float *y, const float *x, long long n, int approximate, int vec) {
#define CH(i0)                                                    \
  float4 v = *reinterpret_cast<const float4 *>(x + (i0));         \
  v.x = gelu_f(v.x, approximate);                                 \
  v.y = gelu_f(v.y, approximate);                                 \
  v.z = gelu_f(v.z, approximate);                                 \
  v.w = gelu_f(v.w, approximate);                                 \
  *reinterpret_cast<float4 *>(y + (i0)) = v;
#define ONE(i) y[i] = gelu_f(x[i], approximate);
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

extern "C" __global__ void gpa_gelu_bwd_f32(float *dx, const float *x, const float *dy, long long n,
                                            int approximate, int vec) {
#define CH(i0)                                                    \
  float4 v = *reinterpret_cast<const float4 *>(x + (i0));         \
  const float4 d = *reinterpret_cast<const float4 *>(dy + (i0));  \
  v.x = d.x * gelu_grad(v.x, approximate);                        \
  v.y = d.y * gelu_grad(v.y, approximate);                        \
  v.z = d.z * gelu_grad(v.z, approximate);                        \
  v.w = d.w * gelu_grad(v.w, approximate);                        \
  *reinterpret_cast<float4 *>(dx + (i0)) = v;
#define ONE(i) dx[i] = dy[i] * gelu_grad(x[i], approximate);
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* ---- bf16 storage (fp32 math, one rounding per output) ------------------------------------------------
 * `vec`: every pointer is 16-byte aligned (and, where rows matter, the row
 * length a multiple of 8), so eight values move per 16-byte access. */

extern "C" __global__ void gpa_ew_add_bf16(gpa_bf16 *y, const gpa_bf16 *a, const gpa_bf16 *b, long long n, int vec) {
#define CH(i0)                                 \
  float va[8], vb[8];                          \
  gpa_bf8_load(a + (i0), va);                  \
  gpa_bf8_load(b + (i0), vb);                  \
  GPA_UNROLL for (int k = 0; k < 8; k++) va[k] += vb[k];  \
  gpa_bf8_store(y + (i0), va);
#define ONE(i) y[i] = gpa_f2bf(gpa_bf2f(a[i]) + gpa_bf2f(b[i]));
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* y = alpha * x (+ y0 when y0 != NULL) */
extern "C" __global__ void gpa_ew_axpy_bf16(gpa_bf16 *y, const gpa_bf16 *x, const gpa_bf16 *y0, float alpha,
                                            long long n, int vec) {
#define CH(i0)                                                     \
  float vx[8], v0[8] = {0, 0, 0, 0, 0, 0, 0, 0};                   \
  gpa_bf8_load(x + (i0), vx);                                      \
  if (y0) gpa_bf8_load(y0 + (i0), v0);                             \
  GPA_UNROLL for (int k = 0; k < 8; k++) vx[k] = alpha * vx[k] + v0[k];       \
  gpa_bf8_store(y + (i0), vx);
#define ONE(i) y[i] = gpa_f2bf(alpha * gpa_bf2f(x[i]) + (y0 ? gpa_bf2f(y0[i]) : 0.0f));
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* rows x d (vec: d % 8 == 0, so a chunk lies in one row) */
extern "C" __global__ void gpa_ew_mask_zero_bf16(gpa_bf16 *y, const gpa_bf16 *x, const void *mask, int mask_i32,
                                                 long long rows, long long d, int vec) {
  const long long n = rows * d;
#define CH(i0)                                                                  \
  if (mask_at(mask, mask_i32, (i0) / d)) {                                      \
    *reinterpret_cast<uint4 *>(y + (i0)) = *reinterpret_cast<const uint4 *>(x + (i0)); \
  } else {                                                                      \
    *reinterpret_cast<uint4 *>(y + (i0)) = make_uint4(0, 0, 0, 0);             \
  }
#define ONE(i) y[i] = mask_at(mask, mask_i32, (i) / d) ? x[i] : (gpa_bf16)0;
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

extern "C" __global__ void gpa_ew_sum_over_l_bf16(gpa_bf16 *y, const gpa_bf16 *x, const void *mask, int mask_i32,
                                                  long long B, long long L, long long D, int mean) {
  sum_over_l(y, x, mask, mask_i32, B, L, D, mean);
}

extern "C" __global__ void gpa_ew_masked_mean_bwd_bf16(gpa_bf16 *dx, const gpa_bf16 *dy, const void *mask,
                                                       int mask_i32, long long B, long long L, long long D) {
  masked_mean_bwd(dx, dy, mask, mask_i32, B, L, D);
}

/* vec: D % 8 == 0 (a chunk lies in one row; v's chunk is aligned too) */
extern "C" __global__ void gpa_ew_add_broadcast_bf16(gpa_bf16 *y, const gpa_bf16 *x, const gpa_bf16 *v, long long L,
                                                     long long D, long long n, int vec) {
#define CH(i0)                                                   \
  float vx[8], vv[8];                                            \
  gpa_bf8_load(x + (i0), vx);                                    \
  gpa_bf8_load(v + (((i0) / D) / L) * D + (i0) % D, vv);         \
  GPA_UNROLL for (int k = 0; k < 8; k++) vx[k] += vv[k];                    \
  gpa_bf8_store(y + (i0), vx);
#define ONE(i) y[i] = gpa_f2bf(gpa_bf2f(x[i]) + gpa_bf2f(v[((i) / D / L) * D + (i) % D]));
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

extern "C" __global__ void gpa_gelu_fwd_bf16(gpa_bf16 *y, const gpa_bf16 *x, long long n, int approximate, int vec) {
#define CH(i0)                                                 \
  float vx[8];                                                 \
  gpa_bf8_load(x + (i0), vx);                                  \
  GPA_UNROLL for (int k = 0; k < 8; k++) vx[k] = gelu_f(vx[k], approximate); \
  gpa_bf8_store(y + (i0), vx);
#define ONE(i) y[i] = gpa_f2bf(gelu_f(gpa_bf2f(x[i]), approximate));
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* 32 registers (39 unbounded): the host launches 8 blocks of 256 a SM
 * (gpa__cu_blocks' cap, GPA__CU_THREADS), and at 39 only 6 fit, so a
 * quarter of the grid ran as a second wave with 2 blocks a SM (16 KiB in
 * flight). ptxas fits it in 32 without spills (+14 instructions). */
extern "C" __global__ void __launch_bounds__(256, 8)
    gpa_gelu_bwd_bf16(gpa_bf16 *dx, const gpa_bf16 *x, const gpa_bf16 *dy, long long n, int approximate, int vec) {
#define CH(i0)                                                              \
  float vx[8], vd[8];                                                       \
  gpa_bf8_load(x + (i0), vx);                                               \
  gpa_bf8_load(dy + (i0), vd);                                              \
  GPA_UNROLL for (int k = 0; k < 8; k++) vx[k] = vd[k] * gelu_grad(vx[k], approximate); \
  gpa_bf8_store(dx + (i0), vx);
#define ONE(i) dx[i] = gpa_f2bf(gpa_bf2f(dy[i]) * gelu_grad(gpa_bf2f(x[i]), approximate));
  GPA_BF8_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* The mixed form: x and dx bf16, dy f32, four values a step as the fp32
 * kernel (x and dx 8 bytes, dy a float4): with eight a step (as
 * gpa_gelu_bwd_bf16) the eight dy values live at once spilled 8 bytes on
 * sm_80 at the 32 registers that keep 8 blocks of 256 a SM. */
extern "C" __global__ void __launch_bounds__(256, 8) gpa_gelu_bwd_bf16_f32dy(gpa_bf16 *dx, const gpa_bf16 *x,
                                                                            const float *dy, long long n,
                                                                            int approximate, int vec) {
#define CH(i0)                                                                                     \
  const uint2 u = *reinterpret_cast<const uint2 *>(x + (i0));                                      \
  const float4 d = F4(dy, i0);                                                                     \
  const float a = d.x * gelu_grad(__uint_as_float(u.x << 16), approximate);                       \
  const float b = d.y * gelu_grad(__uint_as_float(u.x & 0xffff0000u), approximate);               \
  const float c = d.z * gelu_grad(__uint_as_float(u.y << 16), approximate);                       \
  const float e = d.w * gelu_grad(__uint_as_float(u.y & 0xffff0000u), approximate);               \
  *reinterpret_cast<uint2 *>(dx + (i0)) = make_uint2(gpa_bf2_pack(a, b), gpa_bf2_pack(c, e));
#define ONE(i) dx[i] = gpa_f2bf(dy[i] * gelu_grad(gpa_bf2f(x[i]), approximate));
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* ---- optimizers ------------------------------------------------------------------------------------ */

/* AdamW; scalars formed on the host in double, as the host kernel does.
 * Four values per 16-byte access when `vec` (GPA_F4_LOOP): seven streams
 * of scalar accesses kept too few bytes in flight (0.86 of the copy on an
 * H100, session 6). Every rounding is spelled out (the _rn intrinsics are
 * never contracted): with plain a * b + c, nvcc and ptxas choose which
 * products fuse into FMAs per kernel, so adamw and adamw_multi, which
 * promise the same bits, could round differently (adamw_multi's bitwise
 * test failed on an H100 and passed on sim, session 14). */
static __device__ __forceinline__ void adamw_one(float &po, float &mo, float &vo, float p, float g, float m, float v,
                                                 float decay, float b1, float c1, float b2, float c2,
                                                 float step_size, float inv_bc2_sqrt, float eps) {
  mo = __fmaf_rn(b1, m, __fmul_rn(c1, g));
  vo = __fmaf_rn(b2, v, __fmul_rn(__fmul_rn(c2, g), g));
  const float den = __fmaf_rn(__fsqrt_rn(vo), inv_bc2_sqrt, eps);
  po = __fmaf_rn(p, decay, -__fdiv_rn(__fmul_rn(step_size, mo), den));
}

/* AdamW over [i0, i0+4) and over element i, with the names of the kernels
 * below: gpa_adamw_f32 and gpa_adamw_multi_f32 share them, so a tensor gets
 * the same bits from either. */
#define ADAMW_CH(i0)                                                                             \
  const float4 p4 = F4(p, i0), g4 = F4(g, i0), m4 = F4(m, i0), v4 = F4(v, i0);                  \
  float4 a, b, c;                                                                                \
  adamw_one(a.x, b.x, c.x, p4.x, g4.x, m4.x, v4.x, decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps); \
  adamw_one(a.y, b.y, c.y, p4.y, g4.y, m4.y, v4.y, decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps); \
  adamw_one(a.z, b.z, c.z, p4.z, g4.z, m4.z, v4.z, decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps); \
  adamw_one(a.w, b.w, c.w, p4.w, g4.w, m4.w, v4.w, decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps); \
  *reinterpret_cast<float4 *>(po + (i0)) = a;                                                    \
  *reinterpret_cast<float4 *>(mo + (i0)) = b;                                                    \
  *reinterpret_cast<float4 *>(vo + (i0)) = c;
#define ADAMW_ONE(i) \
  adamw_one(po[i], mo[i], vo[i], p[i], g[i], m[i], v[i], decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps);

extern "C" __global__ void gpa_adamw_f32(float *po, float *mo, float *vo, const float *p, const float *g,
                                         const float *m, const float *v, long long n, float decay, float b1,
                                         float c1, float b2, float c2, float step_size, float inv_bc2_sqrt,
                                         float eps, int vec) {
  GPA_F4_LOOP(n, vec, ADAMW_CH, ADAMW_ONE);
}

/* Many tensors in one launch (adamw_multi): each tensor owns a run of
 * blocks (a.t[k].block0 on); a block finds its tensor by a scan of at most
 * 16 entries, the same for all its threads, then runs gpa_adamw_f32's loop
 * over its tensor with its run as the grid. The argument array is indexed
 * at run time, read from the parameter bank: ptxas (CUDA 13) reports no
 * stack frame and no spills, 56 registers on sm_80 and sm_90 with bf16_copies (adamw:
 * 40); ew_no_spills checks the spills. */
/* With bf16_copies a tensor's pw also gets param' rounded to bf16 by the
 * cast op's rounding (gpa_f2bf), from the register that is stored to po: the
 * bits a cast after the update would write, without its launch and its
 * re-read of param' (the main job's 15 weight casts a step, issue 25). */
#define ADAMW_CH_W(i0)                                                                     \
  ADAMW_CH(i0)                                                                             \
  if (pw) *reinterpret_cast<uint2 *>(pw + (i0)) = make_uint2(gpa_bf2_pack(a.x, a.y), gpa_bf2_pack(a.z, a.w));
#define ADAMW_ONE_W(i)                                                                                      \
  {                                                                                                         \
    float pi_;                                                                                              \
    adamw_one(pi_, mo[i], vo[i], p[i], g[i], m[i], v[i], decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps); \
    po[i] = pi_;                                                                                            \
    if (pw) pw[i] = gpa_f2bf(pi_);                                                                          \
  }

extern "C" __global__ void gpa_adamw_multi_f32(gpa_adamw_multi_args a) {
  const long long blk = blockIdx.x;
  int k = 0;
  while (k + 1 < a.count && blk >= a.t[k + 1].block0) k++;
  const long long first = a.t[k].block0, end = k + 1 < a.count ? a.t[k + 1].block0 : (long long)gridDim.x;
  float *po = a.t[k].po, *mo = a.t[k].mo, *vo = a.t[k].vo;
  const float *p = a.t[k].p, *g = a.t[k].g, *m = a.t[k].m, *v = a.t[k].v;
  gpa_bf16 *pw = a.t[k].pw;
  const long long n = a.t[k].n;
  const float decay = a.t[k].decay, b1 = a.b1, c1 = a.c1, b2 = a.b2, c2 = a.c2, step_size = a.step_size,
              inv_bc2_sqrt = a.inv_bc2_sqrt, eps = a.eps;
  GPA_F4_LOOP_IN(n, a.t[k].vec, blk - first, end - first, ADAMW_CH_W, ADAMW_ONE_W);
}
#undef ADAMW_CH_W
#undef ADAMW_ONE_W
#undef ADAMW_CH
#undef ADAMW_ONE

static __device__ __forceinline__ void sgd_one(float &po, float &bo, float p, float g, float b, float lr, float mu,
                                               float wd, int nesterov) {
  const float gi = g + wd * p;
  const float bi = mu * b + gi;
  po = p - lr * (nesterov ? gi + mu * bi : bi);
  bo = bi;
}

extern "C" __global__ void gpa_sgd_f32(float *po, float *bo, const float *p, const float *g, const float *b,
                                       long long n, float lr, float mu, float wd, int nesterov, int vec) {
#define CH(i0)                                                                    \
  const float4 p4 = F4(p, i0), g4 = F4(g, i0), b4 = F4(b, i0);                    \
  float4 a, c;                                                                    \
  sgd_one(a.x, c.x, p4.x, g4.x, b4.x, lr, mu, wd, nesterov);                      \
  sgd_one(a.y, c.y, p4.y, g4.y, b4.y, lr, mu, wd, nesterov);                      \
  sgd_one(a.z, c.z, p4.z, g4.z, b4.z, lr, mu, wd, nesterov);                      \
  sgd_one(a.w, c.w, p4.w, g4.w, b4.w, lr, mu, wd, nesterov);                      \
  *reinterpret_cast<float4 *>(po + (i0)) = a;                                     \
  *reinterpret_cast<float4 *>(bo + (i0)) = c;
#define ONE(i) sgd_one(po[i], bo[i], p[i], g[i], b[i], lr, mu, wd, nesterov);
  GPA_F4_LOOP(n, vec, CH, ONE);
#undef CH
#undef ONE
}

/* bf16 storage of the optimizers: grad (g_bf) and/or param (p_bf, then po
 * too) bf16, widened for the fp32 math of the f32 kernels above; param'
 * rounded once; the state (m, v, buf) f32. The flags are uniform per
 * launch. */
static __device__ __forceinline__ float ld_fb(const void *p, int bf, long long i) {
  return bf ? gpa_bf2f(((const gpa_bf16 *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ void st_fb(void *p, int bf, long long i, float v) {
  if (bf) ((gpa_bf16 *)p)[i] = gpa_f2bf(v);
  else ((float *)p)[i] = v;
}

extern "C" __global__ void gpa_adamw_bf16(void *po, float *mo, float *vo, const void *p, const void *g,
                                          const float *m, const float *v, long long n, float decay, float b1,
                                          float c1, float b2, float c2, float step_size, float inv_bc2_sqrt,
                                          float eps, int p_bf, int g_bf, gpa_bf16 *pw) {
  GS_LOOP(i, n) {
    float pi, mi, vi; /* the f32 kernels' arithmetic, the same bits for f32 storage */
    adamw_one(pi, mi, vi, ld_fb(p, p_bf, i), ld_fb(g, g_bf, i), m[i], v[i], decay, b1, c1, b2, c2, step_size,
              inv_bc2_sqrt, eps);
    st_fb(po, p_bf, i, pi);
    if (pw) pw[i] = gpa_f2bf(pi); /* adamw's param_bf16 (f32 param, bf16 grad): the cast op's rounding */
    mo[i] = mi;
    vo[i] = vi;
  }
}

extern "C" __global__ void gpa_sgd_bf16(void *po, float *bo, const void *p, const void *g, const float *b,
                                        long long n, float lr, float mu, float wd, int nesterov, int p_bf,
                                        int g_bf) {
  GS_LOOP(i, n) {
    const float pv = ld_fb(p, p_bf, i);
    const float gi = ld_fb(g, g_bf, i) + wd * pv;
    const float bi = mu * b[i] + gi;
    st_fb(po, p_bf, i, pv - lr * (nesterov ? gi + mu * bi : bi));
    bo[i] = bi;
  }
}

/* y[b, c, i] = x[b, i, c] for x [B, M, N]: a block per 32 x 32 tile (tiles
 * of all batches numbered along x), staged through shared memory with a
 * padded row (33) so that both the row reads and the column writes are
 * coalesced and the column reads of the tile hit distinct banks. */
template <typename T>
static __device__ void transpose_tile(T *y, const T *x, long long m, long long n, long long tm, long long tn) {
  GPA_DYNAMIC_SHARED(T, tile);
  const long long t = blockIdx.x, b = t / (tm * tn), r = t % (tm * tn);
  const long long i0 = r / tn * 32, c0 = r % tn * 32;
  const T *xb = x + b * m * n;
  T *yb = y + b * m * n;
  const int tx = (int)threadIdx.x;
  for (int k = (int)threadIdx.y; k < 32; k += (int)blockDim.y) {
    const long long i = i0 + k, c = c0 + tx;
    if (i < m && c < n) tile[k * 33 + tx] = xb[i * n + c];
  }
  __syncthreads();
  for (int k = (int)threadIdx.y; k < 32; k += (int)blockDim.y) {
    const long long c = c0 + k, i = i0 + tx;
    if (c < n && i < m) yb[c * m + i] = tile[tx * 33 + k];
  }
}

extern "C" __global__ void gpa_ew_transpose_1(unsigned char *y, const unsigned char *x, long long m, long long n,
                                              long long tm, long long tn) {
  transpose_tile(y, x, m, n, tm, tn);
}
extern "C" __global__ void gpa_ew_transpose_2(unsigned short *y, const unsigned short *x, long long m, long long n,
                                              long long tm, long long tn) {
  transpose_tile(y, x, m, n, tm, tn);
}
extern "C" __global__ void gpa_ew_transpose_4(unsigned *y, const unsigned *x, long long m, long long n, long long tm,
                                              long long tn) {
  transpose_tile(y, x, m, n, tm, tn);
}
extern "C" __global__ void gpa_ew_transpose_8(unsigned long long *y, const unsigned long long *x, long long m,
                                              long long n, long long tm, long long tn) {
  transpose_tile(y, x, m, n, tm, tn);
}
