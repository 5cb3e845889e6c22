/* linear on CUDA: GEMMs through cuBLAS (loaded on first use),
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
#include "ops/cuda_kernels.h"
#include "ops/linear/linear.h"

static const float one = 1.0f, zero = 0.0f;

static int fits(long long v) { return v >= 0 && v <= INT_MAX; }

static long long rows_of(const gpa_tensor *t) {
  long long n = 1;
  for (uint32_t i = 0; i + 1 < t->rank; i++) n *= t->shape[i];
  return n;
}

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
      GPA__CU_TRY(gpa__cu_zero_f32(x, acc, N * out));
  } else {
    cublasHandle_t h;
    GPA__CU_TRY(gpa__cu_blas(x, &h));
    if (bf)
      GPA__CU_TRY(gpa__cu_blas_status(x,
                          C->blas.cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)N, (int)in, &one, x->in[1],
                                               CUDA_R_16BF, (int)in, x->in[0], CUDA_R_16BF, (int)in, &zero, acc,
                                               direct ? CUDA_R_16BF : CUDA_R_32F, (int)out, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT),
                          "linear: cublasGemmEx (bf16)"));
    else
      GPA__CU_TRY(gpa__cu_blas_status(x, C->blas.cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)out, (int)N, (int)in, &one,
                                                 x->in[1], (int)in, x->in[0], (int)in, &zero, acc, (int)out),
                          "linear: cublasSgemm"));
  }
  if (direct) return GPA_OK;
  void *args[] = {&y, &pre, &acc, &b, &N, &out, &gelu};
  return gpa__cu_launch1d(x, bf ? GPA__K_LIN_EPI_BF : GPA__K_LIN_EPI, N * out, args);
}

gpa_status gpa__lin_fwd_cu(const gpa_op_exec *x) {
  return lin_fwd(x, (int)((const gpa__lin_params *)x->params)->gelu, NULL);
}
gpa_status gpa__lin_gelu_fwd_cu(const gpa_op_exec *x) { return lin_fwd(x, 1, x->out[1]); }

/* db = column sums of g [N, out] (kernels/cuda/linear.cu col_sum): blocks
 * of 32 x 32 threads per 32 columns. Below 64 such tiles the rows split
 * into chunks of at least 32 rows (one a thread row), about 128 blocks in
 * all, and more for many rows (at most 128 rows a thread, 1024 blocks),
 * whose partials the tile's last block adds in chunk order: 3 blocks
 * walking 4096 rows took 20 us for the main job's bias of 96 on an H100
 * (issue 25). The chunks depend on the shape alone (deterministic). */
#define DB_TILES_WHOLE 64
#define DB_SPLIT_BLOCKS 128
#define DB_SPLIT_MAX_BLOCKS 1024

static long long db_chunks(const gpa_op_exec *x, long long N, long long out) {
  long long tiles = (out + 31) / 32, most = (N + 31) / 32;
  if (tiles == 0 || tiles >= DB_TILES_WHOLE || most <= 1 || !gpa__cu_split_sums(x)) return 1;
  long long c = (DB_SPLIT_BLOCKS + tiles - 1) / tiles, many = (N + 4095) / 4096;
  if (c < many) c = many < DB_SPLIT_MAX_BLOCKS / tiles ? many : DB_SPLIT_MAX_BLOCKS / tiles;
  return c < most ? c : most;
}

/* Scratch bytes of db's partials (0: one chunk, none). */
static uint64_t db_scratch(const gpa_op_exec *x, long long N, long long out) {
  long long c = db_chunks(x, N, out);
  return c > 1 ? (uint64_t)(c * out) * sizeof(double) : 0;
}

/* id: GPA__K_LIN_COLSUM (g f32) or GPA__K_LIN_DB_BF (g bf16, times
 * gelu'(pre) when pre); the partials go `skip` bytes into the scratch,
 * after what the op keeps there (the caller asked for skip + db_scratch). */
