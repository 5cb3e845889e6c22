/* Embedding forward/backward and index checks of the CUDA backend.
 *
 * Index checks (embedding ids, cross-entropy targets): the first position
 * whose index is out of [0, V) (and not ignore_index) is found with an
 * atomicMin on a 64-bit position (the minimum does not depend on the order),
 * then its value is fetched; the host reads both after the op (an error on
 * the handle, as on the host backend). Out-of-range ids read nothing.
 * embedding_fwd checks its ids in its own kernel (below).
 *
 * Deterministic backward: the (id, position) pairs are sorted as 64-bit keys
 * (bitonic sort; padding keys are ~0), then each id's positions' dy are
 * added in position order in double within chunks of sorted positions and
 * the chunks' parts in chunk order (below). No floating-point atomics.
 * Small vocabularies skip the sort (emb_rows, at the end: a block per
 * vocabulary row finds its positions itself) with the same sums, bit for
 * bit.
 *
 * bf16 storage: the forward copies bf16 table rows into a bf16 y (exact);
 * the backward reads bf16 dy (widened) and writes the f32 dtable. */
#include "gpa_bf16.h"
#include "launch_shapes.h"

#define GS_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
#define NONE 0xffffffffffffffffull

/* res[0] = first bad position (NONE if none), res[1] = its index value. */
extern "C" __global__ void gpa_idx_check(const int *idx, long long n, long long v, long long ignore, int use_ignore,
                                         unsigned long long *res) {
  GS_LOOP(i, n) {
    const long long id = idx[i];
    if (use_ignore && id == ignore) continue;
    if (id < 0 || id >= v) atomicMin(&res[0], (unsigned long long)i);
  }
}

extern "C" __global__ void gpa_idx_fetch(const int *idx, unsigned long long *res) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && res[0] != NONE) res[1] = (unsigned long long)(long long)idx[res[0]];
}

/* Row copies: y[row] = table[ids[row]], `tpr` threads a row (a power of
 * two up to the block; blockDim.x / tpr rows a block), each moving
 * GPA_EMB_FWD_U accesses of `w` values a step (w = 4 f32 or 8 bf16: 16 bytes, when the
 * host found d a multiple of w and y and the table 16-byte aligned; else
 * 1). The id is loaded once a row (a broadcast in the row's threads) and
 * the columns are a 32-bit counter: no per-access division or id load.
 * The earlier shape (a flat grid-stride over n * d / w accesses, a thread's
 * 4 accesses a grid stride apart, each with its own row, id and 64-bit index
 * arithmetic) used 40 registers, so of the 8 blocks a SM that the
 * capped grid launched 6 fitted and a quarter of the work ran as a second
 * wave at a quarter of the occupancy: 0.61-0.73 of PyTorch on an H100
 * (issue 25). Here the grid is a block per rpb rows, uncapped (20 waves
 * or so at 16384 rows: the last one's shortfall is small whatever the
 * registers allow), and a row's bytes are in flight behind one id load.
 *
 * The ids are checked here too (res != 0): the first bad row's (row << 32
 * | id) by one atomicMin on res[0] (the minimum is the lowest row whatever
 * the order; rows < 2^32, the host's condition), read and unpacked when
 * the op completes (GPA__CU_POST_PACKED). That replaces gpa_idx_check and
 * gpa_idx_fetch, two launches on the op's path. A bad id's row is zeros. */
template <typename V>
static __device__ void emb_fwd_rows(V *__restrict__ y, const int *__restrict__ ids, const V *__restrict__ table,
                                    long long n, int dw, long long v, int tpr, unsigned long long *res) {
  const int sub = (int)threadIdx.x & (tpr - 1);
  const long long rpb = (long long)blockDim.x / tpr, rs = (long long)gridDim.x * rpb;
  for (long long row = (long long)blockIdx.x * rpb + (long long)threadIdx.x / tpr; row < n; row += rs) {
    const int id = ids[row];
    const bool ok = id >= 0 && id < v;
    if (!ok && res && sub == 0) atomicMin(res, ((unsigned long long)row << 32) | (unsigned)id);
    const V *src = table + (long long)(ok ? id : 0) * dw;
    V *dst = y + row * dw;
    for (int c = sub; c < dw; c += GPA_EMB_FWD_U * tpr) {
      V val[GPA_EMB_FWD_U];
GPA_UNROLL
      for (int u = 0; u < GPA_EMB_FWD_U; u++) val[u] = ok && c + u * tpr < dw ? src[c + u * tpr] : V();
GPA_UNROLL
      for (int u = 0; u < GPA_EMB_FWD_U; u++)
        if (c + u * tpr < dw) dst[c + u * tpr] = val[u];
    }
  }
}

