/* attention_fwd / attention_bwd (host flash kernels) against a naive
 * attention built from cblas_sgemm + a softmax pass + cblas_sgemm that
 * materializes the S x Sk matrix ("naive_sgemm_softmax"), per (batch, head),
 * measured in the same run with the same threads (OpenBLAS threads for the
 * GEMMs, the host pool for the row passes), each side run twice after a
 * pause (gpa_bench_pair_settled: OpenBLAS's spinning threads).
 * FLOPs: forward 4*B*H*S*Sk*D (halved when causal), backward 2.5x that.
 * Default: a few representative shapes; GPA_BENCH_FULL=1 sweeps
 * B in {1,4}, S=Sk in {512,1024,2048,4096}, D in {64,128}, causal 0/1.
 * GPA_BENCH_SHAPE=text runs only the shapes whose name (B4_H8_S2048_Sk2048_D128,
 * ..._causal) contains text, e.g. one point of the full sweep.
 * Also, in "sgemm_ns" and "sgemm_ratio" (its time over ours, issue 26's
 * target >= 0.5): one sgemm of the same FLOPs (2048 x 2048 x FLOPs/(2*2048^2))
 * through gpa__sgemm on the same pool, with the kernel set the library
 * loaded (the best the CPU runs), paired with ours the same way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench/cblas_loaded.h"
#include "bench_nn_host.h"
#include "kernels/host/attention.h"
#include "kernels/host/blas.h"

typedef struct att_ctx {
  gpa__attn_geom g;
  int64_t sk;            /* the same-FLOPs sgemm: 2048 x 2048 x sk */
  float *sa, *sb, *sc;
  float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
  float *P, *dP, *delta; /* naive: S x Sk matrices, row sums */
} att_ctx;

static void run_fwd(void *p) {
  att_ctx *c = p;
  gpa__attention_fwd(gpa_bench_host_par(), &c->g, c->q, c->k, c->v, NULL, c->o, c->lse);
}
static void run_bwd(void *p) {
  att_ctx *c = p;
  gpa__attention_bwd(gpa_bench_host_par(), &c->g, c->dout, c->q, c->k, c->v, c->o, c->lse, NULL, c->dq, c->dk,
                     c->dv);
}

static void sgemm_same(void *p) {
  att_ctx *c = p;
  gpa__sgemm(gpa_bench_host_par(), 0, 0, 2048, 2048, c->sk, c->sa, c->sk, c->sb, 2048, 0.0f, c->sc, 2048);
}

/* ---- naive reference ---- */
typedef struct rows_ctx {
  const att_ctx *c;
  float *lse; /* lse row of (b, h) */
  int bwd;
  const float *dout, *o; /* bwd: rows of (b, h), stride H*D */
} rows_ctx;

/* forward: P row = softmax(S row) with the causal mask, lse saved;
 * backward: P = exp(S - lse), dS = P (dP - delta), delta = dout . o. */
static void softmax_rows(int64_t r0, int64_t r1, void *p) {
  const rows_ctx *rc = p;
  const att_ctx *c = rc->c;
  int64_t Sk = c->g.Sk, S = c->g.S, ld = c->g.H * c->g.D;
  for (int64_t i = r0; i < r1; i++) {
    float *row = c->P + i * Sk;
    int64_t lim = c->g.causal ? i + Sk - S + 1 : Sk;
    if (lim > Sk) lim = Sk;
    if (lim < 0) lim = 0;
    if (!rc->bwd) {
      float mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < lim; j++) mx = row[j] > mx ? row[j] : mx;
      for (int64_t j = 0; j < lim; j++) sum += (row[j] = expf(row[j] - mx));
      float inv = sum > 0 ? 1.0f / sum : 0;
      for (int64_t j = 0; j < lim; j++) row[j] *= inv;
      for (int64_t j = lim; j < Sk; j++) row[j] = 0;
      rc->lse[i] = sum > 0 ? mx + logf(sum) : -INFINITY;
    } else {
      float L = rc->lse[i], dl = 0, *dp = c->dP + i * Sk;
      const float *a = rc->dout + i * ld, *b = rc->o + i * ld;
      for (int64_t d = 0; d < c->g.D; d++) dl += a[d] * b[d];
      for (int64_t j = 0; j < lim; j++) {
        row[j] = expf(row[j] - L);
        dp[j] = row[j] * (dp[j] - dl);
      }
      for (int64_t j = lim; j < Sk; j++) row[j] = dp[j] = 0;
    }
  }
}

