/* gpa-sim cuBLAS subset: the GEMM calls the CUDA backend uses, exported under
 * cuBLAS's real names (cublas_v2.h maps cublasCreate -> cublasCreate_v2, ...)
 * so the backend can dlopen this library instead of libcublas.so.13 and
 * resolve it with dlsym.
 *
 * A GEMM is queued on the handle's stream (through the driver's hooks) and
 * runs there as host code: operands are converted to fp32 where they are
 * fp16/bf16, multiplied by OpenBLAS (column-major, like cuBLAS), and C is
 * rounded back to its type. Argument errors are reported at the call, as
 * cuBLAS does; operands outside their device allocations fault on the stream
 * (sticky CUDA_ERROR_ILLEGAL_ADDRESS), as a GPU kernel would. alpha/beta are
 * read at the call in host pointer mode and when the GEMM runs in device
 * pointer mode. Only fp32 compute types are supported. */
#include <cblas.h>
#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpa_sim_hooks.h"
#include "half16.h"

#define EXPORT __attribute__((visibility("default")))

struct cublasContext {
  CUstream stream;
  void *workspace;
  size_t workspace_size;
  cublasMath_t math;
  cublasPointerMode_t pmode;
};

typedef struct gemm_task {
  cublasOperation_t ta, tb;
  int m, n, k, batch;
  float alpha, beta;
  const float *alpha_dev, *beta_dev;
  const void *a, *b;
  void *c;
  cudaDataType at, bt, ct;
  int lda, ldb, ldc;
  long long sa, sb, sc;
} gemm_task;

static int range_ok(const void *p, cudaDataType t, long rows, long cols, long ld, const char *what, char *why,
                    size_t n) {
  if (rows == 0 || cols == 0) return 1;
  size_t bytes = type_size(t) * (size_t)(ld * (cols - 1) + rows);
  char w[400];
  if (gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)p, bytes, w, sizeof w)) return 1;
  snprintf(why, n, "cuBLAS GEMM: matrix %s: %s", what, w);
  return 0;
}

static int gemm_run(void *arg, char *why, size_t wn) {
  gemm_task *g = arg;
  float alpha = g->alpha_dev ? *g->alpha_dev : g->alpha, beta = g->beta_dev ? *g->beta_dev : g->beta;
  long ar = g->ta == CUBLAS_OP_N ? g->m : g->k, ac = g->ta == CUBLAS_OP_N ? g->k : g->m;
  long br = g->tb == CUBLAS_OP_N ? g->k : g->n, bc = g->tb == CUBLAS_OP_N ? g->n : g->k;
  for (int bi = 0; bi < g->batch; bi++) {
    const char *a = (const char *)g->a + (size_t)(g->sa * bi) * type_size(g->at);
    const char *b = (const char *)g->b + (size_t)(g->sb * bi) * type_size(g->bt);
    char *c = (char *)g->c + (size_t)(g->sc * bi) * type_size(g->ct);
    int need_ab = g->k > 0 && alpha != 0.0f;
    if ((need_ab && (!range_ok(a, g->at, ar, ac, g->lda, "A", why, wn) ||
                     !range_ok(b, g->bt, br, bc, g->ldb, "B", why, wn))) ||
        !range_ok(c, g->ct, g->m, g->n, g->ldc, "C", why, wn))
      return 1;
    float *fc = g->ct == CUDA_R_32F ? (float *)c : to_float(c, g->ct, g->m, g->n, g->ldc);
    float *fa = NULL, *fb = NULL;
    if (need_ab) {
      fa = g->at == CUDA_R_32F ? (float *)a : to_float(a, g->at, ar, ac, g->lda);
      fb = g->bt == CUDA_R_32F ? (float *)b : to_float(b, g->bt, br, bc, g->ldb);
    }
    if (!fc || (need_ab && (!fa || !fb))) {
      snprintf(why, wn, "cuBLAS GEMM: host memory exhausted");
      return 1;
    }
    if (beta == 0.0f) /* C is not read when beta is 0 (it may hold NaN) */
      for (int j = 0; j < g->n; j++) memset(fc + (size_t)j * g->ldc, 0, sizeof(float) * (size_t)g->m);
    if (need_ab)
      cblas_sgemm(CblasColMajor, g->ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                  g->tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, g->m, g->n, g->k, alpha, fa, g->lda, fb, g->ldb,
                  beta == 0.0f ? 0.0f : beta, fc, g->ldc);
    else if (beta != 1.0f)
      for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) fc[i + (size_t)j * g->ldc] *= beta;
    if (g->ct != CUDA_R_32F) {
      for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
          size_t x = (size_t)i + (size_t)j * g->ldc;
          ((uint16_t *)c)[x] = g->ct == CUDA_R_16F ? float_to_half(fc[x]) : float_to_bf16(fc[x]);
        }
      free(fc);
    }
    if (fa != (const float *)a) free(fa);
    if (fb != (const float *)b) free(fb);
  }
  return 0;
}