/* d / w accesses a row; the host keeps d / w under 2^31 */
extern "C" __global__ void __launch_bounds__(256)
    gpa_emb_fwd_f32(float *y, const int *ids, const float *table, long long n, long long d, long long v, int w,
                    int tpr, unsigned long long *res) {
  if (w > 1) emb_fwd_rows((float4 *)y, ids, (const float4 *)table, n, (int)(d / w), v, tpr, res);
  else emb_fwd_rows(y, ids, table, n, (int)d, v, tpr, res);
}

extern "C" __global__ void __launch_bounds__(256)
    gpa_emb_fwd_bf16(gpa_bf16 *y, const int *ids, const gpa_bf16 *table, long long n, long long d, long long v,
                     int w, int tpr, unsigned long long *res) {
  if (w > 1) emb_fwd_rows((uint4 *)y, ids, (const uint4 *)table, n, (int)(d / w), v, tpr, res);
  else emb_fwd_rows(y, ids, table, n, (int)d, v, tpr, res);
}

/* Sort key of position i: (id, position), past n the largest key. */
static __device__ __forceinline__ unsigned long long emb_key(const int *ids, long long i, long long n) {
  return i < n ? ((unsigned long long)(unsigned)ids[i] << 32) | (unsigned long long)i : NONE;
}

/* The network's compare-exchange of element i in the stage (k: sequence
 * size, j: compare distance), by the lower index of each pair; i indexes
 * `keys`, which starts at element `base` of the whole sequence (the
 * direction depends on the global index). */
static __device__ __forceinline__ void bitonic_cas(unsigned long long *keys, long long i, long long j, long long k,
                                                   long long base) {
  const long long l = i ^ j;
  if (l > i) {
    const unsigned long long a = keys[i], b = keys[l];
    if ((a > b) == (((base + i) & k) == 0)) {
      keys[i] = b;
      keys[l] = a;
    }
  }
}

/* One bitonic stage over global memory (the compare distances j >= tile). */
extern "C" __global__ void gpa_emb_bitonic(unsigned long long *keys, long long npow2, long long j, long long k) {
  GS_LOOP(i, npow2) bitonic_cas(keys, i, j, k, 0);
}

/* Tiles of `tile` keys (a power of two up to 4096, GPA__EMB_SORT_BLOCK_MAX
 * in ops/embedding/cuda.c: 32 KiB of shared memory), a block each. The
 * first kernel makes the keys and runs every stage with k <= tile; the
 * second, for one k > tile, the stages with j < tile, after the global
 * stages j >= tile. So n keys take 1 + sum over k > tile of (log2(k/tile)
 * + 1) launches: 1 up to 4096 keys (the main job's step has 32 x 128), 6
 * at 16384 instead of 105 launches of the stage kernel. The network and
 * so the order are the same (keys are unique: any sort gives this one). */
extern "C" __global__ void gpa_emb_sort_block(unsigned long long *keys, const int *ids, long long n, long long tile) {
  GPA_DYNAMIC_SHARED(unsigned long long, sk);
  const int t = (int)threadIdx.x, nt = (int)blockDim.x, np = (int)tile;
  const long long base = (long long)blockIdx.x * tile;
  for (int i = t; i < np; i += nt) sk[i] = emb_key(ids, base + i, n);
  __syncthreads();
  for (int k = 2; k <= np; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = t; i < np; i += nt) bitonic_cas(sk, i, j, k, base);
      __syncthreads();
    }
  for (int i = t; i < np; i += nt) keys[base + i] = sk[i];
}