static void naive_fwd(void *p) {
  att_ctx *c = p;
  const gpa__attn_geom *g = &c->g;
  int S = (int)g->S, Sk = (int)g->Sk, D = (int)g->D, ldq = (int)(g->H * g->D), ldk = (int)(g->Hkv * g->D);
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->H; h++) {
      int64_t kh = h / (g->H / g->Hkv);
      const float *Q = c->q + (b * g->S * g->H + h) * g->D, *K = c->k + (b * g->Sk * g->Hkv + kh) * g->D;
      const float *V = c->v + (b * g->Sk * g->Hkv + kh) * g->D;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, Sk, D, g->scale, Q, ldq, K, ldk, 0.0f, c->P, Sk);
      rows_ctx rc = {c, c->lse + (b * g->H + h) * g->S, 0, NULL, NULL};
      gpa__pfor(gpa_bench_host_par(), g->S, 16, softmax_rows, &rc);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, D, Sk, 1.0f, c->P, Sk, V, ldk, 0.0f,
                  c->o + (b * g->S * g->H + h) * g->D, ldq);
    }
}

static void naive_bwd(void *p) {
  att_ctx *c = p;
  const gpa__attn_geom *g = &c->g;
  int S = (int)g->S, Sk = (int)g->Sk, D = (int)g->D, ldq = (int)(g->H * g->D), ldk = (int)(g->Hkv * g->D);
  int64_t grp = g->H / g->Hkv;
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->H; h++) {
      int64_t kh = h / grp;
      size_t qo = (size_t)((b * g->S * g->H + h) * g->D), ko = (size_t)((b * g->Sk * g->Hkv + kh) * g->D);
      float beta = h % grp ? 1.0f : 0.0f; /* GQA: the group's heads add into dk/dv */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, Sk, D, g->scale, c->q + qo, ldq, c->k + ko, ldk, 0.0f,
                  c->P, Sk);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, S, Sk, D, 1.0f, c->dout + qo, ldq, c->v + ko, ldk, 0.0f,
                  c->dP, Sk);
      rows_ctx rc = {c, c->lse + (b * g->H + h) * g->S, 1, c->dout + qo, c->o + qo};
      gpa__pfor(gpa_bench_host_par(), g->S, 16, softmax_rows, &rc);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Sk, D, S, 1.0f, c->P, Sk, c->dout + qo, ldq, beta,
                  c->dv + ko, ldk);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, D, Sk, g->scale, c->dP, Sk, c->k + ko, ldk, 0.0f,
                  c->dq + qo, ldq);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Sk, D, S, g->scale, c->dP, Sk, c->q + qo, ldq, beta,
                  c->dk + ko, ldk);
    }
}

static void one(int64_t B, int64_t S, int64_t H, int64_t D, int causal, int bwd) {
  char shape[96];
  snprintf(shape, sizeof shape, "B%lld_H%lld_S%lld_Sk%lld_D%lld%s", (long long)B, (long long)H, (long long)S,
           (long long)S, (long long)D, causal ? "_causal" : "");
  const char *pick = getenv("GPA_BENCH_SHAPE");
  if (pick && !strstr(shape, pick)) return;
  att_ctx c;
  memset(&c, 0, sizeof c);
  c.g = (gpa__attn_geom){B, S, S, H, H, D, (float)(1.0 / sqrt((double)D)), causal, 0};
  size_t nq = (size_t)(B * S * H * D), nl = (size_t)(B * H * S), np = (size_t)(S * S);
  c.q = malloc(nq * 4); c.k = malloc(nq * 4); c.v = malloc(nq * 4); c.o = malloc(nq * 4);
  c.lse = malloc(nl * 4); c.dout = malloc(nq * 4); c.dq = malloc(nq * 4); c.dk = malloc(nq * 4);
  c.dv = malloc(nq * 4); c.P = malloc(np * 4); c.dP = malloc(np * 4);
  if (!c.q || !c.k || !c.v || !c.o || !c.lse || !c.dout || !c.dq || !c.dk || !c.dv || !c.P || !c.dP) {
    fprintf(stderr, "bench attention: out of memory\n");
    goto out;
  }
  gpa_bench_fill(c.q, (int64_t)nq, -1, 1, 11);
  gpa_bench_fill(c.k, (int64_t)nq, -1, 1, 12);
  gpa_bench_fill(c.v, (int64_t)nq, -1, 1, 13);
  gpa_bench_fill(c.dout, (int64_t)nq, -1, 1, 14);
  run_fwd(&c); /* o and lse for the backward */
  double work = 4.0 * (double)B * (double)H * (double)S * (double)S * (double)D * (causal ? 0.5 : 1.0);
  int reps = gpa_bench_reps(S * S * B >= 4096 * 4096 ? 2 : 4);
  double ns, rns, ns2 = 0, sns = 0, flops = bwd ? 2.5 * work : work;
  gpa_bench_pair_settled(reps, bwd ? run_bwd : run_fwd, &c, bwd ? naive_bwd : naive_fwd, &c, &ns, &rns, NULL, NULL);
  c.sk = (int64_t)(flops / (2.0 * 2048 * 2048) + 0.5);
  c.sa = malloc((size_t)(2048 * c.sk) * 4), c.sb = malloc((size_t)(2048 * c.sk) * 4), c.sc = malloc(2048 * 2048 * 4);
  if (c.sa && c.sb && c.sc) {
    gpa_bench_fill(c.sa, 2048 * c.sk, -1, 1, 15);
    gpa_bench_fill(c.sb, 2048 * c.sk, -1, 1, 16);
    gpa_bench_pair_settled(reps, bwd ? run_bwd : run_fwd, &c, sgemm_same, &c, &ns2, &sns, NULL, NULL);
    sns *= flops / (2.0 * 2048 * 2048 * (double)c.sk); /* to the same FLOPs exactly */
  }
  char extra[192];
  snprintf(extra, sizeof extra, "\"threads\":%d,\"blas_threads\":%d,\"sgemm_ns\":%.1f,\"sgemm_ratio\":%.4f,"
           "\"blas_kernels\":\"%s\"", gpa_bench_host_threads(), openblas_get_num_threads(), sns,
           ns2 > 0 ? sns / ns2 : 0.0, gpa__blas()->kernels);
  gpa_bench_result r = {.name = bwd ? "attention_bwd" : "attention_fwd", .backend = "cpu", .shape = shape,
                        .ref = "naive_sgemm_softmax", .ns = ns, .ref_ns = rns,
                        .flops = flops, .extra = extra};
  gpa_bench_emit(&r);
out:
  free(c.q); free(c.k); free(c.v); free(c.o); free(c.lse); free(c.dout); free(c.dq); free(c.dk); free(c.dv);
  free(c.P); free(c.dP); free(c.sa); free(c.sb); free(c.sc);
}

