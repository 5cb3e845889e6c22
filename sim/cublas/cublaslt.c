/* gpa-sim cuBLASLt subset (libgpa_sim_cublasLt.so): what the CUDA backend's
 * linear layer uses, under cuBLASLt's real names and signatures so the
 * backend can dlopen this library instead of libcublasLt.so.13.
 *
 *   cublasLtCreate/Destroy, cublasLtGetStatusString,
 *   cublasLtMatmulDescCreate/SetAttribute/Destroy (TRANSA, TRANSB, EPILOGUE,
 *     BIAS_POINTER, BIAS_DATA_TYPE, EPILOGUE_AUX_POINTER, EPILOGUE_AUX_LD),
 *   cublasLtMatrixLayoutCreate/Destroy,
 *   cublasLtMatmulPreferenceCreate/SetAttribute/Destroy (MAX_WORKSPACE_BYTES,
 *     MIN_ALIGNMENT_{A,B,C,D}_BYTES),
 *   cublasLtMatmulAlgoGetHeuristic, cublasLtMatmul.
 *
 * Supported, as on a GPU with CUBLAS_COMPUTE_32F: A and B of one type (fp32,
 * fp16 or bf16), C = D of that type or fp32, epilogues DEFAULT, BIAS, GELU,
 * GELU_BIAS, GELU_AUX, GELU_AUX_BIAS (bias of D's type unless set; aux of D's
 * type, its leading dimension a multiple of 8 and >= D's rows, as cuBLASLt
 * requires). Anything else: the heuristic returns no algorithm and
 * cublasLtMatmul answers CUBLAS_STATUS_NOT_SUPPORTED. The matmul runs as
 * host work on the stream (fp32 GEMM by OpenBLAS, then the epilogue: bias,
 * aux = the pre-activation rounded to its type, GELU in its tanh form,
 * rounding of D). As on a GPU, the algorithm the heuristic returns assumes
 * the operand alignments of the preference (256 bytes unless set); a matmul
 * whose A, B, C or D is less aligned answers CUBLAS_STATUS_NOT_SUPPORTED.
 * GPA_SIM_CUBLASLT_REFUSE=1 makes the heuristic find nothing
 * (tests of the caller's fallback). Counters for tests: gpa_sim_cublaslt_count. */
#include <cblas.h>
#include <cublasLt.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpa_sim_hooks.h"
#include "half16.h"

#define EXPORT __attribute__((visibility("default")))

struct cublasLtContext {
  int unused;
};

typedef struct lt_desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t ta, tb;
  uint32_t epilogue;
  const void *bias;
  int32_t bias_type; /* -1: D's type */
  void *aux;
  int64_t aux_ld;
} lt_desc;

/* The preference; the heuristic copies the alignments into the algorithm. */
typedef struct lt_pref {
  uint64_t max_ws;
  uint32_t align[4]; /* A, B, C, D */
} lt_pref;

typedef struct lt_layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
} lt_layout;

_Static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "lt_desc fits the opaque descriptor");
_Static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "lt_layout fits the opaque layout");
_Static_assert(sizeof(lt_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "lt_pref fits the opaque preference");
_Static_assert(4 * sizeof(uint32_t) <= sizeof(cublasLtMatmulAlgo_t), "alignments fit the algorithm");

static lt_desc *D_(cublasLtMatmulDesc_t d) { return (lt_desc *)(void *)d->data; }
static lt_layout *L_(cublasLtMatrixLayout_t l) { return (lt_layout *)(void *)l->data; }
static lt_pref *P_(cublasLtMatmulPreference_t p) { return (lt_pref *)(void *)p->data; }

/* matmuls run (in total and by epilogue, indexed as epis[]) and refusals */
static _Atomic unsigned long long n_matmul, n_refused, n_by_epi[6];
static const uint32_t epis[6] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU,
                                 CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                                 CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
static int epi_index(uint32_t e) {
  for (int i = 0; i < 6; i++)
    if (epis[i] == e) return i;
  return -1;
}

/* Matmuls run with this epilogue (a cublasLtEpilogue_t value), all of them
 * for -1, refusals (no algorithm / NOT_SUPPORTED) for -2. */
EXPORT unsigned long long gpa_sim_cublaslt_count(int epilogue) {
  if (epilogue == -1) return n_matmul;
  if (epilogue == -2) return n_refused;
  int i = epi_index((uint32_t)epilogue);
  return i < 0 ? 0 : n_by_epi[i];
}

static int has_bias(uint32_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) != 0; }
static int has_gelu(uint32_t e) { return (e & CUBLASLT_EPILOGUE_GELU) != 0; }
static int has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

