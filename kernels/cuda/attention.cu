/* Flash attention of the CUDA backend, fp32 (SIMT): forward and a
 * deterministic backward (bf16 and fp16 with tensor cores: attention_fa2*.cu;
 * the masking helpers: attention_common.h). Semantics as the host's (ops/attention.c,
 * kernels/host/attention.c): q [B,S,H,D], k/v [B,Sk,Hkv,D], optional
 * lengths [B] (already checked by the host side: in [0, Sk]), query i sees
 * keys j < min(len, i + Sk - S + 1) (causal, bottom-right aligned) or
 * j < len; a query that sees no key gets o = 0, lse = -inf, zero gradients.
 * Nothing of size S x Sk is ever stored: key tiles of 32 stream through
 * shared memory with an online softmax; the backward recomputes P.
 *
 * Entry points per head-dim class DM (32, 64, 96, 128, 256; D <= DM at run
 * time): the per-thread accumulators are DM / 32 (forward) or DM / warps
 * (backward) registers, indexed by unrolled loops only (no local memory).
 *
 * Forward, one block per (query tile of 16, h, b), 4 warps of 4 query rows:
 *   per key tile (32 keys, one per lane; K with an odd row stride so lanes
 *   read different banks): s = scale q.k_lane, warp max/sum (online
 *   softmax: O and l rescaled by exp(m_old - m_new)), p staged per warp in
 *   shared memory, O[:, d] += sum_j p_j V[j, d] with lane = d. Key tiles past
 *   the tile's last visible key (causal, lengths) are skipped.
 *
 * Backward, three kernels, no atomics (the same bits every run):
 *   delta[b,h,s] = dout . o (one warp per row, fixed shuffle tree);
 *   dk/dv: one block per (key tile of 32, kv head, b): over the group's query
 *     heads, then query tiles of 32 in ascending order (from the first query
 *     that can see the tile), P and dS = P (dP - delta) are computed into
 *     shared memory (attn_ps_tile), then thread (key = lane, warp w) adds
 *     P^T dO and dS^T Q to its registers for d = w, w + W, ...;
 *   dq: one block per (query tile of 32, h, b), key tiles ascending up to the
 *     last visible one: the same attn_ps_tile, then dq += dS K with
 *     (query = lane, warp w) owning d = w, w + W, ...
 *   dq and dk are scaled by `scale` at the end, as the host does. */
#include "attention_common.h"

#define BC 32      /* keys per tile */
#define FWD_RPW 4  /* query rows per warp (forward) */
#define FWD_W 4    /* warps per forward block */
#define BQ 32      /* query rows per backward tile */

static __device__ __forceinline__ float attn_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(GPA_FULL_MASK, v, o));
  return v;
}

/* Rows [r0, r0 + n) (zero beyond nvalid) of the head at `src` (rows `ld`
 * floats apart) into dst [n][lds]. */
static __device__ __forceinline__ void attn_load_rows(float *dst, int lds, const float *src, long long ld, int n,
                                                      int nvalid, int D, int tid, int nt) {
  for (int e = tid; e < n * D; e += nt) {
    const int r = e / D, d = e - r * D;
    dst[r * lds + d] = r < nvalid ? src[(long long)r * ld + d] : 0.0f;
  }
}

/* ---- forward ------------------------------------------------------------ */

template <int DM>
static __device__ __forceinline__ void attn_fwd(const float *__restrict__ q, const float *__restrict__ k,
                                                const float *__restrict__ v, const int *__restrict__ lens,
                                                float *__restrict__ o, float *__restrict__ lse, int S, int Sk,
                                                int H, int Hkv, int D, float scale, int causal) {
  GPA_DYNAMIC_SHARED(float, smem);
  constexpr int DT = DM / 32, BR = FWD_RPW * FWD_W;
  const int ldk = D | 1; /* odd: lane j reads sK[j][d] from bank (j + d) % 32 */
  float *sK = smem, *sV = sK + BC * ldk, *sQ = sV + BC * D, *sP = sQ + BR * D;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, nt = 32 * FWD_W;
  const int row0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk);
  const int nrows = S - row0 < BR ? S - row0 : BR;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal); /* the tile's last row sees most */
  const long long ldq = (long long)H * D, ldkv = (long long)Hkv * D;
  attn_load_rows(sQ, D, q + ((long long)b * S + row0) * ldq + (long long)h * D, ldq, BR, nrows, D, tid, nt);
  float m[FWD_RPW], l[FWD_RPW], acc[FWD_RPW][DT];
  int lim[FWD_RPW];
