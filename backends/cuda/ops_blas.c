/* linear and conv1d on CUDA: GEMMs through cuBLAS (loaded on first use),
 * the rest in kernels/cuda/linear.cu. Row-major operands are handed to
 * column-major cuBLAS as their transposes (a row-major A[m,n] is a
 * column-major [n,m] with leading dimension n).
 *
 * linear_fwd / linear_gelu_fwd take f32 or bf16 (x, W, b, y, pre of one
 * dtype; fp32 compute). Where cuBLASLt is available its BIAS epilogue fuses
 * the bias. GELU is ours: cuBLAS computes the GEMM (cublasSgemm /
 * cublasGemmEx into an fp32 accumulator) and one elementwise kernel applies
 * bias and GELU, as it does when cuBLASLt declines the shape. cuBLASLt's GELU
 * epilogues were tried and dropped: on an H100 (cuBLAS 13.1) their bf16
 * results were up to 5 bf16 ulps off where bias and pre-activation cancel
 * (docs/cuda.md). */
#include <limits.h>
#include <stdio.h>

#include <cublasLt.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernel_list.h"

#define THREADS 256
#define CONV_SCRATCH_CAP ((uint64_t)256 << 20)

static const float one = 1.0f, zero = 0.0f;

static gpa_status blas_st(const gpa_op_exec *x, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return GPA_OK;
  gpa__cu_ctx *C = gpa__cu_of(x);
  snprintf(x->msg, x->msg_size, "%s: %s", what, C->blas.cublasGetStatusString(s));
  return s == CUBLAS_STATUS_ALLOC_FAILED ? GPA_ENOMEM : GPA_EDEVICE;
}

static gpa_status launch1d(const gpa_op_exec *x, int id, long long n, void **args) {
  if (n <= 0) return GPA_OK;
  return gpa__cu_launch(x, id, gpa__cu_blocks(x, n, THREADS), 1, 1, THREADS, 1, 0, args);
}

static gpa_status zero_f32(const gpa_op_exec *x, void *p, long long n) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (n <= 0) return GPA_OK;
  return gpa__cu_check(C, C->cu.cuMemsetD32Async(GPA__DP(p), 0, (size_t)n, (CUstream)x->stream),
                       "cuMemsetD32Async", x->msg, x->msg_size);
}

static int fits(long long v) { return v >= 0 && v <= INT_MAX; }

static long long rows_of(const gpa_tensor *t) {
  long long n = 1;
  for (uint32_t i = 0; i + 1 < t->rank; i++) n *= t->shape[i];
  return n;
}

/* ---- linear ---------------------------------------------------------------------------------------- */

/* The forward with a bias as one cublasLtMatmul with the BIAS epilogue
 * (*done = 0: not fused, the caller's path runs). */
static gpa_status lin_fwd_lt(const gpa_op_exec *x, int bf, long long N, long long in, long long out, int *done) {
  void *b = x->in[2];
  *done = 0;
  /* no preference states the bias alignment: fuse only a 16-byte aligned bias */
  if ((uintptr_t)b & 15) return GPA_OK;
  int dt = bf ? CUDA_R_16BF : CUDA_R_32F;
  gpa__lt_gemm g = {CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)N, (int)in, dt, dt, x->in[1], x->in[0], (int)in,
                    (int)in, x->out[0], (int)out, CUBLASLT_EPILOGUE_BIAS, b};
  return gpa__cu_lt_matmul(x, &g, done);
}

