/* Kernels around the cuBLAS GEMMs of linear and conv1d (CUDA backend):
 * the bias/GELU epilogue of linear (fp32 and bf16 storage), im2col / col2im and the bias passes of
 * conv1d. Every sum runs in a fixed order (deterministic, no atomics). */
#include "gelu_tanh.h"
#include "gpa_bf16.h"
#include "split_sum.h"

#define GS_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

/* v = acc + b[col]; pre = v (when pre != NULL); y = gelu ? gelu_tanh(v) : v.
 * acc may be y or pre (elementwise in place). */
extern "C" __global__ void gpa_lin_epilogue_f32(float *y, float *pre, const float *acc, const float *b, long long rows,
                                                long long cols, int gelu) {
  GS_LOOP(i, rows * cols) {
    float v = acc[i];
    if (b) v += b[i % cols];
    if (pre) pre[i] = v;
    y[i] = gelu ? gpa_gelu_tanh(v) : v;
  }
}

/* bf16 storage: acc is the fp32 GEMM result (scratch), b bf16 or NULL; v =
 * acc + b[col] in fp32, pre = bf16(v), y = bf16(gelu ? gelu_tanh(v) : v):
 * one rounding each, from the same fp32 v as the host's widened path. */
extern "C" __global__ void gpa_lin_epilogue_bf16(gpa_bf16 *y, gpa_bf16 *pre, const float *acc, const gpa_bf16 *b,
                                                 long long rows, long long cols, int gelu) {
  GS_LOOP(i, rows * cols) {
    float v = acc[i];
    if (b) v += gpa_bf2f(b[i % cols]);
    if (pre) pre[i] = gpa_f2bf(v);
    y[i] = gpa_f2bf(gelu ? gpa_gelu_tanh(v) : v);
  }
}

/* The bf16 GELU backward's g = dy * gelu'(pre) in fp32, as two bf16 halves
 * g = hi + lo (hi = bf16(g), lo = bf16(g - hi): g to 2^-17 relative, where
 * bf16(g) alone is 2^-9) side by side in g2 [rows, 2 cols], so one bf16
 * GEMM over K = 2 cols against W stacked twice sums both halves in fp32.
 * halves = 1 (the op's g_bf16 mode): hi alone, g2 [rows, cols]. */
extern "C" __global__ void gpa_lin_dgelu_split_bf16(gpa_bf16 *g2, const gpa_bf16 *dy, const gpa_bf16 *pre,
                                                    long long rows, long long cols, int halves) {
  GS_LOOP(i, rows * cols) {
    const long long r = i / cols, c = i - r * cols;
    const float g = gpa_bf2f(dy[i]) * gpa_gelu_tanh_grad(gpa_bf2f(pre[i]));
    const gpa_bf16 hi = gpa_f2bf(g);
    g2[r * halves * cols + c] = hi;
    if (halves == 2) g2[r * 2 * cols + cols + c] = gpa_f2bf(g - gpa_bf2f(hi));
  }
}

/* col[b][ci*K + k][t] = x[b, c0 + ci, t*stride - pad_l + k*dil] (0 outside [0, L)),
 * for nb batches starting at x's batch b0 (x points at that batch). */
extern "C" __global__ void gpa_conv_im2col_f32(float *col, const float *x, long long nb, long long cin,
                                               long long c0, long long cin_g, long long l, long long k,
                                               long long lout, long long stride, long long pad_l, long long dil) {
  const long long r = cin_g * k;
  GS_LOOP(i, nb * r * lout) {
    const long long t = i % lout, rr = (i / lout) % r, b = i / (lout * r);
    const long long ci = rr / k, kk = rr % k;
    const long long pos = t * stride - pad_l + kk * dil;
    col[i] = pos >= 0 && pos < l ? x[(b * cin + c0 + ci) * l + pos] : 0.0f;
  }
}

/* dx[b, c0 + ci, p] = T(sum over (k, t) with t*stride - pad_l + k*dil == p
 * of col(b, ci, k, t)), k ascending, in fp32: the f32 and bf16 kernels'
 * dcol layouts differ. */
