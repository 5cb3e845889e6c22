/* cuBLAS subset against a naive GEMM: every transpose combination, odd sizes,
 * padded leading dimensions, fp32/fp16/bf16 inputs with fp32 compute, 16-bit
 * outputs, strided batches, argument errors and out-of-bounds operands.
 * The library is dlopened and resolved by real names, as the backend does. */
#define _GNU_SOURCE
#include <cublas_api.h>
#include <dlfcn.h>
#include <math.h>
#include "sim_test.h"

typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                                   const float *, int, const float *, int, const float *, float *, int);
typedef cublasStatus_t (*gemmex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                    const void *, cudaDataType, int, const void *, cudaDataType, int, const void *,
                                    void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*gemmsb_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void *, const void *, cudaDataType, int, long long, const void *,
                                    cudaDataType, int, long long, const void *, void *, cudaDataType, int, long long,
                                    int, cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*ssb_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                                 const float *, int, long long, const float *, int, long long, const float *, float *,
                                 int, long long, int);
typedef const char *(*str_fn)(cublasStatus_t);
typedef cublasStatus_t (*ws_fn)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*math_fn)(cublasHandle_t, cublasMath_t);

static struct {
  create_fn create;
  destroy_fn destroy;
  stream_fn set_stream;
  sgemm_fn sgemm;
  gemmex_fn gemmex;
  gemmsb_fn gemmsb;
  ssb_fn ssb;
  str_fn status_string, status_name;
  ws_fn set_ws;
  math_fn set_math;
} B;

static void *sym(void *h, const char *n) {
  void *p = dlsym(h, n);
  if (!p) {
    fprintf(stderr, "missing %s\n", n);
    exit(1);
  }
  return p;
}

static cublasHandle_t open_blas(void) {
  void *h = dlopen(GPA_SIM_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  B.create = (create_fn)sym(h, "cublasCreate_v2");
  B.destroy = (destroy_fn)sym(h, "cublasDestroy_v2");
  B.set_stream = (stream_fn)sym(h, "cublasSetStream_v2");
  B.sgemm = (sgemm_fn)sym(h, "cublasSgemm_v2");
  B.gemmex = (gemmex_fn)sym(h, "cublasGemmEx");
  B.gemmsb = (gemmsb_fn)sym(h, "cublasGemmStridedBatchedEx");
  B.ssb = (ssb_fn)sym(h, "cublasSgemmStridedBatched");
  B.status_string = (str_fn)sym(h, "cublasGetStatusString");
  B.status_name = (str_fn)sym(h, "cublasGetStatusName");
  B.set_ws = (ws_fn)sym(h, "cublasSetWorkspace_v2");
  B.set_math = (math_fn)sym(h, "cublasSetMathMode");
  cublasHandle_t hb;
  CHECK(B.create(&hb) == CUBLAS_STATUS_NOT_INITIALIZED); /* no context yet */
  sim_setup();
  CHECK(B.create(&hb) == CUBLAS_STATUS_SUCCESS);
  return hb;
}

static float half_round(float f, cudaDataType t); /* value after a trip through t */

/* Column-major reference with double accumulation. */
static void ref_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                     float beta, float *c, int ldc) {
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0;
      for (int l = 0; l < k; l++) {
        double av = ta ? a[l + (size_t)i * lda] : a[i + (size_t)l * lda];
        double bv = tb ? b[j + (size_t)l * ldb] : b[l + (size_t)j * ldb];
        s += av * bv;
      }
      float *cij = c + i + (size_t)j * ldc;
      *cij = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *cij));
    }
}

static uint16_t to16(float f, cudaDataType t) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (t == CUDA_R_16BF) return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  /* fp16 for values the tests use (normal range): round the mantissa */
  uint32_t s = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
  if (a < 0x38800000u) return (uint16_t)s; /* tests avoid subnormals: flush */
  uint32_t r = a + 0xfff + ((a >> 13) & 1);
  return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}