static void sweep(int bwd) {
  if (!gpa_bench_full()) {
    one(1, 2048, 8, 64, 0, bwd);
    one(1, 2048, 8, 64, 1, bwd);
    one(1, 2048, 8, 128, 0, bwd);
    return;
  }
  const int64_t Bs[2] = {1, 4}, Ss[4] = {512, 1024, 2048, 4096}, Ds[2] = {64, 128};
  for (int bi = 0; bi < 2; bi++)
    for (int si = 0; si < 4; si++)
      for (int di = 0; di < 2; di++)
        for (int causal = 0; causal < 2; causal++) one(Bs[bi], Ss[si], 8, Ds[di], causal, bwd);
}

void gpa_bench_attention_fwd(void) { sweep(0); }
void gpa_bench_attention_bwd(void) { sweep(1); }

/* ---- gpa-bench cuda_attention_fa2 (issue 23) ----
 * The bf16/fp16 FlashAttention-2 kernels (kernels/cuda/attention_fa2*.cu),
 * forced: a user op with attention's params runs only our own kernels
 * (ops/attention/cuda.c, gpa__attn_own_*_cu), never cuDNN, and fails where
 * they would fall back to the host (the user op has no host part). Beside
 * PyTorch's FlashAttention-2 backend on the same shapes in the same run
 * (bench/sdpa_torch.py, named by
 * GPA_BENCH_SDPA_TORCH, when python3 has torch with CUDA); ratio = ours over
 * PyTorch's "flash" (ref "none" without it). Shapes of the targets:
 * B4 S4096 H16 D128 and B4 S4096 H32 D64, causal and not, bf16 (fp16 with
 * GPA_BENCH_FULL=1); o, dq, dk, dv in the storage type, as PyTorch's. Device
 * time from the batch's CUDA events. On sim: tiny shapes, plumbing only.
 * Rows "cuda_attention_fa2_*" time the default kernels (at these head dims
 * the exact-head-dim ones; "kernels" says which ran), rows
 * "cuda_attention_fa2c_*" each shape again on the class kernels
 * (GPA_FA2_EXACT=0, a second actor) beside the same PyTorch figures.
 * Rows "cuda_attention_fa2_bwd_nd": the default kernels' backward again with
 * the op's deterministic = 0 (dQ by fp32 atomics in the dK/dV kernel, no
 * dQ pass; PyTorch's flash backward is non-deterministic too), the
 * deterministic backward's time in "default_ns". Rows
 * "cuda_attention_fa2_bwd_dkv128": the backward with GPA_FA2_DKV128=1 (its
 * dK/dV on the 128-key, 8-warp kernels, a third actor), "default_ns" as
 * well.
 * Then the fp32 rows (f32_rows): our 3xTF32 forward beside PyTorch's
 * memory-efficient backend on fp32. */
#ifdef GPA_HAVE_CUDA_BACKEND
#include "gpuactor.h"
#include "ops/attention/attention.h"

