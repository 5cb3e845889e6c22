/* gpa-sim: mma.sync m16n8k16 (bf16, fp16) and m16n8k8 (tf32, with
 * cvt.rna.tf32.f32), ldmatrix .x4 (.trans) and cp.async for the
 * emulated kernels (kernels/cuda/gpa_mma.h calls these under GPA_SIM_EMU).
 *
 * Every lane keeps only its own fragment registers, laid out as the PTX ISA
 * documents (the table in gpa_mma.h); what a lane needs from the others it
 * reads from a per-warp exchange area (the hardware's operand network):
 * every lane posts its registers (mma) or row address (ldmatrix), a
 * __syncwarp, each lane reads the lanes it needs (mma: the A rows g and
 * g+8 from the 4 lanes of its quad, the B columns 2t, 2t+1 from 8 lanes),
 * a second __syncwarp before the area is reused. A kernel that assumes a
 * wrong layout therefore computes wrong numbers here too. Two warp
 * collectives per call (sixteen shuffles cost eight times the fiber
 * switches).
 *
 * cp.async is deferred: a copy lands in shared memory only when the
 * issuing thread waits for its group (or when the per-thread queue is
 * full, which the hardware may also do: a copy can land any time before
 * its wait). A kernel that reads a tile before waiting for it, or without
 * the barrier after the wait, sees the old contents, as it could on the
 * device. */
#ifndef GPA_SIM_MMA_H
#define GPA_SIM_MMA_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <vector>

/* The operand exchange and the arithmetic of an mma: the simulator's own
 * work on registers, no memory of the kernel's (ldmatrix and cp.async,
 * which take the kernel's addresses, stay checked). Not instrumented by
 * ASan and UBSan, which made it ~10x slower: in the ASan build alone,
 * parity_conv1d_bf16_own 42 -> 22 s, parity_conv1d_tc32 24 -> 12 s,
 * attention 22 -> 13 s on sim. */
#if defined(__GNUC__) || defined(__clang__)
#define GPA_SIM_MMA_UNCHECKED __attribute__((no_sanitize("address", "undefined")))
#else
#define GPA_SIM_MMA_UNCHECKED
#endif

/* One 16-bit element of a fragment register, widened exactly (a bf16 is
 * the high half of its float). */
template <class T>
GPA_SIM_MMA_UNCHECKED inline float gpa_sim_mma_f(uint16_t bits) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    const uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  } else {
    T v;
    memcpy((void *)&v, &bits, 2);
    return __half2float(v);
  }
}

/* The exchange area of each warp of the block this OS worker runs (a
 * worker runs one block at a time; 32 warps at most). */
struct gpa_sim_mma_xchg {
  unsigned a[32][4], b[32][2];
  unsigned as[32][4], bs[32][2]; /* tf32: the second (small) operands of 3xTF32 */
  uintptr_t row[32];
};
inline gpa_sim_mma_xchg &gpa_sim_mma_area(void) {
  static thread_local gpa_sim_mma_xchg x[32];
  return x[gpa_sim_self()->warp & 31];
}

template <class T>
GPA_SIM_MMA_UNCHECKED inline void gpa_sim_mma16816(float d[4], const unsigned a[4], const unsigned b[2]) {
  const int lane = (int)gpa_sim_self()->lane, g = lane >> 2, t = lane & 3;
  gpa_sim_mma_xchg &x = gpa_sim_mma_area();
  memcpy(x.a[lane], a, sizeof x.a[lane]);
  memcpy(x.b[lane], b, sizeof x.b[lane]);
  __syncwarp();
  /* A rows g (ar[0]) and g+8 (ar[1]), k = 0..15, from lanes 4g..4g+3 */
  float ar[2][16], bc[2][16];
  for (int s = 0; s < 4; s++) {
    const unsigned *r = x.a[4 * g + s];
    for (int i = 0; i < 4; i++) {
      const int row = i & 1, k = 2 * s + (i >> 1) * 8;
      ar[row][k] = gpa_sim_mma_f<T>((uint16_t)r[i]);
      ar[row][k + 1] = gpa_sim_mma_f<T>((uint16_t)(r[i] >> 16));
    }
  }
  /* B columns 2t (bc[0]) and 2t+1 (bc[1]): column n sits in lanes 4n..4n+3 */
  for (int c = 0; c < 2; c++)
    for (int s = 0; s < 4; s++) {
      const unsigned *r = x.b[4 * (2 * t + c) + s];
      for (int i = 0; i < 2; i++) {
        const int k = 2 * s + i * 8;
        bc[c][k] = gpa_sim_mma_f<T>((uint16_t)r[i]);
        bc[c][k + 1] = gpa_sim_mma_f<T>((uint16_t)(r[i] >> 16));
      }
    }
  __syncwarp(); /* every lane has read the area */
  /* products of 16-bit values are exact in fp32; summed in fp32 */
  for (int i = 0; i < 4; i++) {
    const float *ra = ar[i >> 1], *cb = bc[i & 1];
    float s = 0.0f;
    for (int k = 0; k < 16; k++) s += ra[k] * cb[k];
    d[i] += s;
  }
}