/* The operation as described: NOT_SUPPORTED (no algorithm) or INVALID_VALUE. */
static cublasStatus_t check(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c,
                            const lt_layout *o, uint64_t *m, uint64_t *n, uint64_t *k) {
  if (!d || !a || !b || !c || !o) return CUBLAS_STATUS_INVALID_VALUE;
  *m = o->rows;
  *n = o->cols;
  *k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
  uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
  uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
  if (am != *m || bk != *k || bn != *n || c->rows != *m || c->cols != *n) return CUBLAS_STATUS_INVALID_VALUE;
  if (*m > INT32_MAX || *n > INT32_MAX || *k > INT32_MAX) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!type_size(a->type) || a->type != b->type || c->type != o->type || (o->type != CUDA_R_32F && o->type != a->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (epi_index(d->epilogue) < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_bias(d->epilogue) && d->bias_type != -1 && d->bias_type != (int32_t)o->type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_aux(d->epilogue) && (d->aux_ld % 8 || d->aux_ld < (int64_t)*m)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

static int refuse(void) {
  const char *e = getenv("GPA_SIM_CUBLASLT_REFUSE");
  return e && *e && strcmp(e, "0");
}

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *out) {
  CUcontext ctx = NULL;
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return CUBLAS_STATUS_NOT_INITIALIZED;
  *out = calloc(1, sizeof **out);
  return *out ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH; }

EXPORT const char *cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
  }
}

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulDesc_t d = calloc(1, sizeof *d);
  if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
  *D_(d) = (lt_desc){compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, -1, NULL, 0};
  *out = d;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}

#define SET_ATTR(field, type)                                         \
  do {                                                                \
    if (size != sizeof(type)) return CUBLAS_STATUS_INVALID_VALUE;     \
    type v_;                                                          \
    memcpy(&v_, buf, sizeof v_);                                      \
    d->field = v_;                                                    \
  } while (0)

EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                     const void *buf, size_t size) {
  if (!desc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  lt_desc *d = D_(desc);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: SET_ATTR(ta, int32_t); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: SET_ATTR(tb, int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: SET_ATTR(epilogue, uint32_t); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: SET_ATTR(bias, const void *); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: SET_ATTR(bias_type, int32_t); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: SET_ATTR(aux, void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: SET_ATTR(aux_ld, int64_t); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* not in this subset */
  }
  if ((d->ta != CUBLAS_OP_N && d->ta != CUBLAS_OP_T) || (d->tb != CUBLAS_OP_N && d->tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  if (!out || ld < 1 || (uint64_t)ld < rows) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatrixLayout_t l = calloc(1, sizeof *l);
  if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
  *L_(l) = (lt_layout){type, rows, cols, ld};
  *out = l;
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  free(l);
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
  if (!out) return CUBLAS_STATUS_INVALID_VALUE;
  *out = calloc(1, sizeof **out);
  if (!*out) return CUBLAS_STATUS_ALLOC_FAILED;
  *P_(*out) = (lt_pref){0, {256, 256, 256, 256}};
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  free(p);
  return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr,
                                                           const void *buf, size_t size) {
  if (!p || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  lt_pref *q = P_(p);
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: /* recorded; the host GEMM needs no workspace */
      if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&q->max_ws, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      memcpy(&q->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
      return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* not in this subset */
  }
}

EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t o,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t results[], int *returned) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!pref || requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  *returned = 0;
  cublasStatus_t s = check(desc ? D_(desc) : NULL, a ? L_(a) : NULL, b ? L_(b) : NULL, c ? L_(c) : NULL,
                           o ? L_(o) : NULL, &m, &n, &k);
  if (s == CUBLAS_STATUS_SUCCESS && refuse()) s = CUBLAS_STATUS_NOT_SUPPORTED;
  if (s != CUBLAS_STATUS_SUCCESS) {
    n_refused++;
    return s;
  }
  memset(&results[0], 0, sizeof results[0]);
  memcpy(results[0].algo.data, P_(pref)->align, sizeof P_(pref)->align);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

typedef struct lt_task {
  lt_desc d;
  lt_layout a, b, c, o;
  float alpha, beta;
  const void *A, *B, *C;
  void *D;
} lt_task;

static int matrix_ok(const void *p, const lt_layout *l, const char *what, char *why, size_t wn) {
  if (!l->rows || !l->cols) return 1;
  char w[400];
  size_t bytes = type_size(l->type) * (size_t)((uint64_t)l->ld * (l->cols - 1) + l->rows);
  if (gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)p, bytes, w, sizeof w)) return 1;
  snprintf(why, wn, "cuBLASLt matmul: %s: %s", what, w);
  return 0;
}

static float gelu_tanh(float v) { return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))); }

