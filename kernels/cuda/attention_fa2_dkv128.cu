/* The dK/dV pass of the bf16/fp16 attention backward over 128-key tiles
 * with 8 warps (opt-in: GPA_FA2_DKV128=1; exact head dims D = 64, 96, 128),
 * FlashAttention-2's own partition of that pass (Dao 2023, algorithm 2),
 * where attention_fa2_bwd.cu's dK/dV kernels give each of 4 warps 16 keys
 * of a 64-key tile, so that every Q and dO fragment an ldmatrix loads feeds
 * one m-tile (320 shared-memory bytes per mma at D 128).
 *
 * One block per (key tile of 128, kv head, batch), 8 warps; over the group's
 * query heads, then query steps of 64 rows from the first one that can see
 * the tile, double-buffered (Q, dO by cp.async; lse, delta by loads). Each
 * step in two phases with different warp partitions, joined by P^T and dS^T
 * (rounded to T) in shared memory:
 *   1. S^T = K Q^T and dP^T = V dO^T (keys as rows, 128 x 64): warps 4 x 2
 *      over (keys x queries), 32 x 32 each (two m-tiles of keys, each Q or
 *      dO fragment feeding both, each K or V fragment four n-tiles); P^T
 *      and dS^T = P^T (dP^T - delta) in registers (attn_bwd_pds), stored;
 *   2. dV += P^T dO and dK += dS^T Q (128 keys x D): warps 4 x 2 over (keys
 *      x D), 32 keys x D/2 each, P^T and dS^T by ldmatrix (two m-tiles), dO
 *      and Q by ldmatrix.trans, each feeding both m-tiles.
 * dQ stays with attention_fa2_bwd.cu's deterministic dQ pass: every sum has
 * a fixed order (head, step, row inside one block), the same bits every
 * run. dk, dv: fp32 or T (grads_t), dk times scale, as the other kernels. */
#include "attention_fa2.h"

template <int DM>
struct fa2k_cfg {
  static constexpr int LD = DM + 8, NT = 256, BKV = 128, QT = 64;
  /* P^T, dS^T rows: QT + 8 elements (144 bytes: the 8 rows of an ldmatrix
   * phase in 8 bank groups, and the pair stores of phase 1 in 32 banks) */
  static constexpr int LDP = QT + 8;
  static constexpr int KF = DM / 16, DH = DM / 2, NH = DH / 8; /* phase 2: a warp's D half, its n-tiles */
  /* shared memory (ops/attention/cuda.c, fa2k_smem): K, V, 2 Q, 2 dO tiles,
   * P^T, dS^T, 2 lse and delta rows: (2 BKV + 4 QT) LD 2 + 2 BKV LDP 2 + 4 QT 4 bytes */
};

#define FA2K_ARGS(T)                                                                                               \
  const T *__restrict__ dout, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,         \
      const float *__restrict__ lse, const float *__restrict__ delta, const int *__restrict__ lens,              \
      void *__restrict__ dq, void *__restrict__ dk, void *__restrict__ dv, int S, int Sk, int H, int Hkv, int D, \
      float scale, int causal, int grads_t
#define FA2K_PASS dout, q, k, v, lse, delta, lens, dk, dv, S, Sk, H, Hkv, scale, causal, grads_t