/* A call our kernels decline goes to the host fallback, which a user op
 * without a host implementation refuses (EUNSUPPORTED, with a message). */
static gpa_status fa2_fwd_op(const gpa_op_exec *x) { return gpa__attn_own_fwd_cu(x); }
static gpa_status fa2_bwd_op(const gpa_op_exec *x) { return gpa__attn_own_bwd_cu(x); }

static const gpa_attr_spec fa2_attrs[] = {
    {"scale", GPA_ATTR_FLOAT, 0, offsetof(gpa__attn_params, scale), 0, 0.0, 1, 0},
    {"causal", GPA_ATTR_INT, 0, offsetof(gpa__attn_params, causal), 0, 0.0, 0, 1},
    /* default 1, as the attention op's: the rows without "_nd" time that */
    {"deterministic", GPA_ATTR_INT, 0, offsetof(gpa__attn_params, deterministic), 1, 0.0, 0, 1},
};

static gpa_status simt32_fwd_op(const gpa_op_exec *x) { return gpa__attn_simt32_fwd_cu(x); }
static gpa_status simt32_bwd_op(const gpa_op_exec *x) { return gpa__attn_simt32_bwd_cu(x); }

/* One fp32 row: ours (ns, the 3xTF32 kernels) beside PyTorch's
 * memory-efficient backend (tf TFLOP/s, 0 without it) and the SIMT kernels. */
static void f32_emit(const char *name, const char *shape, const char *note, double ns, double ns_simt, double tf,
                     double fl, int sim) {
  char extra[384];
  snprintf(extra, sizeof extra, "%s,\"torch_efficient_tflops\":%.1f,\"simt_ns\":%.0f,\"simt_tflops\":%.2f", note, tf,
           ns_simt, fl / ns_simt * 1e-3);
  gpa_bench_result r = {.name = name, .backend = sim ? "sim" : "cuda", .shape = shape,
                        .ref = tf > 0 ? "torch_efficient" : "none", .ns = ns,
                        .ref_ns = tf > 0 ? fl / (tf * 1e3) : ns, .flops = fl, .extra = extra};
  gpa_bench_emit(&r);
}

/* fp32 at issue 23's f32 target, B4 S2048 H16 D64, causal and not:
 * "cuda_attention_f32tc_fwd" and "cuda_attention_f32tc_bwd", our own fp32
 * path (the 3xTF32 tensor-core kernels, attention_f32tc.cu and
 * attention_f32tc_bwd.cu), beside PyTorch's memory-efficient backend on
 * fp32 (ratio = ours over "efficient"), with the SIMT kernels' time
 * (attention.cu, forced through gpa__attn_simt32_fwd_cu / _bwd_cu) in
 * "simt_ns". The backward's flops are 2.5 times the forward's, as for the
 * bf16 rows and PyTorch's. */
