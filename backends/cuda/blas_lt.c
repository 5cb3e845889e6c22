/* cuBLASLt: GEMMs with a fused bias epilogue for the linear layer (its GELU
 * epilogues are not used: ops_blas.c says why).
 *
 * Resolved at run time like cuBLAS, lazily, by the first GEMM that asks for
 * an epilogue: GPA_CUBLASLT if set; for GPA_DEVICE=sim the simulator's
 * subset; else libcublasLt.so.13 next to GPA_CUBLAS when that is set, else
 * from the loader's path. Missing library or entry point: logged once, and
 * every later call answers "not done" so the caller keeps its cuBLAS +
 * epilogue-kernel path (the actor never fails for want of cuBLASLt).
 * Descriptors are built per call (a few microseconds of host time; a cache
 * by shape would save them). The workspace is the op's stream scratch. */
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cuda/cuda_internal.h"

#ifndef GPA_SIM_CUBLASLT_DEFAULT
#define GPA_SIM_CUBLASLT_DEFAULT "libgpa_sim_cublasLt.so"
#endif
#define LT_LIB "libcublasLt.so.13"
#define LT_WORKSPACE ((uint64_t)4 << 20)

#define GPA__CUBLASLT_API(X)                                                                                  \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate)                 \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulDescDestroy) X(cublasLtMatrixLayoutCreate)                \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceSetAttribute)    \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

/* Descriptors of one GEMM shape; destroyed together. */
typedef struct lt_call {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulPreference_t pref;
} lt_call;

/* What decides the descriptors and the heuristic's answer: everything of a
 * GEMM but its pointers' values (their alignments count). */
typedef struct lt_key {
  int trans_a, trans_b, m, n, k, ab_type, d_type, lda, ldb, ldd, has_bias;
  unsigned epilogue;
  uint32_t align[3];
  uint64_t ws;
} lt_key;

/* Building the descriptors and asking the heuristic cost more host time
 * than the GEMM of a small layer: a trainer repeats the same shapes every
 * step, so both are kept per shape (declines too), LRU, per actor. */
#define LT_CACHE 32
typedef struct lt_entry {
  lt_key k;
  lt_call c;
  cublasLtMatmulHeuristicResult_t heur;
  int found;
  uint64_t used; /* 0: empty */
} lt_entry;

struct gpa__cu_lt {
  void *lib;
#define GPA__LT_MEMBER(name) __typeof__(name) *name;
  GPA__CUBLASLT_API(GPA__LT_MEMBER)
#undef GPA__LT_MEMBER
  cublasLtHandle_t h;
  lt_entry cache[LT_CACHE];
  uint64_t tick;
  uint64_t hits, misses; /* for tests and benches */
};

static const char *lt_path(const gpa__cu_ctx *C, char *buf, size_t cap) {
  const char *p = C->host.cublaslt;
  if (p) return p;
  if (C->sim) return GPA_SIM_CUBLASLT_DEFAULT;
  const char *blas = C->host.cublas, *slash = blas ? strrchr(blas, '/') : NULL;
  if (slash && (size_t)(slash - blas) + sizeof "/" LT_LIB <= cap) {
    snprintf(buf, cap, "%.*s/%s", (int)(slash - blas), blas, LT_LIB);
    if (access(buf, R_OK) == 0) return buf;
  }
  return LT_LIB;
}

static int lt_open(gpa__cu_ctx *C) {
  char buf[512], why[700];
  const char *path = lt_path(C, buf, sizeof buf);
  struct gpa__cu_lt *L = calloc(1, sizeof *L);
  if (!L) return 0;
  L->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!L->lib) {
    const char *e = dlerror();
    snprintf(why, sizeof why, "cannot open %s (%s)", path, e ? e : "dlopen failed");
    goto fail;
  }
  void *fn;
