/* conv1d on CUDA, after cuDNN where it takes the call (cuda_cudnn.c): bf16
 * storage on our tensor-core implicit GEMMs (ops/conv1d/cuda_tc.c)
 * wherever gpa__conv_tc_fits holds, f32 on the 3xTF32 ones
 * (ops/conv1d/cuda_tc32.c) wherever gpa__conv_tc32_fits holds; then our SIMT implicit-GEMM kernels
 * (ops/conv1d/cuda_igemm.c) wherever gpa__conv_ig_fits holds; for the rest (indices past an int,
 * grids past their limits, a kernel extent whose stage passes 48 KiB of
 * shared memory) im2col (kernels/cuda/linear.cu) + cuBLAS GEMMs per
 * group, in chunks of batches whose column matrices fit CONV_SCRATCH_CAP;
 * col2im for dx. dW: one strided-batched GEMM of the per-batch products,
 * summed over batches in order by a kernel (deterministic). Row-major
 * operands go to column-major cuBLAS as their transposes. bf16 storage
 * goes to cuda_bf16.c once the geometry is known.
 *
 * Channels last (layout nlc): cuDNN (NHWC strides), the bf16 tensor-core
 * kernels where every group's channels are a multiple of 8 (read in
 * place, no copies), and the SIMT implicit GEMMs take it natively; the
 * opt-in 3xTF32 and small-grid kernels decline it (the SIMT ones run), and
 * so does the im2col + cuBLAS path: a shape none of the kernels takes runs
 * on the host implementation (gpa__cu_fallback), as one past an int does.
 * db of dy [B,Lout,Cout] is the column sum of its B Lout rows
 * (gpa__conv_db_rows_cu). */
#include <limits.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/conv1d/conv1d.h"
#include "ops/conv1d/conv1d_cudnn.h"
#include "ops/cuda_kernels.h"

#define CONV_SCRATCH_CAP ((uint64_t)256 << 20)
#define CONV_DB_THREADS 256 /* a power of two: the db kernels' tree */

static const float one = 1.0f, zero = 0.0f;

static int fits(long long v) { return v >= 0 && v <= INT_MAX; }

typedef gpa__conv_cu_geom geom;

/* db: a block per channel and chunk of its B x Lout values
 * (kernels/cuda/linear.cu conv_db). Below 256 channels a block per channel
 * left most of an H100 idle (96 blocks at the main job's shape, issue 25):
 * the values split into chunks of at least 4 a thread, about 512 blocks in
 * all (more for many values: at most 64 a thread, 4096 blocks), whose
 * partials the grid's last block adds in chunk order (deterministic: the
 * chunks depend on the shape alone). The partials (double) go in the
 * scratch: every caller launches db before its other scratch use or after
 * its last. */
gpa_status gpa__conv_db_cu(const gpa_op_exec *x, long long nb, long long cout, long long lout) {
  if (x->n_outputs <= 2) return GPA_OK;
  void *db = x->out[2], *dy = x->in[0];
  long long n = nb * lout, chunks = 1;
  if (cout < 256 && gpa__cu_split_sums(x)) {
    chunks = (511 + cout) / cout;
    long long most = (n + 4 * CONV_DB_THREADS - 1) / (4 * CONV_DB_THREADS);
    long long many = (n + 64 * CONV_DB_THREADS - 1) / (64 * CONV_DB_THREADS);
    if (chunks < many) chunks = many < 4096 / cout ? many : 4096 / cout;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
  }
  long long per = (n + chunks - 1) / chunks;
  if (per < 1) per = 1;
  chunks = (n + per - 1) / per;
  if (chunks < 1) chunks = 1;
  CUdeviceptr part = 0, ctr = 0;
  if (chunks > 1 && (!(part = gpa__cu_scratch(x, (uint64_t)(chunks * cout) * sizeof(double))) ||
                     !(ctr = gpa__cu_counters(x))))
    return GPA_ENOMEM;
  void *args[] = {&db, &dy, &nb, &cout, &lout, &per, &part, &ctr};
  int id = x->inputs[0].dtype == GPA_BF16 ? GPA__K_CONV_DB_BF : GPA__K_CONV_DB;
  return gpa__cu_launch(x, id, (unsigned)cout, (unsigned)chunks, 1, CONV_DB_THREADS, 1,
                        CONV_DB_THREADS * sizeof(double), args);
}