static void f32_rows(gpa_actor *a, gpa_queue *q, int sim, int reps, int k, const char *note) {
  gpa_op_desc d = {.size = sizeof d, .name = "bench_tc32_fwd", .min_inputs = 3, .max_inputs = 4, .n_outputs = 2,
                   .attrs = fa2_attrs, .n_attrs = 3, .params_size = sizeof(gpa__attn_params), .cuda = fa2_fwd_op};
  gpa_op_desc d2 = d, d3 = d, d4 = d;
  d2.name = "bench_simt32_fwd", d2.cuda = simt32_fwd_op;
  d3.name = "bench_tc32_bwd", d3.min_inputs = 6, d3.max_inputs = 7, d3.n_outputs = 3, d3.cuda = fa2_bwd_op;
  d4 = d3, d4.name = "bench_simt32_bwd", d4.cuda = simt32_bwd_op;
  gpa_registry *reg = gpa_actor_registry(a);
  if (gpa_op_register(reg, &d) != GPA_OK || gpa_op_register(reg, &d2) != GPA_OK ||
      gpa_op_register(reg, &d3) != GPA_OK || gpa_op_register(reg, &d4) != GPA_OK)
    return;
  uint64_t seed = 2324;
  for (int causal = 0; causal <= 1; causal++) {
    const int64_t B = sim ? 1 : 4, H = sim ? 2 : 16, S = sim ? 80 : 2048, D = 64;
    int64_t qs[4] = {B, S, H, D}, ls[3] = {B, H, S};
    gpa_tensor t[9]; /* q, k, v, o, lse, dout, dq, dk, dv */
    for (int i = 0; i < 9; i++) t[i] = gpa_bench_device_tensor(a, q, GPA_F32, i == 4 ? 3 : 4, i == 4 ? ls : qs, &seed);
    gpa_attr at = {"causal", GPA_ATTR_INT, causal, 0};
    gpa_tensor fout[2] = {t[3], t[4]}, bin[6] = {t[5], t[0], t[1], t[2], t[3], t[4]};
    gpa_op_call tc = {"bench_tc32_fwd", t, 3, fout, 2, &at, 1}, simt = {"bench_simt32_fwd", t, 3, fout, 2, &at, 1};
    gpa_op_call tcb = {"bench_tc32_bwd", bin, 6, t + 6, 3, &at, 1}, simtb = {"bench_simt32_bwd", bin, 6, t + 6, 3, &at, 1};
    char err[256] = "", shape[96], args[96];
    const unsigned long long n0 = __atomic_load_n(&gpa__attn_tc32_calls, __ATOMIC_RELAXED);
    const double ns = gpa_bench_batch_ns(q, &tc, k, reps, NULL, err, sizeof err);
    const int ran_tc = __atomic_load_n(&gpa__attn_tc32_calls, __ATOMIC_RELAXED) > n0;
    const double ns_simt = ns > 0 ? gpa_bench_batch_ns(q, &simt, k, reps, NULL, err, sizeof err) : 0;
    /* the backward from the SIMT forward's o and lse (the same values up to rounding) */
    char errb[256] = "";
    const unsigned long long nb0 = __atomic_load_n(&gpa__attn_tc32_bwd_calls, __ATOMIC_RELAXED);
    const double nsb = ns_simt > 0 ? gpa_bench_batch_ns(q, &tcb, k, reps, NULL, errb, sizeof errb) : 0;
    const int ran_tcb = __atomic_load_n(&gpa__attn_tc32_bwd_calls, __ATOMIC_RELAXED) > nb0;
    const double nsb_simt = nsb > 0 ? gpa_bench_batch_ns(q, &simtb, k, reps, NULL, errb, sizeof errb) : 0;
    snprintf(shape, sizeof shape, "f32 B%lld S%lld H%lld D%lld%s", (long long)B, (long long)S, (long long)H,
             (long long)D, causal ? " causal" : "");
    snprintf(args, sizeof args, "f32 %lld %lld %lld %lld %lld %d", (long long)B, (long long)S, (long long)H,
             (long long)H, (long long)D, causal);
    double tf = 0, tfb = 0; /* PyTorch's memory-efficient TFLOP/s, fwd and bwd; 0 without it */
    gpa_bench_torch_row rows[4];
    int nr = sim ? 0 : gpa_bench_torch_sdpa(args, rows, 4);
    for (int i = 0; i < nr; i++)
      if (!strcmp(rows[i].backend, "efficient")) tf = rows[i].fwd, tfb = rows[i].bwd;
    const double fl = 4.0 * (double)(B * H * S * S * D) * (causal ? 0.5 : 1.0);
    if (ns <= 0 || ns_simt <= 0 || !ran_tc)
      fprintf(stderr, "gpa-bench cuda_attention_fa2 %s: %s\n", shape, ran_tc ? err : "the 3xTF32 kernels declined");
    else
      f32_emit("cuda_attention_f32tc_fwd", shape, note, ns, ns_simt, tf, fl, sim);
    if (nsb <= 0 || nsb_simt <= 0 || !ran_tcb)
      fprintf(stderr, "gpa-bench cuda_attention_fa2 %s bwd: %s\n", shape,
              ns_simt <= 0 ? "no forward" : ran_tcb ? errb : "the 3xTF32 kernels declined");
    else
      f32_emit("cuda_attention_f32tc_bwd", shape, note, nsb, nsb_simt, tfb, 2.5 * fl, sim);
    gpa_sync_batch(q, NULL);
    for (int i = 0; i < 9; i++) gpa_buffer_release(a, t[i].buffer);
  }
}

/* Registers the forced forward and backward ops on actor a; 0 if refused. */
static int fa2_register(gpa_actor *a) {
  gpa_op_desc d = {.size = sizeof d, .name = "bench_fa2_fwd", .min_inputs = 3, .max_inputs = 4, .n_outputs = 2,
                   .attrs = fa2_attrs, .n_attrs = 3, .params_size = sizeof(gpa__attn_params), .cuda = fa2_fwd_op};
  gpa_op_desc d2 = d;
  d2.name = "bench_fa2_bwd", d2.min_inputs = 6, d2.max_inputs = 7, d2.n_outputs = 3, d2.cuda = fa2_bwd_op;
  return gpa_op_register(gpa_actor_registry(a), &d) == GPA_OK && gpa_op_register(gpa_actor_registry(a), &d2) == GPA_OK;
}

/* An actor created with the switch env (GPA_FA2_EXACT, GPA_FA2_DKV128)
 * set to val (NULL: unset, the default), the caller's setting restored:
 * the switches are read at actor creation. */
