/* Kernels of sim/tests/test_mma.c: the gpa_mma.h helpers against the
 * per-lane layouts of the PTX ISA, one warp each. */
#include "gpa_mma.h"

/* d = a b + c for one m16n8k16, the fragments built straight from the
 * documented layouts (no ldmatrix): a [16][16], b [16][8] (k rows), c and
 * d [16][8], row-major in global memory. */
template <class T>
static __device__ void mma_direct(const unsigned short *a, const unsigned short *b, const float *c, float *d) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  auto pk = [](unsigned short lo, unsigned short hi) { return (unsigned)lo | (unsigned)hi << 16; };
  unsigned fa[4], fb[2];
  for (int i = 0; i < 4; i++) {
    const int row = g + (i & 1) * 8, k = 2 * t + (i >> 1) * 8;
    fa[i] = pk(a[row * 16 + k], a[row * 16 + k + 1]);
  }
  for (int i = 0; i < 2; i++) {
    const int k = 2 * t + i * 8;
    fb[i] = pk(b[k * 8 + g], b[(k + 1) * 8 + g]);
  }
  float acc[4];
  for (int i = 0; i < 4; i++) acc[i] = c[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)];
  gpa_mma16816<T>(acc, fa, fb);
  for (int i = 0; i < 4; i++) d[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = acc[i];
}
extern "C" __global__ void sim_mma_direct_bf16(const unsigned short *a, const unsigned short *b, const float *c,
                                               float *d) {
  mma_direct<__nv_bfloat16>(a, b, c, d);
}
extern "C" __global__ void sim_mma_direct_f16(const unsigned short *a, const unsigned short *b, const float *c,
                                              float *d) {
  mma_direct<__half>(a, b, c, d);
}

/* m [32][8] 16-bit values (matrix q = rows 8q..8q+7) through shared memory
 * (cp.async), then ldmatrix .x4 (.trans when trans): out[lane * 4 + reg]. */
extern "C" __global__ void sim_ldmatrix(const unsigned short *m, unsigned *out, int trans) {
  __shared__ __align__(16) unsigned short tile[32 * 8];
  const int lane = threadIdx.x;
  gpa_cp_async16(tile + lane * 8, m + lane * 8, true);
  gpa_cp_async_commit();
  gpa_cp_async_wait<0>();
  __syncwarp();
  unsigned r[4];
  if (trans)
    gpa_ldmatrix_x4_trans(r, tile + lane * 8);
  else
    gpa_ldmatrix_x4(r, tile + lane * 8);
  for (int i = 0; i < 4; i++) out[lane * 4 + i] = r[i];
}

/* The attention kernels' pattern: c1 = a bt^T and c2 = a b, with a [16][K]
 * (rows >= nvalid zero-filled by cp.async), bt [16][K] (n rows: the K tile
 * of Q K^T) and b [K][16] (k rows: the V tile of P V), all through shared
 * memory with rows padded by 8 elements. c1, c2: [16][16] fp32. K <= 64,
 * a multiple of 16. The copies of b are committed as a second group and
 * waited for only after the first product (the double-buffering order). */
template <class T>
static __device__ void mma_tiles(const T *a, const T *bt, const T *b, float *c1, float *c2, int K, int nvalid) {
  __shared__ __align__(16) T sa[16 * 72], sbt[16 * 72], sb[64 * 24];
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3, lda = K + 8;
  for (int e = lane; e < 16 * K / 8; e += 32) {
    const int r = e / (K / 8), c = (e % (K / 8)) * 8;
    gpa_cp_async16(sa + r * lda + c, a + r * K + c, r < nvalid);
    gpa_cp_async16(sbt + r * lda + c, bt + r * K + c, true);
  }
  gpa_cp_async_commit();
  for (int e = lane; e < K * 2; e += 32) {
    const int r = e / 2, c = (e % 2) * 8;
    gpa_cp_async16(sb + r * 24 + c, b + r * 16 + c, true);
  }
  gpa_cp_async_commit();
  gpa_cp_async_wait<1>();
  __syncwarp();
  float acc[2][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    unsigned fa[4], fb[4];
    gpa_ldmatrix_x4(fa, sa + (lane & 15) * lda + k0 + (lane >> 4) * 8);
    /* matrices: n 0-7 k lo, n 0-7 k hi, n 8-15 k lo, n 8-15 k hi */
    gpa_ldmatrix_x4(fb, sbt + ((lane & 7) + (lane >> 4) * 8) * lda + k0 + ((lane >> 3) & 1) * 8);
    gpa_mma16816<T>(acc[0], fa, fb);
    gpa_mma16816<T>(acc[1], fa, fb + 2);
  }
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < 4; i++) c1[(g + (i >> 1) * 8) * 16 + 8 * j + 2 * t + (i & 1)] = acc[j][i];
  gpa_cp_async_wait<0>();
  __syncwarp();
  float acc2[2][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    unsigned fa[4], fb[4];
    gpa_ldmatrix_x4(fa, sa + (lane & 15) * lda + k0 + (lane >> 4) * 8);
    /* matrices: k lo n 0-7, k hi n 0-7, k lo n 8-15, k hi n 8-15 (transposed) */
    gpa_ldmatrix_x4_trans(fb, sb + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * 24 + (lane >> 4) * 8);
    gpa_mma16816<T>(acc2[0], fa, fb);
    gpa_mma16816<T>(acc2[1], fa, fb + 2);
  }
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < 4; i++) c2[(g + (i >> 1) * 8) * 16 + 8 * j + 2 * t + (i & 1)] = acc2[j][i];
}
extern "C" __global__ void sim_mma_tiles_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *bt,
                                              const __nv_bfloat16 *b, float *c1, float *c2, int K, int nvalid) {
  mma_tiles(a, bt, b, c1, c2, K, nvalid);
}
extern "C" __global__ void sim_mma_tiles_f16(const __half *a, const __half *bt, const __half *b, float *c1,
                                             float *c2, int K, int nvalid) {
  mma_tiles(a, bt, b, c1, c2, K, nvalid);
}

/* tf32 m16n8k8: d = a b + c with a [16][8], b [8][8] (k rows), c, d
 * [16][8] fp32, fragments built by the documented formulas; split = 0: one
 * product of the cvt.rna-rounded operands, 1: 3xTF32. Also x -> cvt.rna
 * bits for 32 values (out[lane]). */
extern "C" __global__ void sim_mma_direct_tf32(const float *a, const float *b, const float *c, float *d, int split,
                                               const float *x, unsigned *out) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  unsigned ab[4], as[4], bb[2], bs[2];
  for (int i = 0; i < 4; i++) gpa_split_tf32(a[(g + (i & 1) * 8) * 8 + t + (i >> 1) * 4], ab[i], as[i]);
  for (int i = 0; i < 2; i++) gpa_split_tf32(b[(t + i * 4) * 8 + g], bb[i], bs[i]);
  float acc[4];
  for (int i = 0; i < 4; i++) acc[i] = c[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)];
  if (split)
    gpa_mma1688_3xtf32(acc, ab, as, bb, bs);
  else
    gpa_mma1688_tf32(acc, ab, bb);
  for (int i = 0; i < 4; i++) d[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = acc[i];
  out[lane] = gpa_cvt_tf32(x[lane]);
}
