/* Attention forward in fp32 on tensor cores: FlashAttention-2 structure
 * (as attention_fa2.cu) on mma.sync m16n8k8 tf32 in 3xTF32 (gpa_mma.h,
 * gpa_mma1688_3xtf32): every fp32 operand is split into a tf32 value and a
 * tf32 residual, and a b ~ ab bb + ab bs + as bb with fp32 accumulation,
 * which keeps fp32 accuracy (the products' relative error about 3 * 2^-22
 * against 2^-24 for an fp32 product; tests/test_attention_f32tc.c checks
 * the results against the fp32 error bound that the SIMT kernels of
 * attention.cu meet, and that a one-product tf32 kernel fails it). The
 * same scheme as PyTorch's memory-efficient kernels on fp32 (CUTLASS's
 * OpMultiplyAddFastF32). Masking and key lengths as every attention kernel
 * here (attention_common.h).
 *
 * One block per (query tile of 64 rows, head, batch), 4 warps of 16 query
 * rows each. The Q tile and the first K/V tile are copied with cp.async;
 * then per key tile of KT keys, the next tile's copies issued first (double
 * buffering):
 *   - S = Q K^T: the k index (head dim) is permuted within each 16-column
 *     chunk so that a lane's A and B elements are 4 consecutive floats: for
 *     the chunk's two k steps, k = t and t + 4 stand for columns 4t + 2s and
 *     4t + 2s + 1 (s = step), in Q and K alike, so the sum is the same and
 *     each operand comes from one 16-byte shared-memory load (LDS.128);
 *   - mask, online softmax in base 2: as attention_fa2.cu;
 *   - O += P V with P from the S registers: the m16n8 accumulator holds
 *     columns 2t, 2t+1 of rows g, g+8, the tf32 A operand wants k t and
 *     t + 4, so k t stands for key 2t and k t + 4 for key 2t + 1, and V's B
 *     rows are read in the same order (rows 2t, 2t+1 of the 8-key step): no
 *     shuffle, no shared-memory round trip.
 * The splits are made where the operand is loaded: Q once per tile (D <= 64:
 * once, kept in registers), K and V per warp per tile, P per tile.
 *
 * Shared memory, fp32 rows: Q and K rows of DM + 16 floats (the rows g and
 * g + 1 that one LDS.128 phase reads start 64 bytes apart modulo 128: no
 * bank conflict), V rows of DM + 4 (the scalar loads of rows 2t, 2t + 1 at
 * column g fall in 32 different banks). Classes (compile-time head-dim
 * bound DM; D <= DM, D % 16 == 0 at run time; larger D goes to the SIMT
 * kernels):
 *   DM 64: KT 64, Q split kept in registers;
 *   DM 96, 128: KT 32 (O alone is DM / 2 registers a thread).
 * Bytes: 4 (64 (DM + 16) + 2 KT (DM + 16) + 2 KT (DM + 4)) = 96256 (DM 64),
 * 82944 (96), 107520 (128): two blocks per SM on sm_90 (tc32_fwd_smem in
 * ops/attention/cuda.c computes the same). o goes out in fp32, lse =
 * (m + log2 l) ln 2; rows that see no key get o = 0, lse = -inf. */
#include "attention_f32tc.h"

template <int DM>
struct tc32_cfg {
  static constexpr int BR = 64, W = 4, NT = 128, KT = DM > 64 ? 32 : 64;
  static constexpr int LDK = DM + 16, LDV = DM + 4;
  static constexpr bool keep_q = DM <= 64;
};

#define TC32F_ARGS                                                                                               \
  const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,                        \
      const int *__restrict__ lens, float *__restrict__ o, float *__restrict__ lse, int S, int Sk, int H, int Hkv, \
      int D, float scale, int causal
#define TC32F_PASS q, k, v, lens, o, lse, S, Sk, H, Hkv, D, scale, causal