template <class T, class Col>
static __device__ __forceinline__ void col2im(T *dx, Col col, long long nb, long long cin, long long c0,
                                              long long cin_g, long long l, long long k, long long lout,
                                              long long stride, long long pad_l, long long dil) {
  GS_LOOP(i, nb * cin_g * l) {
    const long long p = i % l, ci = (i / l) % cin_g, b = i / (l * cin_g);
    float acc = 0.0f;
    for (long long kk = 0; kk < k; kk++) {
      const long long q = p + pad_l - kk * dil;
      if (q < 0 || q % stride) continue;
      const long long t = q / stride;
      if (t < lout) acc += col(b, ci, kk, t);
    }
    dx[(b * cin + c0 + ci) * l + p] = gpa_f2t<T>(acc);
  }
}

/* dcol [b][ci*K + k][t] */
extern "C" __global__ void gpa_conv_col2im_f32(float *dx, const float *dcol, long long nb, long long cin,
                                               long long c0, long long cin_g, long long l, long long k,
                                               long long lout, long long stride, long long pad_l, long long dil) {
  auto col = [=](long long b, long long ci, long long kk, long long t) {
    return dcol[((b * cin_g + ci) * k + kk) * lout + t];
  };
  col2im(dx, col, nb, cin, c0, cin_g, l, k, lout, stride, pad_l, dil);
}

/* y[b, co, t] += bias[co] */
extern "C" __global__ void gpa_conv_bias_f32(float *y, const float *bias, long long n, long long cout, long long lout) {
  GS_LOOP(i, n) y[i] += bias[(i / lout) % cout];
}

/* db[co] = sum over b, t of dy[b, co, t], in double. Grid (channels,
 * chunks): a block per channel and chunk of the flat index i = b Lout + t
 * (`per` values; one chunk is all of them), each thread a strided share
 * of its chunk, then a tree of fixed shape (deterministic for the block
 * size, CONV_DB_THREADS in ops/conv1d/cuda.c). With one chunk the tree's
 * sum is db[co]; with several it is the chunk's partial (gpart[chunk][co])
 * and the grid's last block adds each channel's partials in chunk order
 * (split_sum.h): 96 blocks of a block per channel left most of an H100
 * idle at the main job's shape (issue 25). A thread per channel summing all
 * B x Lout values in turn did so before that. T: float, or gpa_bf16
 * (widened). */
template <typename T>
static __device__ void conv_db(double *part, float *db, const T *dy, long long nb, long long cout, long long lout,
                               long long per, double *gpart, unsigned *ctr) {
  __shared__ unsigned flag;
  const long long co = blockIdx.x, n = nb * lout, i0 = (long long)blockIdx.y * per;
  const long long i1 = i0 + per < n ? i0 + per : n;
  const int t = (int)threadIdx.x;
  double acc = 0.0;
  /* (b, tt) of i = i0 + t, stepped by blockDim.x without a division a value */
  long long step_b = 0, step_t = 0, b = 0, tt = 0;
  if (i0 + t < i1) /* lout > 0 */
    step_b = blockDim.x / lout, step_t = blockDim.x % lout, b = (i0 + t) / lout, tt = (i0 + t) % lout;
  for (long long i = i0 + t; i < i1; i += blockDim.x) {
    acc += (double)gpa_ldf(dy, (b * cout + co) * lout + tt);
    b += step_b, tt += step_t;
    if (tt >= lout) tt -= lout, b++;
  }
  part[t] = acc;
  __syncthreads();
  for (int s = (int)blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    __syncthreads();
  }
  if (gridDim.y == 1) {
    if (t == 0) db[co] = (float)part[0];
    return;
  }
  if (t == 0) gpart[blockIdx.y * cout + co] = part[0];
  if (!gpa_split_last(ctr, gridDim.x * gridDim.y, &flag)) return;
  for (long long c = t; c < cout; c += blockDim.x) {
    double s = 0.0;
    for (unsigned k = 0; k < gridDim.y; k++) s += gpa_split_ld(gpart + k * cout + c);
    db[c] = (float)s;
  }
}