static int lt_run(void *arg, char *why, size_t wn) {
  lt_task *t = arg;
  long m = (long)t->o.rows, n = (long)t->o.cols, k = (long)(t->d.ta == CUBLAS_OP_N ? t->a.cols : t->a.rows);
  int need_ab = k > 0 && t->alpha != 0.0f;
  lt_layout bias_l = {t->d.bias_type == -1 ? t->o.type : (cudaDataType)t->d.bias_type, (uint64_t)m, 1, m};
  lt_layout aux_l = {t->o.type, (uint64_t)m, (uint64_t)n, t->d.aux_ld};
  if ((need_ab && (!matrix_ok(t->A, &t->a, "A", why, wn) || !matrix_ok(t->B, &t->b, "B", why, wn))) ||
      (t->beta != 0.0f && !matrix_ok(t->C, &t->c, "C", why, wn)) || !matrix_ok(t->D, &t->o, "D", why, wn) ||
      (has_bias(t->d.epilogue) && !matrix_ok(t->d.bias, &bias_l, "bias", why, wn)) ||
      (has_aux(t->d.epilogue) && !matrix_ok(t->d.aux, &aux_l, "aux", why, wn)))
    return 1;
  float *acc = calloc((size_t)(m * n) + 1, sizeof(float));
  float *fa = NULL, *fb = NULL;
  if (need_ab) {
    fa = to_float(t->A, t->a.type, (long)t->a.rows, (long)t->a.cols, (long)t->a.ld);
    fb = to_float(t->B, t->b.type, (long)t->b.rows, (long)t->b.cols, (long)t->b.ld);
  }
  if (!acc || (need_ab && (!fa || !fb))) {
    free(acc), free(fa), free(fb);
    snprintf(why, wn, "cuBLASLt matmul: host memory exhausted");
    return 1;
  }
  if (need_ab)
    cblas_sgemm(CblasColMajor, t->d.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                t->d.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, t->alpha, fa, (int)t->a.ld,
                fb, (int)t->b.ld, 0.0f, acc, (int)m);
  for (long j = 0; j < n; j++)
    for (long i = 0; i < m; i++) {
      float v = acc[i + j * m];
      if (t->beta != 0.0f) v += t->beta * elem_get(t->C, t->c.type, (size_t)(i + j * (long)t->c.ld));
      if (has_bias(t->d.epilogue)) v += elem_get(t->d.bias, bias_l.type, (size_t)i);
      if (has_aux(t->d.epilogue)) elem_set(t->d.aux, aux_l.type, (size_t)(i + j * t->d.aux_ld), v);
      if (has_gelu(t->d.epilogue)) v = gelu_tanh(v);
      elem_set(t->D, t->o.type, (size_t)(i + j * (long)t->o.ld), v);
    }
  free(acc), free(fa), free(fb);
  return 0;
}

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
                                     const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
                                     cublasLtMatrixLayout_t o, const cublasLtMatmulAlgo_t *algo, void *ws,
                                     size_t ws_size, cudaStream_t stream) {
  (void)ws, (void)ws_size;
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo) { /* the algorithm needs the alignments it was chosen for */
    uint32_t al[4];
    memcpy(al, algo->data, sizeof al);
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
      if (al[i] > 1 && (uintptr_t)ptr[i] % al[i]) {
        n_refused++;
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
  }
  uint64_t m, n, k;
  cublasStatus_t s = check(desc ? D_(desc) : NULL, a ? L_(a) : NULL, b ? L_(b) : NULL, c ? L_(c) : NULL,
                           o ? L_(o) : NULL, &m, &n, &k);
  if (s != CUBLAS_STATUS_SUCCESS) {
    n_refused++;
    return s;
  }
  if (L_(o)->type != L_(c)->type || (C != D && L_(c)->ld != L_(o)->ld && *(const float *)beta != 0.0f))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  lt_task *t = calloc(1, sizeof *t);
  if (!t) return CUBLAS_STATUS_ALLOC_FAILED;
  *t = (lt_task){*D_(desc), *L_(a), *L_(b), *L_(c), *L_(o), *(const float *)alpha, *(const float *)beta, A, B, C, D};
  if (m && n && gpa_sim__enqueue((CUstream)stream, lt_run, t, free) != CUDA_SUCCESS) {
    free(t);
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!m || !n) free(t);
  n_matmul++;
  int i = epi_index(D_(desc)->epilogue);
  if (i >= 0) n_by_epi[i]++;
  return CUBLAS_STATUS_SUCCESS;
}
