/* Flash attention in bf16 and fp16 with tensor cores (wmma 16x16x16, fp32
 * accumulation), forward and a deterministic backward; the same code for
 * both element types (template parameter T). q, k, v (and dout) are T;
 * o, lse, delta, dq, dk, dv are fp32. Masking as the fp32 kernels
 * (attention_common.h). Head dims: multiples of 16 up to 256, in three
 * classes DM = 64 (D <= 64), 128 and 256; the host side sends other shapes
 * to the host fallback. In the DM = 256 class the fragments a thread would
 * hold for the whole kernel (O: 128 registers, dK and dV: 256) do not fit
 * in its registers, so there the forward keeps O in shared memory (fp32)
 * and each backward block accumulates one half of the columns (D <= 128 or
 * the rest; two blocks per tile, each computing the tile's S and dP whole).
 *
 * Tiles are 64 rows of T in shared memory, rows padded by 8 elements (the
 * stride stays a multiple of 8 as wmma requires, and consecutive rows start
 * in different banks). Every warp owns 16 rows of a tile; its accumulators
 * are wmma fragments kept in registers for the whole kernel, indexed by
 * unrolled loops only.
 *
 * Forward, one block per (query tile of 64, h, b), 4 warps: S = Q K^T per
 * key tile of 64 into shared memory (fp32), softmax by lanes (2 lanes per
 * row). Two passes over the key tiles: the first finds each row's max m and
 * sum l (online, scalars only), the second forms P = exp(s - m) / l in T and
 * accumulates O += P V in fragments (a single final m means no rescaling,
 * which the opaque fragment layout would not allow). Q K^T is computed
 * twice: the price of that.
 *
 * Backward, three kernels, no atomics (the same bits every run):
 *   delta = dout . o per row (attention_common.h);
 *   dk/dv: one block per (key tile of 64, kv head, b); warp w owns keys
 *     16w..16w+15. Over the group's query heads, then query tiles of 64 in
 *     ascending order from the first query that can see the tile: S = Q K^T
 *     and dP = dO V^T (each warp 16 query rows), P = exp(scale S - lse) and
 *     dS = P (dP - delta) rounded to T, then dV += P^T dO, dK += dS^T Q;
 *   dq: one block per (query tile of 64, h, b); warp w owns queries
 *     16w..16w+15; key tiles ascending up to the tile's last visible key:
 *     the same S, dP, dS (the warp's rows only), then dQ += dS K.
 * Fully masked tiles (causal, key lengths) are never visited. dq and dk are
 * scaled by `scale` at the end, as the host does. (DM = 256: blockIdx.x is
 * 2 tile + half, and the block accumulates columns [128 half, 128 half +
 * 128) of dk/dv or dq.)
 *
 * Accuracy: the products of T values are exact in fp32 and summed in fp32;
 * the roundings to T are P (forward and backward) and dS: relative 2^-8
 * (bf16) or 2^-11 (fp16) of each term (tests/test_attention_lowp.c). */
#include <mma.h>

#include "attention_common.h"

#define LP_BR 64              /* rows of every tile (queries or keys) */
#define LP_LDS (LP_BR + 4)    /* fp32 scores per row */
#define LP_LDP (LP_BR + 8)    /* T elements of P / dS per row */
#define LP_LDC 20             /* fp32 per row of a warp's 16 x 16 chunk of S or dP (backward) */

/* Rows [0, n) of a head (rows `ld` elements apart) into dst [LP_BR][lds],
 * zero for rows nvalid..LP_BR-1 (columns >= D are never read). */
template <class T>
static __device__ __forceinline__ void lp_load_rows(T *dst, int lds, const T *src, long long ld, int nvalid,
                                                    int D, int tid) {
  T zero;
  attn_set(zero, 0.0f);
  for (int e = tid; e < LP_BR * D; e += 128) {
    const int r = e / D, d = e - r * D;
    dst[r * lds + d] = r < nvalid ? src[(long long)r * ld + d] : zero;
  }
}

