/* gpa-sim: fp16/bf16. CUDA's own cuda_fp16.h / cuda_bf16.h compile as host
 * code and provide the types, conversions, operators and most __h* calls.
 * What they keep device-only is supplied here, computed through float (the
 * result is then rounded to the 16-bit type once, as the device does for
 * fused operations). Shuffles of these types use the generic templates. */
#ifndef GPA_SIM_HALF_H
#define GPA_SIM_HALF_H
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define GPA_SIM_H16(T, TO, FROM, T2, TO2, FROM2)                                                     \
  inline T __hfma(T a, T b, T c) { return FROM(fmaf(TO(a), TO(b), TO(c))); }                         \
  inline T2 __hfma2(T2 a, T2 b, T2 c) {                                                               \
    float2 x = TO2(a), y = TO2(b), z = TO2(c);                                                        \
    return FROM2(make_float2(fmaf(x.x, y.x, z.x), fmaf(x.y, y.y, z.y)));                              \
  }                                                                                                   \
  inline T hexp(T a) { return FROM(expf(TO(a))); }                                                    \
  inline T hexp2(T a) { return FROM(exp2f(TO(a))); }                                                  \
  inline T hlog(T a) { return FROM(logf(TO(a))); }                                                    \
  inline T hsqrt(T a) { return FROM(sqrtf(TO(a))); }                                                  \
  inline T hrsqrt(T a) { return FROM(1.0f / sqrtf(TO(a))); }                                          \
  inline T htanh(T a) { return FROM(tanhf(TO(a))); }                                                  \
  inline T2 h2exp(T2 a) { float2 x = TO2(a); return FROM2(make_float2(expf(x.x), expf(x.y))); }      \
  inline T2 h2sqrt(T2 a) { float2 x = TO2(a); return FROM2(make_float2(sqrtf(x.x), sqrtf(x.y))); }   \
  inline T atomicAdd(T *p, T v) { return gpa_sim_atomic_rmw<T, uint16_t>(p, [v](T o) { return FROM(TO(o) + TO(v)); }); } \
  inline T2 atomicAdd(T2 *p, T2 v) {                                                                  \
    return gpa_sim_atomic_rmw<T2, uint32_t>(p, [v](T2 o) {                                            \
      float2 a = TO2(o), b = TO2(v);                                                                  \
      return FROM2(make_float2(a.x + b.x, a.y + b.y));                                                \
    });                                                                                               \
  }
GPA_SIM_H16(__half, __half2float, __float2half_rn, __half2, __half22float2, __float22half2_rn)
GPA_SIM_H16(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn, __nv_bfloat162, __bfloat1622float2,
            __float22bfloat162_rn)
#undef GPA_SIM_H16

inline int __half2int_rn(__half h) { return (int)nearbyintf(__half2float(h)); }
inline int __bfloat162int_rn(__nv_bfloat16 h) { return (int)nearbyintf(__bfloat162float(h)); }
#endif