extern "C" __global__ void gpa_conv_db_f32(float *db, const float *dy, long long nb, long long cout, long long lout,
                                           long long per, double *gpart, unsigned *ctr) {
  GPA_DYNAMIC_SHARED(double, part);
  conv_db(part, db, dy, nb, cout, lout, per, gpart, ctr);
}
extern "C" __global__ void gpa_conv_db_bf16(float *db, const gpa_bf16 *dy, long long nb, long long cout,
                                            long long lout, long long per, double *gpart, unsigned *ctr) {
  GPA_DYNAMIC_SHARED(double, part);
  conv_db(part, db, dy, nb, cout, lout, per, gpart, ctr);
}

/* out[j] = sum over i of g[i, j], in double, g = x (f32 or bf16, widened),
 * times gelu'(pre) when pre != NULL (bf16 linear with GELU: g formed in
 * fp32 from the bf16 inputs, so db does not see the bf16 rounding of the g
 * the GEMMs take). Grid (column tiles of 32, chunks of `per` rows), block
 * (32, S): each thread a strided share of its chunk's rows (a warp reads
 * 32 adjacent columns), then a column's S shares in order. With one chunk
 * that is out[j]; with several it is the chunk's partial (gpart[chunk][j])
 * and the tile's last block adds the partials the same way (thread y:
 * chunks y, y + S, ..., then the S shares in order; split_sum.h). The
 * order is fixed by the launch shape (ops/linear/cuda.c): deterministic.
 * A block per 32 columns walking every row took 20 us for a bias of 96
 * over 4096 rows on an H100 (3 blocks; issue 25); a thread per column
 * summing every row in turn took ~250 us for 60 columns before that. */
template <typename T>
static __device__ void col_sum(double *part, float *out, const T *x, const gpa_bf16 *pre, long long rows,
                               long long cols, long long per, double *gpart, unsigned *ctr) {
  __shared__ unsigned flag;
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, sl = (int)blockDim.y;
  const long long j = (long long)blockIdx.x * 32 + tx, i0 = (long long)blockIdx.y * per;
  const long long i1 = i0 + per < rows ? i0 + per : rows;
  double acc = 0.0;
  if (j < cols)
    for (long long i = i0 + ty; i < i1; i += sl) {
      float g = gpa_ldf(x, i * cols + j);
      if (pre) g *= gpa_gelu_tanh_grad(gpa_bf2f(pre[i * cols + j]));
      acc += (double)g;
    }
  part[ty * 32 + tx] = acc;
  __syncthreads();
  if (ty == 0 && j < cols) {
    double s = 0.0;
    for (int k = 0; k < sl; k++) s += part[k * 32 + tx];
    if (gridDim.y == 1) out[j] = (float)s;
    else gpart[blockIdx.y * cols + j] = s;
  }
  if (gridDim.y == 1 || !gpa_split_last(ctr + blockIdx.x, gridDim.y, &flag)) return;
  acc = 0.0;
  if (j < cols)
    for (unsigned c = ty; c < gridDim.y; c += sl) acc += gpa_split_ld(gpart + c * cols + j);
  part[ty * 32 + tx] = acc; /* gpa_split_last's barriers: the first pass's reads are done */
  __syncthreads();
  if (ty == 0 && j < cols) {
    double s = 0.0;
    for (int k = 0; k < sl; k++) s += part[k * 32 + tx];
    out[j] = (float)s;
  }
}

extern "C" __global__ void gpa_colsum_f32(float *out, const float *x, long long rows, long long cols, long long per,
                                          double *gpart, unsigned *ctr) {
  GPA_DYNAMIC_SHARED(double, part);
  col_sum(part, out, x, (const gpa_bf16 *)0, rows, cols, per, gpart, ctr);
}

/* bf16 linear backward's db: g = dy, or dy gelu'(pre) */
extern "C" __global__ void gpa_lin_db_bf16(float *db, const gpa_bf16 *dy, const gpa_bf16 *pre, long long rows,
                                           long long cols, long long per, double *gpart, unsigned *ctr) {
  GPA_DYNAMIC_SHARED(double, part);
  col_sum(part, db, dy, pre, rows, cols, per, gpart, ctr);
}