static gpa_status lin_db(const gpa_op_exec *x, int id, void *db, const void *g, const void *pre, long long N,
                         long long out, uint64_t skip) {
  long long chunks = db_chunks(x, N, out), per = chunks > 1 ? (N + chunks - 1) / chunks : N;
  if (chunks > 1) chunks = (N + per - 1) / per;
  CUdeviceptr part = 0, ctr = 0;
  if (chunks > 1) {
    CUdeviceptr s = gpa__cu_scratch(x, skip + db_scratch(x, N, out));
    if (!s || !(ctr = gpa__cu_counters(x))) return GPA_ENOMEM;
    part = s + skip;
  }
  void *gp = (void *)g, *pp = (void *)pre;
  void *a32[] = {&db, &gp, &N, &out, &per, &part, &ctr}, *abf[] = {&db, &gp, &pp, &N, &out, &per, &part, &ctr};
  return gpa__cu_launch(x, id, (unsigned)((out + 31) / 32), (unsigned)chunks, 1, 32, 32, 32 * 32 * sizeof(double),
                        id == GPA__K_LIN_COLSUM ? a32 : abf);
}

/* dx = g W, dW = g^T x, db = column sums of g (fp32 operands; g [N,out];
 * db_skip: scratch bytes that hold g, else 0). */
static gpa_status lin_bwd_f32(const gpa_op_exec *x, const void *g, const void *xs, const void *Wp, void *dx,
                              void *dW, void *db, long long N, long long in, long long out, uint64_t db_skip) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (N == 0 || in == 0 || out == 0) {
    GPA__CU_TRY(gpa__cu_zero_f32(x, dW, out * in));
    if (N == 0 && db) GPA__CU_TRY(gpa__cu_zero_f32(x, db, out));
    if (N == 0 || out == 0 || !db) return out == 0 ? gpa__cu_zero_f32(x, dx, N * in) : GPA_OK;
  } else {
    cublasHandle_t h;
    GPA__CU_TRY(gpa__cu_blas(x, &h));
    /* dx[N,in] = g[N,out] W[out,in] */
    GPA__CU_TRY(gpa__cu_blas_status(x, C->blas.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)N, (int)out, &one,
                                               Wp, (int)in, g, (int)out, &zero, dx, (int)in),
                        "linear_bwd: cublasSgemm (dx)"));
    /* dW[out,in] = g^T x */
    GPA__CU_TRY(gpa__cu_blas_status(x, C->blas.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)N, &one,
                                               xs, (int)in, g, (int)out, &zero, dW, (int)in),
                        "linear_bwd: cublasSgemm (dW)"));
  }
  if (!db) return GPA_OK;
  return lin_db(x, GPA__K_LIN_COLSUM, db, g, NULL, N, out, db_skip);
}

/* bf16 storage: bf16 GEMMs (tensor cores) with fp32 compute, dx rounded
 * once to bf16 by the GEMM, dW written fp32, db summed by our kernel from
 * the fp32 g. Without GELU, g = dy (bf16 already: the host's result up to
 * summation order). With GELU, g = dy gelu'(pre) is fp32; the GEMMs take it
 * as two bf16 halves (hi + lo, 2^-17 relative) so the result stays the
 * host's: dx = [hi | lo] [W; W] (one GEMM, K = 2 out, W copied twice into
 * scratch), dW = hi^T x + lo^T x (two GEMMs accumulating in fp32). With
 * the op's g_bf16 = 1 the GEMMs take hi alone (PyTorch's rounding: one GEMM
 * each, half the tensor work and scratch of the exact mode). */