extern "C" __global__ void gpa_emb_merge_block(unsigned long long *keys, long long tile, long long k) {
  GPA_DYNAMIC_SHARED(unsigned long long, sk);
  const int t = (int)threadIdx.x, nt = (int)blockDim.x, np = (int)tile;
  const long long base = (long long)blockIdx.x * tile;
  for (int i = t; i < np; i += nt) sk[i] = keys[base + i];
  __syncthreads();
  for (int j = np / 2; j > 0; j /= 2) {
    for (int i = t; i < np; i += nt) bitonic_cas(sk, i, j, k, base);
    __syncthreads();
  }
  for (int i = t; i < np; i += nt) keys[base + i] = sk[i];
}

/* The backward's sums, split into chunks of GPA_EMB_CHUNK sorted positions
 * (a block each) so that no thread walks a long run of one id alone: the
 * most frequent token of a batch (a space in text) may own a tenth of it,
 * and a thread per (row, column) adding that run in sequence bounded the
 * whole op (about 200 us of the main job's 2 ms step on an H100). Each
 * chunk adds its runs in position order in double; a run wholly inside the
 * chunk is written to dtable, a run cut by the chunk's edge leaves its
 * part in part[chunk][0] (the run began in an earlier chunk) or
 * part[chunk][1] (it begins here and goes on), and gpa_emb_bwd_join adds
 * those parts chunk by chunk. The split is fixed by n alone, so the sums
 * are deterministic. dtable holds zeros (or the prior gradient with
 * accumulate) on entry: the runs add into it, each row from one thread. */

static __device__ __forceinline__ unsigned long long key_row(unsigned long long k) { return k >> 32; }

/* W adjacent dy values of position p, column col, widened: one 16-byte
 * load when W > 1 (4 floats or 8 bf16; the host checked alignment) */
template <int W>
static __device__ __forceinline__ void emb_ld(const float *dy, long long at, float *v) {
  if (W == 1) {
    v[0] = dy[at];
  } else {
    const float4 a = *reinterpret_cast<const float4 *>(dy + at);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  }
}
template <int W>
static __device__ __forceinline__ void emb_ld(const gpa_bf16 *dy, long long at, float *v) {
  if (W == 1) v[0] = gpa_bf2f(dy[at]);
  else gpa_bf8_load(dy + at, v);
}

/* A run's positions: the sort path reads them from its sorted keys (the
 * low 32 bits), the rows path from its list in shared memory. */
struct emb_at_key {
  const unsigned long long *sk;
  __device__ __forceinline__ long long operator()(int q) const { return (long long)(sk[q] & 0xffffffffull); }
};
struct emb_at_pos {
  const unsigned short *pos;
  __device__ __forceinline__ long long operator()(int q) const { return pos[q]; }
};

/* acc = dy[at(k0)] + ... + dy[at(k1 - 1)] at columns col..col+W-1, from
 * 0.0 in double in that order: one piece of a run, the same sum on both
 * paths (their bits agree) */
template <typename T, int W, typename At>
static __device__ __forceinline__ void emb_piece(double *acc, const T *dy, At at, int k0, int k1, long long d,
                                                 long long col) {
GPA_UNROLL
  for (int k = 0; k < W; k++) acc[k] = 0.0;
#ifndef GPA_SIM_EMU
#pragma unroll 4
#endif
  for (int q = k0; q < k1; q++) {
    float x[W];
    emb_ld<W>(dy, at(q) * d + col, x);
GPA_UNROLL
    for (int k = 0; k < W; k++) acc[k] += (double)x[k];
  }
}

/* o[0..W) = prior + acc, rounded once (prior: o's value with accumulate,
 * else 0.0f, the zeros the sort path's memset leaves); W > 1: 16-byte
 * read-modify-writes */
template <int W>
static __device__ __forceinline__ void emb_put(float *o, const double *acc, int accumulate) {
  if (W == 1) {
    o[0] = (float)((double)(accumulate ? o[0] : 0.0f) + acc[0]);
  } else {
GPA_UNROLL
    for (int k = 0; k < W; k += 4) {
      float4 t = accumulate ? *reinterpret_cast<const float4 *>(o + k) : make_float4(0.f, 0.f, 0.f, 0.f);
      t.x = (float)((double)t.x + acc[k]), t.y = (float)((double)t.y + acc[k + 1]);
      t.z = (float)((double)t.z + acc[k + 2]), t.w = (float)((double)t.w + acc[k + 3]);
      *reinterpret_cast<float4 *>(o + k) = t;
    }
  }
}

