/* The tanh form of GELU and its derivative, for every kernel that applies
 * it (elementwise.cu's gelu ops with `approximate`, linear.cu's fused
 * epilogue and its bf16 backward), so all of them form the same fp32
 * values: gelu(v) = v sigmoid(2u), u = K_TANH (v + C_TANH v^3). */
#ifndef GPA_GELU_TANH_H
#define GPA_GELU_TANH_H
#include "gpa_kernel.h"

#define K_TANH 0.7978845608028654f /* sqrt(2/pi) */
#define C_TANH 0.044715f

static __device__ __forceinline__ float gpa_gelu_tanh(float v) {
  return v / (1.0f + expf(-2.0f * K_TANH * (v + C_TANH * v * v * v)));
}

/* d/dv, the exponent clamped (finite at +-inf: 1 and 0) */
static __device__ __forceinline__ float gpa_gelu_tanh_grad(float v) {
  float a = -2.0f * K_TANH * (v + C_TANH * v * v * v);
  a = fminf(fmaxf(a, -80.0f), 80.0f);
  const float e = expf(a);
  const float s = 1.0f / (1.0f + e), s1 = e * s;
  const float du = K_TANH * (1.0f + 3.0f * C_TANH * v * v);
  return s + 2.0f * v * s * s1 * du;
}
#endif