template <int DM>
static __device__ __forceinline__ void tc32_fwd(TC32F_ARGS) {
  typedef tc32_cfg<DM> C;
  constexpr int BR = C::BR, KT = C::KT, LDK = C::LDK, LDV = C::LDV, NT = C::NT, KC = DM / 16, NB = KT / 8,
                NO = DM / 8;
  GPA_DYNAMIC_SHARED(float, sQ);
  float *sK = sQ + BR * LDK, *sV = sK + 2 * KT * LDK; /* [2][KT][LDK], [2][KT][LDV] */
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  /* causal: the last query tiles see the most keys; they start first */
  const int qtile = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int row0 = qtile * BR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < BR ? S - row0 : BR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal), ntiles = (jmax + KT - 1) / KT;
  const int r0 = row0 + w * 16 + g, r1 = r0 + 8;
  const int lim0 = r0 < S ? attn_limit(kvlen, r0, S, Sk, causal) : 0;
  const int lim1 = r1 < S ? attn_limit(kvlen, r1, S, Sk, causal) : 0;
  const long long ldq = (long long)H * D, ldkv = (long long)Hkv * D;
  const float *kb = k + (long long)b * Sk * ldkv + (long long)kh * D;
  const float *vb = v + (long long)b * Sk * ldkv + (long long)kh * D;

  tc32_load<BR, LDK, NT>(sQ, q + ((long long)b * S + row0) * ldq + (long long)h * D, ldq, nrows, D, tid);
  if (ntiles > 0) {
    const int nc = jmax < KT ? jmax : KT;
    tc32_load<KT, LDK, NT>(sK, kb, ldkv, nc, D, tid);
    tc32_load<KT, LDV, NT>(sV, vb, ldkv, nc, D, tid);
  }
  gpa_cp_async_commit();

  const float sl2 = scale * 1.4426950408889634f; /* scores to base-2 exponents */
  float oacc[NO][4];
  UNROLL
  for (int n = 0; n < NO; n++) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  unsigned qb[C::keep_q ? KC : 1][2][4], qs[C::keep_q ? KC : 1][2][4];
  const float *sQw = sQ + (w * 16 + g) * LDK + 4 * t; /* this lane's row g, columns 4t.. */

  for (int it = 0; it < ntiles; it++) {
    const int j0 = it * KT, buf = it & 1;
    gpa_cp_async_next(it + 1 < ntiles, [&] {
      const int j1 = j0 + KT, nc = jmax - j1 < KT ? jmax - j1 : KT;
      tc32_load<KT, LDK, NT>(sK + (buf ^ 1) * KT * LDK, kb + (long long)j1 * ldkv, ldkv, nc, D, tid);
      tc32_load<KT, LDV, NT>(sV + (buf ^ 1) * KT * LDV, vb + (long long)j1 * ldkv, ldkv, nc, D, tid);
    });
    __syncthreads(); /* tile it (and Q) landed for every thread's copies */
    const float *tK = sK + buf * KT * LDK, *tV = sV + buf * KT * LDV;
    if constexpr (C::keep_q) {
      if (it == 0) {
        UNROLL
        for (int c = 0; c < KC; c++)
          if (c * 16 < D)
            tc32_split_a(qb[c], qs[c], *reinterpret_cast<const float4 *>(sQw + c * 16),
                         *reinterpret_cast<const float4 *>(sQw + 8 * LDK + c * 16));
      }
    }
    /* S = Q K^T, this warp's 16 rows x KT keys */
    float s[NB][4];
    UNROLL
    for (int n = 0; n < NB; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    UNROLL
    for (int c = 0; c < KC; c++)
      if (c * 16 < D) {
        unsigned ab[2][4], as[2][4];
        if constexpr (C::keep_q) {
          UNROLL
          for (int i = 0; i < 8; i++) ab[i >> 2][i & 3] = qb[c][i >> 2][i & 3], as[i >> 2][i & 3] = qs[c][i >> 2][i & 3];
        } else {
          tc32_split_a(ab, as, *reinterpret_cast<const float4 *>(sQw + c * 16),
                       *reinterpret_cast<const float4 *>(sQw + 8 * LDK + c * 16));
        }
        UNROLL
        for (int n = 0; n < NB; n++) {
          /* key n*8 + g, columns c*16 + 4t.. (k t, t+4 of step 0, then step 1) */
          tc32_mma_chunk(s[n], ab, as, *reinterpret_cast<const float4 *>(tK + (n * 8 + g) * LDK + c * 16 + 4 * t));
        }
      }
    /* mask: only tiles reaching a row's limit */
    if (j0 + KT > lim0 || j0 + KT > lim1) {
      UNROLL
      for (int n = 0; n < NB; n++) {
        const int c = j0 + n * 8 + 2 * t;
        if (c >= lim0) s[n][0] = -INFINITY;
        if (c + 1 >= lim0) s[n][1] = -INFINITY;
        if (c >= lim1) s[n][2] = -INFINITY;
        if (c + 1 >= lim1) s[n][3] = -INFINITY;
      }
    }
    /* online softmax over the rows g (0) and g + 8 (1) */
    float mx0 = -INFINITY, mx1 = -INFINITY;
    UNROLL
    for (int n = 0; n < NB; n++) {
      mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
      mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(GPA_FULL_MASK, mx0, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(GPA_FULL_MASK, mx1, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(GPA_FULL_MASK, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(GPA_FULL_MASK, mx1, 2));
    const float mn0 = fmaxf(m0, mx0 * sl2), mn1 = fmaxf(m1, mx1 * sl2);
    /* a row with no visible key so far keeps m = -inf: subtract 0 instead */
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float al0 = exp2f(m0 - base0), al1 = exp2f(m1 - base1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.0f, ps1 = 0.0f;
    UNROLL
    for (int n = 0; n < NB; n++) {
      s[n][0] = exp2f(fmaf(s[n][0], sl2, -base0));
      s[n][1] = exp2f(fmaf(s[n][1], sl2, -base0));
      s[n][2] = exp2f(fmaf(s[n][2], sl2, -base1));
      s[n][3] = exp2f(fmaf(s[n][3], sl2, -base1));
      ps0 += s[n][0] + s[n][1];
      ps1 += s[n][2] + s[n][3];
    }
    l0 = fmaf(l0, al0, ps0); /* this lane's columns only: the quad's sum at the end */
    l1 = fmaf(l1, al1, ps1);
    UNROLL
    for (int n = 0; n < NO; n++) {
      oacc[n][0] *= al0, oacc[n][1] *= al0;
      oacc[n][2] *= al1, oacc[n][3] *= al1;
    }
    /* O += P V per 8-key step: A k t = key 2t, k t + 4 = key 2t + 1 */
    tc32_acc_ax(oacc, s, tV, LDV, D, t, g);
    __syncthreads(); /* buffer `buf` is read: the next iteration refills it */
  }
  gpa_cp_async_wait<0>(); /* no tile at all: the Q copies are still in flight */
  __syncthreads();

  l0 += __shfl_xor_sync(GPA_FULL_MASK, l0, 1);
  l1 += __shfl_xor_sync(GPA_FULL_MASK, l1, 1);
  l0 += __shfl_xor_sync(GPA_FULL_MASK, l0, 2);
  l1 += __shfl_xor_sync(GPA_FULL_MASK, l1, 2);
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  const long long orow0 = (((long long)b * S + r0) * H + h) * D, orow1 = orow0 + 8LL * H * D;
  UNROLL
  for (int n = 0; n < NO; n++) {
    const int c = n * 8 + 2 * t;
    if (c < D) {
      if (r0 < S) *reinterpret_cast<float2 *>(o + orow0 + c) = make_float2(oacc[n][0] * inv0, oacc[n][1] * inv0);
      if (r1 < S) *reinterpret_cast<float2 *>(o + orow1 + c) = make_float2(oacc[n][2] * inv1, oacc[n][3] * inv1);
    }
  }
  if (t == 0) {
    const float ln2 = 0.6931471805599453f;
    const long long at = ((long long)b * H + h) * S;
    if (r0 < S) lse[at + r0] = l0 > 0.0f ? (m0 + log2f(l0)) * ln2 : -INFINITY;
    if (r1 < S) lse[at + r1] = l1 > 0.0f ? (m1 + log2f(l1)) * ln2 : -INFINITY;
  }
}

/* (written out: the emulated build finds kernels by their names in the source) */
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_fwd_d64(TC32F_ARGS) { tc32_fwd<64>(TC32F_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_fwd_d96(TC32F_ARGS) { tc32_fwd<96>(TC32F_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_fwd_d128(TC32F_ARGS) { tc32_fwd<128>(TC32F_PASS); }