/* db of channels-last dy: the column sums of [rows][cout] by linear.cu's
 * col_sum kernels (gpa_colsum_f32, gpa_lin_db_bf16 without pre), whose
 * warps read 32 adjacent channels of a row; conv_db's block per channel
 * would read one float per 32-byte sector there. Below 64 column tiles the
 * rows split into chunks of at least 32 (about 128 blocks, at most 1024),
 * whose partials (double, in the scratch: the callers' rule as above) the
 * tile's last block adds in chunk order. The split depends on the shape
 * alone: deterministic. */
gpa_status gpa__conv_db_rows_cu(const gpa_op_exec *x, long long rows, long long cout) {
  if (x->n_outputs <= 2) return GPA_OK;
  long long tiles = (cout + 31) / 32, most = (rows + 31) / 32, chunks = 1;
  if (tiles < 64 && most > 1 && gpa__cu_split_sums(x)) {
    long long many = (rows + 4095) / 4096;
    chunks = (128 + tiles - 1) / tiles;
    if (chunks < many) chunks = many < 1024 / tiles ? many : 1024 / tiles;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
  }
  long long per = chunks > 1 ? (rows + chunks - 1) / chunks : rows;
  if (per < 1) per = 1;
  chunks = (rows + per - 1) / per;
  if (chunks < 1) chunks = 1;
  CUdeviceptr part = 0, ctr = 0;
  if (chunks > 1 && (!(part = gpa__cu_scratch(x, (uint64_t)(chunks * cout) * sizeof(double))) ||
                     !(ctr = gpa__cu_counters(x))))
    return GPA_ENOMEM;
  void *db = x->out[2], *dy = x->in[0], *pre = NULL;
  void *a32[] = {&db, &dy, &rows, &cout, &per, &part, &ctr}, *abf[] = {&db, &dy, &pre, &rows, &cout, &per, &part, &ctr};
  const int bf = x->inputs[0].dtype == GPA_BF16;
  return gpa__cu_launch(x, bf ? GPA__K_LIN_DB_BF : GPA__K_LIN_COLSUM, (unsigned)tiles, (unsigned)chunks, 1, 32, 32,
                        32 * 32 * sizeof(double), bf ? abf : a32);
}

static void conv_geom(const gpa_op_exec *x, const gpa_tensor *xt, const gpa_tensor *W, const gpa_tensor *yt,
                      geom *g) {
  const gpa__conv_params *p = x->params;
  const int nlc = p->layout == GPA_CONV1D_NLC;
  const long long lout = yt->shape[nlc ? 1 : 2];
  g->nlc = nlc;
  g->B = xt->shape[0];
  g->Cin = xt->shape[nlc ? 2 : 1];
  g->L = xt->shape[nlc ? 1 : 2];
  g->Cout = W->shape[0];
  g->K = W->shape[2];
  g->stride = p->stride;
  g->dil = p->dilation;
  g->G = p->groups;
  g->pad_l = p->causal ? g->dil * (g->K - 1) : p->padding;
  g->Lout = lout;
  g->cin_g = g->Cin / g->G;
  g->cout_g = g->Cout / g->G;
  g->R = g->cin_g * g->K;
}

static int conv_fits(const geom *g) {
  return fits(g->B) && fits(g->Lout) && fits(g->R) && fits(g->cout_g) && fits(g->R * g->Lout) &&
         fits(g->Cout * g->Lout);
}

/* Batches per chunk so that `bufs` column matrices (and, for the backward,
 * the per-batch dW products) fit the cap. */
static long long chunk_of(const geom *g, int bufs) {
  uint64_t per = (uint64_t)g->R * (uint64_t)g->Lout * sizeof(float) * (uint64_t)bufs;
  if (bufs > 1) per += (uint64_t)g->cout_g * (uint64_t)g->R * sizeof(float);
  long long c = per ? (long long)(CONV_SCRATCH_CAP / per) : g->B;
  if (c < 1) c = 1;
  return c < g->B ? c : g->B;
}

