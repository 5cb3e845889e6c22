/* The pieces of gpa-train-lm (examples/train_lm.c): a byte-level language
 * model whose every forward, backward and optimizer op runs through one
 * gpuactor queue. See docs/training.md for the model and the op sequence. */
#ifndef GPA_EXAMPLES_LM_H
#define GPA_EXAMPLES_LM_H
#include <stdint.h>
#include <stdio.h>

#include "gpuactor.h"

/* ---- text (data.c) -------------------------------------------------------- */

typedef struct lm_text {
  uint8_t *bytes;   /* the file */
  int64_t n;        /* its length */
  int32_t *tok;     /* token of each byte */
  int64_t n_train;  /* tokens [0, n_train) train, [n_train, n) evaluation */
  int vocab;        /* distinct bytes */
  uint8_t byte_of[256];
  double unigram_nats; /* entropy of the byte distribution of the whole text */
} lm_text;

int lm_text_load(const char *path, double eval_fraction, lm_text *t);
void lm_text_free(lm_text *t);

/* A fixed-seed generator (splitmix64), one per purpose. */
typedef struct lm_rng { uint64_t s; } lm_rng;
uint64_t lm_rng_next(lm_rng *r);
double lm_rng_uniform(lm_rng *r); /* [0, 1) */
double lm_rng_normal(lm_rng *r);

/* B windows of L+1 tokens from [lo, hi): ids = window[0..L), targets =
 * window[1..L]. Random starts from rng, or (rng NULL) evenly spaced ones
 * shifted by `shift` windows (the evaluation batches). */
void lm_sample(const lm_text *t, int64_t lo, int64_t hi, int B, int L, lm_rng *rng, int shift, int32_t *ids,
               int32_t *targets);

/* ---- model (model.c) ------------------------------------------------------ */

typedef struct lm_config {
  int vocab;    /* tokens */
  int dim;      /* model width D */
  int heads;    /* attention heads (D / heads = head dim) */
  int blocks;   /* causal conv blocks, dilations 1, 2, 4, ... */
  int kernel;   /* conv taps */
  int ctx;      /* sequence length L */
  int batch;    /* sequences per step B */
  int bf16;     /* mixed precision (--bf16): bf16 GEMM weights and activations, fp32 masters (model.c) */
  int cast_weights; /* --bf16 --cast-weights: a cast per bf16 weight copy at every forward, rather than
                       AdamW writing the copies (adamw_multi's bf16_copies); the same bits */
} lm_config;

enum { LM_MAX_BLOCKS = 8, LM_MAX_PARAMS = 8 * LM_MAX_BLOCKS + 16, LM_MAX_BUFS = 512 };

typedef struct lm_param {
  char name[40];
  gpa_tensor p, g, m, v; /* value, gradient (a view of lm_model.grads), AdamW moments */
  gpa_tensor w;          /* what the forward and backward read: p, or under bf16 p's bf16 copy (GEMM
                            weights and biases): cast from p once at init, then written by each AdamW
                            step beside p (or, with cast_weights, cast at the start of every forward) */
  int64_t n;
  int64_t g_off;         /* where g starts in lm_model.grads, in floats */
  int ready;             /* lm_backward submitted the op that writes g */
  int decay;             /* 1: weight decay applies (matrices) */
  float *host;           /* the initial values (also used by --gradcheck) */
} lm_param;

typedef struct lm_conv_block {
  lm_param *ln_g, *ln_b, *W, *b;
  int dilation;
  gpa_tensor x;        /* block input [B,L,D] (the previous block's output) */
  gpa_tensor mean, rstd;
  gpa_tensor u;        /* layernorm(x) [B,L,D] in the activation dtype: the conv's input, kept for its backward */
  gpa_tensor c;        /* conv1d(u) [B,L,D] (channels last, layout nlc): the GELU input */
} lm_conv_block;

