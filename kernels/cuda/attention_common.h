/* What the attention kernels share (attention.cu: fp32; attention_fa2*.cu:
 * bf16 and fp16 with tensor cores; attention_f32tc*.cu: fp32 with tensor
 * cores): the masking rule, the key-length clamp, the element conversions,
 * the delta kernel's body and the tensor-core backward passes' common
 * steps. Semantics as the host's (kernels/host/attention.h): query row s
 * sees keys j < min(len, s + Sk - S + 1) (causal, bottom-right aligned) or
 * j < len. */
#ifndef GPA_ATTENTION_COMMON_H
#define GPA_ATTENTION_COMMON_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "gpa_kernel.h"
#include "gpa_mma.h"

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

/* The key limits of a lane's query rows in a forward or dQ warp of MT
 * m-tiles of 16 rows from row rw (attention_fa2.cu, attention_fa2_bwd.cu):
 * lim[mt][hf] for row rw + mt 16 + hf 8 + g (0 past S). Returns the warp's
 * limit (limits grow with the row): key tiles at or past it add nothing to
 * any of the warp's rows, whose math the warp skips. */
template <int MT>
static __device__ __forceinline__ int attn_lane_limits(int (&lim)[MT][2], int rw, int g, int kvlen, int S, int Sk,
                                                       int causal) {
  UNROLL
  for (int mt = 0; mt < MT; mt++)
    UNROLL
    for (int hf = 0; hf < 2; hf++) {
      const int r = rw + mt * 16 + hf * 8 + g;
      lim[mt][hf] = r < S ? attn_limit(kvlen, r, S, Sk, causal) : 0;
    }
  return rw < S ? attn_limit(kvlen, (rw + 16 * MT - 1 < S ? rw + 16 * MT - 1 : S - 1), S, Sk, causal) : 0;
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

/* log2(e): the tensor-core kernels take exp as exp2 of x log2e */
static constexpr float ATTN_LOG2E = 1.4426950408889634f;

/* Two accumulator tiles zeroed together (a dK/dV pass's dK and dV, a
 * step's S^T and dP^T). */
template <int N>
static __device__ __forceinline__ void attn_zero2(float (&a)[N][4], float (&b)[N][4]) {
  UNROLL
  for (int n = 0; n < N; n++)
    UNROLL
    for (int i = 0; i < 4; i++) a[n][i] = b[n][i] = 0.0f;
}

/* The start of a tensor-core dK/dV pass (attention_f32tc_bwd.cu,
 * attention_fa2_bwd.cu): dK and dV zeroed; when the block has query steps,
 * its K and V tiles (load_kv) and the first step (load_step(0, 0): into
 * buffer 0) copied as one cp.async group, which the steps' loop waits for. */
template <int N, class LoadKV, class LoadStep>
static __device__ __forceinline__ void attn_dkv_start(float (&ak)[N][4], float (&av)[N][4], int n_steps,
                                                      LoadKV &&load_kv, LoadStep &&load_step) {
  attn_zero2(ak, av);
  if (n_steps > 0) {
    load_kv();
    load_step(0, 0);
    gpa_cp_async_commit();
  }
}

/* Row r of a dK/dV query step's statistics into buffer buf of sL and sD
 * (QS rows each): lse log2e and delta of query head hq's row row0 + r of
 * batch b, if r < n (inside S); else -inf and 0 (P^T 0, no term). (The
 * index written out in full, as the passes had it: from a precomputed
 * base, nvcc orders their PTX otherwise.) */
template <int QS>
static __device__ __forceinline__ void attn_step_row(float *sL, float *sD, int buf, const float *lse,
                                                     const float *delta, int b, int H, int hq, int S, int row0,
                                                     int n, int r) {
  const long long at = ((long long)b * H + hq) * S + row0 + r;
  sL[buf * QS + r] = r < n ? lse[at] * ATTN_LOG2E : -INFINITY;
  sD[buf * QS + r] = r < n ? delta[at] : 0.0f;
}

/* All QS rows over NT threads (attn_step_row). A loop, even where NT >= QS
 * makes it one pass: nvcc's code for the two passes that call it follows
 * its form (an `if` there changes their PTX throughout). */
template <int QS, int NT>
static __device__ __forceinline__ void attn_step_stats(float *sL, float *sD, int buf, const float *lse,
                                                       const float *delta, int b, int H, int hq, int S, int row0,
                                                       int n, int tid) {
  for (int r = tid; r < QS; r += NT) attn_step_row<QS>(sL, sD, buf, lse, delta, b, H, hq, S, row0, n, r);
}

/* The tensor-core dK/dV passes' P^T and dS^T (attention_f32tc_bwd.cu,
 * attention_fa2_bwd.cu), in place over a warp's S^T (st) and dP^T (dpt):
 * its keys kw + g (accumulator rows g) and kw + g + 8, and a query step's
 * NQ n-tiles of 8 from row0 (tL: their lse log2e, tD: their delta). P^T =
 * exp2(S^T sl2 - lse log2e) (exp2: the kernel's), dS^T = P^T (dP^T -
 * delta); key j visible to query row iff j < its limit. The test per
 * element only where some pair of the warp's 16 keys and the step's QS
 * rows is hidden (warp-uniform; OPEN false: always). */
template <bool OPEN, int QS, int NQ, class Exp2>
static __device__ __forceinline__ void attn_bwd_pds(float (&st)[NQ][4], float (&dpt)[NQ][4], const float *tL,
                                                    const float *tD, int row0, int kw, int g, int t, int kvlen, int S,
                                                    int Sk, int causal, float sl2, Exp2 exp2) {
  const int key0 = kw + g, key1 = key0 + 8;
  auto pds = [&](auto masked) {
    UNROLL
    for (int n = 0; n < NQ; n++)
      UNROLL
      for (int i = 0; i < 4; i++) {
        const int qi = n * 8 + 2 * t + (i & 1), row = row0 + qi, key = i < 2 ? key0 : key1;
        const bool vis = !decltype(masked)::value || (row < S && key < kvlen &&
                                                      (!causal || (long long)key <= (long long)row + Sk - S));
        const float p = vis ? exp2(fmaf(st[n][i], sl2, -tL[qi])) : 0.0f;
        st[n][i] = p;
        dpt[n][i] = p * (dpt[n][i] - tD[qi]);
      }
  };
  const int wkey = kw + 15;
  if (OPEN && row0 + QS <= S && wkey < kvlen && (!causal || (long long)wkey <= (long long)row0 + Sk - S))
    pds(std::false_type());
  else
    pds(std::true_type());
}

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