/* Columns in vectors of W values (W > 1: 16-byte dy loads), a thread per
 * vector; each run's positions are counted first, then added in position
 * order four loads at a time (a counted loop the compiler unrolls), so a
 * thread has 4 x 16 bytes of dy in flight instead of one 4-byte load
 * behind the run's end test (issue 25: 0.88 of PyTorch at 16384 x 4096;
 * 128 threads a chunk, scalar). The same double sums in the same order as
 * the scalar path: the same bits. */
template <typename T, int W>
static __device__ void emb_bwd_cols(float *dtable, double *part, const T *dy, const unsigned long long *sk, long long c,
                                    int len, long long v, long long d) {
  for (long long col = (long long)threadIdx.x * W; col < d; col += (long long)blockDim.x * W) {
    for (int i = 1; i <= len;) {
      const unsigned long long r = key_row(sk[i]);
      int j = i + 1;
      while (j <= len && key_row(sk[j]) == r) j++;
      if (r < (unsigned long long)v) { /* ids out of range fail the op; their keys sort last */
        double acc[W];
        emb_piece<T, W>(acc, dy, emb_at_key{sk}, i, j, d, col);
        const bool starts = i > 1 || key_row(sk[0]) != r, ends = j <= len || key_row(sk[len + 1]) != r;
        if (starts && ends) {
          emb_put<W>(dtable + r * d + col, acc, 1);
        } else {
          double *o = part + (2 * c + (starts ? 1 : 0)) * d + col;
GPA_UNROLL
          for (int k = 0; k < W; k++) o[k] = acc[k];
        }
      }
      i = j;
    }
  }
}

template <typename T>
static __device__ void emb_bwd_chunk(float *dtable, double *part, const T *dy, const unsigned long long *keys,
                                     long long n, long long v, long long d, int w) {
  __shared__ unsigned long long sk[GPA_EMB_CHUNK + 2]; /* the key before the chunk, its keys, the key after */
  const long long c = blockIdx.x, c0 = c * GPA_EMB_CHUNK, c1 = min(c0 + GPA_EMB_CHUNK, n);
  const int len = (int)(c1 - c0);
  for (int i = (int)threadIdx.x; i < len; i += (int)blockDim.x) sk[i + 1] = keys[c0 + i];
  if (threadIdx.x == 0) {
    sk[0] = c0 > 0 ? keys[c0 - 1] : NONE;
    sk[len + 1] = c1 < n ? keys[c1] : NONE;
  }
  __syncthreads();
  if (w > 1) emb_bwd_cols<T, 16 / sizeof(T)>(dtable, part, dy, sk, c, len, v, d);
  else emb_bwd_cols<T, 1>(dtable, part, dy, sk, c, len, v, d);
}

extern "C" __global__ void gpa_emb_bwd_join(float *dtable, const double *part, const unsigned long long *keys,
                                            long long n, long long v, long long d) {
  const long long chunks = (n + GPA_EMB_CHUNK - 1) / GPA_EMB_CHUNK;
  GS_LOOP(i, chunks * d) {
    const long long c = i / d, col = i % d, c0 = c * GPA_EMB_CHUNK, c1 = c0 + GPA_EMB_CHUNK;
    if (c1 >= n) continue;
    const unsigned long long r = key_row(keys[c1 - 1]);
    /* only the chunk where a cut run begins joins it */
    if (r >= (unsigned long long)v || key_row(keys[c1]) != r || (c > 0 && key_row(keys[c0 - 1]) == r)) continue;
    double acc = part[(2 * c + 1) * d + col];
    for (long long k = c + 1;; k++) {
      acc += part[2 * k * d + col];
      const long long e = (k + 1) * GPA_EMB_CHUNK;
      if (e >= n || key_row(keys[e]) != r) break;
    }
    dtable[r * d + col] = (float)((double)dtable[r * d + col] + acc);
  }
}

