/* Launch shapes that a host adapter and its kernels must agree on; both
 * compilers include this file (as conv1d_geo.h for conv1d). */
#ifndef GPA_KERNELS_CUDA_LAUNCH_SHAPES_H
#define GPA_KERNELS_CUDA_LAUNCH_SHAPES_H

/* Sorted positions per block of embedding_bwd's sums (embedding.cu,
 * ops/embedding/cuda.c: the grid and the partials' size). */
#define GPA_EMB_CHUNK 32
/* 16-byte accesses a thread a step of embedding_fwd's row copies
 * (embedding.cu's registers, ops/embedding/cuda.c's threads a row). */
#define GPA_EMB_FWD_U 4
/* embedding_bwd without a sort (embedding.cu emb_rows, ops/embedding/
 * cuda_rows.c): threads a block (a vocabulary row each), and the most ids
 * it takes (their positions as 16-bit values in 16 KiB of shared memory). */
#define GPA_EMB_ROWS_THREADS 256
#define GPA_EMB_ROWS_MAX_N 8192

/* y threads (slices) of layernorm_bwd's dgamma/dbeta column kernel
 * (norm.cu's shared arrays, ops/layernorm/cuda.c's block). */
#define GPA_LN_SLICES 8

/* Counters per queue for the split sums' last blocks (split_sum.h,
 * backends/cuda/backend.c gpa__cu_counters): a kernel counts on one per
 * column tile, so its tiles must not pass this. */
#define GPA_SPLIT_COUNTERS 256

/* 16-byte vectors a thread of cross_entropy_bwd's block-per-row kernel
 * (metrics.cu ce_bwd_row's registers, ops/metrics/cuda.c's block size). */
#define GPA_CE_ROW_NV 4
/* Their largest blocks, each kernel's __launch_bounds__: a block of 1024
 * threads needs at most 64 registers a thread, which the bf16 kernels
 * (69-76 on sm_90) exceed, so their launches at 1024 threads failed on an
 * H100 (too many resources requested), which the simulator does not model. */
#define GPA_CE_ROW_MAX_THREADS_F32 1024
#define GPA_CE_ROW_MAX_THREADS_BF16 512

#endif