static float from16(uint16_t h, cudaDataType t) {
  uint32_t u;
  if (t == CUDA_R_16BF) u = (uint32_t)h << 16;
  else {
    uint32_t e = (h >> 10) & 0x1f;
    u = ((uint32_t)(h & 0x8000) << 16) | (e ? ((e + 112) << 23) | ((uint32_t)(h & 0x3ff) << 13) : 0);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float half_round(float f, cudaDataType t) { return t == CUDA_R_32F ? f : from16(to16(f, t), t); }

/* One GEMM through GemmEx (or Sgemm for fp32 when `use_sgemm`), checked. */
static void one(cublasHandle_t h, int ta, int tb, int m, int n, int k, int pad, cudaDataType it, cudaDataType ct,
                int use_sgemm) {
  int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
  int lda = (ar > 1 ? ar : 1) + pad, ldb = (br > 1 ? br : 1) + pad, ldc = m + pad; /* cuBLAS: ld >= max(1, rows) */
  size_t na = (size_t)lda * ac, nb = (size_t)ldb * bc, nc = (size_t)ldc * n;
  size_t is = it == CUDA_R_32F ? 4 : 2, cs = ct == CUDA_R_32F ? 4 : 2;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *got = malloc(nc * 4);
  unsigned char *ha = malloc(na * is), *hb = malloc(nb * is), *hc = malloc(nc * cs);
  for (size_t i = 0; i < na; i++) a[i] = half_round((float)((int)(i * 7 % 11) - 5) / 4.0f, it);
  for (size_t i = 0; i < nb; i++) b[i] = half_round((float)((int)(i * 5 % 13) - 6) / 8.0f, it);
  for (size_t i = 0; i < nc; i++) c[i] = half_round((float)((int)(i % 5) - 2), ct);
  for (size_t i = 0; i < na; i++) is == 4 ? memcpy(ha + 4 * i, a + i, 4) : (void)(((uint16_t *)ha)[i] = to16(a[i], it));
  for (size_t i = 0; i < nb; i++) is == 4 ? memcpy(hb + 4 * i, b + i, 4) : (void)(((uint16_t *)hb)[i] = to16(b[i], it));
  for (size_t i = 0; i < nc; i++) cs == 4 ? memcpy(hc + 4 * i, c + i, 4) : (void)(((uint16_t *)hc)[i] = to16(c[i], ct));
  CUdeviceptr da, db, dc;
  CK(cuMemAlloc(&da, na ? na * is : 4)); /* k == 0: empty operands */
  CK(cuMemAlloc(&db, nb ? nb * is : 4));
  CK(cuMemAlloc(&dc, nc * cs));
  CK(cuMemcpyHtoD(da, ha, na * is));
  CK(cuMemcpyHtoD(db, hb, nb * is));
  CK(cuMemcpyHtoD(dc, hc, nc * cs));
  float alpha = 1.5f, beta = (m + n) % 2 ? 0.5f : 0.0f;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t st;
  if (use_sgemm)
    st = B.sgemm(h, oa, ob, m, n, k, &alpha, (const float *)da, lda, (const float *)db, ldb, &beta, (float *)dc, ldc);
  else
    st = B.gemmex(h, oa, ob, m, n, k, &alpha, (const void *)da, it, lda, (const void *)db, it, ldb, &beta, (void *)dc,
                  ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  CHECK(st == CUBLAS_STATUS_SUCCESS);
  CK(cuCtxSynchronize()); /* the GEMM may be on a non-blocking stream */
  CK(cuMemcpyDtoH(hc, dc, nc * cs));
  for (size_t i = 0; i < nc; i++) got[i] = cs == 4 ? ((float *)hc)[i] : from16(((uint16_t *)hc)[i], ct);
  ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double tol = ct == CUDA_R_32F ? 1e-5 : ct == CUDA_R_16F ? 1e-3 : 8e-3;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float r = c[i + (size_t)j * ldc], g = got[i + (size_t)j * ldc];
      if (fabs(r - g) > tol * (1.0 + fabs(r))) {
        fprintf(stderr, "mismatch ta=%d tb=%d m=%d n=%d k=%d type=%d/%d at (%d,%d): %g vs %g\n", ta, tb, m, n, k,
                (int)it, (int)ct, i, j, g, r);
        exit(1);
      }
    }
  /* padding rows of C are untouched */
  for (int j = 0; j < n; j++)
    for (int i = m; i < ldc; i++) CHECK(got[i + (size_t)j * ldc] == c[i + (size_t)j * ldc]);
  CK(cuMemFree(da));
  CK(cuMemFree(db));
  CK(cuMemFree(dc));
  free(a), free(b), free(c), free(got), free(ha), free(hb), free(hc);
}

static const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 1, 31}, {3, 40, 1}, {16, 16, 0}};

static int t_sgemm(void) {
  cublasHandle_t h = open_blas();
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(B.set_stream(h, (cudaStream_t)s) == CUBLAS_STATUS_SUCCESS);
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int pad = 0; pad < 4; pad += 3)
          one(h, ta, tb, sizes[z][0], sizes[z][1], sizes[z][2], pad, CUDA_R_32F, CUDA_R_32F, 1);
  CHECK(B.destroy(h) == CUBLAS_STATUS_SUCCESS);
  CK(cuStreamDestroy(s));
  sim_teardown();
  return 0;
}

static int t_gemmex(void) {
  cublasHandle_t h = open_blas();
  static const cudaDataType in[][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_32F},
                                       {CUDA_R_16F, CUDA_R_16F}, {CUDA_R_16BF, CUDA_R_16BF}};
  CHECK(B.set_math(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
  for (size_t t = 0; t < sizeof in / sizeof in[0]; t++)
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) one(h, ta, tb, sizes[z][0], sizes[z][1], sizes[z][2], 1, in[t][0], in[t][1], 0);
  CHECK(B.destroy(h) == CUBLAS_STATUS_SUCCESS);
  sim_teardown();
  return 0;
}