static gpa_status im2col(const gpa_op_exec *x, const geom *g, void *col, const float *xb, long long nb,
                         long long c0, int back) {
  long long cin = g->Cin, cin_g = g->cin_g, l = g->L, k = g->K, lout = g->Lout, st = g->stride, pl = g->pad_l,
            dil = g->dil;
  void *xp = (void *)xb;
  void *args[] = {back ? &xp : &col, back ? &col : &xp, &nb, &cin, &c0, &cin_g, &l, &k, &lout, &st, &pl, &dil};
  return gpa__cu_launch1d(x, back ? GPA__K_CONV_COL2IM : GPA__K_CONV_IM2COL, back ? nb * cin_g * l : nb * g->R * lout,
                  args);
}

gpa_status gpa__conv_fwd_cu(const gpa_op_exec *x) {
  gpa_status dnn = gpa__conv_cudnn_cu(x, 0); /* cuDNN first where it takes the call */
  if (dnn != GPA_SKIP) return dnn;
  gpa__cu_ctx *C = gpa__cu_of(x);
  geom g;
  conv_geom(x, &x->inputs[0], &x->inputs[1], &x->outputs[0], &g);
  if (!conv_fits(&g)) return gpa__cu_fallback(x);
  if (x->inputs[0].dtype == GPA_BF16 && gpa__conv_tc_fits(x, &g)) return gpa__conv_fwd_tc_cu(x, &g);
  if (x->inputs[0].dtype == GPA_F32 && !g.nlc && gpa__conv_tc32_fits(x, &g)) return gpa__conv_fwd_tc32_cu(x, &g);
  if (gpa__conv_ig_fits(&g)) return gpa__conv_fwd_ig_cu(x, &g);
  if (g.nlc) return gpa__cu_fallback(x); /* the im2col path is ncl only */
  if (x->inputs[0].dtype == GPA_BF16) return gpa__conv_fwd_bf16_cu(x, &g);
  if (g.B == 0) return GPA_OK;
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  long long nbc = chunk_of(&g, 1);
  CUdeviceptr col = gpa__cu_scratch(x, (uint64_t)nbc * (uint64_t)(g.R * g.Lout) * sizeof(float));
  if (!col) return GPA_ENOMEM;
  const float *xs = x->in[0], *W = x->in[1];
  float *y = x->out[0];
  for (long long b0 = 0; b0 < g.B; b0 += nbc) {
    long long nb = g.B - b0 < nbc ? g.B - b0 : nbc;
    for (long long gi = 0; gi < g.G; gi++) {
      GPA__CU_TRY(im2col(x, &g, (void *)(uintptr_t)col, xs + b0 * g.Cin * g.L, nb, gi * g.cin_g, 0));
      GPA__CU_TRY(gpa__cu_blas_status(x,
                          C->blas.cublasSgemmStridedBatched(
                              h, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.Lout, (int)g.cout_g, (int)g.R, &one,
                              (const float *)(uintptr_t)col, (int)g.Lout, g.R * g.Lout, W + gi * g.cout_g * g.R,
                              (int)g.R, 0, &zero, y + (b0 * g.Cout + gi * g.cout_g) * g.Lout, (int)g.Lout,
                              g.Cout * g.Lout, (int)nb),
                          "conv1d_fwd: cublasSgemmStridedBatched"));
    }
  }
  if (x->n_inputs < 3) return GPA_OK;
  long long n = g.B * g.Cout * g.Lout, cout = g.Cout, lout = g.Lout;
  void *bp = x->in[2], *yp = y;
  void *args[] = {&yp, &bp, &n, &cout, &lout};
  return gpa__cu_launch1d(x, GPA__K_CONV_BIAS, n, args);
}