/* cvt.rna.tf32.f32: to 10 mantissa bits, nearest, ties away from zero (add
 * half a tf32 ulp to the magnitude, drop the 13 low bits; a carry into the
 * exponent is the correct rounding, up to inf); NaN stays NaN. */
GPA_SIM_MMA_UNCHECKED inline unsigned gpa_sim_cvt_tf32(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? 0x7fffffffu : u;
  return (u + 0x1000u) & 0xffffe000u;
}
/* One operand register as the tensor core reads it: its tf32 bits. */
GPA_SIM_MMA_UNCHECKED inline float gpa_sim_tf32_f(unsigned r) {
  r &= 0xffffe000u;
  float f;
  memcpy(&f, &r, 4);
  return f;
}
/* One output of an m16n8k8 tf32 mma, d + sum_k a_k b_k, added the way the
 * tensor core adds (the model Fasi, Higham, Mikaitis and Pranesh measured
 * on the A100, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021):
 * the products are exact (tf32 x tf32: 22 bits); d and the 8 products are
 * aligned to the exponent of the largest of them, keeping 3 bits below
 * that term's fp32 ulp and dropping the rest (truncation, not rounding);
 * the exact sum of what is kept goes to fp32 toward zero. Unlike fp32 FMAs
 * (round to nearest: errors of both signs that mostly cancel) every mma
 * loses up to an ulp of the largest term, always toward zero in
 * magnitude: a long reduction kept in one accumulator drifts by about
 * (mmas) x (half an ulp of the running sum). A kernel whose accuracy rests
 * on round-to-nearest accumulation fails here as on the GPU. Infinite or
 * NaN terms: their plain sum (the special value). */
GPA_SIM_MMA_UNCHECKED inline float gpa_sim_tc_dot8(float d, const float *a, const float *b) {
  double t[9], mx = fabs((double)d);
  t[0] = d;
  for (int k = 0; k < 8; k++) {
    t[k + 1] = (double)a[k] * (double)b[k];
    if (fabs(t[k + 1]) > mx) mx = fabs(t[k + 1]);
  }
  if (!(mx <= 3.4028234663852886e38)) { /* inf or NaN among the terms */
    double s = 0;
    for (int k = 0; k < 9; k++) s += t[k];
    return (float)s;
  }
  if (mx == 0) return d + 0.0f;
  int e;
  frexp(mx, &e); /* mx in [2^(e-1), 2^e): its fp32 ulp is 2^(e-24) */
  const double q = ldexp(1.0, e - 24 - 3);
  double s = 0; /* multiples of q below 9 2^e: exact in a double */
  for (int k = 0; k < 9; k++) s += trunc(t[k] / q) * q;
  float f = (float)s;
  if (fabs((double)f) > fabs(s)) f = nextafterf(f, 0.0f);
  return f;
}
/* mma.m16n8k8 tf32 (layouts in gpa_mma.h): d += a b; with as and bs (3xTF32)
 * d += as b, d += a bs, d += a b in this order, three mmas, each as
 * gpa_sim_tc_dot8 adds. */
GPA_SIM_MMA_UNCHECKED inline void gpa_sim_mma1688_tf32(float d[4], const unsigned a[4], const unsigned b[2], const unsigned *as,
                                 const unsigned *bs) {
  const int lane = (int)gpa_sim_self()->lane, g = lane >> 2, t = lane & 3;
  gpa_sim_mma_xchg &x = gpa_sim_mma_area();
  memcpy(x.a[lane], a, sizeof x.a[lane]);
  memcpy(x.b[lane], b, sizeof x.b[lane]);
  if (as) {
    memcpy(x.as[lane], as, sizeof x.as[lane]);
    memcpy(x.bs[lane], bs, sizeof x.bs[lane]);
  }
  __syncwarp();
  /* A rows g (0) and g+8 (1), k = 0..7: column t of lane 4g+t in a[0]/a[1],
   * column t+4 in a[2]/a[3]; B columns 2t, 2t+1: k t in b[0], t+4 in b[1] of
   * the lanes 4n..4n+3 */
  float ar[2][2][8], bc[2][2][8]; /* [big/small][row or column][k] */
  const int parts = as ? 2 : 1;
  for (int p = 0; p < parts; p++) {
    for (int s = 0; s < 4; s++) {
      const unsigned *r = p ? x.as[4 * g + s] : x.a[4 * g + s];
      for (int i = 0; i < 4; i++) ar[p][i & 1][s + (i >> 1) * 4] = gpa_sim_tf32_f(r[i]);
    }
    for (int c = 0; c < 2; c++)
      for (int s = 0; s < 4; s++) {
        const unsigned *r = p ? x.bs[4 * (2 * t + c) + s] : x.b[4 * (2 * t + c) + s];
        bc[p][c][s] = gpa_sim_tf32_f(r[0]);
        bc[p][c][s + 4] = gpa_sim_tf32_f(r[1]);
      }
  }
  __syncwarp(); /* every lane has read the area */
  static const int terms[3][2] = {{1, 0}, {0, 1}, {0, 0}}; /* (a, b) parts: small big, big small, big big */
  for (int q = as ? 0 : 2; q < 3; q++)
    for (int i = 0; i < 4; i++) d[i] = gpa_sim_tc_dot8(d[i], ar[terms[q][0]][i >> 1], bc[terms[q][1]][i & 1]);
}