static gpa_status lin_bwd_bf16(const gpa_op_exec *x, long long N, long long in, long long out, int gelu,
                               int g_bf16) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  void *dy = x->in[0], *xs = x->in[1], *Wp = x->in[2], *pre = gelu ? x->in[3] : NULL;
  void *dx = x->out[0], *dW = x->out[1], *db = x->n_outputs > 2 ? x->out[2] : NULL;
  if (db) GPA__CU_TRY(lin_db(x, GPA__K_LIN_DB_BF, db, dy, pre, N, out, 0)); /* before g2 takes the scratch */
  if (out == 0)
    return N * in == 0 ? GPA_OK
                       : gpa__cu_check(C, C->cu.cuMemsetD16Async(GPA__DP(dx), 0, (size_t)(N * in), (CUstream)x->stream),
                                       "cuMemsetD16Async", x->msg, x->msg_size);
  if (N == 0 || in == 0) return gpa__cu_zero_f32(x, dW, out * in);
  void *g = dy, *w2 = Wp;
  long long k = out, ldg = out; /* the GEMMs' K for dx; g's row stride */
  int halves = g_bf16 ? 1 : 2;
  if (gelu) {
    /* g2 [N, halves out]; for two halves, W stacked twice after it */
    uint64_t gb = ((uint64_t)(N * out) * 2 * (uint64_t)halves + 255) & ~(uint64_t)255, wb = (uint64_t)(out * in) * 2;
    CUdeviceptr s = gpa__cu_scratch(x, gb + (halves == 2 ? 2 * wb : 0));
    if (!s) return GPA_ENOMEM;
    g = (void *)(uintptr_t)s;
    void *args[] = {&g, &dy, &pre, &N, &out, &halves};
    GPA__CU_TRY(gpa__cu_launch1d(x, GPA__K_LIN_DGELU_BF, N * out, args));
    if (halves == 2) {
      w2 = (void *)(uintptr_t)(s + gb);
      k = ldg = 2 * out;
      for (int r = 0; r < 2; r++)
        GPA__CU_TRY(gpa__cu_check(C, C->cu.cuMemcpyDtoDAsync(s + gb + r * wb, GPA__DP(Wp), wb, (CUstream)x->stream),
                                  "cuMemcpyDtoDAsync", x->msg, x->msg_size));
    }
  }
  cublasHandle_t h;
  GPA__CU_TRY(gpa__cu_blas(x, &h));
  /* dx[N,in] = g[N,k] W2[k,in] */
  GPA__CU_TRY(gpa__cu_blas_status(x,
                      C->blas.cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)in, (int)N, (int)k, &one, w2,
                                           CUDA_R_16BF, (int)in, g, CUDA_R_16BF, (int)ldg, &zero, dx, CUDA_R_16BF,
                                           (int)in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "linear_bwd: cublasGemmEx (dx, bf16)"));
  /* dW[out,in] = g^T x, fp32 C; with GELU the lo half is added to the hi half's result */
  for (int half = 0; half < (gelu && halves == 2 ? 2 : 1); half++) {
    const void *gh = (const char *)g + (size_t)(half * out) * 2;
    GPA__CU_TRY(gpa__cu_blas_status(x,
                        C->blas.cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)in, (int)out, (int)N, &one, xs,
                                             CUDA_R_16BF, (int)in, gh, CUDA_R_16BF, (int)ldg, half ? &one : &zero,
                                             dW, CUDA_R_32F, (int)in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "linear_bwd: cublasGemmEx (dW, bf16)"));
  }
  return GPA_OK;
}

gpa_status gpa__lin_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *xt = &x->inputs[1], *W = &x->inputs[2];
  long long N = rows_of(xt), in = xt->shape[xt->rank - 1], out = W->shape[0];
  int gelu = (int)((const gpa__lin_params *)x->params)->gelu;
  if (!fits(N) || !fits(in) || !fits(out)) return gpa__cu_fallback(x);
  if (xt->dtype == GPA_BF16)
    return lin_bwd_bf16(x, N, in, out, gelu, (int)((const gpa__lin_params *)x->params)->g_bf16);
  void *g = x->in[0];
  uint64_t skip = 0; /* scratch bytes holding g */
  if (gelu && N * out > 0) {
    skip = ((uint64_t)(N * out) * sizeof(float) + 255) & ~(uint64_t)255;
    /* g, then db's partials: one request, so the block cannot move under g */
    CUdeviceptr s = gpa__cu_scratch(x, skip + db_scratch(x, N, out));
    if (!s) return GPA_ENOMEM;
    void *pre = x->in[3], *dy = x->in[0];
    g = (void *)(uintptr_t)s;
    long long n = N * out;
    int approx = 1, vec = ((uintptr_t)g | (uintptr_t)pre | (uintptr_t)dy) % 16 == 0;
    void *args[] = {&g, &pre, &dy, &n, &approx, &vec};
    GPA__CU_TRY(gpa__cu_launch1d(x, GPA__K_GELU_BWD, vec ? (n + 3) / 4 : n, args));
  }
  return lin_bwd_f32(x, g, x->in[1], x->in[2], x->out[0], x->out[1], x->n_outputs > 2 ? x->out[2] : NULL, N, in,
                     out, skip);
}