/* dw[i] (+)= sum over b < nb of part[b n + i], b in order: the per-batch
 * products of one strided-batched GEMM, summed deterministically (one GEMM
 * launch per batch before: 32 in turn at the main job's shape). */
extern "C" __global__ void gpa_conv_dw_sum_f32(float *dw, const float *part, long long nb, long long n,
                                               int accumulate) {
  GS_LOOP(i, n) {
    float acc = accumulate ? dw[i] : 0.0f;
    for (long long b = 0; b < nb; b++) acc += part[b * n + i];
    dw[i] = acc;
  }
}

/* ---- bf16 conv1d (ops/conv1d/cuda_bf16.c) --------------------------------------------------------
 * The batches of a chunk are folded into the GEMMs' long dimension: the
 * column matrix is col[r][b lout + t] (r = ci K + k), so y = W col, dW = dy'
 * col^T and dcol = W^T dy' are one bf16 GEMM each over all nb batches (fp32
 * compute), with dy' = dy as [Cout][b lout + t]. The f32 path's per-batch
 * strided GEMMs need cublasGemmStridedBatchedEx for bf16, which the
 * backend's cuBLAS table does not hold; one GEMM of nb x the columns is as
 * good for cuBLAS. Outputs are formed in fp32 and rounded once. */

/* col[ci K + k][b lout + t] = x[b, c0 + ci, t stride - pad_l + k dil] (0 outside [0, L)) */
extern "C" __global__ void gpa_conv_im2col_bf16(gpa_bf16 *col, const gpa_bf16 *x, long long nb, long long cin,
                                                long long c0, long long cin_g, long long l, long long k,
                                                long long lout, long long stride, long long pad_l, long long dil) {
  const long long nl = nb * lout;
  GS_LOOP(i, cin_g * k * nl) {
    const long long j = i % nl, rr = i / nl, b = j / lout, t = j - b * lout;
    const long long ci = rr / k, kk = rr - ci * k;
    const long long pos = t * stride - pad_l + kk * dil;
    col[i] = pos >= 0 && pos < l ? x[(b * cin + c0 + ci) * l + pos] : (gpa_bf16)0;
  }
}

/* y[b, c0 + co, t] = bf16(acc[co][b lout + t] + bias[c0 + co]) (bias nullable) */
extern "C" __global__ void gpa_conv_out_bf16(gpa_bf16 *y, const float *acc, const gpa_bf16 *bias, long long nb,
                                             long long cout, long long c0, long long cout_g, long long lout) {
  const long long nl = nb * lout;
  GS_LOOP(i, cout_g * nl) {
    const long long co = i / nl, j = i - co * nl, b = j / lout, t = j - b * lout;
    float v = acc[i];
    if (bias) v += gpa_bf2f(bias[c0 + co]);
    y[(b * cout + c0 + co) * lout + t] = gpa_f2bf(v);
  }
}

/* dyp[co][b lout + t] = dy[b, co, t] for every channel (a copy: the GEMMs' K runs over (b, t)) */
extern "C" __global__ void gpa_conv_perm_bf16(gpa_bf16 *dyp, const gpa_bf16 *dy, long long nb, long long cout,
                                              long long lout) {
  const long long nl = nb * lout;
  GS_LOOP(i, cout * nl) {
    const long long co = i / nl, j = i - co * nl, b = j / lout, t = j - b * lout;
    dyp[i] = dy[(b * cout + co) * lout + t];
  }
}

/* col2im (gpa_conv_col2im_f32) from the fp32 dcol [ci K + k][b lout + t],
 * rounded to bf16 once */
extern "C" __global__ void gpa_conv_col2im_bf16(gpa_bf16 *dx, const float *dcol, long long nb, long long cin,
                                                long long c0, long long cin_g, long long l, long long k,
                                                long long lout, long long stride, long long pad_l, long long dil) {
  const long long nl = nb * lout;
  auto col = [=](long long b, long long ci, long long kk, long long t) {
    return dcol[(ci * k + kk) * nl + b * lout + t];
  };
  col2im(dx, col, nb, cin, c0, cin_g, l, k, lout, stride, pad_l, dil);
}
