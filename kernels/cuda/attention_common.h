/* What the attention kernels share (attention.cu: fp32; attention_fa2*.cu:
 * bf16 and fp16 with tensor cores): the masking rule, the key-length clamp,
 * the element conversions and the delta kernel's body. Semantics as the
 * host's (kernels/host/attention.h): query row s sees keys j < min(len,
 * s + Sk - S + 1) (causal, bottom-right aligned) or j < len. */
#ifndef GPA_ATTENTION_COMMON_H
#define GPA_ATTENTION_COMMON_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpa_kernel.h"

/* Loops over register arrays are unrolled (no local memory); the host
 * compiler of the emulated build does not know the pragma. */
#ifdef GPA_SIM_EMU
#define UNROLL
#else
#define UNROLL _Pragma("unroll")
#endif

/* Keys visible to query row s: [0, lim). */
static __device__ __forceinline__ int attn_limit(int kvlen, int s, int S, int Sk, int causal) {
  int lim = kvlen;
  if (causal) {
    const long long c = (long long)s + Sk - S + 1;
    if (c < lim) lim = (int)c;
  }
  return lim < 0 ? 0 : lim;
}

/* lens is checked on the host side (a bad value fails the op at
 * completion); clamped here so that nothing reads out of range meanwhile. */
static __device__ __forceinline__ int attn_kvlen(const int *lens, int b, int Sk) {
  if (!lens) return Sk;
  const int n = lens[b];
  return n < 0 ? 0 : (n > Sk ? Sk : n);
}

/* The query steps of a tensor-core dK/dV block whose keys start at j0
 * (attention_f32tc_bwd.cu, attention_fa2_bwd.cu): the group's grp query
 * heads in turn, each in steps of QS rows from the step that holds the
 * first query that can see key j0 (causal, bottom-right aligned) to the
 * last row; none when j0 is at or past the batch's length kvlen. Step i:
 * the group's query head head(i), rows row0(i) .. row0(i) + QS. */
template <int QS>
struct attn_kv_steps {
  int first, per_head, n; /* first step's row, steps per head, steps in all */
  __device__ __forceinline__ attn_kv_steps(int j0, int kvlen, int S, int Sk, int causal, int grp) {
    long long qs = causal ? (long long)j0 - (Sk - S) : 0; /* first query that can see key j0 */
    if (qs < 0) qs = 0;
    first = (int)(qs < S ? qs / QS * QS : S);
    per_head = (S - first + QS - 1) / QS;
    n = j0 < kvlen ? grp * per_head : 0;
  }
  __device__ __forceinline__ int head(int i) const { return i / per_head; }
  __device__ __forceinline__ int row0(int i) const { return first + (i % per_head) * QS; }
};

static __device__ __forceinline__ float attn_f(float x) { return x; }
static __device__ __forceinline__ float attn_f(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ float attn_f(__half x) { return __half2float(x); }
static __device__ __forceinline__ void attn_set(__nv_bfloat16 &d, float x) { d = __float2bfloat16_rn(x); }
static __device__ __forceinline__ void attn_set(__half &d, float x) { d = __float2half_rn(x); }

/* delta[(b*H + h)*S + s] = dout[b,s,h,:] . o[b,s,h,:] in fp32; one warp per
 * row (blockDim 32 x warps), a fixed shuffle tree: the same bits every run. */
template <class T>
static __device__ __forceinline__ void attn_delta(const T *__restrict__ dout, const float *__restrict__ o,
                                                  float *__restrict__ delta, long long rows, int S, int H, int D) {
  for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
       r += (long long)gridDim.x * blockDim.y) {
    const T *a = dout + r * D;
    const float *c = o + r * D;
    float s = 0.0f;
    for (int d = threadIdx.x; d < D; d += 32) s = fmaf(attn_f(a[d]), c[d], s);
    s = gpa_warp_sum(s);
    const long long bs = r / H, h = r - bs * H, b = bs / S, i = bs - b * S;
    if (threadIdx.x == 0) delta[(b * H + h) * S + i] = s;
  }
}
#endif