/* w > 1: d a multiple of 16 bytes of dy, dy and dtable 16-byte aligned */
extern "C" __global__ void gpa_emb_bwd_f32(float *dtable, double *part, const float *dy,
                                           const unsigned long long *keys, long long n, long long v, long long d,
                                           int w) {
  emb_bwd_chunk(dtable, part, dy, keys, n, v, d, w);
}

extern "C" __global__ void gpa_emb_bwd_bf16(float *dtable, double *part, const gpa_bf16 *dy,
                                            const unsigned long long *keys, long long n, long long v, long long d,
                                            int w) {
  emb_bwd_chunk(dtable, part, dy, keys, n, v, d, w);
}

/* The backward without a sort, for small vocabularies (ops/embedding/
 * cuda_rows.c says when): a block owns a vocabulary row r (rows r,
 * r + gridDim.x, ... where the grid is capped) and finds r's positions
 * itself, so one launch does the whole op, index check included.
 *
 * Each warp owns a contiguous range of 32-id chunks. A first scan counts,
 * with one ballot each, the ids below r (unsigned: bad ids count as
 * above every row, as their sort keys sort last) and the ids equal to r;
 * the block adds the warps' counts, so it knows where r's run starts in
 * the order the sort path would sort it (start) and how long it is (cnt).
 * A second scan, only by warps that hold an r and only until they found
 * them all, writes r's positions in position order into shared memory
 * (the warps' offsets from their counts, a lane's from the ballot).
 *
 * Then the sums, in the sort path's rounding exactly (so both paths give
 * the same bits): the run is cut where the sort path's chunks of
 * GPA_EMB_CHUNK sorted positions cut it (at multiples of the chunk past
 * start); each piece is summed from 0.0 in position order in double, the
 * pieces are added first to last (the join's order, into part[chunk][1]
 * for the first piece and part[chunk][0] for the rest, the sort path's
 * slots), and the total is added to dtable's prior value (0 without
 * accumulate) and rounded once. A run of one piece (most rows) writes
 * dtable directly; longer runs spread their pieces over the block's
 * threads (a piece and a column vector each), so a frequent id is not one
 * thread's long walk. Rows no id names are zeroed (or left, with
 * accumulate): no memset before.
 *
 * The index check rides along: the block of row 0 sees every id in its
 * first scan and records the first bad one as embedding_fwd's kernel does
 * (res: (position << 32) | id by atomicMin; positions < 2^13 here). */

