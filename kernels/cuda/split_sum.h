/* Split sums: a reduction over many rows cut into chunks over a 2-D grid
 * (blockIdx.y = the chunk), each block writing its chunk's partial sums to
 * scratch, and the last block of a column tile to finish adding the
 * partials in chunk order. At small shapes (the main job's 4096 rows of 96
 * columns) a block per column tile walking every row left most of an H100
 * idle: 2-3 blocks, 20 us a launch (issue 25). The order of every sum is
 * fixed by the shape and the launch (chunk rows, slices), never by which
 * block finishes last: deterministic, bit for bit.
 *
 * The last block is found as in CUDA's threadFenceReduction sample: each
 * block makes its partials visible (__threadfence) before it counts itself
 * on the tile's counter (atomicAdd); the block that counts last reads the
 * others' partials. It resets the counter to zero, so the next kernel of
 * the stream, and a CUDA graph replaying this one, find it zero (the
 * counters: backends/cuda/backend.c gpa__cu_counters). */
#ifndef GPA_KERNELS_CUDA_SPLIT_SUM_H
#define GPA_KERNELS_CUDA_SPLIT_SUM_H

/* A partial written by another block of this grid: through L2, never a
 * line this SM's L1 might hold (it holds none of them, but say so). */
static __device__ __forceinline__ double gpa_split_ld(const double *p) {
#ifdef GPA_SIM_EMU
  return *(const volatile double *)p;
#else
  return __ldcg(p);
#endif
}

/* Every thread of the block calls it, after writing its partials; true in
 * the last of the nblk blocks counted on *ctr (the same answer for all of
 * its threads). flag: one word of shared memory. */
static __device__ bool gpa_split_last(unsigned *ctr, unsigned nblk, unsigned *flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned done = atomicAdd(ctr, 1u) + 1u;
    *flag = done == nblk;
    if (done == nblk) atomicExch(ctr, 0u);
  }
  __syncthreads();
  const bool last = *flag != 0u;
  __threadfence(); /* the others' partials are read after their counts */
  return last;
}

#endif
