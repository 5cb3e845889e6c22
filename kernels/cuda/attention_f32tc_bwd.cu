/* Attention backward in fp32 on tensor cores, 3xTF32 (mma.sync m16n8k8
 * tf32, gpa_mma1688_3xtf32: every operand split into a tf32 value and a
 * tf32 residual, three products with fp32 accumulation), with the
 * FlashAttention-2 partitioning of attention_fa2_bwd.cu and its
 * determinism: no atomics, every sum in a fixed order, the same bits every
 * run. Operand layouts, the k permutation of a 16-column chunk and the
 * accumulator-as-A re-lay are the forward's (attention_f32tc.cu's head
 * comment; helpers in attention_f32tc.h). Kernels:
 *   delta = rowsum(dO o): attention.cu's gpa_attn_bwd_delta (fp32 FMA
 *     chain, fixed shuffle tree);
 *   dK, dV: one block per (key tile of 64, kv head, batch), 4 warps of 16
 *     keys. Over the group's query heads, then the query steps of QS rows
 *     from the first query that can see the tile (causal), ascending,
 *     double-buffered with cp.async: S^T = K Q^T and dP^T = V dO^T (keys as
 *     rows; K, V are the A operands, float4 loads), P^T = 2^(S^T scale
 *     log2e - lse log2e), dS^T = P^T (dP^T - delta) in the accumulators,
 *     which become the A operands of dV += P^T dO and dK += dS^T Q (k t of
 *     an 8-query step = query 2t, k t + 4 = query 2t + 1; dO and Q rows 2t,
 *     2t + 1 read as scalars at column g).
 *   dQ: one block per (query tile of 64, head, batch), 4 warps of 16 rows,
 *     key tiles of KT ascending up to the tile's last visible key,
 *     double-buffered: S = Q K^T, dP = dO V^T, dS as above, dQ += dS K (K
 *     rows 2t, 2t + 1 as scalars); a warp skips the math of tiles past its
 *     own last visible key.
 * dQ without atomics costs the second computation of S and dP (7 tile
 * products per (query, key) tile pair instead of FA2's 5), as in
 * attention_fa2_bwd.cu.
 *
 * Shared memory, fp32 rows. A tile read by float4 loads (A operands, and B
 * operands of S-like products) wants rows of DM + 16 floats (rows g and
 * g + 1 of one LDS.128 phase 64 bytes apart modulo 128: conflict-free); a
 * tile read by the scalar loads of rows 2t, 2t + 1 at column g wants DM + 4
 * (32 different banks). Q and dO in the dK/dV pass and K in the dQ pass are
 * read both ways; they take DM + 4, as their scalar loads are the more
 * numerous (2 per 8x8 element block against 1 float4 per 4), and their
 * float4 loads see a 2-way conflict. Classes DM 32, 64, 96, 128 (D <= DM,
 * D % 16 == 0 at run time; the forward's head dims, whose class 64 also
 * serves D 16 and 32: the backward's class 32, for the main job's heads of
 * 32, takes half the registers and shared memory of class 64, so twice the
 * blocks an SM); tile sizes in tc32b_cfg, bytes in tc32_dkv_smem /
 * tc32_dq_smem of ops/attention/cuda.c.
 *
 * Accuracy: every product in 3xTF32 (relative error about 3 * 2^-22 per
 * product against fp32's 2^-24; docs/ops.md), the rest in fp32 as the SIMT
 * kernels: the fp32 bound of tests/test_attention.c, which a one-product
 * tf32 backward fails (sim/tests/test_attention_f32tc.c). dq and dk are
 * scaled by `scale` at the end, as the host does. */
#include "attention_f32tc.h"

template <int DM>
struct tc32b_cfg {
  static constexpr int NT = 128, LDA = DM + 16, LDB = DM + 4;
  /* dK/dV pass: 64 keys a block, query steps of QS rows; dQ pass: 64
   * query rows a block, key tiles of KT (registers: ptxas -v) */
  static constexpr int BKV = 64, QS = DM > 64 ? 16 : 32, QR = 64, KT = DM > 64 ? 16 : 32;
};

#define TC32B_ARGS                                                                                               \
  const float *__restrict__ dout, const float *__restrict__ q, const float *__restrict__ k,                     \
      const float *__restrict__ v, const float *__restrict__ lse, const float *__restrict__ delta,              \
      const int *__restrict__ lens, float *__restrict__ dq, float *__restrict__ dk, float *__restrict__ dv, int S, \
      int Sk, int H, int Hkv, int D, float scale, int causal
#define TC32B_PASS dout, q, k, v, lse, delta, lens, dq, dk, dv, S, Sk, H, Hkv, D, scale, causal

