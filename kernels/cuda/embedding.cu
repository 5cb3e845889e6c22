/* Embedding forward/backward and index checks of the CUDA backend.
 *
 * Index checks (embedding ids, cross-entropy targets): the first position
 * whose index is out of [0, V) (and not ignore_index) is found with an
 * atomicMin on a 64-bit position (the minimum does not depend on the order),
 * then its value is fetched; the host reads both after the op (an error on
 * the handle, as on the host backend). Out-of-range ids read nothing.
 *
 * Deterministic backward: the (id, position) pairs are sorted as 64-bit keys
 * (bitonic sort, one launch per stage; padding keys are ~0), then every
 * (vocabulary row, column) adds its positions' dy in position order in
 * double, as the host does. No floating-point atomics.
 *
 * bf16 storage: the forward copies bf16 table rows into a bf16 y (exact);
 * the backward reads bf16 dy (widened) and writes the f32 dtable. */
#include "gpa_bf16.h"

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

extern "C" __global__ void gpa_emb_fwd_f32(float *y, const int *ids, const float *table, long long n, long long d,
                                           long long v) {
  GS_LOOP(i, n * d) {
    const long long id = ids[i / d];
    y[i] = id >= 0 && id < v ? table[id * d + i % d] : 0.0f;
  }
}

extern "C" __global__ void gpa_emb_fwd_bf16(gpa_bf16 *y, const int *ids, const gpa_bf16 *table, long long n,
                                            long long d, long long v) {
  GS_LOOP(i, n * d) {
    const long long id = ids[i / d];
    y[i] = id >= 0 && id < v ? table[id * d + i % d] : (gpa_bf16)0;
  }
}

/* Sort key of position i: (id, position), past n the largest key. */
static __device__ __forceinline__ unsigned long long emb_key(const int *ids, long long i, long long n) {
  return i < n ? ((unsigned long long)(unsigned)ids[i] << 32) | (unsigned long long)i : NONE;
}

extern "C" __global__ void gpa_emb_keys(unsigned long long *keys, const int *ids, long long n, long long npow2) {
  GS_LOOP(i, npow2) keys[i] = emb_key(ids, i, n);
}

/* The network's compare-exchange of element i in the stage (k: sequence
 * size, j: compare distance), by the lower index of each pair. */
static __device__ __forceinline__ void bitonic_cas(unsigned long long *keys, long long i, long long j, long long k) {
  const long long l = i ^ j;
  if (l > i) {
    const unsigned long long a = keys[i], b = keys[l];
    if ((a > b) == ((i & k) == 0)) {
      keys[i] = b;
      keys[l] = a;
    }
  }
}

/* One bitonic stage. */
extern "C" __global__ void gpa_emb_bitonic(unsigned long long *keys, long long npow2, long long j, long long k) {
  GS_LOOP(i, npow2) bitonic_cas(keys, i, j, k);
}

/* The whole sort in one block while the keys fit shared memory (up to
 * 4096 tokens, GPA__EMB_SORT_BLOCK_MAX in ops/embedding/cuda.c; the main job's step has 32 x 128): one
 * launch instead of log2(n) (log2(n) + 1) / 2 of the stage kernel above
 * (78 at 4096 tokens, each a launch and a pass over global memory). The
 * same network, so the same order. */
extern "C" __global__ void gpa_emb_sort_block(unsigned long long *keys, const int *ids, long long n, long long npow2) {
  GPA_DYNAMIC_SHARED(unsigned long long, sk);
  const int t = (int)threadIdx.x, nt = (int)blockDim.x, np = (int)npow2;
  for (int i = t; i < np; i += nt) sk[i] = emb_key(ids, i, n);
  __syncthreads();
  for (int k = 2; k <= np; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = t; i < np; i += nt) bitonic_cas(sk, i, j, k);
      __syncthreads();
    }
  for (int i = t; i < np; i += nt) keys[i] = sk[i];
}

static __device__ long long lower_bound(const unsigned long long *keys, long long n, unsigned long long key) {
  long long lo = 0, hi = n;
  while (lo < hi) {
    const long long mid = (lo + hi) / 2;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static __device__ __forceinline__ double ld_d(const float *p, long long i) { return (double)p[i]; }
static __device__ __forceinline__ double ld_d(const gpa_bf16 *p, long long i) { return (double)gpa_bf2f(p[i]); }

template <typename T>
static __device__ void emb_bwd(float *dtable, const T *dy, const unsigned long long *keys, long long n, long long v,
                               long long d, int accumulate) {
  GS_LOOP(i, v * d) {
    const unsigned long long row = (unsigned long long)(i / d);
    const long long col = i % d;
    const long long lo = lower_bound(keys, n, row << 32), hi = lower_bound(keys, n, (row + 1) << 32);
    if (lo == hi) {
      if (!accumulate) dtable[i] = 0.0f;
      continue;
    }
    double acc = accumulate ? (double)dtable[i] : 0.0;
    for (long long k = lo; k < hi; k++) acc += ld_d(dy, (long long)(keys[k] & 0xffffffffull) * d + col);
    dtable[i] = (float)acc;
  }
}

extern "C" __global__ void gpa_emb_bwd_f32(float *dtable, const float *dy, const unsigned long long *keys,
                                           long long n, long long v, long long d, int accumulate) {
  emb_bwd(dtable, dy, keys, n, v, d, accumulate);
}

extern "C" __global__ void gpa_emb_bwd_bf16(float *dtable, const gpa_bf16 *dy, const unsigned long long *keys,
                                            long long n, long long v, long long d, int accumulate) {
  emb_bwd(dtable, dy, keys, n, v, d, accumulate);
}
