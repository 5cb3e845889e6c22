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
 * ..._causal) contains text, e.g. one point of the full sweep. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_nn_host.h"
#include "kernels/host/attention.h"

typedef struct att_ctx {
  gpa__attn_geom g;
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
  double ns, rns;
  gpa_bench_pair_settled(reps, bwd ? run_bwd : run_fwd, &c, bwd ? naive_bwd : naive_fwd, &c, &ns, &rns, NULL, NULL);
  char extra[96];
  snprintf(extra, sizeof extra, "\"threads\":%d,\"blas_threads\":%d", gpa_bench_host_threads(),
           openblas_get_num_threads());
  gpa_bench_result r = {.name = bwd ? "attention_bwd" : "attention_fwd", .backend = "cpu", .shape = shape,
                        .ref = "naive_sgemm_softmax", .ns = ns, .ref_ns = rns,
                        .flops = bwd ? 2.5 * work : work, .extra = extra};
  gpa_bench_emit(&r);
out:
  free(c.q); free(c.k); free(c.v); free(c.o); free(c.lse); free(c.dout); free(c.dq); free(c.dk); free(c.dv);
  free(c.P); free(c.dP);
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