#define GPA__LT_RESOLVE(name)                                              \
  fn = dlsym(L->lib, #name);                                               \
  if (!fn) {                                                               \
    snprintf(why, sizeof why, "%s lacks %s", path, #name);                 \
    goto fail;                                                             \
  }                                                                        \
  memcpy(&L->name, &fn, sizeof fn);
  GPA__CUBLASLT_API(GPA__LT_RESOLVE)
#undef GPA__LT_RESOLVE
  cublasStatus_t s = L->cublasLtCreate(&L->h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(why, sizeof why, "cublasLtCreate: %s", L->cublasLtGetStatusString(s));
    goto fail;
  }
  C->lt = L;
  gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: cuBLASLt from %s: linear bias epilogue fused", path);
  return 1;
fail:
  gpa__log(GPA_LOG_INFO, C->host.log_level, "cuda: no cuBLASLt (%s): linear epilogues run as separate kernels",
           why);
  if (L->lib) dlclose(L->lib);
  free(L);
  return 0;
}

static void call_free(struct gpa__cu_lt *L, lt_call *c);

void gpa__cu_lt_stats(const gpa__cu_ctx *C, uint64_t *hits, uint64_t *misses) {
  *hits = C->lt ? C->lt->hits : 0;
  *misses = C->lt ? C->lt->misses : 0;
}

void gpa__cu_lt_release(gpa__cu_ctx *C) {
  struct gpa__cu_lt *L = C->lt;
  if (L) {
    for (int i = 0; i < LT_CACHE; i++)
      if (L->cache[i].used) call_free(L, &L->cache[i].c);
    L->cublasLtDestroy(L->h);
    dlclose(L->lib);
    free(L);
  }
  C->lt = NULL;
  C->lt_state = 0;
}

static void call_free(struct gpa__cu_lt *L, lt_call *c) {
  if (c->pref) L->cublasLtMatmulPreferenceDestroy(c->pref);
  if (c->d) L->cublasLtMatrixLayoutDestroy(c->d);
  if (c->b) L->cublasLtMatrixLayoutDestroy(c->b);
  if (c->a) L->cublasLtMatrixLayoutDestroy(c->a);
  if (c->op) L->cublasLtMatmulDescDestroy(c->op);
}

#define LT_SET(attr, v) L->cublasLtMatmulDescSetAttribute(c->op, attr, &(v), sizeof(v))

/* Alignment of a device pointer in bytes, at most 256: the heuristic
 * assumes 256 unless told, and an algorithm picked for 256-byte operands
 * need not run on a tensor at a smaller offset. */
static uint32_t align_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al) al /= 2;
  return al;
}