template <typename T, int W>
static __device__ void emb_rows(float *dtable, double *part, const T *dy, const int *ids, long long n, long long v,
                                long long d, int accumulate, unsigned long long *res) {
  __shared__ unsigned short pos[GPA_EMB_ROWS_MAX_N];
  __shared__ int wlt[GPA_EMB_ROWS_THREADS / 32], weq[GPA_EMB_ROWS_THREADS / 32];
  const int t = (int)threadIdx.x, lane = t & 31, wp = t >> 5, nw = (int)blockDim.x >> 5, nt = (int)blockDim.x;
  const int nch = (int)((n + 31) / 32), ch0 = nch * wp / nw, ch1 = nch * (wp + 1) / nw;
  const unsigned below = (1u << lane) - 1u;
  const long long cols = d / W;
  for (long long r = blockIdx.x; r < v; r += gridDim.x) {
    const unsigned ur = (unsigned)r;
    int lt = 0, eq = 0;
#ifndef GPA_SIM_EMU
#pragma unroll 4
#endif
    for (int c = ch0; c < ch1; c++) {
      const long long i = (long long)c * 32 + lane;
      const unsigned id = i < n ? (unsigned)ids[i] : 0xffffffffu;
      lt += __popc(__ballot_sync(GPA_FULL_MASK, id < ur));
      eq += __popc(__ballot_sync(GPA_FULL_MASK, id == ur));
      if (res && r == 0 && i < n && (unsigned long long)id >= (unsigned long long)v)
        atomicMin(res, ((unsigned long long)i << 32) | id);
    }
    if (lane == 0) wlt[wp] = lt, weq[wp] = eq;
    __syncthreads();
    int start = 0, cnt = 0, off = 0;
    for (int k = 0; k < nw; k++) start += wlt[k], cnt += weq[k], off += k < wp ? weq[k] : 0;
    const int end = off + weq[wp]; /* the warp's last slot + 1: it stops there */
    for (int c = ch0; c < ch1 && off < end; c++) {
      const long long i = (long long)c * 32 + lane;
      const bool m = i < n && (unsigned)ids[i] == ur;
      const unsigned b = __ballot_sync(GPA_FULL_MASK, m);
      if (m) pos[off + __popc(b & below)] = (unsigned short)i;
      off += __popc(b);
    }
    __syncthreads();
    float *row = dtable + r * d;
    if (cnt == 0) {
      if (!accumulate)
        for (long long q = t; q < cols; q += nt) {
          const double z[W] = {};
          emb_put<W>(row + q * W, z, 0);
        }
    } else {
      const int first = min(cnt, GPA_EMB_CHUNK - start % GPA_EMB_CHUNK);
      const int pieces = 1 + (cnt - first + GPA_EMB_CHUNK - 1) / GPA_EMB_CHUNK;
      if (pieces == 1) {
        for (long long q = t; q < cols; q += nt) {
          double acc[W];
          emb_piece<T, W>(acc, dy, emb_at_pos{pos}, 0, cnt, d, q * W);
          emb_put<W>(row + q * W, acc, accumulate);
        }
      } else {
        double *pr = part + (long long)(start / GPA_EMB_CHUNK) * 2 * d; /* the first piece's chunk */
        for (long long it = t; it < (long long)pieces * cols; it += nt) {
          const int s = (int)(it / cols);
          const long long q = it - (long long)s * cols;
          const int k0 = s ? first + (s - 1) * GPA_EMB_CHUNK : 0, k1 = s ? min(k0 + GPA_EMB_CHUNK, cnt) : first;
          double acc[W];
          emb_piece<T, W>(acc, dy, emb_at_pos{pos}, k0, k1, d, q * W);
          double *o = pr + (2LL * s + (s == 0)) * d + q * W;
GPA_UNROLL
          for (int k = 0; k < W; k++) o[k] = acc[k];
        }
        __syncthreads(); /* the pieces (global memory) are visible to the block */
        for (long long q = t; q < cols; q += nt) {
          double acc[W];
          const double *p = pr + d + q * W;
GPA_UNROLL
          for (int k = 0; k < W; k++) acc[k] = p[k];
          for (int s = 1; s < pieces; s++) {
            p = pr + 2LL * s * d + q * W;
GPA_UNROLL
            for (int k = 0; k < W; k++) acc[k] += p[k];
          }
          emb_put<W>(row + q * W, acc, accumulate);
        }
      }
    }
    __syncthreads(); /* pos, wlt and weq are the next row's */
  }
}

/* w > 1: d a multiple of 16 bytes of dy, dy and dtable 16-byte aligned;
 * blockDim.x = GPA_EMB_ROWS_THREADS, n <= GPA_EMB_ROWS_MAX_N */
extern "C" __global__ void __launch_bounds__(GPA_EMB_ROWS_THREADS)
    gpa_emb_bwd_rows_f32(float *dtable, double *part, const float *dy, const int *ids, long long n, long long v,
                         long long d, int w, int accumulate, unsigned long long *res) {
  if (w > 1) emb_rows<float, 4>(dtable, part, dy, ids, n, v, d, accumulate, res);
  else emb_rows<float, 1>(dtable, part, dy, ids, n, v, d, accumulate, res);
}

extern "C" __global__ void __launch_bounds__(GPA_EMB_ROWS_THREADS)
    gpa_emb_bwd_rows_bf16(float *dtable, double *part, const gpa_bf16 *dy, const int *ids, long long n, long long v,
                          long long d, int w, int accumulate, unsigned long long *res) {
  if (w > 1) emb_rows<gpa_bf16, 8>(dtable, part, dy, ids, n, v, d, accumulate, res);
  else emb_rows<gpa_bf16, 1>(dtable, part, dy, ids, n, v, d, accumulate, res);
}