/* acc (16 x 16 per fragment) = the warp's 16 rows of A [.][ld] times the
 * 16 rows n*16.. of B [.][ld], transposed: A B^T over D. */
template <class T, int DF>
static __device__ __forceinline__ void lp_abt(nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> &acc,
                                              const T *a, const T *b, int ld, int D) {
  using namespace nvcuda;
  wmma::fill_fragment(acc, 0.0f);
  UNROLL
  for (int f = 0; f < DF; f++)
    if (f * 16 < D) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bf;
      wmma::load_matrix_sync(af, a + f * 16, ld);
      wmma::load_matrix_sync(bf, b + f * 16, ld);
      wmma::mma_sync(acc, af, bf, acc);
    }
}

/* ---- forward ------------------------------------------------------------ */

template <class T, int DM>
static __device__ __forceinline__ void attn_fwd_lp(const T *__restrict__ q, const T *__restrict__ k,
                                                   const T *__restrict__ v, const int *__restrict__ lens,
                                                   float *__restrict__ o, float *__restrict__ lse, int S, int Sk,
                                                   int H, int Hkv, int D, float scale, int causal) {
  using namespace nvcuda;
  GPA_DYNAMIC_SHARED(unsigned char, smem);
  constexpr int DF = DM / 16;
  constexpr bool o_shared = DM > 128; /* O in shared memory (fp32), not in fragments */
  const int ld = D + 8;
  T *sK = reinterpret_cast<T *>(smem), *sV = sK + LP_BR * ld;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane;
  float *sS = reinterpret_cast<float *>(sV + LP_BR * ld) + w * (16 * LP_LDS);
  T *sP = reinterpret_cast<T *>(reinterpret_cast<float *>(sV + LP_BR * ld) + 4 * 16 * LP_LDS) + w * (16 * LP_LDP);
  /* o_shared: the warp's 16 rows of O [16][D + 4] after the 4 warps' P */
  float *sOw = reinterpret_cast<float *>(reinterpret_cast<T *>(reinterpret_cast<float *>(sV + LP_BR * ld) +
                                                               4 * 16 * LP_LDS) + 4 * 16 * LP_LDP) +
               w * (16 * (D + 4));
  const int row0 = blockIdx.x * LP_BR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < LP_BR ? S - row0 : LP_BR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal);
  const long long ldq = (long long)H * D, ldkv = (long long)Hkv * D;
  /* Q tile through sK into the warps' a-fragments */
  lp_load_rows(sK, ld, q + ((long long)b * S + row0) * ldq + (long long)h * D, ldq, nrows, D, tid);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa[DF];
  UNROLL
  for (int f = 0; f < DF; f++)
    if (f * 16 < D) wmma::load_matrix_sync(qa[f], sK + (w * 16) * ld + f * 16, ld);
  /* this lane's row (2 lanes per row, 32 columns each) */
  const int rr = lane >> 1, half = lane & 1, row = row0 + w * 16 + rr;
  const int lim = row < S ? attn_limit(kvlen, row, S, Sk, causal) : 0;
  float m = -INFINITY, l = 0.0f;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> oacc[o_shared ? 1 : DF];
  if constexpr (o_shared) {
    for (int e = lane; e < 16 * (D + 4); e += 32) sOw[e] = 0.0f;
  } else {
    UNROLL
    for (int f = 0; f < DF; f++) wmma::fill_fragment(oacc[f], 0.0f);
  }
  const T *kb = k + (long long)b * Sk * ldkv + (long long)kh * D;
  const T *vb = v + (long long)b * Sk * ldkv + (long long)kh * D;
  for (int pass = 0; pass < 2; pass++) {
    for (int j0 = 0; j0 < jmax; j0 += LP_BR) {
      const int nc = jmax - j0 < LP_BR ? jmax - j0 : LP_BR;
      __syncthreads(); /* the previous tile (or the Q staging) is consumed */
      lp_load_rows(sK, ld, kb + (long long)j0 * ldkv, ldkv, nc, D, tid);
      if (pass) lp_load_rows(sV, ld, vb + (long long)j0 * ldkv, ldkv, nc, D, tid);
      __syncthreads();
      /* S (16 x 64) of this warp's rows */
      for (int n = 0; n < LP_BR / 16; n++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> sacc;
        wmma::fill_fragment(sacc, 0.0f);
        UNROLL
        for (int f = 0; f < DF; f++)
          if (f * 16 < D) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
            wmma::load_matrix_sync(kf, sK + (n * 16) * ld + f * 16, ld);
            wmma::mma_sync(sacc, qa[f], kf, sacc);
          }
        wmma::store_matrix_sync(sS + n * 16, sacc, LP_LDS, wmma::mem_row_major);
      }
      __syncwarp();
      const float *srow = sS + rr * LP_LDS + half * 32;
      const int c0 = j0 + half * 32;
      if (pass == 0) {
        float mx = -INFINITY;
        for (int c = 0; c < 32; c++)
          if (c0 + c < lim) mx = fmaxf(mx, srow[c] * scale);
        mx = fmaxf(mx, __shfl_xor_sync(GPA_FULL_MASK, mx, 1));
        const float mnew = fmaxf(m, mx);
        float sum = 0.0f;
        if (mnew != -INFINITY)
          for (int c = 0; c < 32; c++)
            if (c0 + c < lim) sum += expf(srow[c] * scale - mnew);
        sum += __shfl_xor_sync(GPA_FULL_MASK, sum, 1);
        l = (mnew == -INFINITY ? 0.0f : l * expf(m - mnew)) + sum;
        m = mnew;
      } else {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        T *prow = sP + rr * LP_LDP + half * 32;
        for (int c = 0; c < 32; c++) attn_set(prow[c], c0 + c < lim ? expf(srow[c] * scale - m) * inv : 0.0f);
        __syncwarp();
        UNROLL
        for (int f = 0; f < DF; f++)
          if (f * 16 < D) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> &acc = oacc[o_shared ? 0 : f];
            if constexpr (o_shared) wmma::load_matrix_sync(acc, sOw + f * 16, D + 4, wmma::mem_row_major);
            for (int kk = 0; kk < LP_BR / 16; kk++) {
              wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf;
              wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
              wmma::load_matrix_sync(pf, sP + kk * 16, LP_LDP);
              wmma::load_matrix_sync(vf, sV + (kk * 16) * ld + f * 16, ld);
              wmma::mma_sync(acc, pf, vf, acc);
            }
            if constexpr (o_shared) wmma::store_matrix_sync(sOw + f * 16, acc, D + 4, wmma::mem_row_major);
          }
      }
      __syncwarp();
    }
  }
  /* O (16 x D per warp) staged in fp32 over the K/V tiles (o_shared: where
   * it is), then the rows < S */
  float *sO = sOw;
  if constexpr (!o_shared) {
    __syncthreads();
    sO = reinterpret_cast<float *>(smem) + w * (16 * (D + 4));
    UNROLL
    for (int f = 0; f < DF; f++)
      if (f * 16 < D) wmma::store_matrix_sync(sO + f * 16, oacc[f], D + 4, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = e / D, d = e - r * D, gr = row0 + w * 16 + r;
    if (gr < S) o[(((long long)b * S + gr) * H + h) * D + d] = sO[r * (D + 4) + d];
  }
  if (half == 0 && row < S) lse[((long long)b * H + h) * S + row] = l > 0.0f ? m + logf(l) : -INFINITY;
}