/* dK, dV of key tile blockIdx.x of (kv head blockIdx.y, batch blockIdx.z). */
template <int DM>
static __device__ __forceinline__ void tc32_dkv(TC32B_ARGS) {
  typedef tc32b_cfg<DM> C;
  constexpr int NT = C::NT, LDA = C::LDA, LDB = C::LDB, BKV = C::BKV, QS = C::QS, KC = DM / 16, NQ = QS / 8,
                NO = DM / 8;
  GPA_DYNAMIC_SHARED(float, sK);
  float *sV = sK + BKV * LDA, *sQ = sV + BKV * LDA, *sO = sQ + 2 * QS * LDB; /* Q, dO: [2][QS][LDB] */
  float *sL = sO + 2 * QS * LDB, *sDl = sL + 2 * QS;
  (void)dq;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  const int j0 = (int)blockIdx.x * BKV, kh = blockIdx.y, b = blockIdx.z, grp = H / Hkv;
  const int kvlen = attn_kvlen(lens, b, Sk), nc = Sk - j0 < BKV ? Sk - j0 : BKV;
  const attn_kv_steps<QS> steps(j0, kvlen, S, Sk, causal, grp);
  const int items = steps.n;
  const long long ldq = (long long)H * D, ldkv = (long long)Hkv * D;
  const long long kvoff = ((long long)b * Sk + j0) * ldkv + (long long)kh * D;
  const float sl2 = scale * ATTN_LOG2E;

  /* item i: query head kh * grp + steps.head(i), rows steps.row0(i).. */
  auto load_item = [&](int i, int buf) {
    const int hq = kh * grp + steps.head(i), row0 = steps.row0(i), n = S - row0 < QS ? S - row0 : QS;
    const long long off = ((long long)b * S + row0) * ldq + (long long)hq * D;
    tc32_load<QS, LDB, NT>(sQ + buf * QS * LDB, q + off, ldq, n, D, tid);
    tc32_load<QS, LDB, NT>(sO + buf * QS * LDB, dout + off, ldq, n, D, tid);
    attn_step_stats<QS, NT>(sL, sDl, buf, lse, delta, b, H, hq, S, row0, n, tid);
  };

  float ak[NO][4], av[NO][4];
  attn_dkv_start(
      ak, av, items,
      [&] {
        tc32_load<BKV, LDA, NT>(sK, k + kvoff, ldkv, nc, D, tid);
        tc32_load<BKV, LDA, NT>(sV, v + kvoff, ldkv, nc, D, tid);
      },
      load_item);
  const int key0 = j0 + w * 16 + g, key1 = key0 + 8;
  const float *sKw = sK + (w * 16 + g) * LDA + 4 * t, *sVw = sV + (w * 16 + g) * LDA + 4 * t;
  for (int it = 0; it < items; it++) {
    const int buf = it & 1;
    gpa_cp_async_next(it + 1 < items, [&] { load_item(it + 1, buf ^ 1); });
    __syncthreads(); /* step it (and K, V) landed for every thread's copies */
    const float *tQ = sQ + buf * QS * LDB, *tO = sO + buf * QS * LDB, *tL = sL + buf * QS, *tD = sDl + buf * QS;
    const int row0 = steps.row0(it);
    /* S^T = K Q^T and dP^T = V dO^T: the warp's 16 keys x QS queries */
    float st[NQ][4], dpt[NQ][4];
    attn_zero2(st, dpt);
    UNROLL
    for (int c = 0; c < KC; c++)
      if (c * 16 < D) {
        unsigned kb[2][4], ks[2][4], vb[2][4], vs[2][4];
        tc32_split_a(kb, ks, *reinterpret_cast<const float4 *>(sKw + c * 16),
                     *reinterpret_cast<const float4 *>(sKw + 8 * LDA + c * 16));
        tc32_split_a(vb, vs, *reinterpret_cast<const float4 *>(sVw + c * 16),
                     *reinterpret_cast<const float4 *>(sVw + 8 * LDA + c * 16));
        UNROLL
        for (int n = 0; n < NQ; n++) {
          const int at = (n * 8 + g) * LDB + c * 16 + 4 * t;
          tc32_mma_chunk(st[n], kb, ks, *reinterpret_cast<const float4 *>(tQ + at));
          tc32_mma_chunk(dpt[n], vb, vs, *reinterpret_cast<const float4 *>(tO + at));
        }
      }
    /* P^T and dS^T in place */
    attn_bwd_pds<true, QS>(st, dpt, tL, tD, row0, j0 + w * 16, g, t, kvlen, S, Sk, causal, sl2,
                           [](float x) { return exp2f(x); });
    /* dV += P^T dO, dK += dS^T Q over the step's queries, 8 at a time */
    UNROLL
    for (int n = 0; n < NQ; n++) {
      unsigned pb[4], ps[4], db[4], ds[4];
      tc32_split_acc(pb, ps, st[n]);
      tc32_split_acc(db, ds, dpt[n]);
      const float *o0 = tO + (n * 8 + 2 * t) * LDB + g, *q0 = tQ + (n * 8 + 2 * t) * LDB + g;
      UNROLL
      for (int f = 0; f < NO; f++)
        if (f * 8 < D) {
          tc32_mma_rows(av[f], pb, ps, o0[f * 8], o0[LDB + f * 8]);
          tc32_mma_rows(ak[f], db, ds, q0[f * 8], q0[LDB + f * 8]);
        }
    }
    __syncthreads(); /* buffer `buf` is read: the next iteration refills it */
  }
  const long long o0 = kvoff + (long long)(w * 16 + g) * ldkv, o1 = o0 + 8 * ldkv;
  UNROLL
  for (int n = 0; n < NO; n++) {
    const int c = n * 8 + 2 * t;
    if (c < D) {
      if (key0 < Sk) {
        *reinterpret_cast<float2 *>(dv + o0 + c) = make_float2(av[n][0], av[n][1]);
        *reinterpret_cast<float2 *>(dk + o0 + c) = make_float2(ak[n][0] * scale, ak[n][1] * scale);
      }
      if (key1 < Sk) {
        *reinterpret_cast<float2 *>(dv + o1 + c) = make_float2(av[n][2], av[n][3]);
        *reinterpret_cast<float2 *>(dk + o1 + c) = make_float2(ak[n][2] * scale, ak[n][3] * scale);
      }
    }
  }
}