template <class T, int DM>
static __device__ __forceinline__ void fa2k_dkv(const T *__restrict__ dout, const T *__restrict__ q,
                                                const T *__restrict__ k, const T *__restrict__ v,
                                                const float *__restrict__ lse, const float *__restrict__ delta,
                                                const int *__restrict__ lens, void *__restrict__ dk,
                                                void *__restrict__ dv, int S, int Sk, int H, int Hkv, float scale,
                                                int causal, int grads_t) {
  typedef fa2k_cfg<DM> C;
  constexpr int LD = C::LD, LDP = C::LDP, NT = C::NT, BKV = C::BKV, QT = C::QT, KF = C::KF, DH = C::DH;
  constexpr int NH = C::NH;
  GPA_DYNAMIC_SHARED(T, sK);
  T *sV = sK + BKV * LD, *sQ = sV + BKV * LD, *sO = sQ + 2 * QT * LD; /* Q, dO: [2][QT][LD] */
  T *sP = sO + 2 * QT * LD, *sS = sP + BKV * LDP;                     /* P^T, dS^T: [BKV][LDP] */
  float *sL = reinterpret_cast<float *>(sS + BKV * LDP), *sDl = sL + 2 * QT;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  /* phase 1: keys 32 wk.., queries 32 wh..; phase 2: keys 32 wk.., columns DH wh.. */
  const int wk = w & 3, wh = w >> 2;
  const int j0 = blockIdx.x * BKV, kh = blockIdx.y, b = blockIdx.z, grp = H / Hkv;
  const int kvlen = attn_kvlen(lens, b, Sk), nc = Sk - j0 < BKV ? Sk - j0 : BKV;
  const attn_kv_steps<QT> steps(j0, kvlen, S, Sk, causal, grp);
  const int items = steps.n;
  const long long ldq = (long long)H * DM, ldkv = (long long)Hkv * DM;
  const long long kvoff = ((long long)b * Sk + j0) * ldkv + (long long)kh * DM;
  const float sl2 = scale * ATTN_LOG2E;

  auto load_item = [&](int i, int buf) {
    const int hq = kh * grp + steps.head(i), row0 = steps.row0(i), n = S - row0 < QT ? S - row0 : QT;
    const long long off = ((long long)b * S + row0) * ldq + (long long)hq * DM;
    fa2_load_c<T, QT, LD, NT, DM>(sQ + buf * QT * LD, q + off, ldq, n, tid);
    fa2_load_c<T, QT, LD, NT, DM>(sO + buf * QT * LD, dout + off, ldq, n, tid);
    if (tid < QT) attn_step_row<QT>(sL, sDl, buf, lse, delta, b, H, hq, S, row0, n, tid);
  };

  float ak[2][NH][4], av[2][NH][4]; /* the warp's 32 keys x DH columns */
  UNROLL
  for (int m = 0; m < 2; m++)
    UNROLL
    for (int n = 0; n < NH; n++)
      UNROLL
      for (int i = 0; i < 4; i++) ak[m][n][i] = av[m][n][i] = 0.0f;
  if (items > 0) {
    fa2_load_c<T, BKV, LD, NT, DM>(sK, k + kvoff, ldkv, nc, tid);
    fa2_load_c<T, BKV, LD, NT, DM>(sV, v + kvoff, ldkv, nc, tid);
    load_item(0, 0);
    gpa_cp_async_commit();
  }
  const T *wK = sK + (wk * 32) * LD, *wV = sV + (wk * 32) * LD;
  for (int it = 0; it < items; it++) {
    const int buf = it & 1;
    gpa_cp_async_next(it + 1 < items, [&] { load_item(it + 1, buf ^ 1); });
    __syncthreads(); /* this step's Q, dO, lse, delta are in */
    const T *tQ = sQ + buf * QT * LD, *tO = sO + buf * QT * LD;
    const int row0 = steps.row0(it);
    {
      /* phase 1: the warp's S^T and dP^T, 2 m-tiles of keys x 4 n-tiles of queries */
      float st[2][4][4], dpt[2][4][4];
      UNROLL
      for (int m = 0; m < 2; m++)
        UNROLL
        for (int n = 0; n < 4; n++)
          UNROLL
          for (int i = 0; i < 4; i++) st[m][n][i] = dpt[m][n][i] = 0.0f;
      const T *wQ = tQ + (wh * 32) * LD, *wO = tO + (wh * 32) * LD;
      UNROLL
      for (int f = 0; f < KF; f++) {
        unsigned bq[2][4], bo[2][4];
        UNROLL
        for (int n = 0; n < 2; n++) {
          fa2_ldb_nk<LD>(bq[n], wQ + (n * 16) * LD + f * 16, lane);
          fa2_ldb_nk<LD>(bo[n], wO + (n * 16) * LD + f * 16, lane);
        }
        UNROLL
        for (int m = 0; m < 2; m++) {
          unsigned a_k[4], a_v[4];
          fa2_lda<LD>(a_k, wK + (m * 16) * LD + f * 16, lane);
          fa2_lda<LD>(a_v, wV + (m * 16) * LD + f * 16, lane);
          UNROLL
          for (int n = 0; n < 2; n++) {
            gpa_mma16816<T>(st[m][2 * n], a_k, bq[n]);
            gpa_mma16816<T>(st[m][2 * n + 1], a_k, bq[n] + 2);
            gpa_mma16816<T>(dpt[m][2 * n], a_v, bo[n]);
            gpa_mma16816<T>(dpt[m][2 * n + 1], a_v, bo[n] + 2);
          }
        }
      }
      const float *tL = sL + buf * QT + wh * 32, *tD = sDl + buf * QT + wh * 32;
      UNROLL
      for (int m = 0; m < 2; m++) {
        attn_bwd_pds<true, 32>(st[m], dpt[m], tL, tD, row0 + wh * 32, j0 + wk * 32 + m * 16, g, t, kvlen, S, Sk,
                               causal, sl2, [](float x) { return fa2_exp2<true>(x); });
        /* rows: keys wk 32 + m 16 + g (+ 8); columns: queries wh 32 + n 8 + 2t */
        T *p0 = sP + (wk * 32 + m * 16 + g) * LDP + wh * 32 + 2 * t, *s0 = sS + (p0 - sP);
        UNROLL
        for (int n = 0; n < 4; n++) {
          *reinterpret_cast<unsigned *>(p0 + n * 8) = gpa_pack2<T>(st[m][n][0], st[m][n][1]);
          *reinterpret_cast<unsigned *>(p0 + 8 * LDP + n * 8) = gpa_pack2<T>(st[m][n][2], st[m][n][3]);
          *reinterpret_cast<unsigned *>(s0 + n * 8) = gpa_pack2<T>(dpt[m][n][0], dpt[m][n][1]);
          *reinterpret_cast<unsigned *>(s0 + 8 * LDP + n * 8) = gpa_pack2<T>(dpt[m][n][2], dpt[m][n][3]);
        }
      }
    }
    __syncthreads(); /* the block's P^T and dS^T are in */
    /* phase 2: dV += P^T dO, dK += dS^T Q over the step's 64 queries */
    UNROLL
    for (int kk = 0; kk < QT / 16; kk++) {
      unsigned pa[2][4], da[2][4];
      UNROLL
      for (int m = 0; m < 2; m++) {
        fa2_lda<LDP>(pa[m], sP + (wk * 32 + m * 16) * LDP + kk * 16, lane);
        fa2_lda<LDP>(da[m], sS + (wk * 32 + m * 16) * LDP + kk * 16, lane);
      }
      UNROLL
      for (int c = 0; c < NH / 2; c++) {
        unsigned bo[4], bq[4];
        fa2_ldb_kn<LD>(bo, tO + (kk * 16) * LD + wh * DH + c * 16, lane);
        fa2_ldb_kn<LD>(bq, tQ + (kk * 16) * LD + wh * DH + c * 16, lane);
        UNROLL
        for (int m = 0; m < 2; m++) {
          gpa_mma16816<T>(av[m][2 * c], pa[m], bo);
          gpa_mma16816<T>(av[m][2 * c + 1], pa[m], bo + 2);
          gpa_mma16816<T>(ak[m][2 * c], da[m], bq);
          gpa_mma16816<T>(ak[m][2 * c + 1], da[m], bq + 2);
        }
      }
    }
    __syncthreads(); /* buffer `buf`, P^T and dS^T are read: the next steps refill them */
  }
  UNROLL
  for (int m = 0; m < 2; m++) {
    const int key0 = j0 + wk * 32 + m * 16 + g, key1 = key0 + 8;
    const long long o0 = kvoff + (long long)(wk * 32 + m * 16 + g) * ldkv + wh * DH, o1 = o0 + 8 * ldkv;
    UNROLL
    for (int n = 0; n < NH; n++) {
      const int c = n * 8 + 2 * t;
      if (key0 < Sk) {
        fa2_store2<T>(dv, o0 + c, av[m][n][0], av[m][n][1], grads_t);
        fa2_store2<T>(dk, o0 + c, ak[m][n][0] * scale, ak[m][n][1] * scale, grads_t);
      }
      if (key1 < Sk) {
        fa2_store2<T>(dv, o1 + c, av[m][n][2], av[m][n][3], grads_t);
        fa2_store2<T>(dk, o1 + c, ak[m][n][2] * scale, ak[m][n][3] * scale, grads_t);
      }
    }
  }
}