static gpa_status lin_fwd(const gpa_op_exec *x, int gelu, void *pre) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  const gpa_tensor *xt = &x->inputs[0], *W = &x->inputs[1];
  long long N = rows_of(xt), in = xt->shape[xt->rank - 1], out = W->shape[0];
  if (!fits(N) || !fits(in) || !fits(out)) return gpa__cu_fallback(x);
  if (N == 0 || out == 0) return GPA_OK;
  int bf = xt->dtype == GPA_BF16, done = 0;
  if (in > 0 && !gelu && x->n_inputs > 2) {
    GPA__CU_TRY(lin_fwd_lt(x, bf, N, in, out, &done));
    if (done) return GPA_OK;
  }
  void *y = x->out[0], *b = x->n_inputs > 2 ? x->in[2] : NULL;
  int direct = !b && !gelu && !pre; /* the GEMM writes y itself */
  /* fp32 accumulator: y or pre (f32), scratch (bf16 with an epilogue) */
  void *acc = bf ? y : pre ? pre : y;
  if (bf && !direct) {
    CUdeviceptr s = gpa__cu_scratch(x, (uint64_t)(N * out) * sizeof(float));
    if (!s) return GPA_ENOMEM;
    acc = (void *)(uintptr_t)s;
  }
  if (in == 0) {
    if (bf && direct)
      GPA__CU_TRY(gpa__cu_check(C, C->cu.cuMemsetD16Async(GPA__DP(y), 0, (size_t)(N * out), (CUstream)x->stream),
                                "cuMemsetD16Async", x->msg, x->msg_size));
    else
      GPA__CU_TRY(zero_f32(x, acc, N * out));
  } else {
    cublasHandle_t h;
    GPA__CU_TRY(gpa__cu_blas(x, &h));
    if (bf)
      GPA__CU_TRY(blas_st(x,
                          C->blas.cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)N, (int)in, &one, x->in[1],
                                               CUDA_R_16BF, (int)in, x->in[0], CUDA_R_16BF, (int)in, &zero, acc,
                                               direct ? CUDA_R_16BF : CUDA_R_32F, (int)out, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT),
                          "linear: cublasGemmEx (bf16)"));
    else
      GPA__CU_TRY(blas_st(x, C->blas.cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)N, (int)in, &one,
                                                 x->in[1], (int)in, x->in[0], (int)in, &zero, acc, (int)out),
                          "linear: cublasSgemm"));
  }
  if (direct) return GPA_OK;
  void *args[] = {&y, &pre, &acc, &b, &N, &out, &gelu};
  return launch1d(x, bf ? GPA__K_LIN_EPI_BF : GPA__K_LIN_EPI, N * out, args);
}

static gpa_status lin_fwd_cu(const gpa_op_exec *x) {
  return lin_fwd(x, (int)gpa__cu_attr_i(x, "gelu", 0), NULL);
}
static gpa_status lin_gelu_fwd_cu(const gpa_op_exec *x) { return lin_fwd(x, 1, x->out[1]); }

/* dx = g W, dW = g^T x, db = column sums of g (fp32 operands; g [N,out]). */
static gpa_status lin_bwd_f32(const gpa_op_exec *x, const void *g, const void *xs, const void *Wp, void *dx,
                              void *dW, void *db, long long N, long long in, long long out) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (N == 0 || in == 0 || out == 0) {
    GPA__CU_TRY(zero_f32(x, dW, out * in));
    if (N == 0 && db) GPA__CU_TRY(zero_f32(x, db, out));
    if (N == 0 || out == 0 || !db) return out == 0 ? zero_f32(x, dx, N * in) : GPA_OK;
  } else {
    cublasHandle_t h;
    GPA__CU_TRY(gpa__cu_blas(x, &h));
    /* dx[N,in] = g[N,out] W[out,in] */
    GPA__CU_TRY(blas_st(x, C->blas.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)N, (int)out, &one,
                                               Wp, (int)in, g, (int)out, &zero, dx, (int)in),
                        "linear_bwd: cublasSgemm (dx)"));
    /* dW[out,in] = g^T x */
    GPA__CU_TRY(blas_st(x, C->blas.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)N, &one,
                                               xs, (int)in, g, (int)out, &zero, dW, (int)in),
                        "linear_bwd: cublasSgemm (dW)"));
  }
  if (!db) return GPA_OK;
  /* db = column sums of g, in row order (the masked-mean kernel with B = 1) */
  long long B = 1;
  void *mask = NULL, *gp = (void *)g;
  int i32 = 0, mean = 0;
  void *args[] = {&db, &gp, &mask, &i32, &B, &N, &out, &mean};
  return launch1d(x, GPA__K_SUM_OVER_L, out, args);
}

/* bf16 storage: bf16 GEMMs (tensor cores) with fp32 compute, dx rounded
 * once to bf16 by the GEMM, dW written fp32, db summed by our kernel from
 * the fp32 g. Without GELU, g = dy (bf16 already: the host's result up to
 * summation order). With GELU, g = dy gelu'(pre) is fp32; the GEMMs take it
 * as two bf16 halves (hi + lo, 2^-17 relative) so the result stays the
 * host's: dx = [hi | lo] [W; W] (one GEMM, K = 2 out, W copied twice into
 * scratch), dW = hi^T x + lo^T x (two GEMMs accumulating in fp32). */