#define LPF_ARGS(T)                                                                                              \
  const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, const int *__restrict__ lens,     \
      float *__restrict__ o, float *__restrict__ lse, int S, int Sk, int H, int Hkv, int D, float scale, int causal
#define LPF_PASS q, k, v, lens, o, lse, S, Sk, H, Hkv, D, scale, causal

extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_bf16_d64(LPF_ARGS(__nv_bfloat16)) {
  attn_fwd_lp<__nv_bfloat16, 64>(LPF_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_bf16_d128(LPF_ARGS(__nv_bfloat16)) {
  attn_fwd_lp<__nv_bfloat16, 128>(LPF_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_bf16_d256(LPF_ARGS(__nv_bfloat16)) {
  attn_fwd_lp<__nv_bfloat16, 256>(LPF_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_f16_d64(LPF_ARGS(__half)) {
  attn_fwd_lp<__half, 64>(LPF_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_f16_d128(LPF_ARGS(__half)) {
  attn_fwd_lp<__half, 128>(LPF_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_f16_d256(LPF_ARGS(__half)) {
  attn_fwd_lp<__half, 256>(LPF_PASS);
}

/* ---- backward ----------------------------------------------------------- */

extern "C" __global__ void gpa_attn_bwd_delta_bf16(const __nv_bfloat16 *__restrict__ dout, const float *__restrict__ o,
                                                   float *__restrict__ delta, long long rows, int S, int H, int D) {
  attn_delta(dout, o, delta, rows, S, H, D);
}
extern "C" __global__ void gpa_attn_bwd_delta_f16(const __half *__restrict__ dout, const float *__restrict__ o,
                                                  float *__restrict__ delta, long long rows, int S, int H, int D) {
  attn_delta(dout, o, delta, rows, S, H, D);
}

/* Shared memory of the backward blocks: four T tiles [64][D+8] (K, V, Q,
 * dO), per warp one fp32 16 x 16 chunk of S and one of dP [16][LP_LDC]
 * (the scores pass through them 16 keys at a time: a whole [64][68] S and
 * dP would take 34 KiB, which at D = 256 is what keeps the block within an
 * A100's 163 KiB), T P and dS [64][72], lse and delta [64]. Every region
 * starts at a multiple of 32 bytes (wmma pointers). */
template <class T>
struct lp_smem {
  T *k, *v, *q, *dO, *p, *ds;
  float *chunks, *lse, *delta;
  __device__ __forceinline__ lp_smem(unsigned char *base, int D) {
    const int tile = LP_BR * (D + 8);
    k = reinterpret_cast<T *>(base);
    v = k + tile;
    q = v + tile;
    dO = q + tile;
    chunks = reinterpret_cast<float *>(dO + tile);
    p = reinterpret_cast<T *>(chunks + 4 * 2 * 16 * LP_LDC);
    ds = p + LP_BR * LP_LDP;
    lse = reinterpret_cast<float *>(ds + LP_BR * LP_LDP);
    delta = lse + LP_BR;
  }
};

/* Query tile at row0 of head h: Q, dO, lse, delta into shared memory. */
template <class T>
static __device__ __forceinline__ void lp_load_qtile(const lp_smem<T> &sm, const T *q, const T *dout,
                                                     const float *lse, const float *delta, int b, int h, int row0,
                                                     int S, int H, int D, int tid) {
  const long long ldq = (long long)H * D, off = ((long long)b * S + row0) * ldq + (long long)h * D;
  const int n = S - row0 < LP_BR ? S - row0 : LP_BR;
  lp_load_rows(sm.q, D + 8, q + off, ldq, n, D, tid);
  lp_load_rows(sm.dO, D + 8, dout + off, ldq, n, D, tid);
  for (int i = tid; i < LP_BR; i += 128) {
    const long long at = ((long long)b * H + h) * S + row0 + i;
    sm.lse[i] = i < n ? lse[at] : -INFINITY;
    sm.delta[i] = i < n ? delta[at] : 0.0f;
  }
}

/* The warp's 16 query rows (16w..) of the current (query tile at row0, key
 * tile at j0), 16 keys at a time: S = Q K^T and dP = dO V^T into the warp's
 * chunks, then P and dS = P (dP - delta) in T (0 where masked), 2 lanes per
 * row, 8 keys each. */
template <class T, int DF>
static __device__ __forceinline__ void lp_ps_rows(const lp_smem<T> &sm, int w, int lane, int row0, int j0, int S,
                                                  int Sk, int kvlen, int causal, int D, float scale) {
  using namespace nvcuda;
  const int ld = D + 8;
  float *cs = sm.chunks + w * (2 * 16 * LP_LDC), *cdp = cs + 16 * LP_LDC;
  const int r = lane >> 1, c8 = (lane & 1) * 8, i = w * 16 + r, row = row0 + i;
  const int lim = row < S ? attn_limit(kvlen, row, S, Sk, causal) : 0;
  const float L = sm.lse[i], dl = sm.delta[i];
  for (int n = 0; n < LP_BR / 16; n++) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    lp_abt<T, DF>(acc, sm.q + (w * 16) * ld, sm.k + (n * 16) * ld, ld, D);
    wmma::store_matrix_sync(cs, acc, LP_LDC, wmma::mem_row_major);
    lp_abt<T, DF>(acc, sm.dO + (w * 16) * ld, sm.v + (n * 16) * ld, ld, D);
    wmma::store_matrix_sync(cdp, acc, LP_LDC, wmma::mem_row_major);
    __syncwarp();
    const int c0 = n * 16 + c8;
    const float *srow = cs + r * LP_LDC + c8, *dprow = cdp + r * LP_LDC + c8;
    T *prow = sm.p + i * LP_LDP + c0, *dsrow = sm.ds + i * LP_LDP + c0;
    for (int c = 0; c < 8; c++) {
      float p = 0.0f, ds = 0.0f;
      if (j0 + c0 + c < lim && L != -INFINITY) {
        p = expf(srow[c] * scale - L);
        ds = p * (dprow[c] - dl);
      }
      attn_set(prow[c], p);
      attn_set(dsrow[c], ds);
    }
    __syncwarp(); /* the chunks are read before the next keys overwrite them */
  }
}

/* fp32 fragments of a warp (16 rows x W columns) to rows r0.. of a [.][ld]
 * head in global memory (rows < nvalid), times `mul`, staged through
 * `stage` (16 x (W+4) floats, the warp's own). */
template <int DF>
static __device__ __forceinline__ void lp_store_rows(
    float *stage, const nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> *acc, float *dst,
    long long ld, int nvalid, int W, float mul, int lane) {
  using namespace nvcuda;
  UNROLL
  for (int f = 0; f < DF; f++)
    if (f * 16 < W) wmma::store_matrix_sync(stage + f * 16, acc[f], W + 4, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 16 * W; e += 32) {
    const int r = e / W, d = e - r * W;
    if (r < nvalid) dst[(long long)r * ld + d] = stage[r * (W + 4) + d] * mul;
  }
  __syncwarp();
}

/* Columns of the backward's accumulators: DM <= 128 all D of them; DM = 256
 * the half of blockIdx.x (2 tile + half): [c0, c0 + W). */
template <int DM>
struct lp_cols {
  static constexpr int DA = DM > 128 ? 128 : DM, DFA = DA / 16;
  int tile, c0, W;
  __device__ __forceinline__ explicit lp_cols(int D) {
    const int half = DM > 128 ? (int)(blockIdx.x & 1) : 0;
    tile = DM > 128 ? (int)(blockIdx.x >> 1) : (int)blockIdx.x;
    c0 = half * DA;
    W = D - c0 < DA ? D - c0 : DA;
  }
};

#define LPB_ARGS(T)                                                                                                \
  const T *__restrict__ dout, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,          \
      const float *__restrict__ lse, const float *__restrict__ delta, const int *__restrict__ lens,               \
      float *__restrict__ dq, float *__restrict__ dk, float *__restrict__ dv, int S, int Sk, int H, int Hkv, int D, \
      float scale, int causal
#define LPB_PASS dout, q, k, v, lse, delta, lens, dq, dk, dv, S, Sk, H, Hkv, D, scale, causal

/* dk, dv of key tile blockIdx.x of (kv head blockIdx.y, batch blockIdx.z). */
template <class T, int DM>
static __device__ __forceinline__ void attn_dkv_lp(LPB_ARGS(T)) {
  using namespace nvcuda;
  GPA_DYNAMIC_SHARED(unsigned char, smem);
  constexpr int DF = DM / 16, DFA = lp_cols<DM>::DFA;
  const lp_smem<T> sm(smem, D);
  const lp_cols<DM> cols(D);
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, ld = D + 8, c0 = cols.c0;
  (void)dq;
  const int j0 = cols.tile * LP_BR, kh = blockIdx.y, b = blockIdx.z, grp = H / Hkv;
  const int kvlen = attn_kvlen(lens, b, Sk), nc = Sk - j0 < LP_BR ? Sk - j0 : LP_BR;
  long long qs = causal ? (long long)j0 - (Sk - S) : 0; /* first query that can see key j0 */
  if (qs < 0) qs = 0;
  const long long ldkv = (long long)Hkv * D, off = ((long long)b * Sk + j0) * ldkv + (long long)kh * D;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> ak[DFA], av[DFA];
  UNROLL
  for (int f = 0; f < DFA; f++) {
    wmma::fill_fragment(ak[f], 0.0f);
    wmma::fill_fragment(av[f], 0.0f);
  }
  if (j0 < kvlen && qs < S) {
    lp_load_rows(sm.k, ld, k + off, ldkv, nc, D, tid);
    lp_load_rows(sm.v, ld, v + off, ldkv, nc, D, tid);
    for (int gi = 0; gi < grp; gi++) {
      const int h = kh * grp + gi;
      for (int row0 = (int)(qs / LP_BR * LP_BR); row0 < S; row0 += LP_BR) {
        __syncthreads(); /* the previous query tile is consumed (and K, V are loaded) */
        lp_load_qtile(sm, q, dout, lse, delta, b, h, row0, S, H, D, tid);
        __syncthreads();
        lp_ps_rows<T, DF>(sm, w, lane, row0, j0, S, Sk, kvlen, causal, D, scale);
        __syncthreads(); /* every query row's P and dS */
        for (int kk = 0; kk < LP_BR / 16; kk++) {
          /* P^T and dS^T (this warp's 16 keys x queries kk*16..): P read column-major */
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> pt, dst;
          wmma::load_matrix_sync(pt, sm.p + (kk * 16) * LP_LDP + w * 16, LP_LDP);
          wmma::load_matrix_sync(dst, sm.ds + (kk * 16) * LP_LDP + w * 16, LP_LDP);
          UNROLL
          for (int f = 0; f < DFA; f++)
            if (f * 16 < cols.W) {
              wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf;
              wmma::load_matrix_sync(bf, sm.dO + (kk * 16) * ld + c0 + f * 16, ld);
              wmma::mma_sync(av[f], pt, bf, av[f]);
              wmma::load_matrix_sync(bf, sm.q + (kk * 16) * ld + c0 + f * 16, ld);
              wmma::mma_sync(ak[f], dst, bf, ak[f]);
            }
        }
      }
    }
  }
  __syncthreads(); /* the tiles are consumed: staging over Q and dO */
  float *stage = reinterpret_cast<float *>(sm.q) + w * (16 * (cols.W + 4));
  const int nv = nc - w * 16;
  lp_store_rows<DFA>(stage, av, dv + off + (long long)(w * 16) * ldkv + c0, ldkv, nv, cols.W, 1.0f, lane);
  lp_store_rows<DFA>(stage, ak, dk + off + (long long)(w * 16) * ldkv + c0, ldkv, nv, cols.W, scale, lane);
}

/* dq of query tile blockIdx.x of (head blockIdx.y, batch blockIdx.z). */
template <class T, int DM>
static __device__ __forceinline__ void attn_dq_lp(LPB_ARGS(T)) {
  using namespace nvcuda;
  GPA_DYNAMIC_SHARED(unsigned char, smem);
  constexpr int DF = DM / 16, DFA = lp_cols<DM>::DFA;
  const lp_smem<T> sm(smem, D);
  const lp_cols<DM> cols(D);
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, ld = D + 8, c0 = cols.c0;
  (void)dk;
  (void)dv;
  const int row0 = cols.tile * LP_BR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < LP_BR ? S - row0 : LP_BR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal);
  const long long ldkv = (long long)Hkv * D, kvoff = (long long)b * Sk * ldkv + (long long)kh * D;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> aq[DFA];
  UNROLL
  for (int f = 0; f < DFA; f++) wmma::fill_fragment(aq[f], 0.0f);
  lp_load_qtile(sm, q, dout, lse, delta, b, h, row0, S, H, D, tid);
  for (int j0 = 0; j0 < jmax; j0 += LP_BR) {
    const int nc = jmax - j0 < LP_BR ? jmax - j0 : LP_BR;
    __syncthreads(); /* the previous key tile is consumed */
    lp_load_rows(sm.k, ld, k + kvoff + (long long)j0 * ldkv, ldkv, nc, D, tid);
    lp_load_rows(sm.v, ld, v + kvoff + (long long)j0 * ldkv, ldkv, nc, D, tid);
    __syncthreads();
    lp_ps_rows<T, DF>(sm, w, lane, row0, j0, S, Sk, kvlen, causal, D, scale);
    for (int kk = 0; kk < LP_BR / 16; kk++) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> dsa;
      wmma::load_matrix_sync(dsa, sm.ds + (w * 16) * LP_LDP + kk * 16, LP_LDP);
      UNROLL
      for (int f = 0; f < DFA; f++)
        if (f * 16 < cols.W) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> kf;
          wmma::load_matrix_sync(kf, sm.k + (kk * 16) * ld + c0 + f * 16, ld);
          wmma::mma_sync(aq[f], dsa, kf, aq[f]);
        }
    }
  }
  __syncthreads(); /* staging over K and V */
  float *stage = reinterpret_cast<float *>(sm.k) + w * (16 * (cols.W + 4));
  const long long ldq = (long long)H * D;
  lp_store_rows<DFA>(stage, aq, dq + ((long long)b * S + row0 + w * 16) * ldq + (long long)h * D + c0, ldq,
                     nrows - w * 16, cols.W, scale, lane);
}

/* (written out: the emulated build finds kernels by their names in the source) */
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_bf16_d64(LPB_ARGS(__nv_bfloat16)) {
  attn_dkv_lp<__nv_bfloat16, 64>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_bf16_d64(LPB_ARGS(__nv_bfloat16)) {
  attn_dq_lp<__nv_bfloat16, 64>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_bf16_d128(LPB_ARGS(__nv_bfloat16)) {
  attn_dkv_lp<__nv_bfloat16, 128>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_bf16_d128(LPB_ARGS(__nv_bfloat16)) {
  attn_dq_lp<__nv_bfloat16, 128>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_bf16_d256(LPB_ARGS(__nv_bfloat16)) {
  attn_dkv_lp<__nv_bfloat16, 256>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_bf16_d256(LPB_ARGS(__nv_bfloat16)) {
  attn_dq_lp<__nv_bfloat16, 256>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_f16_d64(LPB_ARGS(__half)) {
  attn_dkv_lp<__half, 64>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_f16_d64(LPB_ARGS(__half)) {
  attn_dq_lp<__half, 64>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_f16_d128(LPB_ARGS(__half)) {
  attn_dkv_lp<__half, 128>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_f16_d128(LPB_ARGS(__half)) {
  attn_dq_lp<__half, 128>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_f16_d256(LPB_ARGS(__half)) {
  attn_dkv_lp<__half, 256>(LPB_PASS);
}
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_f16_d256(LPB_ARGS(__half)) {
  attn_dq_lp<__half, 256>(LPB_PASS);
}
