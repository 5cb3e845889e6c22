/* Attention forward in bf16 and fp16, FlashAttention-2 structure (Dao
 * 2023, algorithm 1), on mma.sync m16n8k16 with fp32 accumulation
 * (gpa_mma.h). Masking and key lengths as every attention kernel here
 * (attention_common.h: bottom-right aligned causal, keys j < len).
 *
 * One block per (query tile of BR rows, head, batch), 4 warps, each owning
 * MT m-tiles of 16 query rows for the whole kernel. With MT = 2 every K or
 * V fragment an ldmatrix loads feeds two m-tiles: half the shared-memory
 * bytes per mma of one m-tile a warp, which at the tensor pipe's rate
 * needed about the whole shared-memory bandwidth. The Q tile and the first
 * K/V tile are copied with cp.async; then per key tile of KT keys:
 *   - the copies of the next K/V tile are issued into the other buffer
 *     (double buffering: they overlap this tile's math);
 *   - S = Q K^T (A from registers or ldmatrix, B by ldmatrix from K);
 *   - masked entries (past the row's limit) become -inf, only in the tiles
 *     that reach a limit;
 *   - online softmax in base 2 (scale folded with log2 e): the row max over
 *     the quad's lanes by two shuffles, O and the running sum rescaled by
 *     2^(m_old - m_new), P = 2^(S scale log2e - m_new);
 *   - O += P V: the S accumulators, rounded to T, are the A operand
 *     directly (attention_fa2.h, fa2_acc_to_a); V by ldmatrix.trans.
 * Causal and length-limited tiles past the block's last visible key are
 * never loaded; a warp skips the math of tiles past its own last one. At the end O / l goes out as fp32 (o32) and/or T (oT,
 * staged through the warp's own Q rows for 16-byte stores), lse =
 * (m + log2 l) ln 2 in fp32; rows that see no key get o = 0, lse = -inf.
 *
 * Classes (compile-time head-dim bound DM; D <= DM, D % 16 == 0 at run
 * time, the untouched columns skipped 16 at a time):
 *   DM 64, 96, 128: BR 128, 32 rows a warp (MT 2), KT 64; Q fragments kept
 *     in registers for DM 64 only, re-read by ldmatrix per k-step above it
 *     (two m-tiles' O and S leave no room: ptxas -v, docs/cuda.md);
 *   DM 256: BR 64, 16 rows a warp (MT 1: two m-tiles' O would be 256
 *     registers a thread), KT 32, Q re-read by ldmatrix.
 * Shared memory: (BR + 4 KT) (DM + 8) elements of T (fa2_fwd_smem in
 * ops/attention/cuda.c computes the same).
 *
 * Accuracy: the products of T values are exact in fp32 and summed in fp32;
 * P is rounded to T before P V (relative u of each term, the bound of
 * tests/test_attention_lowp.c); the sum l is kept unrounded. */
#include "attention_fa2.h"

template <int DM>
struct fa2_fwd_cfg {
  /* MT 16-row m-tiles per warp: every K or V fragment ldmatrix loads feeds
   * MT of them (shared-memory bytes per mma / MT). 2 for DM <= 128; DM 256
   * keeps 1 (two m-tiles' O alone would be 256 registers a thread). */
  static constexpr int MT = DM > 128 ? 1 : 2, RW = 16 * MT;
  static constexpr int BR = DM > 128 ? 64 : 128, KT = DM > 128 ? 32 : 64, W = BR / RW, NT = W * 32;
  static constexpr int LD = DM + 8;
  /* Q fragments held in registers only where they fit beside two m-tiles'
   * O and S (ptxas -v, no spills); otherwise re-read by ldmatrix per k-step,
   * each A fragment then serving all KT / 8 n-tiles of the step */
  static constexpr bool keep_q = DM <= 64;
};