static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const void *alpha, const void *a, cudaDataType at, int lda, long long sa, const void *b,
                           cudaDataType bt, int ldb, long long sb, const void *beta, void *c, cudaDataType ct,
                           int ldc, long long sc, int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T && ta != CUBLAS_OP_C) ||
      (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T && tb != CUBLAS_OP_C) || m < 0 || n < 0 || k < 0 || batch < 0 ||
      lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
      ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!type_size(at) || at != bt || (ct != CUDA_R_32F && ct != at)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  if (!h->workspace_size) gpa_sim__capture_mem_nodes(h->stream); /* its default pool: cudaMallocAsync */
  gemm_task *g = calloc(1, sizeof *g);
  if (!g) return CUBLAS_STATUS_ALLOC_FAILED;
  *g = (gemm_task){ta, tb, m, n, k, batch, 0, 0, NULL, NULL, a, b, c, at, bt, ct, lda, ldb, ldc, sa, sb, sc};
  if (h->pmode == CUBLAS_POINTER_MODE_DEVICE) {
    g->alpha_dev = alpha;
    g->beta_dev = beta;
  } else {
    g->alpha = *(const float *)alpha;
    g->beta = *(const float *)beta;
  }
  CUresult r = gpa_sim__enqueue(h->stream, gemm_run, g, free);
  if (r != CUDA_SUCCESS) {
    free(g);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

static int compute_ok(cublasComputeType_t t) {
  return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC || t == CUBLAS_COMPUTE_32F_FAST_16F ||
         t == CUBLAS_COMPUTE_32F_FAST_16BF || t == CUBLAS_COMPUTE_32F_FAST_TF32;
}

EXPORT cublasStatus_t cublasCreate(cublasHandle_t *out) {
  CUcontext ctx = NULL;
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasHandle_t h = calloc(1, sizeof *h);
  if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
  h->math = CUBLAS_DEFAULT_MATH;
  h->pmode = CUBLAS_POINTER_MODE_HOST;
  *out = h;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  cuStreamSynchronize(h->stream); /* queued GEMMs may still use the handle's settings' memory */
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetVersion(cublasHandle_t h, int *v) {
  (void)h;
  if (!v) return CUBLAS_STATUS_INVALID_VALUE;
  *v = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = (CUstream)s;
  h->workspace = NULL; /* as cuBLAS does: back to the default workspace pool */
  h->workspace_size = 0;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  *s = (cudaStream_t)h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t size) {
  char why[256];
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (size && (!ws || !gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)ws, size, why, sizeof why)))
    return CUBLAS_STATUS_INVALID_VALUE;
  h->workspace = ws; /* unused: the host GEMM needs no device workspace */
  h->workspace_size = size;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode; /* recorded; the emulation always computes in fp32 */
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m != CUBLAS_POINTER_MODE_HOST && m != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
  h->pmode = m;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasGetPointerMode(cublasHandle_t h, cublasPointerMode_t *m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!m) return CUBLAS_STATUS_INVALID_VALUE;
  *m = h->pmode;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *a, int lda, const float *b, int ldb,
                                  const float *beta, float *c, int ldc) {
  return gemm(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, 0, b, CUDA_R_32F, ldb, 0, beta, c, CUDA_R_32F, ldc, 0, 1);
}

EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float *alpha, const float *a, int lda,
                                                long long sa, const float *b, int ldb, long long sb,
                                                const float *beta, float *c, int ldc, long long sc, int batch) {
  return gemm(h, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, sa, b, CUDA_R_32F, ldb, sb, beta, c, CUDA_R_32F, ldc, sc,
              batch);
}

EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *a, cudaDataType at, int lda, const void *b,
                                   cudaDataType bt, int ldb, const void *beta, void *c, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  (void)algo;
  if (!compute_ok(compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(h, ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0, beta, c, ct, ldc, 0, 1);
}

EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void *alpha, const void *a, cudaDataType at,
                                                 int lda, long long sa, const void *b, cudaDataType bt, int ldb,
                                                 long long sb, const void *beta, void *c, cudaDataType ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t compute,
                                                 cublasGemmAlgo_t algo) {
  (void)algo;
  if (!compute_ok(compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
  return gemm(h, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch);
}

#define GPA_SIM_CUBLAS_STATUS(X)                                             \
  X(CUBLAS_STATUS_SUCCESS, "success")                                        \
  X(CUBLAS_STATUS_NOT_INITIALIZED, "the library was not initialized")        \
  X(CUBLAS_STATUS_ALLOC_FAILED, "the resource allocation failed")            \
  X(CUBLAS_STATUS_INVALID_VALUE, "an invalid numeric value was used as an argument") \
  X(CUBLAS_STATUS_ARCH_MISMATCH, "an absent device architectural feature is required") \
  X(CUBLAS_STATUS_MAPPING_ERROR, "an access to GPU memory space failed")     \
  X(CUBLAS_STATUS_EXECUTION_FAILED, "the GPU program failed to execute")     \
  X(CUBLAS_STATUS_INTERNAL_ERROR, "an internal operation failed")            \
  X(CUBLAS_STATUS_NOT_SUPPORTED, "the functionality requested is not supported") \
  X(CUBLAS_STATUS_LICENSE_ERROR, "license error")

EXPORT const char *cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
#define X(code, text) \
  case code: return #code;
    GPA_SIM_CUBLAS_STATUS(X)
#undef X
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

EXPORT const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
#define X(code, text) \
  case code: return text;
    GPA_SIM_CUBLAS_STATUS(X)
#undef X
  }
  return "unknown error";
}
