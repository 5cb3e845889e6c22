/* Attention backward in bf16 and fp16, FlashAttention-2 partitioning (Dao
 * 2023, algorithm 2) on mma.sync m16n8k16 (gpa_mma.h), deterministic: no
 * atomics anywhere, every sum in a fixed order, so repeated runs give the
 * same bits. Three kernels:
 *   delta = rowsum(dO o) (attention_common.h's for an fp32 o; fa2_delta
 *     below for o in T);
 *   dK, dV: one block per (key tile of 64, kv head, batch), 4 warps, each
 *     owning 16 keys. Over the group's query heads, then the query tiles
 *     from the first query that can see the tile (causal), in ascending
 *     order, double-buffered with cp.async (Q, dO; lse, delta by plain
 *     loads): S^T = K Q^T and dP^T = V dO^T (keys as rows), P^T =
 *     2^(S^T scale log2e - lse log2e) and dS^T = P^T (dP^T - delta), both
 *     re-laid from the accumulators as A operands (no shared-memory round
 *     trip), dV += P^T dO and dK += dS^T Q with dO and Q by ldmatrix.trans.
 *   dQ: one block per (query tile of 128, head, batch), 4 warps of 32 query
 *     rows (two m-tiles sharing every K and V fragment; DM 256: 64 rows,
 *     16 a warp), key tiles ascending up to the tile's last visible key,
 *     double-buffered: S = Q K^T, dP = dO V^T, dS as above, dQ += dS K; a
 *     warp skips the math of tiles past its own last visible key.
 * dQ without atomics costs a second computation of S and dP (the dQ pass
 * recomputes what the dK/dV pass had): 7 tile products per (query tile,
 * key tile) instead of FA2's 5, about 1.4x the backward's tensor work, for
 * a result that does not depend on the order blocks run in. Opt-in (the
 * op's deterministic = 0, classes 64-128): FA2's own form, the dK/dV
 * kernel also adding its key tile's share of dQ with fp32 atomics
 * (fa2_dq_red, the gpa_fa2n*_dkv_* kernels at the end), no dQ pass.
 *
 * Classes as the forward's: DM 64, 96, 128 accumulate all D columns; DM 256
 * splits the dK/dV block's columns in two (blockIdx.x = 2 tile + half:
 * dK and dV alone would take 256 registers a thread), each half computing
 * the tile's S and dP whole. Query steps of the dK/dV pass: 32 rows (DM
 * 256: 16); key tiles of the dQ pass: 64 for DM 64, 32 above.
 *
 * Accuracy: P and dS are rounded to T before their products (the bound of
 * tests/test_attention_lowp.c); everything else is fp32. dq, dk, dv are
 * written in fp32 or, when grads_t, in T (each rounded once from its fp32
 * sum), scaled by `scale` at the end as the host does. */
#include "attention_fa2.h"

template <int DM>
struct fa2_bwd_cfg {
  static constexpr int LD = DM + 8, W = 4, NT = 128;
  static constexpr int BKV = 64, QT = DM > 128 ? 16 : 32, DA = DM > 128 ? 128 : DM; /* dK/dV pass */
  /* dQ pass: MQ 16-row m-tiles a warp (each K or V fragment ldmatrix loads
   * feeds MQ of them), BQ2 query rows a block, key tiles of BC2; DM 96 and
   * 128 take 32-key tiles so two m-tiles' dQ, S and dP fit (ptxas -v) */
  static constexpr int MQ = DM > 128 ? 1 : 2, BQ2 = 64 * MQ, BC2 = DM > 64 ? 32 : 64;
};

/* dq, dk, dv: fp32, or T when grads_t (rounded once from the fp32 sums) */
#define FA2B_ARGS(T)                                                                                               \
  const T *__restrict__ dout, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,         \
      const float *__restrict__ lse, const float *__restrict__ delta, const int *__restrict__ lens,              \
      void *__restrict__ dq, void *__restrict__ dk, void *__restrict__ dv, int S, int Sk, int H, int Hkv, int D, \
      float scale, int causal, int grads_t
#define FA2B_PASS dout, q, k, v, lse, delta, lens, dq, dk, dv, S, Sk, H, Hkv, D, scale, causal, grads_t

/* dq += a, b at p and p + 1 (fp32, 8-byte aligned), unordered: on sm_90
 * one vector reduction (red.global.add.v2.f32, sm_90 and later), else two
 * scalar atomicAdds (results unused). */