inline void gpa_sim_ldmatrix_x4(unsigned r[4], const void *row, bool trans) {
  const int lane = (int)gpa_sim_self()->lane;
  const uintptr_t mine = (uintptr_t)row;
  if ((mine & 15) != 0) gpa_sim_trap("ldmatrix: row address not 16-byte aligned");
  gpa_sim_mma_xchg &x = gpa_sim_mma_area();
  x.row[lane] = mine;
  __syncwarp();
  for (int m = 0; m < 4; m++) {
    if (!trans) {
      const uintptr_t p = x.row[8 * m + (lane >> 2)];
      memcpy(&r[m], (const unsigned char *)p + 4 * (lane & 3), 4);
    } else {
      /* row lane/4 of the transpose: column lane/4 of rows 2(lane%4), +1 */
      const uintptr_t p0 = x.row[8 * m + 2 * (lane & 3)];
      const uintptr_t p1 = x.row[8 * m + 2 * (lane & 3) + 1];
      uint16_t lo, hi;
      memcpy(&lo, (const unsigned char *)p0 + 2 * (lane >> 2), 2);
      memcpy(&hi, (const unsigned char *)p1 + 2 * (lane >> 2), 2);
      r[m] = (unsigned)lo | (unsigned)hi << 16;
    }
  }
  __syncwarp(); /* every lane has read the addresses */
}

/* ---- cp.async: a queue of pending copies per CUDA thread of the block
 * running on this OS worker (a worker runs one block at a time and fibers
 * never migrate). An entry left by an earlier block (one that exited
 * without waiting) is dropped: its shared memory is gone. */
struct gpa_sim_cp_entry {
  void *dst;
  const void *src; /* NULL: zero fill */
  unsigned group;
};
struct gpa_sim_cp_queue {
  enum { CAP = 96 };
  const void *owner; /* the block's dynamic shared memory identifies it */
  uint3 block;
  unsigned n, committed; /* entries; groups committed so far */
  gpa_sim_cp_entry e[CAP];
};
inline gpa_sim_cp_queue &gpa_sim_cp_self(void) {
  static thread_local std::vector<gpa_sim_cp_queue> qs;
  const gpa_sim_thread *me = gpa_sim_self();
  if (qs.size() <= me->linear) qs.resize(me->linear + 1);
  gpa_sim_cp_queue &q = qs[me->linear];
  if (q.owner != me->dyn_shared || q.block.x != me->block_idx.x || q.block.y != me->block_idx.y ||
      q.block.z != me->block_idx.z) {
    q.owner = me->dyn_shared;
    q.block = me->block_idx;
    q.n = q.committed = 0;
  }
  return q;
}
inline void gpa_sim_cp_land(const gpa_sim_cp_entry &e) {
  if (e.src)
    memcpy(e.dst, e.src, 16);
  else
    memset(e.dst, 0, 16);
}
inline void gpa_sim_cp_async16(void *dst, const void *src, bool valid) {
  if (((uintptr_t)dst & 15) || (valid && ((uintptr_t)src & 15))) gpa_sim_trap("cp.async: address not 16-byte aligned");
  gpa_sim_cp_queue &q = gpa_sim_cp_self();
  if (q.n == gpa_sim_cp_queue::CAP) { /* full: the oldest lands now */
    gpa_sim_cp_land(q.e[0]);
    memmove(q.e, q.e + 1, sizeof q.e[0] * (q.n - 1));
    q.n--;
  }
  q.e[q.n++] = {dst, valid ? src : nullptr, q.committed};
}
inline void gpa_sim_cp_async_commit(void) { gpa_sim_cp_self().committed++; }
/* Lands every copy of the groups older than the newest n committed ones
 * (copies not yet committed belong to no group a wait can name: they stay). */
inline void gpa_sim_cp_async_wait(int n) {
  gpa_sim_cp_queue &q = gpa_sim_cp_self();
  const unsigned upto = q.committed >= (unsigned)n ? q.committed - (unsigned)n : 0;
  unsigned keep = 0;
  for (unsigned i = 0; i < q.n; i++) {
    if (q.e[i].group < upto)
      gpa_sim_cp_land(q.e[i]);
    else
      q.e[keep++] = q.e[i];
  }
  q.n = keep;
}
#endif