static gpa_actor *fa2_actor(const char *env, const char *val, int *sim) {
  const char *was = getenv(env);
  char saved[16] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  if (val) setenv(env, val, 1);
  else unsetenv(env);
  gpa_actor *a = gpa_bench_cuda_actor("cuda_attention_fa2", sim);
  if (was) setenv(env, saved, 1);
  else unsetenv(env);
  if (a && !fa2_register(a)) {
    gpa_actor_destroy(a);
    a = NULL;
  }
  return a;
}

/* One shape's tensors (q, k, v, dout, o, lse, dq, dk, dv: random, lse
 * f32) and the bench's forward and backward calls over them on actor a;
 * the calls point into the set, which stays where it was made. */
typedef struct fa2_set {
  gpa_tensor t[9], fout[2], bin[6];
  gpa_attr at;
  gpa_op_call fwd, bwd;
} fa2_set;

static void fa2_set_init(fa2_set *s, gpa_actor *a, gpa_queue *q, int dt, const int64_t qs[4], int causal,
                         uint64_t *seed) {
  int64_t ls[3] = {qs[0], qs[2], qs[1]};
  for (int i = 0; i < 9; i++)
    s->t[i] = gpa_bench_device_tensor(a, q, i == 5 ? GPA_F32 : dt, i == 5 ? 3 : 4, i == 5 ? ls : qs, seed);
  s->at = (gpa_attr){"causal", GPA_ATTR_INT, causal, 0};
  s->fout[0] = s->t[4], s->fout[1] = s->t[5];
  const int order[6] = {3, 0, 1, 2, 4, 5}; /* dout, q, k, v, o, lse */
  for (int i = 0; i < 6; i++) s->bin[i] = s->t[order[i]];
  s->fwd = (gpa_op_call){"bench_fa2_fwd", s->t, 3, s->fout, 2, &s->at, 1};
  s->bwd = (gpa_op_call){"bench_fa2_bwd", s->bin, 6, s->t + 6, 3, &s->at, 1};
}

static void fa2_set_release(fa2_set *s, gpa_actor *a) {
  for (int i = 0; i < 9; i++) gpa_buffer_release(a, s->t[i].buffer);
}

/* The class kernels (GPA_FA2_EXACT=0: actor ac) on one shape, beside the
 * same PyTorch figures tf[2]: rows "cuda_attention_fa2c_fwd" / "_bwd", so
 * that one run compares them with the default kernels' "cuda_attention_fa2_*"
 * rows. The exact kernels' calls count (gpa__attn_fa2x_*_calls): should
 * they run here, a line instead of a row. */
static void fa2c_rows(gpa_actor *ac, int dt, const int64_t qs[4], int causal, const char *shape, const double tf[2],
                      double flops, const char *note, int sim, int reps, int k, uint64_t *seed) {
  gpa_queue *q = gpa_actor_default_queue(ac);
  fa2_set fs;
  fa2_set_init(&fs, ac, q, dt, qs, causal, seed);
  char err[256] = "", extra[384];
  const unsigned long long f0 = __atomic_load_n(&gpa__attn_fa2x_fwd_calls, __ATOMIC_RELAXED);
  const unsigned long long b0 = __atomic_load_n(&gpa__attn_fa2x_bwd_calls, __ATOMIC_RELAXED);
  double ns[2];
  ns[0] = gpa_bench_batch_ns(q, &fs.fwd, k, reps, NULL, err, sizeof err);
  ns[1] = ns[0] > 0 ? gpa_bench_batch_ns(q, &fs.bwd, k, reps, NULL, err, sizeof err) : 0;
  const int exact[2] = {__atomic_load_n(&gpa__attn_fa2x_fwd_calls, __ATOMIC_RELAXED) > f0,
                        __atomic_load_n(&gpa__attn_fa2x_bwd_calls, __ATOMIC_RELAXED) > b0};
  for (int dir = 0; dir < 2; dir++) {
    if (ns[dir] <= 0 || exact[dir]) {
      fprintf(stderr, "gpa-bench cuda_attention_fa2 %s %s (GPA_FA2_EXACT=0): %s\n", shape, dir ? "bwd" : "fwd",
              ns[dir] > 0 ? "the exact-head-dim kernels ran" : err);
      continue;
    }
    const double fl = dir ? 2.5 * flops : flops;
    snprintf(extra, sizeof extra, "%s,\"torch_flash_tflops\":%.1f,\"variant\":\"GPA_FA2_EXACT=0\"", note, tf[dir]);
    gpa_bench_result r = {.name = dir ? "cuda_attention_fa2c_bwd" : "cuda_attention_fa2c_fwd",
                          .backend = sim ? "sim" : "cuda", .shape = shape, .ref = tf[dir] > 0 ? "torch_flash" : "none",
                          .ns = ns[dir], .ref_ns = tf[dir] > 0 ? fl / (tf[dir] * 1e3) : ns[dir], .flops = fl,
                          .extra = extra};
    gpa_bench_emit(&r);
  }
  gpa_sync_batch(q, NULL);
  fa2_set_release(&fs, ac);
}