gpa_status gpa__conv_bwd_cu(const gpa_op_exec *x) {
  gpa_status dnn = gpa__conv_cudnn_cu(x, 1);
  if (dnn != GPA_SKIP) return dnn;
  gpa__cu_ctx *C = gpa__cu_of(x);
  geom g;
  conv_geom(x, &x->inputs[1], &x->inputs[2], &x->inputs[0], &g);
  if (!conv_fits(&g)) return gpa__cu_fallback(x);
  if (x->inputs[1].dtype == GPA_BF16 && gpa__conv_tc_fits(x, &g)) return gpa__conv_bwd_tc_cu(x, &g);
  if (x->inputs[1].dtype == GPA_F32 && !g.nlc && gpa__conv_tc32_fits(x, &g)) return gpa__conv_bwd_tc32_cu(x, &g);
  if (gpa__conv_ig_fits(&g)) return gpa__conv_bwd_ig_cu(x, &g);
  if (g.nlc) return gpa__cu_fallback(x); /* the im2col path is ncl only */
  if (x->inputs[1].dtype == GPA_BF16) return gpa__conv_bwd_bf16_cu(x, &g);
  const float *dy = x->in[0], *xs = x->in[1], *W = x->in[2];
  float *dx = x->out[0], *dW = x->out[1];
  GPA__CU_TRY(gpa__conv_db_cu(x, g.B, g.Cout, g.Lout));
  if (g.B == 0) return gpa__cu_zero_f32(x, dW, g.Cout * g.R);
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  long long nbc = chunk_of(&g, 2);
  uint64_t cb = (uint64_t)nbc * (uint64_t)(g.R * g.Lout) * sizeof(float);
  long long nw = g.cout_g * g.R;
  CUdeviceptr scr = gpa__cu_scratch(x, 2 * cb + (uint64_t)nbc * (uint64_t)nw * sizeof(float));
  if (!scr) return GPA_ENOMEM;
  float *col = (float *)(uintptr_t)scr, *dcol = (float *)(uintptr_t)(scr + cb), *part = dcol + cb / sizeof(float);
  for (long long b0 = 0; b0 < g.B; b0 += nbc) {
    long long nb = g.B - b0 < nbc ? g.B - b0 : nbc;
    for (long long gi = 0; gi < g.G; gi++) {
      const float *Wg = W + gi * g.cout_g * g.R;
      float *dWg = dW + gi * g.cout_g * g.R;
      GPA__CU_TRY(im2col(x, &g, col, xs + b0 * g.Cin * g.L, nb, gi * g.cin_g, 0));
      /* part_b = dy_bg col_b^T for every b of the chunk, then dW_g (+)= their sum in order */
      GPA__CU_TRY(gpa__cu_blas_status(x,
                          C->blas.cublasSgemmStridedBatched(
                              h, CUBLAS_OP_T, CUBLAS_OP_N, (int)g.R, (int)g.cout_g, (int)g.Lout, &one, col,
                              (int)g.Lout, g.R * g.Lout, dy + (b0 * g.Cout + gi * g.cout_g) * g.Lout, (int)g.Lout,
                              g.Cout * g.Lout, &zero, part, (int)g.R, nw, (int)nb),
                          "conv1d_bwd: cublasSgemmStridedBatched (dW)"));
      int acc = b0 > 0;
      void *dwp = dWg, *pp = part;
      void *sargs[] = {&dwp, &pp, &nb, &nw, &acc};
      GPA__CU_TRY(gpa__cu_launch1d(x, GPA__K_CONV_DW_SUM, nw, sargs));
      /* dcol_b = W_g^T dy_bg */
      GPA__CU_TRY(gpa__cu_blas_status(x,
                          C->blas.cublasSgemmStridedBatched(
                              h, CUBLAS_OP_N, CUBLAS_OP_T, (int)g.Lout, (int)g.R, (int)g.cout_g, &one,
                              dy + (b0 * g.Cout + gi * g.cout_g) * g.Lout, (int)g.Lout, g.Cout * g.Lout, Wg, (int)g.R,
                              0, &zero, dcol, (int)g.Lout, g.R * g.Lout, (int)nb),
                          "conv1d_bwd: cublasSgemmStridedBatched (dx)"));
      GPA__CU_TRY(im2col(x, &g, dcol, dx + b0 * g.Cin * g.L, nb, gi * g.cin_g, 1));
    }
  }
  return GPA_OK;
}