static __device__ __forceinline__ void fa2_red2(float *p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GPA_SIM_EMU)
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

/* The non-deterministic backward's dQ share of one dK/dV step (ND, the
 * deterministic attribute 0): dQ[rows of the step] += dS K over the block's
 * 64 keys, FlashAttention-2's own order. dS^T (the step's [key][query],
 * rounded to T as for dK) is in sDS, written by every warp for its 16 keys;
 * each warp takes one 16-row m-tile of the step's queries and a CW-column
 * share of the block's dQ columns [c0, c0 + DA): the A operand by
 * ldmatrix.trans from dS^T, K's by ldmatrix.trans as in the dQ pass. The
 * sums, times scale, are added into dqa (fp32, dq's layout) with
 * reductions: 2 a lane per n-tile and row half. FG: 16-column fragments a
 * pass (all CW columns at once, or, ONEF, one at a time with dS^T's A
 * fragments re-read per pass: 8 accumulators instead of 16, for the exact
 * D 64 kernel on sm_8x, whose K and V kept in registers left ptxas 4 bytes
 * short there; on sm_90 ONEF is the one that spills: ptxas -v). */
#if FA2_SM8X || defined(GPA_SIM_EMU) /* the emulated build: so that sim runs both forms */
#define FA2_ND_ONEF 1
#else
#define FA2_ND_ONEF 0
#endif
template <class T, int DM, int LDS, bool ONEF>
static __device__ __forceinline__ void fa2_dq_red(const T *sDS, const T *sK, float *__restrict__ dqa, int row0,
                                                  int hq, int nc, int c0, int Dc, int S, int H, int b, float scale,
                                                  int w, int lane) {
  typedef fa2_bwd_cfg<DM> C;
  constexpr int LD = C::LD, MT = C::QT / 16, WPM = C::W / MT, CW = C::DA / WPM, NF = CW / 16, FG = ONEF ? 1 : NF;
  const int mq = w % MT, cb = c0 + (w / MT) * CW, g = lane >> 2, t = lane & 3;
  UNROLL
  for (int f0 = 0; f0 < NF; f0 += FG) {
    float acc[2 * FG][4];
    UNROLL
    for (int n = 0; n < 2 * FG; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    UNROLL
    for (int kk = 0; kk < C::BKV / 16; kk++)
      if (kk * 16 < nc) { /* keys past the tile's end add nothing */
        unsigned a[4];
        fa2_lda_t<LDS>(a, sDS + (kk * 16) * LDS + mq * 16, lane);
        UNROLL
        for (int f = 0; f < FG; f++)
          if (cb + (f0 + f) * 16 < Dc) {
            unsigned bk[4];
            fa2_ldb_kn<LD>(bk, sK + (kk * 16) * LD + cb + (f0 + f) * 16, lane);
            gpa_mma16816<T>(acc[2 * f], a, bk);
            gpa_mma16816<T>(acc[2 * f + 1], a, bk + 2);
          }
      }
    /* the addresses after the products: fewer registers live across them */
    const int r0 = row0 + mq * 16 + g, r1 = r0 + 8;
    const long long ld = (long long)H * Dc;
    float *d0 = dqa + ((long long)b * S + r0) * ld + (long long)hq * Dc + cb, *d1 = d0 + 8 * ld;
    UNROLL
    for (int n = 0; n < 2 * FG; n++) {
      const int c = f0 * 16 + n * 8 + 2 * t;
      if (cb + (f0 + (n >> 1)) * 16 < Dc) {
        if (r0 < S) fa2_red2(d0 + c, acc[n][0] * scale, acc[n][1] * scale);
        if (r1 < S) fa2_red2(d1 + c, acc[n][2] * scale, acc[n][3] * scale);
      }
    }
  }
}

/* dK, dV of key tile blockIdx.x (DM 256: 2 tile + half) of (kv head
 * blockIdx.y, batch blockIdx.z); ND: also dQ's share of the tile, added
 * into dqa (fa2_dq_red), where the deterministic backward's dQ pass
 * recomputes S and dP. */
template <class T, int DM, bool EX, bool ND = false>
static __device__ __forceinline__ void fa2_dkv(FA2B_ARGS(T), float *__restrict__ dqa = nullptr) {
  typedef fa2_bwd_cfg<DM> C;
  const int Dc = EX ? DM : D; /* EX: D == DM, a constant (as the forward's) */
  constexpr int LD = C::LD, NT = C::NT, BKV = C::BKV, QT = C::QT, KF = DM / 16, NQ = QT / 8, NA = C::DA / 8;
  /* ND: dS^T rows of an odd count of 16-byte chunks (5; QT 16: 3), so the
   * 8 rows of an ldmatrix phase fall in 8 bank groups */
  constexpr int LDS = QT + 8;
  GPA_DYNAMIC_SHARED(T, sK);
  T *sV = sK + BKV * LD, *sQ = sV + BKV * LD, *sO = sQ + 2 * QT * LD; /* Q, dO: [2][QT][LD] */
  float *sL = reinterpret_cast<float *>(sO + 2 * QT * LD), *sDl = sL + 2 * QT;
  T *sDS = reinterpret_cast<T *>(sDl + 2 * QT); /* ND: dS^T [BKV][LDS] */
  (void)dq;
  (void)sDS;
  (void)dqa;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  const int half = DM > 128 ? (int)(blockIdx.x & 1) : 0, tile = DM > 128 ? (int)(blockIdx.x >> 1) : (int)blockIdx.x;
  const int c0 = half * C::DA, j0 = tile * BKV, kh = blockIdx.y, b = blockIdx.z, grp = H / Hkv;
  const int kvlen = attn_kvlen(lens, b, Sk), nc = Sk - j0 < BKV ? Sk - j0 : BKV;
  const attn_kv_steps<QT> steps(j0, kvlen, S, Sk, causal, grp);
  const int items = steps.n;
  const long long ldq = (long long)H * Dc, ldkv = (long long)Hkv * Dc;
  const long long kvoff = ((long long)b * Sk + j0) * ldkv + (long long)kh * Dc;
  const float sl2 = scale * ATTN_LOG2E;

  /* item i: query head kh * grp + steps.head(i), rows steps.row0(i).. */
  auto load_item = [&](int i, int buf) {
    const int hq = kh * grp + steps.head(i), row0 = steps.row0(i), n = S - row0 < QT ? S - row0 : QT;
    const long long off = ((long long)b * S + row0) * ldq + (long long)hq * Dc;
    fa2_load_x<T, QT, LD, NT, EX, DM>(sQ + buf * QT * LD, q + off, ldq, n, D, tid);
    fa2_load_x<T, QT, LD, NT, EX, DM>(sO + buf * QT * LD, dout + off, ldq, n, D, tid);
    attn_step_stats<QT, NT>(sL, sDl, buf, lse, delta, b, H, hq, S, row0, n, tid);
  };

  float ak[NA][4], av[NA][4];
  attn_dkv_start(
      ak, av, items,
      [&] {
        fa2_load_x<T, BKV, LD, NT, EX, DM>(sK, k + kvoff, ldkv, nc, D, tid);
        fa2_load_x<T, BKV, LD, NT, EX, DM>(sV, v + kvoff, ldkv, nc, D, tid);
      },
      load_item);
  /* EX at DM 64: the warp's K and V fragments (its 16 keys, all of D)
   * loaded once into registers, where the class kernels re-read them from
   * shared memory every query step: a fifth of the pass's ldmatrix traffic
   * at D 64 (40 per 64 mma a step, now 32), which bounds this pass, whose
   * every Q and dO fragment feeds one m-tile. 32 registers more: the
   * kernel's launch bounds keep it at 3 blocks an SM. (DM 96 and 128: no
   * room beside dK and dV.) */
  constexpr bool KEEP_KV = EX && DM <= 64;
  unsigned kf[KEEP_KV ? KF : 1][4], vf[KEEP_KV ? KF : 1][4];
  const int key0 = j0 + w * 16 + g, key1 = key0 + 8;
  for (int it = 0; it < items; it++) {
    const int buf = it & 1;
    gpa_cp_async_next(it + 1 < items, [&] { load_item(it + 1, buf ^ 1); });
    __syncthreads();
    const T *tQ = sQ + buf * QT * LD, *tO = sO + buf * QT * LD;
    const float *tL = sL + buf * QT, *tD = sDl + buf * QT;
    const int row0 = steps.row0(it);
    /* S^T and dP^T: the warp's 16 keys x QT queries */
    float st[NQ][4], dpt[NQ][4];
    attn_zero2(st, dpt);
    if constexpr (KEEP_KV) {
      if (it == 0) {
        UNROLL
        for (int f = 0; f < KF; f++) {
          fa2_lda<LD>(kf[f], sK + (w * 16) * LD + f * 16, lane);
          fa2_lda<LD>(vf[f], sV + (w * 16) * LD + f * 16, lane);
        }
      }
    }
    UNROLL
    for (int f = 0; f < KF; f++)
      if (f * 16 < Dc) {
        unsigned a_k[4], a_v[4];
        if constexpr (KEEP_KV) {
          UNROLL
          for (int i = 0; i < 4; i++) a_k[i] = kf[f][i], a_v[i] = vf[f][i];
        } else {
          fa2_lda<LD>(a_k, sK + (w * 16) * LD + f * 16, lane);
          fa2_lda<LD>(a_v, sV + (w * 16) * LD + f * 16, lane);
        }
        UNROLL
        for (int n = 0; n < NQ; n += 2) {
          unsigned bq[4], bo[4];
          fa2_ldb_nk<LD>(bq, tQ + (n * 8) * LD + f * 16, lane);
          fa2_ldb_nk<LD>(bo, tO + (n * 8) * LD + f * 16, lane);
          gpa_mma16816<T>(st[n], a_k, bq);
          gpa_mma16816<T>(st[n + 1], a_k, bq + 2);
          gpa_mma16816<T>(dpt[n], a_v, bo);
          gpa_mma16816<T>(dpt[n + 1], a_v, bo + 2);
        }
      }
    /* P^T and dS^T in place (the warp-uniform test of the step: EX only) */
    attn_bwd_pds<EX, QT>(st, dpt, tL, tD, row0, j0 + w * 16, g, t, kvlen, S, Sk, causal, sl2,
                         [](float x) { return fa2_exp2<EX>(x); });
    /* dV += P^T dO, dK += dS^T Q over this step's queries */
    UNROLL
    for (int kk = 0; kk < QT / 16; kk++) {
      unsigned pa[4], da[4];
      fa2_acc_to_a<T>(pa, st[2 * kk], st[2 * kk + 1]);
      fa2_acc_to_a<T>(da, dpt[2 * kk], dpt[2 * kk + 1]);
      if constexpr (ND) { /* dS^T for the dQ share: keys w 16 + g (+ 8), queries kk 16 + 2t (+ 8) */
        unsigned *r0 = reinterpret_cast<unsigned *>(sDS + (w * 16 + g) * LDS + kk * 16 + 2 * t);
        unsigned *r1 = reinterpret_cast<unsigned *>(sDS + (w * 16 + g + 8) * LDS + kk * 16 + 2 * t);
        r0[0] = da[0], r1[0] = da[1], r0[4] = da[2], r1[4] = da[3];
      }
      UNROLL
      for (int f = 0; f < NA / 2; f++)
        if (c0 + f * 16 < Dc) {
          unsigned bo[4], bq[4];
          fa2_ldb_kn<LD>(bo, tO + (kk * 16) * LD + c0 + f * 16, lane);
          fa2_ldb_kn<LD>(bq, tQ + (kk * 16) * LD + c0 + f * 16, lane);
          gpa_mma16816<T>(av[2 * f], pa, bo);
          gpa_mma16816<T>(av[2 * f + 1], pa, bo + 2);
          gpa_mma16816<T>(ak[2 * f], da, bq);
          gpa_mma16816<T>(ak[2 * f + 1], da, bq + 2);
        }
    }
    if constexpr (ND) {
      __syncthreads(); /* every warp's dS^T is in sDS */
      fa2_dq_red<T, DM, LDS, KEEP_KV && FA2_ND_ONEF>(sDS, sK, dqa, row0, kh * grp + steps.head(it), nc, c0, Dc, S, H, b,
                                                     scale, w, lane);
    }
    __syncthreads(); /* buffer `buf` is read: the next iteration refills it (ND: and sDS) */
  }
  const long long o0 = kvoff + (long long)(w * 16 + g) * ldkv + c0, o1 = o0 + 8 * ldkv;
  UNROLL
  for (int n = 0; n < NA; n++) {
    const int c = n * 8 + 2 * t;
    if (c0 + c < Dc) {
      if (key0 < Sk) {
        fa2_store2<T>(dv, o0 + c, av[n][0], av[n][1], grads_t);
        fa2_store2<T>(dk, o0 + c, ak[n][0] * scale, ak[n][1] * scale, grads_t);
      }
      if (key1 < Sk) {
        fa2_store2<T>(dv, o1 + c, av[n][2], av[n][3], grads_t);
        fa2_store2<T>(dk, o1 + c, ak[n][2] * scale, ak[n][3] * scale, grads_t);
      }
    }
  }
}

/* dQ of query tile blockIdx.x (causal: counted from the last) of (head
 * blockIdx.y, batch blockIdx.z). */
template <class T, int DM, bool EX>
static __device__ __forceinline__ void fa2_dq(FA2B_ARGS(T)) {
  typedef fa2_bwd_cfg<DM> C;
  const int Dc = EX ? DM : D;
  /* EX at DM 64: 32-key tiles, as DM 96 and 128 (with 64 and no branch
   * between the k-steps, S, dP and dQ of two m-tiles spill) */
  constexpr int LD = C::LD, NT = C::NT, BR = C::BQ2, KT = EX && DM == 64 ? 32 : C::BC2, MQ = C::MQ, RW = 16 * MQ;
  /* EX at DM 128 keeps the run-time test between the S and dP k-steps: it
   * bounds how far ptxas hoists the next step's ldmatrix, without which
   * two m-tiles' dQ, S, dP and both steps' fragments spill */
  const int Dg = EX && DM == 128 ? D : Dc, Dq = EX && DM == 128 && FA2_SM8X ? D : Dc;
  constexpr int KF = DM / 16, NB = KT / 8, NO = DM / 8;
  GPA_DYNAMIC_SHARED(T, sQ);
  T *sO = sQ + BR * LD, *sK = sO + BR * LD, *sV = sK + 2 * KT * LD; /* K, V: [2][KT][LD] */
  (void)dk;
  (void)dv;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  /* causal: the last query tiles see the most keys; they start first (the
   * grid's x varies fastest), so the short ones fill in at the end */
  const int qtile = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int row0 = qtile * BR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < BR ? S - row0 : BR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal), ntiles = (jmax + KT - 1) / KT;
  const long long at = ((long long)b * H + h) * S;
  /* this lane's rows: m-tile mt, rows rw + mt 16 + g (half 0) and + 8 (half
   * 1), and the warp's key limit */
  const int rw = row0 + w * RW;
  int lim[MQ][2];
  const int wlim = attn_lane_limits(lim, rw, g, kvlen, S, Sk, causal);
  const long long ldq = (long long)H * Dc, ldkv = (long long)Hkv * Dc;
  const long long qoff = ((long long)b * S + row0) * ldq + (long long)h * Dc;
  const T *kb = k + (long long)b * Sk * ldkv + (long long)kh * Dc;
  const T *vb = v + (long long)b * Sk * ldkv + (long long)kh * Dc;
  const float sl2 = scale * ATTN_LOG2E;

  fa2_load_x<T, BR, LD, NT, EX, DM>(sQ, q + qoff, ldq, nrows, D, tid);
  fa2_load_x<T, BR, LD, NT, EX, DM>(sO, dout + qoff, ldq, nrows, D, tid);
  if (ntiles > 0) {
    const int nc = jmax < KT ? jmax : KT;
    fa2_load_x<T, KT, LD, NT, EX, DM>(sK, kb, ldkv, nc, D, tid);
    fa2_load_x<T, KT, LD, NT, EX, DM>(sV, vb, ldkv, nc, D, tid);
  }
  gpa_cp_async_commit();
  float aq[MQ][NO][4];
  UNROLL
  for (int mt = 0; mt < MQ; mt++)
    UNROLL
    for (int n = 0; n < NO; n++) aq[mt][n][0] = aq[mt][n][1] = aq[mt][n][2] = aq[mt][n][3] = 0.0f;
  const T *sQw = sQ + (w * RW) * LD, *sOw = sO + (w * RW) * LD;
  for (int it = 0; it < ntiles; it++) {
    const int j0 = it * KT, buf = it & 1;
    gpa_cp_async_next(it + 1 < ntiles, [&] {
      const int j1 = j0 + KT, nc = jmax - j1 < KT ? jmax - j1 : KT;
      fa2_load_x<T, KT, LD, NT, EX, DM>(sK + (buf ^ 1) * KT * LD, kb + (long long)j1 * ldkv, ldkv, nc, D, tid);
      fa2_load_x<T, KT, LD, NT, EX, DM>(sV + (buf ^ 1) * KT * LD, vb + (long long)j1 * ldkv, ldkv, nc, D, tid);
    });
    __syncthreads();
    if (j0 < wlim) { /* warp-uniform */
      const T *tK = sK + buf * KT * LD, *tV = sV + buf * KT * LD;
      float s[MQ][NB][4], dp[MQ][NB][4];
      UNROLL
      for (int mt = 0; mt < MQ; mt++)
        UNROLL
        for (int n = 0; n < NB; n++)
          UNROLL
          for (int i = 0; i < 4; i++) s[mt][n][i] = dp[mt][n][i] = 0.0f;
      UNROLL
      for (int f = 0; f < KF; f++)
        if (f * 16 < Dg) {
          unsigned a_q[MQ][4], a_o[MQ][4];
          UNROLL
          for (int mt = 0; mt < MQ; mt++) {
            fa2_lda<LD>(a_q[mt], sQw + (mt * 16) * LD + f * 16, lane);
            fa2_lda<LD>(a_o[mt], sOw + (mt * 16) * LD + f * 16, lane);
          }
          UNROLL
          for (int n = 0; n < NB; n += 2) {
            unsigned bk[4], bv[4];
            fa2_ldb_nk<LD>(bk, tK + (n * 8) * LD + f * 16, lane);
            fa2_ldb_nk<LD>(bv, tV + (n * 8) * LD + f * 16, lane);
            UNROLL
            for (int mt = 0; mt < MQ; mt++) {
              gpa_mma16816<T>(s[mt][n], a_q[mt], bk);
              gpa_mma16816<T>(s[mt][n + 1], a_q[mt], bk + 2);
              gpa_mma16816<T>(dp[mt][n], a_o[mt], bv);
              gpa_mma16816<T>(dp[mt][n + 1], a_o[mt], bv + 2);
            }
          }
        }
      UNROLL
      for (int mt = 0; mt < MQ; mt++) {
        /* lse and delta re-read per tile (L1 hits): 8 registers fewer across
         * the tile's products, which two m-tiles at D 128 need */
        float L[2], Dl[2];
        UNROLL
        for (int hf = 0; hf < 2; hf++) {
          const int r = rw + mt * 16 + hf * 8 + g;
          L[hf] = r < S ? lse[at + r] * ATTN_LOG2E : 0.0f;
          Dl[hf] = r < S ? delta[at + r] : 0.0f;
        }
        UNROLL
        for (int n = 0; n < NB; n++)
          UNROLL
          for (int i = 0; i < 4; i++) {
            const int col = j0 + n * 8 + 2 * t + (i & 1), hf = i >> 1;
            const bool vis = col < lim[mt][hf];
            const float p = vis ? fa2_exp2<EX>(fmaf(s[mt][n][i], sl2, -L[hf])) : 0.0f;
            dp[mt][n][i] = p * (dp[mt][n][i] - Dl[hf]);
          }
      }
      /* dQ += dS K: K as [k = key][n = d], by ldmatrix.trans, each fragment
       * feeding MQ m-tiles */
      UNROLL
      for (int kk = 0; kk < KT / 16; kk++) {
        unsigned da[MQ][4];
        UNROLL
        for (int mt = 0; mt < MQ; mt++) fa2_acc_to_a<T>(da[mt], dp[mt][2 * kk], dp[mt][2 * kk + 1]);
        UNROLL
        for (int f = 0; f < KF; f++)
          if (f * 16 < Dq) {
            unsigned bk[4];
            fa2_ldb_kn<LD>(bk, tK + (kk * 16) * LD + f * 16, lane);
            UNROLL
            for (int mt = 0; mt < MQ; mt++) {
              gpa_mma16816<T>(aq[mt][2 * f], da[mt], bk);
              gpa_mma16816<T>(aq[mt][2 * f + 1], da[mt], bk + 2);
            }
          }
      }
    }
    __syncthreads();
  }
  gpa_cp_async_wait<0>(); /* no key tile at all: Q and dO are still in flight */
  UNROLL
  for (int mt = 0; mt < MQ; mt++) {
    const int r0 = rw + mt * 16 + g, r1 = r0 + 8;
    const long long o0 = qoff + (long long)(r0 - row0) * ldq, o1 = o0 + 8 * ldq;
    UNROLL
    for (int n = 0; n < NO; n++) {
      const int c = n * 8 + 2 * t;
      if (c < Dc) {
        if (r0 < S) fa2_store2<T>(dq, o0 + c, aq[mt][n][0] * scale, aq[mt][n][1] * scale, grads_t);
        if (r1 < S) fa2_store2<T>(dq, o1 + c, aq[mt][n][2] * scale, aq[mt][n][3] * scale, grads_t);
      }
    }
  }
}