/* The backward with its dK/dV on the 128-key, 8-warp kernels
 * (GPA_FA2_DKV128=1: actor ak; dQ from the same dQ pass as the default's)
 * on one shape: row "cuda_attention_fa2_bwd_dkv128" beside PyTorch's flash
 * backward (tf TFLOP/s) and the default backward's time (default_ns, from
 * the same run). The forward gives o and lse, untimed. Should the kernels
 * decline (gpa__attn_fa2k_bwd_calls), a line instead of a row. */
static void fa2k_row(gpa_actor *ak, int dt, const int64_t qs[4], int causal, const char *shape, double tf,
                     double flops, double default_ns, const char *note, int sim, int reps, int k, uint64_t *seed) {
  gpa_queue *q = gpa_actor_default_queue(ak);
  fa2_set fs;
  fa2_set_init(&fs, ak, q, dt, qs, causal, seed);
  char err[256] = "", extra[384];
  double ns = gpa_bench_batch_ns(q, &fs.fwd, 1, 1, NULL, err, sizeof err);
  const unsigned long long b0 = __atomic_load_n(&gpa__attn_fa2k_bwd_calls, __ATOMIC_RELAXED);
  ns = ns > 0 ? gpa_bench_batch_ns(q, &fs.bwd, k, reps, NULL, err, sizeof err) : 0;
  const int ran = __atomic_load_n(&gpa__attn_fa2k_bwd_calls, __ATOMIC_RELAXED) > b0;
  if (ns <= 0 || !ran) {
    fprintf(stderr, "gpa-bench cuda_attention_fa2 %s bwd (GPA_FA2_DKV128=1): %s\n", shape,
            ns > 0 ? "the 128-key dK/dV kernels declined" : err);
  } else {
    const double fl = 2.5 * flops;
    snprintf(extra, sizeof extra, "%s,\"torch_flash_tflops\":%.1f,\"variant\":\"GPA_FA2_DKV128=1\",\"default_ns\":%.0f",
             note, tf, default_ns);
    gpa_bench_result r = {.name = "cuda_attention_fa2_bwd_dkv128", .backend = sim ? "sim" : "cuda", .shape = shape,
                          .ref = tf > 0 ? "torch_flash" : "none", .ns = ns, .ref_ns = tf > 0 ? fl / (tf * 1e3) : ns,
                          .flops = fl, .extra = extra};
    gpa_bench_emit(&r);
  }
  gpa_sync_batch(q, NULL);
  fa2_set_release(&fs, ak);
}