typedef struct lm_model {
  lm_config cfg;
  gpa_actor *a;
  gpa_queue *q;
  gpa_status err;      /* first failed submit, sticky */
  char err_msg[256];
  gpa_buffer_id bufs[LM_MAX_BUFS];
  int n_bufs;
  lm_param params[LM_MAX_PARAMS];
  int n_params;
  int64_t n_weights;
  /* inputs */
  gpa_tensor ids, targets;
  /* embedding, conv blocks, attention block, head */
  lm_param *emb;
  lm_conv_block blk[LM_MAX_BLOCKS];
  lm_param *a_ln_g, *a_ln_b, *Wq, *Wk, *Wv, *Wo, *bo;
  gpa_tensor xa, a_mean, a_rstd, ua, q4, k4, v4, o4, lse, xb;
  lm_param *f_ln_g, *f_ln_b, *Wh, *bh;
  gpa_tensor f_mean, f_rstd, uf, logits, loss;
  /* gradients of activations and scratch */
  gpa_tensor dlogits, dx, d1, d2, d3, dq4, dk4, dv4, do4, tmp;
  /* the activation dtype's side of f32 tensors that cross into the GEMMs
   * (bf16 under cfg.bf16, written and read by the ops' mixed-dtype forms;
   * in f32 they are the f32 tensors themselves): layernorm outputs ua_lp,
   * uf_lp (the conv blocks' u is in the activation dtype itself); a
   * branch's output before the residual add tlp; gradients d1lp, d2lp,
   * dxlp (dx's bf16 copy). Under bf16 the f32 ones (ua, uf, tmp, d1, d2)
   * are not allocated. */
  gpa_tensor ua_lp, uf_lp, tlp, d1lp, d2lp, dxlp;
  int64_t casts;   /* cast ops submitted: the bf16 weight copies' (at init, or every forward with cast_weights) */
  /* every parameter's gradient in one buffer, the last parameter first (the
   * order the backward produces them): data-parallel buckets are ranges */
  gpa_tensor grads;
  int64_t n_grads; /* floats, each parameter's padded to 16 */
  /* called by lm_backward after each op that writes gradients (their
   * params' ready set): data-parallel training fences buckets there */
  void (*on_grads)(struct lm_model *m, void *user);
  void *on_grads_user;
} lm_model;

/* Creates the buffers and uploads the initial parameters (seeded). */
int lm_model_init(lm_model *m, gpa_actor *a, const lm_config *cfg, uint64_t seed);
void lm_model_free(lm_model *m);
/* Submits (without waiting) the uploads of one batch's ids and targets. */
void lm_upload_batch(lm_model *m, const int32_t *ids, const int32_t *targets);
/* Submits the forward pass up to the loss (a scalar in m->loss). */
void lm_forward(lm_model *m);
/* Submits the backward pass: every parameter's gradient into its .g. */
void lm_backward(lm_model *m);
/* Submits one AdamW step over every parameter (step is 1-based): one
 * adamw_multi message per 16 parameters, weight decay on the matrices. */
void lm_adamw(lm_model *m, double lr, double weight_decay, int step);
/* The same for params[lo..hi], on queue q (data-parallel: a bucket's, on
 * the queue that reduced its gradients). */
void lm_adamw_range(lm_model *m, gpa_queue *q, int lo, int hi, double lr, double weight_decay, int step);
/* Reports the first submit error, if any (returns nonzero then). */
int lm_failed(const lm_model *m, const char *prog);

/* ---- data-parallel training (dp.c) ---------------------------------------- */

enum { LM_DP_MAX = 8 };
typedef struct lm_dp_bucket {
  int lo_param, hi_param; /* params[lo_param..hi_param] */
  int64_t lo, hi;         /* their gradients: lm_model.grads[lo, hi) */
} lm_dp_bucket;

typedef struct lm_dp {
  int n;           /* ranks in this process */
  int size, rank0; /* ranks in all, this process's first (MPI: one rank per process) */
  gpa_actor *a[LM_DP_MAX];
  lm_model m[LM_DP_MAX];
  gpa_comm *c[LM_DP_MAX];
  gpa_queue *q2[LM_DP_MAX]; /* each rank's reductions and optimizer */
  lm_dp_bucket b[LM_MAX_PARAMS];
  int n_buckets;
  gpa_handle *fence[LM_DP_MAX][LM_MAX_PARAMS]; /* a bucket's gradients are written */
  int next_fence[LM_DP_MAX];
  struct lm_dp_hook {
    struct lm_dp *d;
    int r;
  } hook[LM_DP_MAX];
  gpa_status err;
  char err_msg[256];
} lm_dp;

/* n replicas (cfg->batch sequences each) on device kind `device` ("cpu",
 * "sim", "cuda"; rank r on sim:r or cuda:r), identical parameters (seed),
 * one communicator, gradient buckets of about bucket_kb; threads: each cpu
 * actor's. mpi: this process is one rank of n MPI processes (cpu actors,
 * the MPI transport; bootstraps MPI). Returns 0, or -1 with d->err_msg.
 * lm_dp_free in either case. */
int lm_dp_init(lm_dp *d, int n, const char *device, const lm_config *cfg, uint64_t seed, int bucket_kb,
               uint32_t threads, int mpi);
void lm_dp_free(lm_dp *d);
/* One training step over the global batch (n x cfg->batch sequences; rank r
 * takes the r-th shard): forward, backward, bucketed gradient averaging on
 * the second queue (overlapping the backward unless overlap is 0), AdamW.
 * *loss: the global batch's mean loss (averaged over the ranks by the
 * communicator too); stats: this process's first rank's batch. */
int lm_dp_step(lm_dp *d, const int32_t *ids, const int32_t *tg, double lr, double wd, int step, int overlap,
               float *loss, gpa_batch_stats *stats);

/* Monotonic clock, ns. */
int64_t lm_now_ns(void);

#endif