static int t_batched(void) {
  cublasHandle_t h = open_blas();
  enum { M = 9, N = 6, K = 5, BATCH = 3 };
  long long sa = M * K + 4, sb = K * N + 2, sc = M * N + 1;
  float a[(M * K + 4) * BATCH], b[(K * N + 2) * BATCH], c[(M * N + 1) * BATCH], ref[(M * N + 1) * BATCH];
  for (size_t i = 0; i < sizeof a / 4; i++) a[i] = (float)(i % 7) - 3;
  for (size_t i = 0; i < sizeof b / 4; i++) b[i] = (float)(i % 5) - 2;
  for (size_t i = 0; i < sizeof c / 4; i++) c[i] = ref[i] = (float)(i % 3);
  CUdeviceptr da, db, dc;
  CK(cuMemAlloc(&da, sizeof a));
  CK(cuMemAlloc(&db, sizeof b));
  CK(cuMemAlloc(&dc, sizeof c));
  CK(cuMemcpyHtoD(da, a, sizeof a));
  CK(cuMemcpyHtoD(db, b, sizeof b));
  for (int api = 0; api < 2; api++) {
    CK(cuMemcpyHtoD(dc, c, sizeof c));
    float alpha = 2.0f, beta = 1.0f;
    cublasStatus_t st =
        api == 0 ? B.ssb(h, CUBLAS_OP_N, CUBLAS_OP_T, M, N, K, &alpha, (const float *)da, M, sa, (const float *)db, N,
                         sb, &beta, (float *)dc, M, sc, BATCH)
                 : B.gemmsb(h, CUBLAS_OP_N, CUBLAS_OP_T, M, N, K, &alpha, (const void *)da, CUDA_R_32F, M, sa,
                            (const void *)db, CUDA_R_32F, N, sb, &beta, (void *)dc, CUDA_R_32F, M, sc, BATCH,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CHECK(st == CUBLAS_STATUS_SUCCESS);
    float got[sizeof c / 4];
    CK(cuMemcpyDtoH(got, dc, sizeof c));
    memcpy(ref, c, sizeof c);
    for (int bi = 0; bi < BATCH; bi++)
      ref_gemm(0, 1, M, N, K, alpha, a + bi * sa, M, b + bi * sb, N, beta, ref + bi * sc, M);
    for (size_t i = 0; i < sizeof c / 4; i++) CHECK(fabsf(got[i] - ref[i]) <= 1e-4f * (1 + fabsf(ref[i])));
  }
  CK(cuMemFree(da));
  CK(cuMemFree(db));
  CK(cuMemFree(dc));
  CHECK(B.destroy(h) == CUBLAS_STATUS_SUCCESS);
  sim_teardown();
  return 0;
}

static int t_errors(void) {
  cublasHandle_t h = open_blas();
  CUdeviceptr d, ws;
  float one_f = 1.0f, zero = 0.0f;
  CK(cuMemAlloc(&d, 64 * sizeof(float)));
  CK(cuMemAlloc(&ws, 1 << 20));
  CHECK(B.set_ws(h, (void *)ws, 1 << 20) == CUBLAS_STATUS_SUCCESS);
  CHECK(B.set_ws(h, (void *)ws, 2 << 20) == CUBLAS_STATUS_INVALID_VALUE);
  const float *p = (const float *)d;
  CHECK(B.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one_f, p, 7, p, 8, &zero, (float *)d, 8) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(B.sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 8, 8, 4, &one_f, p, 3, p, 8, &zero, (float *)d, 8) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(B.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 8, 8, &one_f, p, 8, p, 8, &zero, (float *)d, 8) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(B.gemmex(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one_f, p, CUDA_R_32F, 4, p, CUDA_R_32F, 4, &zero, (void *)d,
                 CUDA_R_32F, 4, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(B.gemmex(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one_f, p, CUDA_R_16F, 4, p, CUDA_R_16BF, 4, &zero, (void *)d,
                 CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(strcmp(B.status_name(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0);
  CHECK(strstr(B.status_string(CUBLAS_STATUS_NOT_SUPPORTED), "not supported") != NULL);
  /* a 16x16 operand in a 64-float allocation: the GEMM faults on the stream */
  CHECK(B.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one_f, p, 16, p, 16, &zero, (float *)d, 16) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(sim_msg_has("cuBLAS GEMM: matrix A"));
  CK(cuDevicePrimaryCtxReset(0));
  CHECK(B.destroy(h) == CUBLAS_STATUS_SUCCESS);
  sim_teardown();
  return 0;
}

int main(int argc, char **argv) {
  static const sim_case cases[] = {
      {"sgemm", t_sgemm}, {"gemmex", t_gemmex}, {"batched", t_batched}, {"errors", t_errors},
  };
  return sim_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