/* delta for an o stored in T (bf16/fp16 outputs); one warp per row. */
template <class T>
static __device__ __forceinline__ void fa2_delta(const T *__restrict__ dout, const T *__restrict__ o,
                                                 float *__restrict__ delta, long long rows, int S, int H, int D) {
  for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
       r += (long long)gridDim.x * blockDim.y) {
    float s = 0.0f;
    for (int d = threadIdx.x; d < D; d += 32) s = fmaf(attn_f(dout[r * D + d]), attn_f(o[r * D + d]), s);
    s = gpa_warp_sum(s);
    const long long bs = r / H, h = r - bs * H, b = bs / S, i = bs - b * S;
    if (threadIdx.x == 0) delta[(b * H + h) * S + i] = s;
  }
}
extern "C" __global__ void gpa_fa2_delta_bf16(const __nv_bfloat16 *__restrict__ dout,
                                              const __nv_bfloat16 *__restrict__ o, float *__restrict__ delta,
                                              long long rows, int S, int H, int D) {
  fa2_delta(dout, o, delta, rows, S, H, D);
}
extern "C" __global__ void gpa_fa2_delta_f16(const __half *__restrict__ dout, const __half *__restrict__ o,
                                             float *__restrict__ delta, long long rows, int S, int H, int D) {
  fa2_delta(dout, o, delta, rows, S, H, D);
}