/* The launch's arguments are the other FA2 backward kernels' (FA2K_ARGS);
 * dq and D unused (D == DM). Written out: the emulated build finds kernels
 * by their names in the source. */
extern "C" __global__ void __launch_bounds__(256, 1) gpa_fa2x_dkv128_bf16_d64(FA2K_ARGS(__nv_bfloat16)) {
  (void)dq, (void)D;
  fa2k_dkv<__nv_bfloat16, 64>(FA2K_PASS);
}
extern "C" __global__ void __launch_bounds__(256, 1) gpa_fa2x_dkv128_bf16_d96(FA2K_ARGS(__nv_bfloat16)) {
  (void)dq, (void)D;
  fa2k_dkv<__nv_bfloat16, 96>(FA2K_PASS);
}
extern "C" __global__ void __launch_bounds__(256, 1) gpa_fa2x_dkv128_bf16_d128(FA2K_ARGS(__nv_bfloat16)) {
  (void)dq, (void)D;
  fa2k_dkv<__nv_bfloat16, 128>(FA2K_PASS);
}
extern "C" __global__ void __launch_bounds__(256, 1) gpa_fa2x_dkv128_f16_d64(FA2K_ARGS(__half)) {
  (void)dq, (void)D;
  fa2k_dkv<__half, 64>(FA2K_PASS);
}
extern "C" __global__ void __launch_bounds__(256, 1) gpa_fa2x_dkv128_f16_d96(FA2K_ARGS(__half)) {
  (void)dq, (void)D;
  fa2k_dkv<__half, 96>(FA2K_PASS);
}
extern "C" __global__ void __launch_bounds__(256, 1) gpa_fa2x_dkv128_f16_d128(FA2K_ARGS(__half)) {
  (void)dq, (void)D;
  fa2k_dkv<__half, 128>(FA2K_PASS);
}