static cublasStatus_t call_build(struct gpa__cu_lt *L, lt_call *c, const gpa__lt_gemm *g, uint64_t ws) {
  cublasStatus_t s = L->cublasLtMatmulDescCreate(&c->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  int32_t ta = g->trans_a, tb = g->trans_b, bias_type = g->d_type;
  uint32_t epi = g->epilogue;
  if (s == CUBLAS_STATUS_SUCCESS) s = LT_SET(CUBLASLT_MATMUL_DESC_TRANSA, ta);
  if (s == CUBLAS_STATUS_SUCCESS) s = LT_SET(CUBLASLT_MATMUL_DESC_TRANSB, tb);
  if (s == CUBLAS_STATUS_SUCCESS) s = LT_SET(CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
  if (s == CUBLAS_STATUS_SUCCESS && g->bias) s = LT_SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g->bias);
  if (s == CUBLAS_STATUS_SUCCESS && g->bias) s = LT_SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
  /* stored shapes: op(A) is m x k, op(B) k x n */
  int ar = g->trans_a == CUBLAS_OP_N ? g->m : g->k, ac = g->trans_a == CUBLAS_OP_N ? g->k : g->m;
  int br = g->trans_b == CUBLAS_OP_N ? g->k : g->n, bc = g->trans_b == CUBLAS_OP_N ? g->n : g->k;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = L->cublasLtMatrixLayoutCreate(&c->a, (cudaDataType)g->ab_type, (uint64_t)ar, (uint64_t)ac, g->lda);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = L->cublasLtMatrixLayoutCreate(&c->b, (cudaDataType)g->ab_type, (uint64_t)br, (uint64_t)bc, g->ldb);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = L->cublasLtMatrixLayoutCreate(&c->d, (cudaDataType)g->d_type, (uint64_t)g->m, (uint64_t)g->n, g->ldd);
  if (s == CUBLAS_STATUS_SUCCESS) s = L->cublasLtMatmulPreferenceCreate(&c->pref);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = L->cublasLtMatmulPreferenceSetAttribute(c->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const uint32_t al[4] = {align_of(g->A), align_of(g->B), align_of(g->D), align_of(g->D)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
    s = L->cublasLtMatmulPreferenceSetAttribute(c->pref, which[i], &al[i], sizeof al[i]);
  return s;
}

/* The cached descriptors and heuristic answer for g (built on a miss, into
 * the least recently used entry). */
static lt_entry *lookup(struct gpa__cu_lt *L, const gpa__lt_gemm *g, uint64_t ws) {
  lt_key k;
  memset(&k, 0, sizeof k); /* compared bytewise: padding zeroed, fields set one by one */
  k.trans_a = g->trans_a;
  k.trans_b = g->trans_b;
  k.m = g->m;
  k.n = g->n;
  k.k = g->k;
  k.ab_type = g->ab_type;
  k.d_type = g->d_type;
  k.lda = g->lda;
  k.ldb = g->ldb;
  k.ldd = g->ldd;
  k.has_bias = g->bias != NULL;
  k.epilogue = g->epilogue;
  k.align[0] = align_of(g->A);
  k.align[1] = align_of(g->B);
  k.align[2] = align_of(g->D);
  k.ws = ws;
  lt_entry *victim = &L->cache[0];
  for (int i = 0; i < LT_CACHE; i++) {
    lt_entry *e = &L->cache[i];
    if (e->used && !memcmp(&e->k, &k, sizeof k)) {
      e->used = ++L->tick;
      L->hits++;
      return e;
    }
    if (e->used < victim->used) victim = e;
  }
  L->misses++;
  if (victim->used) call_free(L, &victim->c);
  memset(victim, 0, sizeof *victim);
  victim->k = k;
  victim->used = ++L->tick;
  cublasStatus_t s = call_build(L, &victim->c, g, ws);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = L->cublasLtMatmulAlgoGetHeuristic(L->h, victim->c.op, victim->c.a, victim->c.b, victim->c.d, victim->c.d,
                                          victim->c.pref, 1, &victim->heur, &victim->found);
  if (s != CUBLAS_STATUS_SUCCESS) victim->found = 0;
  return victim;
}

gpa_status gpa__cu_lt_matmul(const gpa_op_exec *x, const gpa__lt_gemm *g, int *done) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  *done = 0;
  if (C->lt_state == 0) C->lt_state = lt_open(C) ? 1 : -1;
  if (C->lt_state < 0) return GPA_OK;
  struct gpa__cu_lt *L = C->lt;
  CUdeviceptr ws = gpa__cu_scratch(x, LT_WORKSPACE);
  uint64_t ws_size = ws ? LT_WORKSPACE : 0;
  x->msg[0] = 0; /* a scratch failure only costs the workspace */
  lt_entry *e = lookup(L, g, ws_size);
  if (!e->found) {
    /* no algorithm for this shape/epilogue: not an error, the caller's path runs */
    gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: cuBLASLt declines epilogue %u for %d x %d x %d", g->epilogue,
             g->m, g->n, g->k);
    return GPA_OK;
  }
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (g->bias) s = L->cublasLtMatmulDescSetAttribute(e->c.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                     sizeof g->bias);
  lt_call c = e->c;
  cublasLtMatmulHeuristicResult_t heur = e->heur;
  if (s != CUBLAS_STATUS_SUCCESS) return GPA_OK;
  static const float one = 1.0f, zero = 0.0f;
  s = L->cublasLtMatmul(L->h, c.op, &one, g->A, c.a, g->B, c.b, &zero, g->D, c.d, g->D, c.d, &heur.algo,
                        (void *)(uintptr_t)ws, heur.workspaceSize <= ws_size ? ws_size : 0, (cudaStream_t)C->cur_q->s);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return GPA_OK;
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(x->msg, x->msg_size, "cublasLtMatmul: %s", L->cublasLtGetStatusString(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? GPA_ENOMEM : GPA_EDEVICE;
  }
  *done = 1;
  return GPA_OK;
}