/* delta for an fp32 o (attention_common.h) */
extern "C" __global__ void gpa_fa2_delta32_bf16(const __nv_bfloat16 *__restrict__ dout, const float *__restrict__ o,
                                                float *__restrict__ delta, long long rows, int S, int H, int D) {
  attn_delta(dout, o, delta, rows, S, H, D);
}
extern "C" __global__ void gpa_fa2_delta32_f16(const __half *__restrict__ dout, const float *__restrict__ o,
                                               float *__restrict__ delta, long long rows, int S, int H, int D) {
  attn_delta(dout, o, delta, rows, S, H, D);
}

/* (written out: the emulated build finds kernels by their names in the source) */
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_bf16_d64(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 64, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_bf16_d64(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 64, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_bf16_d96(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 96, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_bf16_d96(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 96, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_bf16_d128(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 128, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_bf16_d128(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 128, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_bf16_d256(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 256, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_bf16_d256(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 256, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_f16_d64(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 64, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_f16_d64(FA2B_ARGS(__half)) {
  fa2_dq<__half, 64, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_f16_d96(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 96, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_f16_d96(FA2B_ARGS(__half)) {
  fa2_dq<__half, 96, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_f16_d128(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 128, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_f16_d128(FA2B_ARGS(__half)) {
  fa2_dq<__half, 128, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dkv_f16_d256(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 256, false>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2_dq_f16_d256(FA2B_ARGS(__half)) {
  fa2_dq<__half, 256, false>(FA2B_PASS);
}

/* The exact-head-dim variant (EX: D == 64, 96, 128 exactly, bf16 and
 * fp16), the default as the forward's; GPA_FA2_EXACT=0 opts out. */
/* 3 blocks an SM, as the class kernel's 153 registers allow: ptxas fits the
 * K/V fragments kept in registers into 166 (168 on sm_80), no spills */
extern "C" __global__ void __launch_bounds__(128, 3) gpa_fa2x_dkv_bf16_d64(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 64, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dq_bf16_d64(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 64, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dkv_bf16_d96(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 96, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dq_bf16_d96(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 96, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dkv_bf16_d128(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dkv<__nv_bfloat16, 128, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dq_bf16_d128(FA2B_ARGS(__nv_bfloat16)) {
  fa2_dq<__nv_bfloat16, 128, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 3) gpa_fa2x_dkv_f16_d64(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 64, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dq_f16_d64(FA2B_ARGS(__half)) {
  fa2_dq<__half, 64, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dkv_f16_d96(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 96, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dq_f16_d96(FA2B_ARGS(__half)) {
  fa2_dq<__half, 96, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dkv_f16_d128(FA2B_ARGS(__half)) {
  fa2_dkv<__half, 128, true>(FA2B_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2x_dq_f16_d128(FA2B_ARGS(__half)) {
  fa2_dq<__half, 128, true>(FA2B_PASS);
}

/* The non-deterministic backward (the attention op's deterministic = 0):
 * FlashAttention-2's own structure, dQ's share of each key tile computed in
 * the dK/dV kernel (fa2_dq_red) and added into an fp32 accumulator with
 * reductions, in whatever order the blocks run: 5 tile products per (query
 * step, key tile) and no dQ pass. dqa: dq itself when dq is fp32, else
 * scratch that gpa_fa2_dq_out_* rounds to T. Zeroed in-stream first (a
 * memset) by the host. Classes 64, 96 and 128 (class 256 keeps the
 * deterministic kernels), exact (fa2nx) and not (fa2n). */
extern "C" __global__ void __launch_bounds__(128, 1)
    gpa_fa2n_dkv_bf16_d64(FA2B_ARGS(__nv_bfloat16), float *__restrict__ dqa) {
  fa2_dkv<__nv_bfloat16, 64, false, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1)
    gpa_fa2n_dkv_bf16_d96(FA2B_ARGS(__nv_bfloat16), float *__restrict__ dqa) {
  fa2_dkv<__nv_bfloat16, 96, false, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1)
    gpa_fa2n_dkv_bf16_d128(FA2B_ARGS(__nv_bfloat16), float *__restrict__ dqa) {
  fa2_dkv<__nv_bfloat16, 128, false, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2n_dkv_f16_d64(FA2B_ARGS(__half), float *__restrict__ dqa) {
  fa2_dkv<__half, 64, false, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2n_dkv_f16_d96(FA2B_ARGS(__half), float *__restrict__ dqa) {
  fa2_dkv<__half, 96, false, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2n_dkv_f16_d128(FA2B_ARGS(__half), float *__restrict__ dqa) {
  fa2_dkv<__half, 128, false, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 3)
    gpa_fa2nx_dkv_bf16_d64(FA2B_ARGS(__nv_bfloat16), float *__restrict__ dqa) {
  fa2_dkv<__nv_bfloat16, 64, true, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1)
    gpa_fa2nx_dkv_bf16_d96(FA2B_ARGS(__nv_bfloat16), float *__restrict__ dqa) {
  fa2_dkv<__nv_bfloat16, 96, true, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1)
    gpa_fa2nx_dkv_bf16_d128(FA2B_ARGS(__nv_bfloat16), float *__restrict__ dqa) {
  fa2_dkv<__nv_bfloat16, 128, true, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 3) gpa_fa2nx_dkv_f16_d64(FA2B_ARGS(__half), float *__restrict__ dqa) {
  fa2_dkv<__half, 64, true, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_fa2nx_dkv_f16_d96(FA2B_ARGS(__half), float *__restrict__ dqa) {
  fa2_dkv<__half, 96, true, true>(FA2B_PASS, dqa);
}
extern "C" __global__ void __launch_bounds__(128, 1)
    gpa_fa2nx_dkv_f16_d128(FA2B_ARGS(__half), float *__restrict__ dqa) {
  fa2_dkv<__half, 128, true, true>(FA2B_PASS, dqa);
}

/* dq in T from the fp32 accumulator (already scaled): n a multiple of 4
 * (D % 16 == 0), src 16-byte and dst 8-byte aligned. */
template <class T>
static __device__ __forceinline__ void fa2_dq_out(const float *__restrict__ src, T *__restrict__ dst, long long n) {
  for (long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += 4 * (long long)gridDim.x * blockDim.x) {
    const float4 v = *reinterpret_cast<const float4 *>(src + i);
    *reinterpret_cast<uint2 *>(dst + i) = make_uint2(gpa_pack2<T>(v.x, v.y), gpa_pack2<T>(v.z, v.w));
  }
}
extern "C" __global__ void gpa_fa2_dq_out_bf16(const float *__restrict__ src, __nv_bfloat16 *__restrict__ dst,
                                               long long n) {
  fa2_dq_out(src, dst, n);
}
extern "C" __global__ void gpa_fa2_dq_out_f16(const float *__restrict__ src, __half *__restrict__ dst, long long n) {
  fa2_dq_out(src, dst, n);
}