/* dQ of query tile blockIdx.x (causal: counted from the last) of (head
 * blockIdx.y, batch blockIdx.z). */
template <int DM>
static __device__ __forceinline__ void tc32_dq(TC32B_ARGS) {
  typedef tc32b_cfg<DM> C;
  constexpr int NT = C::NT, LDA = C::LDA, LDB = C::LDB, QR = C::QR, KT = C::KT, KC = DM / 16, NB = KT / 8,
                NO = DM / 8;
  GPA_DYNAMIC_SHARED(float, sQ);
  float *sO = sQ + QR * LDA, *sK = sO + QR * LDA, *sV = sK + 2 * KT * LDB; /* K [2][KT][LDB], V [2][KT][LDA] */
  (void)dk;
  (void)dv;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, g = lane >> 2, t = lane & 3;
  /* causal: the last query tiles see the most keys; they start first */
  const int qtile = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int row0 = qtile * QR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < QR ? S - row0 : QR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal), ntiles = (jmax + KT - 1) / KT;
  const int rw = row0 + w * 16, r0 = rw + g, r1 = r0 + 8;
  const int lim0 = r0 < S ? attn_limit(kvlen, r0, S, Sk, causal) : 0;
  const int lim1 = r1 < S ? attn_limit(kvlen, r1, S, Sk, causal) : 0;
  /* the warp's key limit (limits grow with the row): tiles at or past it
   * add nothing to the warp's rows */
  const int wlim = rw < S ? attn_limit(kvlen, rw + 15 < S ? rw + 15 : S - 1, S, Sk, causal) : 0;
  const long long at = ((long long)b * H + h) * S;
  const float L0 = r0 < S ? lse[at + r0] * ATTN_LOG2E : 0.0f, L1 = r1 < S ? lse[at + r1] * ATTN_LOG2E : 0.0f;
  const float D0 = r0 < S ? delta[at + r0] : 0.0f, D1 = r1 < S ? delta[at + r1] : 0.0f;
  const long long ldq = (long long)H * D, ldkv = (long long)Hkv * D;
  const long long qoff = ((long long)b * S + row0) * ldq + (long long)h * D;
  const float *kb = k + (long long)b * Sk * ldkv + (long long)kh * D;
  const float *vb = v + (long long)b * Sk * ldkv + (long long)kh * D;
  const float sl2 = scale * ATTN_LOG2E;

  tc32_load<QR, LDA, NT>(sQ, q + qoff, ldq, nrows, D, tid);
  tc32_load<QR, LDA, NT>(sO, dout + qoff, ldq, nrows, D, tid);
  if (ntiles > 0) {
    const int nc = jmax < KT ? jmax : KT;
    tc32_load<KT, LDB, NT>(sK, kb, ldkv, nc, D, tid);
    tc32_load<KT, LDA, NT>(sV, vb, ldkv, nc, D, tid);
  }
  gpa_cp_async_commit();
  float aq[NO][4];
  UNROLL
  for (int n = 0; n < NO; n++) aq[n][0] = aq[n][1] = aq[n][2] = aq[n][3] = 0.0f;
  const float *sQw = sQ + (w * 16 + g) * LDA + 4 * t, *sOw = sO + (w * 16 + g) * LDA + 4 * t;
  for (int it = 0; it < ntiles; it++) {
    const int j0 = it * KT, buf = it & 1;
    gpa_cp_async_next(it + 1 < ntiles, [&] {
      const int j1 = j0 + KT, nc = jmax - j1 < KT ? jmax - j1 : KT;
      tc32_load<KT, LDB, NT>(sK + (buf ^ 1) * KT * LDB, kb + (long long)j1 * ldkv, ldkv, nc, D, tid);
      tc32_load<KT, LDA, NT>(sV + (buf ^ 1) * KT * LDA, vb + (long long)j1 * ldkv, ldkv, nc, D, tid);
    });
    __syncthreads(); /* tile it (and Q, dO) landed for every thread's copies */
    if (j0 < wlim) { /* warp-uniform */
      const float *tK = sK + buf * KT * LDB, *tV = sV + buf * KT * LDA;
      /* S = Q K^T, dP = dO V^T: the warp's 16 rows x KT keys */
      float s[NB][4], dp[NB][4];
      attn_zero2(s, dp);
      UNROLL
      for (int c = 0; c < KC; c++)
        if (c * 16 < D) {
          unsigned qb[2][4], qs[2][4], ob[2][4], os[2][4];
          tc32_split_a(qb, qs, *reinterpret_cast<const float4 *>(sQw + c * 16),
                       *reinterpret_cast<const float4 *>(sQw + 8 * LDA + c * 16));
          tc32_split_a(ob, os, *reinterpret_cast<const float4 *>(sOw + c * 16),
                       *reinterpret_cast<const float4 *>(sOw + 8 * LDA + c * 16));
          UNROLL
          for (int n = 0; n < NB; n++) {
            tc32_mma_chunk(s[n], qb, qs, *reinterpret_cast<const float4 *>(tK + (n * 8 + g) * LDB + c * 16 + 4 * t));
            tc32_mma_chunk(dp[n], ob, os, *reinterpret_cast<const float4 *>(tV + (n * 8 + g) * LDA + c * 16 + 4 * t));
          }
        }
      /* dS = P (dP - delta), P = 2^(S scale log2e - lse log2e); the test per
       * element only in tiles that reach a row's limit */
      const bool masked = j0 + KT > lim0 || j0 + KT > lim1;
      UNROLL
      for (int n = 0; n < NB; n++)
        UNROLL
        for (int i = 0; i < 4; i++) {
          const int col = j0 + n * 8 + 2 * t + (i & 1);
          const bool vis = !masked || col < (i < 2 ? lim0 : lim1);
          const float p = vis ? exp2f(fmaf(s[n][i], sl2, -(i < 2 ? L0 : L1))) : 0.0f;
          dp[n][i] = p * (dp[n][i] - (i < 2 ? D0 : D1));
        }
      /* dQ += dS K, 8 keys at a time: K rows 2t, 2t + 1 at column g */
      tc32_acc_ax(aq, dp, tK, LDB, D, t, g);
    }
    __syncthreads(); /* buffer `buf` is read: the next iteration refills it */
  }
  gpa_cp_async_wait<0>(); /* no key tile at all: Q and dO are still in flight */
  const long long o0 = qoff + (long long)(w * 16 + g) * ldq, o1 = o0 + 8 * ldq;
  UNROLL
  for (int n = 0; n < NO; n++) {
    const int c = n * 8 + 2 * t;
    if (c < D) {
      if (r0 < S) *reinterpret_cast<float2 *>(dq + o0 + c) = make_float2(aq[n][0] * scale, aq[n][1] * scale);
      if (r1 < S) *reinterpret_cast<float2 *>(dq + o1 + c) = make_float2(aq[n][2] * scale, aq[n][3] * scale);
    }
  }
}

/* (written out: the emulated build finds kernels by their names in the source) */
extern "C" __global__ void __launch_bounds__(128, 3) gpa_tc32_dkv_d32(TC32B_ARGS) { tc32_dkv<32>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_dkv_d64(TC32B_ARGS) { tc32_dkv<64>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_dkv_d96(TC32B_ARGS) { tc32_dkv<96>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_dkv_d128(TC32B_ARGS) { tc32_dkv<128>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 3) gpa_tc32_dq_d32(TC32B_ARGS) { tc32_dq<32>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_dq_d64(TC32B_ARGS) { tc32_dq<64>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_dq_d96(TC32B_ARGS) { tc32_dq<96>(TC32B_PASS); }
extern "C" __global__ void __launch_bounds__(128, 2) gpa_tc32_dq_d128(TC32B_ARGS) { tc32_dq<128>(TC32B_PASS); }