static gpa_status lin_bwd_bf16(const gpa_op_exec *x, long long N, long long in, long long out, int gelu) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  void *dy = x->in[0], *xs = x->in[1], *Wp = x->in[2], *pre = gelu ? x->in[3] : NULL;
  void *dx = x->out[0], *dW = x->out[1], *db = x->n_outputs > 2 ? x->out[2] : NULL;
  if (db) {
    void *args[] = {&db, &dy, &pre, &N, &out};
    GPA__CU_TRY(launch1d(x, GPA__K_LIN_DB_BF, out, args));
  }
  if (out == 0)
    return N * in == 0 ? GPA_OK
                       : gpa__cu_check(C, C->cu.cuMemsetD16Async(GPA__DP(dx), 0, (size_t)(N * in), (CUstream)x->stream),
                                       "cuMemsetD16Async", x->msg, x->msg_size);
  if (N == 0 || in == 0) return zero_f32(x, dW, out * in);
  void *g = dy, *w2 = Wp;
  long long k = out, ldg = out; /* the GEMMs' K for dx; g's row stride */
  if (gelu) {
    uint64_t gb = ((uint64_t)(N * out) * 4 + 255) & ~(uint64_t)255, wb = (uint64_t)(out * in) * 2;
    CUdeviceptr s = gpa__cu_scratch(x, gb + 2 * wb);
    if (!s) return GPA_ENOMEM;
    g = (void *)(uintptr_t)s;
    w2 = (void *)(uintptr_t)(s + gb);
    k = ldg = 2 * out;
    void *args[] = {&g, &dy, &pre, &N, &out};
    GPA__CU_TRY(launch1d(x, GPA__K_LIN_DGELU_BF, N * out, args));
    for (int r = 0; r < 2; r++)
      GPA__CU_TRY(gpa__cu_check(C, C->cu.cuMemcpyDtoDAsync(s + gb + r * wb, GPA__DP(Wp), wb, (CUstream)x->stream),
                                "cuMemcpyDtoDAsync", x->msg, x->msg_size));
  }
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  /* dx[N,in] = g[N,k] W2[k,in] */
  GPA__CU_TRY(blas_st(x,
                      C->blas.cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)N, (int)k, &one, w2,
                                           CUDA_R_16BF, (int)in, g, CUDA_R_16BF, (int)ldg, &zero, dx, CUDA_R_16BF,
                                           (int)in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "linear_bwd: cublasGemmEx (dx, bf16)"));
  /* dW[out,in] = g^T x, fp32 C; with GELU the lo half is added to the hi half's result */
  for (int half = 0; half < (gelu ? 2 : 1); half++) {
    const void *gh = (const char *)g + (size_t)(half * out) * 2;
    GPA__CU_TRY(blas_st(x,
                        C->blas.cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)N, &one, xs,
                                             CUDA_R_16BF, (int)in, gh, CUDA_R_16BF, (int)ldg, half ? &one : &zero,
                                             dW, CUDA_R_32F, (int)in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "linear_bwd: cublasGemmEx (dW, bf16)"));
  }
  return GPA_OK;
}

static gpa_status lin_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *xt = &x->inputs[1], *W = &x->inputs[2];
  long long N = rows_of(xt), in = xt->shape[xt->rank - 1], out = W->shape[0];
  int gelu = (int)gpa__cu_attr_i(x, "gelu", 0);
  if (!fits(N) || !fits(in) || !fits(out)) return gpa__cu_fallback(x);
  if (xt->dtype == GPA_BF16) return lin_bwd_bf16(x, N, in, out, gelu);
  void *g = x->in[0];
  if (gelu && N * out > 0) {
    CUdeviceptr s = gpa__cu_scratch(x, (uint64_t)(N * out) * sizeof(float));
    if (!s) return GPA_ENOMEM;
    void *pre = x->in[3], *dy = x->in[0];
    g = (void *)(uintptr_t)s;
    long long n = N * out;
    int approx = 1;
    void *args[] = {&g, &pre, &dy, &n, &approx};
    GPA__CU_TRY(launch1d(x, GPA__K_GELU_BWD, n, args));
  }
  return lin_bwd_f32(x, g, x->in[1], x->in[2], x->out[0], x->out[1], x->n_outputs > 2 ? x->out[2] : NULL, N, in,
                     out);
}

/* ---- conv1d ---------------------------------------------------------------------------------------- */

typedef struct geom {
  long long B, Cin, L, Cout, K, stride, pad_l, dil, G, Lout, cin_g, cout_g, R;
} geom;

