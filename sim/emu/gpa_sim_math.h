/* gpa-sim: CUDA device math that the host C library lacks. Intrinsics
 * (__expf, __fdividef, ...) are computed at full precision: the emulation is
 * at least as accurate as the device, never less. Rounding-mode suffixes
 * (_rn, _rz, ...) are honoured for conversions, ignored for arithmetic
 * (the host rounds to nearest). */
#ifndef GPA_SIM_MATH_H
#define GPA_SIM_MATH_H

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
/* The _rn intrinsics are never contracted into an FMA by nvcc; the emulated
 * modules are built with contraction (cmake/cuda.cmake), so the rounded
 * value is pinned in a register the compiler cannot see through. */
template <typename T> inline T gpa_sim__pin(T v) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(v));
#else
  __asm__("" : "+w"(v));
#endif
  return v;
}
inline float __fadd_rn(float a, float b) { return gpa_sim__pin(a + b); }
inline float __fsub_rn(float a, float b) { return gpa_sim__pin(a - b); }
inline float __fmul_rn(float a, float b) { return gpa_sim__pin(a * b); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return gpa_sim__pin(a + b); }
inline double __dmul_rn(double a, double b) { return gpa_sim__pin(a * b); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }

/* CUDA's overloaded min/max device functions. */
#define GPA_SIM_MINMAX(T)                             \
  inline T min(T a, T b) { return a < b ? a : b; }    \
  inline T max(T a, T b) { return a > b ? a : b; }
GPA_SIM_MINMAX(int)
GPA_SIM_MINMAX(unsigned)
GPA_SIM_MINMAX(long long)
GPA_SIM_MINMAX(unsigned long long)
#undef GPA_SIM_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
#endif
