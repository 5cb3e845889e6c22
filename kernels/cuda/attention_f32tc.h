/* What the fp32 tensor-core attention kernels (attention_f32tc.cu forward,
 * attention_f32tc_bwd.cu backward) share: the cp.async tile copy and the
 * split of a 16-column chunk of two rows into the big and small tf32 A
 * operands of its two k steps (the k permutation of attention_f32tc.cu's
 * head comment: k t and t + 4 of step s stand for columns 4t + 2s and
 * 4t + 2s + 1, so a lane's operand is one float4). */
#ifndef GPA_ATTENTION_F32TC_H
#define GPA_ATTENTION_F32TC_H
#include "attention_common.h"
#include "gpa_mma.h"

/* Rows [0, ROWS) of a head into dst [ROWS][LD], columns [0, D) (D % 4 ==
 * 0), 16 bytes per cp.async; rows >= nvalid zero-filled (no NaN bits reach
 * a product). */
template <int ROWS, int LD, int NT>
static __device__ __forceinline__ void tc32_load(float *dst, const float *src, long long ld, int nvalid, int D,
                                                 int tid) {
  const int cpr = D >> 2;
  for (int e = tid; e < ROWS * cpr; e += NT) {
    const int r = e / cpr, c = (e - r * cpr) << 2;
    const bool ok = r < nvalid;
    gpa_cp_async16(dst + r * LD + c, ok ? src + r * ld + c : src, ok);
  }
}

/* The A operands (big, small) of the two k steps of one 16-column chunk:
 * x = row g's 4 floats at 4t, y = row g + 8's. */
static __device__ __forceinline__ void tc32_split_a(unsigned ab[2][4], unsigned as[2][4], float4 x, float4 y) {
  gpa_split_tf32(x.x, ab[0][0], as[0][0]);
  gpa_split_tf32(y.x, ab[0][1], as[0][1]);
  gpa_split_tf32(x.y, ab[0][2], as[0][2]);
  gpa_split_tf32(y.y, ab[0][3], as[0][3]);
  gpa_split_tf32(x.z, ab[1][0], as[1][0]);
  gpa_split_tf32(y.z, ab[1][1], as[1][1]);
  gpa_split_tf32(x.w, ab[1][2], as[1][2]);
  gpa_split_tf32(y.w, ab[1][3], as[1][3]);
}

/* d += A B over one 16-column chunk (both k steps): A split by
 * tc32_split_a, B's column n = g given as its row's 4 floats at 4t (the
 * same permutation). */
static __device__ __forceinline__ void tc32_mma_chunk(float d[4], const unsigned ab[2][4], const unsigned as[2][4],
                                                      float4 b) {
  unsigned bb[2], bs[2];
  gpa_split_tf32(b.x, bb[0], bs[0]);
  gpa_split_tf32(b.y, bb[1], bs[1]);
  gpa_mma1688_3xtf32(d, ab[0], as[0], bb, bs);
  gpa_split_tf32(b.z, bb[0], bs[0]);
  gpa_split_tf32(b.w, bb[1], bs[1]);
  gpa_mma1688_3xtf32(d, ab[1], as[1], bb, bs);
}

/* An m16n8 accumulator (rows g, g + 8; columns 2t, 2t + 1) as the split A
 * operand of a product over k = its 8 columns: k t stands for column 2t,
 * k t + 4 for column 2t + 1, so no value leaves its lane. */
static __device__ __forceinline__ void tc32_split_acc(unsigned ab[4], unsigned as[4], const float c[4]) {
  gpa_split_tf32(c[0], ab[0], as[0]);
  gpa_split_tf32(c[2], ab[1], as[1]);
  gpa_split_tf32(c[1], ab[2], as[2]);
  gpa_split_tf32(c[3], ab[3], as[3]);
}

/* d += A B with A from tc32_split_acc: B's rows 2t (b0) and 2t + 1 (b1) of
 * the 8-row step, at the output column n = g. */
static __device__ __forceinline__ void tc32_mma_rows(float d[4], const unsigned ab[4], const unsigned as[4], float b0,
                                                     float b1) {
  unsigned bb[2], bs[2];
  gpa_split_tf32(b0, bb[0], bs[0]);
  gpa_split_tf32(b1, bb[1], bs[1]);
  gpa_mma1688_3xtf32(d, ab, as, bb, bs);
}

/* acc += A X over NB 8-row steps (the forward's O += P V, the backward's
 * dQ += dS K): A in accumulator layout, a[n] its columns 8n..8n+7; X in
 * shared memory, rows ld floats apart, whose column 8f + g is acc[f]'s
 * output column g; column blocks from d on are skipped. */
template <int NB, int NO>
static __device__ __forceinline__ void tc32_acc_ax(float (&acc)[NO][4], const float (&a)[NB][4], const float *x, int ld,
                                                   int d, int t, int g) {
  UNROLL
  for (int n = 0; n < NB; n++) {
    unsigned ab[4], as[4];
    tc32_split_acc(ab, as, a[n]);
    const float *x0 = x + (n * 8 + 2 * t) * ld + g;
    UNROLL
    for (int f = 0; f < NO; f++)
      if (f * 8 < d) tc32_mma_rows(acc[f], ab, as, x0[f * 8], x0[ld + f * 8]);
  }
}

#endif