void gpa_bench_cuda_attention_fa2(void) {
  int sim, simc;
  gpa_actor *a = fa2_actor("GPA_FA2_EXACT", NULL, &sim); /* the default kernels */
  if (!a) return;
  gpa_actor *ac = fa2_actor("GPA_FA2_EXACT", "0", &simc);      /* the class kernels */
  gpa_actor *ak = fa2_actor("GPA_FA2_DKV128", "1", &simc);     /* the 128-key dK/dV kernels */
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(5), k = sim ? 1 : 5, ndt = gpa_bench_full() ? 2 : 1;
  const char *note = sim ? "\"note\":\"simulated device: plumbing only, the numbers mean nothing\""
                         : "\"note\":\"device time from CUDA events\"";
  static const int64_t shapes[][3] = {{16, 4096, 128}, {32, 4096, 64}}; /* H, S, D at B = 4 */
  uint64_t seed = 2323;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int dti = 0; dti < ndt; dti++)
      for (int causal = 0; causal <= 1; causal++) {
        const int dt = dti ? GPA_F16 : GPA_BF16;
        const int64_t B = sim ? 1 : 4, H = sim ? 2 : shapes[si][0], S = sim ? 80 : shapes[si][1], D = shapes[si][2];
        int64_t qs[4] = {B, S, H, D};
        fa2_set fs;
        fa2_set_init(&fs, a, q, dt, qs, causal, &seed);
        char err[256] = "", shape[96], args[96], extra[384];
        double ns[2];
        const unsigned long long f0 = __atomic_load_n(&gpa__attn_fa2x_fwd_calls, __ATOMIC_RELAXED);
        const unsigned long long b0 = __atomic_load_n(&gpa__attn_fa2x_bwd_calls, __ATOMIC_RELAXED);
        ns[0] = gpa_bench_batch_ns(q, &fs.fwd, k, reps, NULL, err, sizeof err); /* also the backward's o and lse */
        ns[1] = ns[0] > 0 ? gpa_bench_batch_ns(q, &fs.bwd, k, reps, NULL, err, sizeof err) : 0;
        const int exact[2] = {__atomic_load_n(&gpa__attn_fa2x_fwd_calls, __ATOMIC_RELAXED) > f0,
                              __atomic_load_n(&gpa__attn_fa2x_bwd_calls, __ATOMIC_RELAXED) > b0};
        /* the non-deterministic backward (deterministic = 0) on the same inputs */
        gpa_attr atn[2] = {fs.at, {"deterministic", GPA_ATTR_INT, 0, 0}};
        gpa_op_call bwdn = fs.bwd;
        bwdn.attrs = atn, bwdn.n_attrs = 2;
        char errn[256] = "";
        const unsigned long long n0 = __atomic_load_n(&gpa__attn_fa2nd_bwd_calls, __ATOMIC_RELAXED);
        const double ns_nd = ns[0] > 0 ? gpa_bench_batch_ns(q, &bwdn, k, reps, NULL, errn, sizeof errn) : 0;
        const int ran_nd = __atomic_load_n(&gpa__attn_fa2nd_bwd_calls, __ATOMIC_RELAXED) > n0;
        snprintf(shape, sizeof shape, "%s B%lld S%lld H%lld D%lld%s", gpa_dtype_name(dt), (long long)B, (long long)S,
                 (long long)H, (long long)D, causal ? " causal" : "");
        snprintf(args, sizeof args, "%s %lld %lld %lld %lld %lld %d", gpa_dtype_name(dt), (long long)B, (long long)S,
                 (long long)H, (long long)H, (long long)D, causal);
        double tf[2] = {0, 0}; /* PyTorch's FlashAttention-2 TFLOP/s, fwd and bwd; 0 without it */
        gpa_bench_torch_row rows[4];
        int nr = sim ? 0 : gpa_bench_torch_sdpa(args, rows, 4);
        for (int i = 0; i < nr; i++)
          if (!strcmp(rows[i].backend, "flash")) tf[0] = rows[i].fwd, tf[1] = rows[i].bwd;
        const double flops = 4.0 * (double)(B * H * S * S * D) * (causal ? 0.5 : 1.0);
        for (int dir = 0; dir < 2; dir++) {
          if (ns[dir] <= 0) {
            fprintf(stderr, "gpa-bench cuda_attention_fa2 %s %s: %s\n", shape, dir ? "bwd" : "fwd", err);
            continue;
          }
          const double fl = dir ? 2.5 * flops : flops;
          snprintf(extra, sizeof extra, "%s,\"torch_flash_tflops\":%.1f,\"kernels\":\"%s\"", note, tf[dir],
                   exact[dir] ? "exact" : "class");
          gpa_bench_result r = {.name = dir ? "cuda_attention_fa2_bwd" : "cuda_attention_fa2_fwd",
                                .backend = sim ? "sim" : "cuda", .shape = shape,
                                .ref = tf[dir] > 0 ? "torch_flash" : "none", .ns = ns[dir],
                                .ref_ns = tf[dir] > 0 ? fl / (tf[dir] * 1e3) : ns[dir], .flops = fl, .extra = extra};
          gpa_bench_emit(&r);
        }
        if (ns_nd <= 0 || !ran_nd) {
          fprintf(stderr, "gpa-bench cuda_attention_fa2 %s bwd (deterministic=0): %s\n", shape,
                  ns_nd > 0 ? "the non-deterministic kernels declined" : ns[0] > 0 ? errn : "no forward");
        } else {
          const double fl = 2.5 * flops;
          snprintf(extra, sizeof extra,
                   "%s,\"torch_flash_tflops\":%.1f,\"kernels\":\"%s\",\"deterministic\":0,\"default_ns\":%.0f",
                   note, tf[1], exact[1] ? "exact" : "class", ns[1]);
          gpa_bench_result r = {.name = "cuda_attention_fa2_bwd_nd", .backend = sim ? "sim" : "cuda", .shape = shape,
                                .ref = tf[1] > 0 ? "torch_flash" : "none", .ns = ns_nd,
                                .ref_ns = tf[1] > 0 ? fl / (tf[1] * 1e3) : ns_nd, .flops = fl, .extra = extra};
          gpa_bench_emit(&r);
        }
        gpa_sync_batch(q, NULL);
        fa2_set_release(&fs, a);
        if (ac) fa2c_rows(ac, dt, qs, causal, shape, tf, flops, note, sim, reps, k, &seed);
        if (ak) fa2k_row(ak, dt, qs, causal, shape, tf[1], flops, ns[1], note, sim, reps, k, &seed);
      }
  if (ac) gpa_actor_destroy(ac);
  if (ak) gpa_actor_destroy(ak);
  f32_rows(a, q, sim, reps, k, note);
  gpa_actor_destroy(a);
}
#else
void gpa_bench_cuda_attention_fa2(void) {}
#endif