static void conv_geom(const gpa_op_exec *x, const gpa_tensor *xt, const gpa_tensor *W, long long lout, geom *g) {
  g->B = xt->shape[0];
  g->Cin = xt->shape[1];
  g->L = xt->shape[2];
  g->Cout = W->shape[0];
  g->K = W->shape[2];
  g->stride = gpa__cu_attr_i(x, "stride", 1);
  g->dil = gpa__cu_attr_i(x, "dilation", 1);
  g->G = gpa__cu_attr_i(x, "groups", 1);
  g->pad_l = gpa__cu_attr_i(x, "causal", 0) ? g->dil * (g->K - 1) : gpa__cu_attr_i(x, "padding", 0);
  g->Lout = lout;
  g->cin_g = g->Cin / g->G;
  g->cout_g = g->Cout / g->G;
  g->R = g->cin_g * g->K;
}

static int conv_fits(const geom *g) {
  return fits(g->B) && fits(g->Lout) && fits(g->R) && fits(g->cout_g) && fits(g->R * g->Lout) &&
         fits(g->Cout * g->Lout);
}

/* Batches per chunk so that `bufs` column matrices fit the cap. */
static long long chunk_of(const geom *g, int bufs) {
  uint64_t per = (uint64_t)g->R * (uint64_t)g->Lout * sizeof(float) * (uint64_t)bufs;
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
  return launch1d(x, back ? GPA__K_CONV_COL2IM : GPA__K_CONV_IM2COL, back ? nb * cin_g * l : nb * g->R * lout,
                  args);
}

static gpa_status conv_fwd_cu(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  geom g;
  conv_geom(x, &x->inputs[0], &x->inputs[1], x->outputs[0].shape[2], &g);
  if (!conv_fits(&g)) return gpa__cu_fallback(x);
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
      GPA__CU_TRY(blas_st(x,
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
  return launch1d(x, GPA__K_CONV_BIAS, n, args);
}

static gpa_status conv_bwd_cu(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  geom g;
  conv_geom(x, &x->inputs[1], &x->inputs[2], x->inputs[0].shape[2], &g);
  if (!conv_fits(&g)) return gpa__cu_fallback(x);
  const float *dy = x->in[0], *xs = x->in[1], *W = x->in[2];
  float *dx = x->out[0], *dW = x->out[1];
  void *db = x->n_outputs > 2 ? x->out[2] : NULL;
  if (db) {
    long long nb = g.B, cout = g.Cout, lout = g.Lout;
    void *dyp = (void *)dy;
    void *args[] = {&db, &dyp, &nb, &cout, &lout};
    GPA__CU_TRY(launch1d(x, GPA__K_CONV_DB, cout, args));
  }
  if (g.B == 0) return zero_f32(x, dW, g.Cout * g.R);
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  long long nbc = chunk_of(&g, 2);
  uint64_t cb = (uint64_t)nbc * (uint64_t)(g.R * g.Lout) * sizeof(float);
  CUdeviceptr scr = gpa__cu_scratch(x, 2 * cb);
  if (!scr) return GPA_ENOMEM;
  float *col = (float *)(uintptr_t)scr, *dcol = (float *)(uintptr_t)(scr + cb);
  for (long long b0 = 0; b0 < g.B; b0 += nbc) {
    long long nb = g.B - b0 < nbc ? g.B - b0 : nbc;
    for (long long gi = 0; gi < g.G; gi++) {
      const float *Wg = W + gi * g.cout_g * g.R;
      float *dWg = dW + gi * g.cout_g * g.R;
      GPA__CU_TRY(im2col(x, &g, col, xs + b0 * g.Cin * g.L, nb, gi * g.cin_g, 0));
      /* dW_g += dy_bg col_b^T, batch by batch in order (deterministic) */
      for (long long b = 0; b < nb; b++) {
        const float *dyb = dy + ((b0 + b) * g.Cout + gi * g.cout_g) * g.Lout;
        const float *beta = (b0 + b == 0) ? &zero : &one;
        GPA__CU_TRY(blas_st(x,
                            C->blas.cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)g.R, (int)g.cout_g, (int)g.Lout,
                                                &one, col + b * g.R * g.Lout, (int)g.Lout, dyb, (int)g.Lout, beta,
                                                dWg, (int)g.R),
                            "conv1d_bwd: cublasSgemm (dW)"));
      }
      /* dcol_b = W_g^T dy_bg */
      GPA__CU_TRY(blas_st(x,
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

const gpa__cu_impl gpa__cu_ops_blas[] = {
    {"linear_fwd", lin_fwd_cu},
    {"linear_gelu_fwd", lin_gelu_fwd_cu},
    {"linear_bwd", lin_bwd_cu},
    {"linear_bwd_nobias", lin_bwd_cu},
    {"conv1d_fwd", conv_fwd_cu},
    {"conv1d_bwd", conv_bwd_cu},
    {"conv1d_bwd_nobias", conv_bwd_cu},
    {NULL, NULL},
};