#define FA2F_ARGS(T)                                                                                           \
  const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, const int *__restrict__ lens,     \
      float *__restrict__ o32, T *__restrict__ oT, float *__restrict__ lse, int S, int Sk, int H, int Hkv, int D, \
      float scale, int causal
#define FA2F_PASS q, k, v, lens, o32, oT, lse, S, Sk, H, Hkv, D, scale, causal

template <class T, int DM, bool EX>
static __device__ __forceinline__ void fa2_fwd(FA2F_ARGS(T)) {
  typedef fa2_fwd_cfg<DM> C;
  /* EX: D == DM, a constant: no run-time column tests inside the unrolled
   * k-steps (each was a branch, so ptxas could not hoist the next step's
   * ldmatrix above the current step's mma), constant copy addressing */
  const int Dc = EX ? DM : D, Dg = EX && DM == 128 && FA2_SM8X ? D : Dc;
  constexpr int BR = C::BR, KT = C::KT, LD = C::LD, NT = C::NT, MT = C::MT, RW = C::RW;
  constexpr int KS = EX && DM > 64 ? 32 : KT, KF = DM / 16, NB = KS / 8, NO = DM / 8;
  GPA_DYNAMIC_SHARED(T, sQ);
  T *sK = sQ + BR * LD, *sV = sK + 2 * KT * LD; /* [2][KT][LD] each */
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  /* causal: the last query tiles see the most keys; they start first (the
   * grid's x varies fastest), so the short ones fill in at the end */
  const int qtile = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int row0 = qtile * BR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < BR ? S - row0 : BR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal), ntiles = (jmax + KT - 1) / KT;
  /* this lane's rows: m-tile mt, rows rw + mt 16 + g (half 0) and + 8 (half
   * 1), and the warp's key limit */
  const int rw = row0 + w * RW;
  int lim[MT][2];
  const int wlim = attn_lane_limits(lim, rw, g, kvlen, S, Sk, causal);
  const long long ldq = (long long)H * Dc, ldkv = (long long)Hkv * Dc;
  const T *kb = k + (long long)b * Sk * ldkv + (long long)kh * Dc;
  const T *vb = v + (long long)b * Sk * ldkv + (long long)kh * Dc;

  /* tile copies: the run-time column count, or the exact kernels' constant one */
  auto load = [&](auto rows_c, T *dst, const T *src, long long ld, int nvalid) {
    constexpr int ROWS = decltype(rows_c)::value;
    if constexpr (EX)
      fa2_load_c<T, ROWS, LD, NT, DM>(dst, src, ld, nvalid, tid);
    else
      fa2_load<T, ROWS, LD, NT>(dst, src, ld, nvalid, D, tid);
  };
  load(std::integral_constant<int, BR>(), sQ, q + ((long long)b * S + row0) * ldq + (long long)h * Dc, ldq, nrows);
  if (ntiles > 0) {
    const int nc = jmax < KT ? jmax : KT;
    load(std::integral_constant<int, KT>(), sK, kb, ldkv, nc);
    load(std::integral_constant<int, KT>(), sV, vb, ldkv, nc);
  }
  gpa_cp_async_commit();

  const float sl2 = scale * 1.4426950408889634f; /* scores to base-2 exponents */
  float oacc[MT][NO][4];
  float m[MT][2], l[MT][2];
  UNROLL
  for (int mt = 0; mt < MT; mt++) {
    UNROLL
    for (int n = 0; n < NO; n++) oacc[mt][n][0] = oacc[mt][n][1] = oacc[mt][n][2] = oacc[mt][n][3] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  unsigned qf[C::keep_q ? MT : 1][C::keep_q ? KF : 1][4];
  const T *sQw = sQ + (w * RW) * LD;

  for (int it = 0; it < ntiles; it++) {
    const int j0 = it * KT, buf = it & 1;
    gpa_cp_async_next(it + 1 < ntiles, [&] {
      const int j1 = j0 + KT, nc = jmax - j1 < KT ? jmax - j1 : KT;
      load(std::integral_constant<int, KT>(), sK + (buf ^ 1) * KT * LD, kb + (long long)j1 * ldkv, ldkv, nc);
      load(std::integral_constant<int, KT>(), sV + (buf ^ 1) * KT * LD, vb + (long long)j1 * ldkv, ldkv, nc);
    });
    __syncthreads(); /* tile it (and Q) landed for every thread's copies */
    /* KS keys a softmax step: the tile whole, or (EX above DM 64) two halves
     * of 32, whose S, P and fragments fit beside two m-tiles' O */
    FA2_ROLLED
    for (int sub = 0; sub < KT / KS; sub++) {
    const int j0s = j0 + sub * KS;
    if (j0s < wlim) { /* warp-uniform; the first step a warp computes is tile 0's first */
      const T *tK = sK + buf * KT * LD + sub * KS * LD, *tV = sV + buf * KT * LD + sub * KS * LD;
      if constexpr (C::keep_q) {
        if (it == 0 && sub == 0) {
          UNROLL
          for (int mt = 0; mt < MT; mt++)
            UNROLL
            for (int f = 0; f < KF; f++)
              if (f * 16 < Dc) fa2_lda<LD>(qf[mt][f], sQw + (mt * 16) * LD + f * 16, lane);
        }
      }
      /* S = Q K^T, this warp's RW rows x KT keys; each K fragment feeds MT m-tiles */
      float s[MT][NB][4];
      unsigned pk[MT][EX ? KS / 16 : 1][4]; /* EX: P as A operands */
      UNROLL
      for (int mt = 0; mt < MT; mt++)
        UNROLL
        for (int n = 0; n < NB; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
      UNROLL
      for (int f = 0; f < KF; f++)
        if (f * 16 < Dg) {
          unsigned a[MT][4];
          UNROLL
          for (int mt = 0; mt < MT; mt++) {
            if constexpr (C::keep_q) {
              a[mt][0] = qf[mt][f][0], a[mt][1] = qf[mt][f][1], a[mt][2] = qf[mt][f][2], a[mt][3] = qf[mt][f][3];
            } else {
              fa2_lda<LD>(a[mt], sQw + (mt * 16) * LD + f * 16, lane);
            }
          }
          UNROLL
          for (int n = 0; n < NB; n += 2) {
            unsigned bk[4];
            fa2_ldb_nk<LD>(bk, tK + (n * 8) * LD + f * 16, lane);
            UNROLL
            for (int mt = 0; mt < MT; mt++) {
              gpa_mma16816<T>(s[mt][n], a[mt], bk);
              gpa_mma16816<T>(s[mt][n + 1], a[mt], bk + 2);
            }
          }
        }
      UNROLL
      for (int mt = 0; mt < MT; mt++) {
        /* mask: only tiles reaching a row's limit */
        const int lim0 = lim[mt][0], lim1 = lim[mt][1];
        if (j0s + KS > lim0 || j0s + KS > lim1) {
          UNROLL
          for (int n = 0; n < NB; n++) {
            const int c = j0s + n * 8 + 2 * t;
            if (c >= lim0) s[mt][n][0] = -INFINITY;
            if (c + 1 >= lim0) s[mt][n][1] = -INFINITY;
            if (c >= lim1) s[mt][n][2] = -INFINITY;
            if (c + 1 >= lim1) s[mt][n][3] = -INFINITY;
          }
        }
        /* online softmax over the rows g (0) and g + 8 (1) */
        float mx0 = -INFINITY, mx1 = -INFINITY;
        UNROLL
        for (int n = 0; n < NB; n++) {
          mx0 = fmaxf(mx0, fmaxf(s[mt][n][0], s[mt][n][1]));
          mx1 = fmaxf(mx1, fmaxf(s[mt][n][2], s[mt][n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(GPA_FULL_MASK, mx0, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(GPA_FULL_MASK, mx1, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(GPA_FULL_MASK, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(GPA_FULL_MASK, mx1, 2));
        const float mn0 = fmaxf(m[mt][0], mx0 * sl2), mn1 = fmaxf(m[mt][1], mx1 * sl2);
        /* a row with no visible key so far keeps m = -inf: subtract 0 instead */
        const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
        const float al0 = fa2_exp2<EX>(m[mt][0] - base0), al1 = fa2_exp2<EX>(m[mt][1] - base1);
        m[mt][0] = mn0;
        m[mt][1] = mn1;
        float ps0 = 0.0f, ps1 = 0.0f;
        UNROLL
        for (int n = 0; n < NB; n++) {
          s[mt][n][0] = fa2_exp2<EX>(fmaf(s[mt][n][0], sl2, -base0));
          s[mt][n][1] = fa2_exp2<EX>(fmaf(s[mt][n][1], sl2, -base0));
          s[mt][n][2] = fa2_exp2<EX>(fmaf(s[mt][n][2], sl2, -base1));
          s[mt][n][3] = fa2_exp2<EX>(fmaf(s[mt][n][3], sl2, -base1));
          ps0 += s[mt][n][0] + s[mt][n][1];
          ps1 += s[mt][n][2] + s[mt][n][3];
        }
        if constexpr (EX) { /* P rounded to T now: 32 registers where S's fp32 took 64, across P V */
          UNROLL
          for (int kk = 0; kk < KS / 16; kk++) fa2_acc_to_a<T>(pk[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
        }
        l[mt][0] = fmaf(l[mt][0], al0, ps0); /* this lane's columns only: the quad's sum at the end */
        l[mt][1] = fmaf(l[mt][1], al1, ps1);
        UNROLL
        for (int n = 0; n < NO; n++) {
          oacc[mt][n][0] *= al0, oacc[mt][n][1] *= al0;
          oacc[mt][n][2] *= al1, oacc[mt][n][3] *= al1;
        }
      }
      /* O += P V, P from the S registers; each V fragment feeds MT m-tiles */
      UNROLL
      for (int kk = 0; kk < KS / 16; kk++) {
        unsigned pa[MT][4];
        UNROLL
        for (int mt = 0; mt < MT; mt++) {
          if constexpr (EX)
            pa[mt][0] = pk[mt][kk][0], pa[mt][1] = pk[mt][kk][1], pa[mt][2] = pk[mt][kk][2], pa[mt][3] = pk[mt][kk][3];
          else
            fa2_acc_to_a<T>(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
        }
        UNROLL
        for (int f = 0; f < KF; f++)
          if (f * 16 < Dc) {
            unsigned bv[4];
            fa2_ldb_kn<LD>(bv, tV + (kk * 16) * LD + f * 16, lane);
            UNROLL
            for (int mt = 0; mt < MT; mt++) {
              gpa_mma16816<T>(oacc[mt][2 * f], pa[mt], bv);
              gpa_mma16816<T>(oacc[mt][2 * f + 1], pa[mt], bv + 2);
            }
          }
      }
    }
    }
    __syncthreads(); /* buffer `buf` is read: the next iteration refills it */
  }
  gpa_cp_async_wait<0>(); /* no tile at all: the Q copies are still in flight */
  __syncthreads();

  float inv[MT][2];
  UNROLL
  for (int mt = 0; mt < MT; mt++)
    UNROLL
    for (int hf = 0; hf < 2; hf++) {
      float x = l[mt][hf];
      x += __shfl_xor_sync(GPA_FULL_MASK, x, 1);
      x += __shfl_xor_sync(GPA_FULL_MASK, x, 2);
      l[mt][hf] = x;
      inv[mt][hf] = x > 0.0f ? 1.0f / x : 0.0f;
    }
  if (o32) {
    UNROLL
    for (int mt = 0; mt < MT; mt++) {
      const int r0 = rw + mt * 16 + g, r1 = r0 + 8;
      const long long orow0 = (((long long)b * S + r0) * H + h) * Dc, orow1 = orow0 + 8LL * H * Dc;
      UNROLL
      for (int n = 0; n < NO; n++) {
        const int c = n * 8 + 2 * t;
        if (c < Dc) {
          if (r0 < S)
            *reinterpret_cast<float2 *>(o32 + orow0 + c) =
                make_float2(oacc[mt][n][0] * inv[mt][0], oacc[mt][n][1] * inv[mt][0]);
          if (r1 < S)
            *reinterpret_cast<float2 *>(o32 + orow1 + c) =
                make_float2(oacc[mt][n][2] * inv[mt][1], oacc[mt][n][3] * inv[mt][1]);
        }
      }
    }
  }
  if (oT) { /* through the warp's own Q rows: 16-byte stores */
    T *st = sQ + (w * RW) * LD;
    UNROLL
    for (int mt = 0; mt < MT; mt++)
      UNROLL
      for (int n = 0; n < NO; n++) {
        const int c = n * 8 + 2 * t, r = mt * 16 + g;
        if (c < Dc) {
          *reinterpret_cast<unsigned *>(st + r * LD + c) =
              gpa_pack2<T>(oacc[mt][n][0] * inv[mt][0], oacc[mt][n][1] * inv[mt][0]);
          *reinterpret_cast<unsigned *>(st + (r + 8) * LD + c) =
              gpa_pack2<T>(oacc[mt][n][2] * inv[mt][1], oacc[mt][n][3] * inv[mt][1]);
        }
      }
    __syncwarp();
    const int cpr = Dc >> 3;
    for (int e = lane; e < RW * cpr; e += 32) {
      const int r = e / cpr, c = (e - r * cpr) << 3, gr = rw + r;
      if (gr < S)
        *reinterpret_cast<uint4 *>(oT + (((long long)b * S + gr) * H + h) * Dc + c) =
            *reinterpret_cast<const uint4 *>(st + r * LD + c);
    }
  }
  if (t == 0) {
    const float ln2 = 0.6931471805599453f;
    const long long at = ((long long)b * H + h) * S;
    UNROLL
    for (int mt = 0; mt < MT; mt++)
      UNROLL
      for (int hf = 0; hf < 2; hf++) {
        const int r = rw + mt * 16 + hf * 8 + g;
        if (r < S) lse[at + r] = l[mt][hf] > 0.0f ? (m[mt][hf] + log2f(l[mt][hf])) * ln2 : -INFINITY;
      }
  }
}

/* (written out: the emulated build finds kernels by their names in the source) */
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2_fwd_bf16_d64(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 64, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2_fwd_bf16_d96(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 96, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2_fwd_bf16_d128(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 128, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_fwd_bf16_d256(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 256, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2_fwd_f16_d64(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 64, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2_fwd_f16_d96(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 96, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2_fwd_f16_d128(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 128, false>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_fwd_f16_d256(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 256, false>(FA2F_PASS);
}

/* The exact-head-dim variant (EX: D == 64, 96, 128 exactly), the default
 * for these head dims in both dtypes; GPA_FA2_EXACT=0 takes the class
 * kernels above instead (ops/attention/cuda.c), so that one GPU call can
 * time both. */
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2x_fwd_bf16_d64(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 64, true>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2x_fwd_bf16_d96(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 96, true>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2x_fwd_bf16_d128(FA2F_ARGS(__nv_bfloat16)) {
  fa2_fwd<__nv_bfloat16, 128, true>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2x_fwd_f16_d64(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 64, true>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2x_fwd_f16_d96(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 96, true>(FA2F_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 2) gpa_fa2x_fwd_f16_d128(FA2F_ARGS(__half)) {
  fa2_fwd<__half, 128, true>(FA2F_PASS);
}