UNROLL
  for (int i = 0; i < FWD_RPW; i++) {
    const int r = w * FWD_RPW + i;
    lim[i] = r < nrows ? attn_limit(kvlen, row0 + r, S, Sk, causal) : 0;
    m[i] = -INFINITY;
    l[i] = 0.0f;
UNROLL
    for (int t = 0; t < DT; t++) acc[i][t] = 0.0f;
  }
  const float *kb = k + (long long)b * Sk * ldkv + (long long)kh * D;
  const float *vb = v + (long long)b * Sk * ldkv + (long long)kh * D;
  float *pw = sP + w * 32;
  for (int j0 = 0; j0 < jmax; j0 += BC) {
    const int nc = jmax - j0 < BC ? jmax - j0 : BC;
    __syncthreads(); /* the previous tile is consumed */
    attn_load_rows(sK, ldk, kb + (long long)j0 * ldkv, ldkv, BC, nc, D, tid, nt);
    attn_load_rows(sV, D, vb + (long long)j0 * ldkv, ldkv, BC, nc, D, tid, nt);
    __syncthreads();
UNROLL
    for (int i = 0; i < FWD_RPW; i++) {
      const float *qr = sQ + (w * FWD_RPW + i) * D, *kr = sK + lane * ldk;
      const bool vis = j0 + lane < lim[i];
      float s = -INFINITY;
      if (vis) {
        float a = 0.0f;
        for (int d = 0; d < D; d++) a = fmaf(qr[d], kr[d], a);
        s = a * scale;
      }
      const float mnew = fmaxf(m[i], attn_warp_max(s));
      const float corr = mnew == -INFINITY ? 1.0f : expf(m[i] - mnew);
      const float p = vis ? expf(s - mnew) : 0.0f;
      l[i] = l[i] * corr + gpa_warp_sum(p);
      m[i] = mnew;
      pw[lane] = p;
      __syncwarp();
UNROLL
      for (int t = 0; t < DT; t++) {
        const int d = lane + 32 * t;
        float a = acc[i][t] * corr;
        if (d < D)
          for (int j = 0; j < nc; j++) a = fmaf(pw[j], sV[j * D + d], a);
        acc[i][t] = a;
      }
      __syncwarp();
    }
  }
UNROLL
  for (int i = 0; i < FWD_RPW; i++) {
    const int r = w * FWD_RPW + i;
    if (r >= nrows) continue;
    float *orow = o + (((long long)b * S + row0 + r) * H + h) * D;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
UNROLL
    for (int t = 0; t < DT; t++) {
      const int d = lane + 32 * t;
      if (d < D) orow[d] = l[i] > 0.0f ? acc[i][t] * inv : 0.0f;
    }
    if (lane == 0) lse[((long long)b * H + h) * S + row0 + r] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
  }
}

#define FWD_ARGS                                                                                             \
  const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,                    \
      const int *__restrict__ lens, float *__restrict__ o, float *__restrict__ lse, int S, int Sk, int H, int Hkv, \
      int D, float scale, int causal
#define FWD_PASS q, k, v, lens, o, lse, S, Sk, H, Hkv, D, scale, causal

extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_d32(FWD_ARGS) { attn_fwd<32>(FWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_d64(FWD_ARGS) { attn_fwd<64>(FWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_d96(FWD_ARGS) { attn_fwd<96>(FWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_d128(FWD_ARGS) { attn_fwd<128>(FWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_fwd_d256(FWD_ARGS) { attn_fwd<256>(FWD_PASS); }

/* ---- backward ----------------------------------------------------------- */

/* delta = dout . o per row (attention_common.h). */
extern "C" __global__ void gpa_attn_bwd_delta(const float *__restrict__ dout, const float *__restrict__ o,
                                              float *__restrict__ delta, long long rows, int S, int H, int D) {
  attn_delta(dout, o, delta, rows, S, H, D);
}

/* Shared memory of the backward blocks (floats): K and V [BC][D|1] (odd
 * stride), Q and dO [BQ][D], P and dS [BQ][BC+1], lse and delta [BQ].
 * Offsets recomputed from D where used (pointers kept live across the
 * loops cost registers). */
#define SM_LDK(D) ((D) | 1)
#define SM_K(sm, D) (sm)
#define SM_V(sm, D) ((sm) + BC * SM_LDK(D))
#define SM_Q(sm, D) ((sm) + 2 * BC * SM_LDK(D))
#define SM_DO(sm, D) (SM_Q(sm, D) + BQ * (D))
#define SM_P(sm, D) (SM_Q(sm, D) + 2 * BQ * (D))
#define SM_DS(sm, D) (SM_P(sm, D) + BQ * (BC + 1))
#define SM_L(sm, D) (SM_P(sm, D) + 2 * BQ * (BC + 1))
#define SM_DL(sm, D) (SM_L(sm, D) + BQ)

/* P[i][j] = exp(scale q_i.k_j - lse_i) and dS[i][j] = P (dout_i.v_j - delta_i)
 * for the query tile at row0 and the key tile at j0 (0 where masked). Entry
 * (i, j) is computed by one thread: lanes take consecutive keys (the odd
 * stride of K and V spreads them over the banks), q_i and dout_i are read by
 * the whole warp at once. */
static __device__ __forceinline__ void attn_ps_tile(float *sm, int row0, int j0, int S, int Sk,
                                                    int kvlen, int causal, int D, float scale, int tid, int nt) {
  for (int e = tid; e < BQ * BC; e += nt) {
    const int i = e / BC, j = e - i * BC, row = row0 + i;
    const int lim = row < S ? attn_limit(kvlen, row, S, Sk, causal) : 0;
    const float L = SM_L(sm, D)[i];
    float p = 0.0f, ds = 0.0f;
    if (j0 + j < lim && L != -INFINITY) {
      const int ldk = SM_LDK(D);
      const float *qi = SM_Q(sm, D) + i * D, *oi = SM_DO(sm, D) + i * D;
      const float *kj = SM_K(sm, D) + j * ldk, *vj = SM_V(sm, D) + j * ldk;
      float a = 0.0f, c = 0.0f;
      for (int d = 0; d < D; d++) {
        a = fmaf(qi[d], kj[d], a);
        c = fmaf(oi[d], vj[d], c);
      }
      p = expf(a * scale - L);
      ds = p * (c - SM_DL(sm, D)[i]);
    }
    SM_P(sm, D)[i * (BC + 1) + j] = p;
    SM_DS(sm, D)[i * (BC + 1) + j] = ds;
  }
}

/* Query tile at row0 of head h: Q, dO, lse, delta into shared memory. */
static __device__ __forceinline__ void attn_load_qtile(float *sm, const float *q, const float *dout,
                                                       const float *lse, const float *delta, int b, int h,
                                                       int row0, int S, int H, int D, int tid, int nt) {
  const long long ldq = (long long)H * D, off = ((long long)b * S + row0) * ldq + (long long)h * D;
  const int n = S - row0 < BQ ? S - row0 : BQ;
  attn_load_rows(SM_Q(sm, D), D, q + off, ldq, BQ, n, D, tid, nt);
  attn_load_rows(SM_DO(sm, D), D, dout + off, ldq, BQ, n, D, tid, nt);
  for (int i = tid; i < BQ; i += nt) {
    const long long at = ((long long)b * H + h) * S + row0 + i;
    SM_L(sm, D)[i] = i < n ? lse[at] : -INFINITY;
    SM_DL(sm, D)[i] = i < n ? delta[at] : 0.0f;
  }
}

#define BWD_ARGS                                                                                                 \
  const float *__restrict__ dout, const float *__restrict__ q, const float *__restrict__ k,                     \
      const float *__restrict__ v, const float *__restrict__ lse, const float *__restrict__ delta,              \
      const int *__restrict__ lens, float *__restrict__ dq, float *__restrict__ dk, float *__restrict__ dv, int S, \
      int Sk, int H, int Hkv, int D, float scale, int causal
#define BWD_PASS dout, q, k, v, lse, delta, lens, dq, dk, dv, S, Sk, H, Hkv, D, scale, causal

/* dk, dv of key tile blockIdx.x of (kv head blockIdx.y, batch blockIdx.z). */
template <int DM, int W>
static __device__ __forceinline__ void attn_bwd_dkv(BWD_ARGS) {
  GPA_DYNAMIC_SHARED(float, sm);
  constexpr int DT = DM / W;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, nt = 32 * W;
  (void)dq;
  const int j0 = blockIdx.x * BC, kh = blockIdx.y, b = blockIdx.z, grp = H / Hkv;
  const int kvlen = attn_kvlen(lens, b, Sk), nc = Sk - j0 < BC ? Sk - j0 : BC;
  long long qs = causal ? (long long)j0 - (Sk - S) : 0; /* first query that can see key j0 */
  if (qs < 0) qs = 0;
  const long long ldkv = (long long)Hkv * D, off = ((long long)b * Sk + j0) * ldkv + (long long)kh * D;
  float ak[DT], av[DT];
UNROLL
  for (int t = 0; t < DT; t++) ak[t] = av[t] = 0.0f;
  if (j0 < kvlen && qs < S) {
    attn_load_rows(SM_K(sm, D), SM_LDK(D), k + off, ldkv, BC, nc, D, tid, nt);
    attn_load_rows(SM_V(sm, D), SM_LDK(D), v + off, ldkv, BC, nc, D, tid, nt);
    for (int gi = 0; gi < grp; gi++) {
      const int h = kh * grp + gi;
      for (int row0 = (int)(qs / BQ * BQ); row0 < S; row0 += BQ) {
        __syncthreads(); /* the previous query tile is consumed (and K, V are loaded) */
        attn_load_qtile(sm, q, dout, lse, delta, b, h, row0, S, H, D, tid, nt);
        __syncthreads();
        attn_ps_tile(sm, row0, j0, S, Sk, kvlen, causal, D, scale, tid, nt);
        __syncthreads();
        for (int i = 0; i < BQ; i++) {
          const float p = SM_P(sm, D)[i * (BC + 1) + lane], ds = SM_DS(sm, D)[i * (BC + 1) + lane];
UNROLL
          for (int t = 0; t < DT; t++) {
            const int d = w + W * t;
            if (d < D) {
              av[t] = fmaf(p, SM_DO(sm, D)[i * D + d], av[t]);
              ak[t] = fmaf(ds, SM_Q(sm, D)[i * D + d], ak[t]);
            }
          }
        }
      }
    }
  }
  if (lane < nc) {
    float *dkr = dk + off + (long long)lane * ldkv, *dvr = dv + off + (long long)lane * ldkv;
UNROLL
    for (int t = 0; t < DT; t++) {
      const int d = w + W * t;
      if (d < D) {
        dkr[d] = ak[t] * scale;
        dvr[d] = av[t];
      }
    }
  }
}

/* dq of query tile blockIdx.x of (head blockIdx.y, batch blockIdx.z). */
template <int DM, int W>
static __device__ __forceinline__ void attn_bwd_dq(BWD_ARGS) {
  GPA_DYNAMIC_SHARED(float, sm);
  constexpr int DT = DM / W;
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane, nt = 32 * W;
  (void)dk;
  (void)dv;
  const int row0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z, kh = h / (H / Hkv);
  const int kvlen = attn_kvlen(lens, b, Sk), nrows = S - row0 < BQ ? S - row0 : BQ;
  const int jmax = attn_limit(kvlen, row0 + nrows - 1, S, Sk, causal);
  const long long ldkv = (long long)Hkv * D, kvoff = (long long)b * Sk * ldkv + (long long)kh * D;
  float aq[DT];
UNROLL
  for (int t = 0; t < DT; t++) aq[t] = 0.0f;
  attn_load_qtile(sm, q, dout, lse, delta, b, h, row0, S, H, D, tid, nt);
  for (int j0 = 0; j0 < jmax; j0 += BC) {
    const int nc = Sk - j0 < BC ? Sk - j0 : BC;
    __syncthreads(); /* the previous key tile is consumed */
    attn_load_rows(SM_K(sm, D), SM_LDK(D), k + kvoff + (long long)j0 * ldkv, ldkv, BC, nc, D, tid, nt);
    attn_load_rows(SM_V(sm, D), SM_LDK(D), v + kvoff + (long long)j0 * ldkv, ldkv, BC, nc, D, tid, nt);
    __syncthreads();
    attn_ps_tile(sm, row0, j0, S, Sk, kvlen, causal, D, scale, tid, nt);
    __syncthreads();
    for (int j = 0; j < BC; j++) {
      const float ds = SM_DS(sm, D)[lane * (BC + 1) + j];
UNROLL
      for (int t = 0; t < DT; t++) {
        const int d = w + W * t;
        if (d < D) aq[t] = fmaf(ds, SM_K(sm, D)[j * SM_LDK(D) + d], aq[t]);
      }
    }
  }
  if (lane < nrows) {
    float *dqr = dq + (((long long)b * S + row0 + lane) * H + h) * D;
UNROLL
    for (int t = 0; t < DT; t++) {
      const int d = w + W * t;
      if (d < D) dqr[d] = aq[t] * scale;
    }
  }
}

extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_d32(BWD_ARGS) { attn_bwd_dkv<32, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_d64(BWD_ARGS) { attn_bwd_dkv<64, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_d96(BWD_ARGS) { attn_bwd_dkv<96, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dkv_d128(BWD_ARGS) { attn_bwd_dkv<128, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(256, 1) gpa_attn_dkv_d256(BWD_ARGS) { attn_bwd_dkv<256, 8>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_d32(BWD_ARGS) { attn_bwd_dq<32, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_d64(BWD_ARGS) { attn_bwd_dq<64, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_d96(BWD_ARGS) { attn_bwd_dq<96, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(128, 1) gpa_attn_dq_d128(BWD_ARGS) { attn_bwd_dq<128, 4>(BWD_PASS); }
extern "C" __global__ void __launch_bounds__(256, 1) gpa_attn_dq_d256(BWD_ARGS) { attn_bwd_dq<256, 8>(BWD_PASS); }
