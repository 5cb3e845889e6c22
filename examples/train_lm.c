/* gpa-train-lm: a small byte-level language model trained end to end through
 * the actor, on the default device (CUDA when present, else the host).
 *
 * Model (examples/lm/model.c, docs/training.md): embedding -> causal dilated
 * conv1d blocks (layernorm, conv, GELU, residual) -> a causal multi-head
 * attention block (layernorm, q/k/v projections, attention, output
 * projection, residual) -> layernorm -> linear head -> cross-entropy. The
 * backward is written out op by op; AdamW updates every parameter in place.
 *
 * Every step is one batch: gpa_batch_begin, the uploads of the step's ids and
 * targets, every forward/backward/optimizer op submitted without waiting, a
 * readback of the loss, gpa_sync_batch; the loss is read from the readback
 * handle after the sync (a deferred readback). Evaluation batches are the
 * same with the forward only.
 *
 * Text: examples/data/genesis-kjv.txt (public domain; see its README), one
 * token per distinct byte, the last 10% held out for the evaluation loss.
 * The run prints the unigram entropy of the text next to the losses: a model
 * that learned nothing about context cannot go below it.
 *
 * --bf16: mixed precision (examples/lm/model.c, docs/training.md): fp32
 * master parameters, gradients and AdamW state; bf16 copies of the GEMM
 * weights written by each AdamW step beside the masters (--cast-weights:
 * cast at each forward instead, the same bits), bf16 activations through
 * conv1d, linear, attention and the ops between them; layernorm, the
 * residual stream, the embedding and the loss fp32.
 *
 * --gradcheck compares every parameter's gradient with central finite
 * differences of the loss on a small configuration and exits 1 on a
 * mismatch. GPA_TRACE=path (read by the library) writes the run's trace.
 *
 * --data-parallel N trains N replicas in this process, one actor per device
 * (examples/lm/dp.c): --batch is the global batch, each rank takes batch/N
 * sequences of it; gradients are averaged in buckets (--bucket-kb) on a
 * second queue while the backward goes on (--no-overlap: after it). The
 * devices: GPA_DEVICE's kind (cpu, sim -> sim:0..N-1 with GPA_SIM_DEVICES
 * set to N if unset, cuda -> cuda:0..N-1). Under `mpirun -np N` the ranks
 * are the processes instead, one cpu actor each, through MPI; rank 0
 * prints. --parity-check trains 1 rank x batch and then N ranks x batch/N
 * from the same start and data and exits 1 unless every step's loss agrees
 * within --parity-tol (relative).
 *
 * Exit status: 0 when the loss went down (the mean of the last steps below
 * the first step's loss; with --require-below-unigram also the evaluation
 * loss below the unigram entropy), 1 otherwise, 2 on errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lm/lm.h"

#ifndef GPA_LM_DATA
#define GPA_LM_DATA "examples/data/genesis-kjv.txt"
#endif

static const char *prog = "gpa-train-lm";

typedef struct opts {
  int steps, print_every, eval_every, eval_batches, quiet, gradcheck, below_unigram, graphs, losses;
  int dp, bucket_kb, no_overlap, parity; /* data-parallel: ranks (0: off), bucket size, baseline, parity check */
  double lr, weight_decay, parity_tol;
  uint64_t seed;
  const char *data;
  lm_config cfg;
} opts;

static int check(gpa_status st, const char *what) {
  if (st == GPA_OK) return 0;
  fprintf(stderr, "%s: %s failed: %s (%s)\n", prog, what, gpa_status_name(st), gpa_last_error_message());
  return 1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: %s [--steps N] [--batch B] [--ctx L] [--dim D] [--heads H] [--blocks N] [--kernel K]\n"
          "          [--lr F] [--wd F] [--seed N] [--data PATH] [--eval-every N] [--print-every N]\n"
          "          [--quiet] [--require-below-unigram] [--gradcheck] [--graphs] [--losses] [--bf16 [--cast-weights]]\n"
          "          [--data-parallel N [--bucket-kb K] [--no-overlap] [--parity-check [--parity-tol F]]]\n",
          prog);
}

static int parse(int argc, char **argv, opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int *ip = !strcmp(a, "--steps")         ? &o->steps
              : !strcmp(a, "--batch")       ? &o->cfg.batch
              : !strcmp(a, "--ctx")         ? &o->cfg.ctx
              : !strcmp(a, "--dim")         ? &o->cfg.dim
              : !strcmp(a, "--heads")       ? &o->cfg.heads
              : !strcmp(a, "--blocks")      ? &o->cfg.blocks
              : !strcmp(a, "--kernel")      ? &o->cfg.kernel
              : !strcmp(a, "--eval-every")  ? &o->eval_every
              : !strcmp(a, "--print-every") ? &o->print_every
              : !strcmp(a, "--data-parallel") ? &o->dp
              : !strcmp(a, "--bucket-kb")   ? &o->bucket_kb
                                            : NULL;
    if (ip && v) {
      *ip = atoi(v);
      i++;
    } else if (!strcmp(a, "--lr") && v) {
      o->lr = atof(argv[++i]);
    } else if (!strcmp(a, "--wd") && v) {
      o->weight_decay = atof(argv[++i]);
    } else if (!strcmp(a, "--seed") && v) {
      o->seed = strtoull(argv[++i], NULL, 0);
    } else if (!strcmp(a, "--data") && v) {
      o->data = argv[++i];
    } else if (!strcmp(a, "--parity-tol") && v) {
      o->parity_tol = atof(argv[++i]);
    } else if (!strcmp(a, "--no-overlap")) {
      o->no_overlap = 1;
    } else if (!strcmp(a, "--parity-check")) {
      o->parity = 1;
    } else if (!strcmp(a, "--quiet")) {
      o->quiet = 1;
    } else if (!strcmp(a, "--graphs")) {
      o->graphs = 1;
    } else if (!strcmp(a, "--bf16")) {
      o->cfg.bf16 = 1;
    } else if (!strcmp(a, "--cast-weights")) {
      o->cfg.cast_weights = 1;
    } else if (!strcmp(a, "--losses")) {
      o->losses = 1;
    } else if (!strcmp(a, "--gradcheck")) {
      o->gradcheck = 1;
    } else if (!strcmp(a, "--require-below-unigram")) {
      o->below_unigram = 1;
    } else {
      usage();
      return -1;
    }
  }
  const lm_config *c = &o->cfg;
  if (o->gradcheck && c->bf16) {
    fprintf(stderr, "%s: --gradcheck checks fp32 gradients against fp32 finite differences; not with --bf16\n", prog);
    return -1;
  }
  if (c->cast_weights && !c->bf16) {
    fprintf(stderr, "%s: --cast-weights is a --bf16 option (fp32 runs have no bf16 weight copies)\n", prog);
    return -1;
  }
  if (o->steps < 1 || c->batch < 1 || c->ctx < 2 || c->dim < 1 || c->heads < 1 || c->dim % c->heads ||
      c->dim / c->heads > 256 || c->blocks < 0 || c->blocks > LM_MAX_BLOCKS || c->kernel < 1 || !(o->lr > 0) ||
      o->weight_decay < 0 || o->eval_every < 0 || o->print_every < 0 || o->dp < 0 || o->dp > LM_DP_MAX ||
      (o->dp && c->batch % o->dp) || o->bucket_kb < 1 || (o->parity && o->dp < 1) || !(o->parity_tol >= 0)) {
    fprintf(stderr, "%s: bad arguments (steps, batch >= 1; ctx >= 2; dim a multiple of heads, head dim <= 256; "
                    "blocks 0..%d; lr > 0; --data-parallel 1..%d dividing --batch; --parity-check with it)\n",
            prog, LM_MAX_BLOCKS, LM_DP_MAX);
    return -1;
  }
  return 0;
}

/* Reads a scalar f32 readback after its batch was synced. */
static int read_scalar(gpa_handle *h, float *out) {
  const void *data = NULL;
  uint64_t size = 0;
  if (check(gpa_handle_data(h, &data, &size), "gpa_handle_data")) return -1;
  if (size != sizeof(float)) return -1;
  memcpy(out, data, sizeof(float));
  return 0;
}

/* One batch: uploads, forward (+ backward + AdamW when lr > 0), the loss as a
 * deferred readback, sync. Returns 0 and the loss, or -1. */
static int graphs; /* --graphs: every batch replays as a CUDA graph once recorded (docs/graphs.md) */

static int run_batch(lm_model *m, const char *label, const int32_t *ids, const int32_t *tg, int train, double lr,
                     double wd, int step, float *loss, gpa_batch_stats *st) {
  gpa_batch_options bo = {.size = sizeof bo, .graph = graphs ? GPA_GRAPH_ON : GPA_GRAPH_DEFAULT};
  if (check(gpa_batch_begin_opts(m->q, label, &bo), "gpa_batch_begin")) return -1;
  lm_upload_batch(m, ids, tg);
  lm_forward(m);
  if (train) {
    lm_backward(m);
    lm_adamw(m, lr, wd, step);
  }
  gpa_handle *h = NULL;
  if (!m->err && check(gpa_readback(m->q, &m->loss, &h), "gpa_readback")) m->err = GPA_EINVAL;
  *st = (gpa_batch_stats){.size = sizeof *st};
  gpa_status ss = gpa_sync_batch(m->q, st);
  int bad = lm_failed(m, prog) || check(ss, "gpa_sync_batch");
  if (ss != GPA_OK) fprintf(stderr, "%s: first error of the batch: %s\n", prog, st->first_error_message);
  if (!bad) bad = read_scalar(h, loss) != 0;
  gpa_handle_release(h);
  return bad ? -1 : 0;
}

static double evaluate(lm_model *m, const lm_text *t, int n_batches, int32_t *ids, int32_t *tg) {
  const lm_config *c = &m->cfg;
  double sum = 0;
  for (int i = 0; i < n_batches; i++) {
    lm_sample(t, t->n_train, t->n, c->batch, c->ctx, NULL, i, ids, tg);
    float l;
    gpa_batch_stats st;
    if (run_batch(m, "eval", ids, tg, 0, 0, 0, 0, &l, &st)) return NAN;
    sum += l;
  }
  return sum / n_batches;
}

/* ---- --gradcheck --------------------------------------------------------- */

static int read_tensor(lm_model *m, const gpa_tensor *t, float *out, int64_t n) {
  gpa_handle *h = NULL;
  if (check(gpa_readback(m->q, t, &h), "gpa_readback")) return -1;
  int bad = check(gpa_await(h, -1), "gpa_await");
  const void *data = NULL;
  uint64_t size = 0;
  if (!bad) bad = check(gpa_handle_data(h, &data, &size), "gpa_handle_data") || size != sizeof(float) * (uint64_t)n;
  if (!bad) memcpy(out, data, size);
  gpa_handle_release(h);
  return bad ? -1 : 0;
}

static int loss_at(lm_model *m, lm_param *p, const float *values, const int32_t *ids, const int32_t *tg,
                   float *loss) {
  if (check(gpa_upload(m->q, &p->p, values, sizeof(float) * (uint64_t)p->n, 0, NULL), "gpa_upload")) return -1;
  gpa_batch_stats st;
  return run_batch(m, "gradcheck", ids, tg, 0, 0, 0, 0, loss, &st);
}

/* For every parameter tensor: the directional derivative of the loss along
 * g/|g| (which must equal |g|) and along a random unit direction r (which
 * must equal g.r), by central differences. */
static int gradcheck(lm_model *m, const lm_text *t) {
  const lm_config *c = &m->cfg;
  int64_t n_tok = (int64_t)c->batch * c->ctx;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_tok), *tg = malloc(sizeof(int32_t) * (size_t)n_tok);
  lm_rng rng = {7};
  if (!ids || !tg) return 2;
  lm_sample(t, 0, t->n_train, c->batch, c->ctx, &rng, 0, ids, tg);
  float l0;
  gpa_batch_stats st;
  if (check(gpa_batch_begin(m->q, "gradcheck"), "gpa_batch_begin")) return 2;
  lm_upload_batch(m, ids, tg);
  lm_forward(m);
  lm_backward(m);
  if (check(gpa_sync_batch(m->q, &st), "gpa_sync_batch") || lm_failed(m, prog)) return 2;
  int worst = 0;
  double worst_err = 0;
  const double eps = 2e-2;
  for (int i = 0; i < m->n_params; i++) {
    lm_param *p = &m->params[i];
    float *g = malloc(sizeof(float) * (size_t)p->n), *pv = malloc(sizeof(float) * (size_t)p->n);
    double *r = malloc(sizeof(double) * (size_t)p->n);
    if (!g || !pv || !r || read_tensor(m, &p->g, g, p->n)) return 2;
    double gn = 0, rn = 0, gr = 0;
    for (int64_t k = 0; k < p->n; k++) {
      gn += (double)g[k] * g[k];
      r[k] = lm_rng_normal(&rng);
      rn += r[k] * r[k];
    }
    gn = sqrt(gn);
    rn = sqrt(rn);
    for (int64_t k = 0; k < p->n; k++) {
      r[k] /= rn;
      gr += g[k] * r[k];
    }
    double fd[2];
    for (int dir = 0; dir < 2; dir++) {
      float lp, lm_;
      for (int64_t k = 0; k < p->n; k++) pv[k] = (float)(p->host[k] + eps * (dir ? r[k] : (gn > 0 ? g[k] / gn : 0)));
      if (loss_at(m, p, pv, ids, tg, &lp)) return 2;
      for (int64_t k = 0; k < p->n; k++) pv[k] = (float)(p->host[k] - eps * (dir ? r[k] : (gn > 0 ? g[k] / gn : 0)));
      if (loss_at(m, p, pv, ids, tg, &lm_)) return 2;
      fd[dir] = ((double)lp - (double)lm_) / (2 * eps);
    }
    if (loss_at(m, p, p->host, ids, tg, &l0)) return 2;
    /* float32 forward: absolute noise ~1e-6 in the loss, / 2 eps */
    double tol = 0.01 * gn + 1e-4;
    double e1 = fabs(fd[0] - gn), e2 = fabs(fd[1] - gr);
    int ok = e1 <= tol && e2 <= tol;
    printf("  %-14s |g| %.5f  d/d(g/|g|) %.5f  g.r %+.5f  d/dr %+.5f  %s\n", p->name, gn, fd[0], gr, fd[1],
           ok ? "ok" : "MISMATCH");
    if (!ok) worst = 1;
    if (gn > 0 && e1 / gn > worst_err) worst_err = e1 / gn;
    free(g);
    free(pv);
    free(r);
  }
  printf("%s: gradcheck over %d parameter tensors (loss %.5f): %s (largest relative error along g: %.2e)\n", prog,
         m->n_params, l0, worst ? "FAILED" : "passed", worst_err);
  free(ids);
  free(tg);
  return worst;
}

/* ---- training ---------------------------------------------------------------- */

static void bar(char *out, int width, int step, int steps) {
  int done = (int)((int64_t)step * width / steps);
  for (int i = 0; i < width; i++) out[i] = i < done ? '#' : '.';
  out[width] = 0;
}

static double lr_at(const opts *o, int step) { /* linear warmup, cosine decay to 10% */
  int warm = o->steps / 10 < 50 ? o->steps / 10 : 50;
  if (warm > 0 && step <= warm) return o->lr * step / warm;
  double p = (double)(step - warm) / (double)(o->steps - warm > 0 ? o->steps - warm : 1);
  return o->lr * (0.1 + 0.9 * 0.5 * (1 + cos(3.141592653589793 * p)));
}

/* Trains m, or with dp its ranks (m: rank 0's model, which evaluates);
 * losses (nullable): every step's. */
static int train(lm_model *m, lm_dp *dp, const lm_text *t, const opts *o, float *losses) {
  const lm_config *c = &o->cfg; /* the global batch */
  int64_t n_tok = (int64_t)c->batch * c->ctx;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_tok), *tg = malloc(sizeof(int32_t) * (size_t)n_tok);
  if (!ids || !tg) return 2;
  lm_rng rng = {o->seed ^ 0x5eedull};
  int every = o->print_every ? o->print_every : (o->steps >= 50 ? o->steps / 50 : 1);
  int tail = o->steps >= 40 ? 20 : (o->steps + 1) / 2; /* the final loss: mean of the last steps */
  double first = 0, tail_sum = 0, eval = NAN;
  int64_t start = lm_now_ns(), window_start = start, window_tok = 0, step_ns = 0;
  int rc = 0;
  for (int step = 1; step <= o->steps; step++) {
    lm_sample(t, 0, t->n_train, c->batch, c->ctx, &rng, 0, ids, tg);
    float loss;
    gpa_batch_stats st;
    int64_t t0 = lm_now_ns();
    if (dp ? lm_dp_step(dp, ids, tg, lr_at(o, step), o->weight_decay, step, !o->no_overlap, &loss, &st)
           : run_batch(m, "train_step", ids, tg, 1, lr_at(o, step), o->weight_decay, step, &loss, &st)) {
      if (dp) fprintf(stderr, "%s: %s\n", prog, dp->err_msg);
      rc = 2;
      break;
    }
    step_ns += lm_now_ns() - t0;
    if (losses) losses[step - 1] = loss;
    if (!isfinite(loss)) {
      fprintf(stderr, "%s: the loss is not finite at step %d\n", prog, step);
      rc = 1;
      break;
    }
    if (o->losses) /* exact, for comparing runs bit for bit; and how the batch ran */
      printf("loss %d %a graph %u\n", step, (double)loss, st.graph);
    window_tok += n_tok;
    if (step == 1) first = loss;
    if (step > o->steps - tail) tail_sum += loss;
    int do_eval = o->eval_every && step % o->eval_every == 0 && step < o->steps;
    if (do_eval) eval = evaluate(m, t, o->eval_batches, ids, tg);
    if (!o->quiet && (step % every == 0 || step == 1 || step == o->steps || do_eval)) {
      int64_t now = lm_now_ns();
      double tps = (double)window_tok / ((double)(now - window_start) / 1e9);
      char b[41];
      bar(b, 40, step, o->steps);
      printf("[%s] step %5d/%d  loss %.4f  %8.0f tok/s  lr %.2e  %3llu ops  %.1f ms/step", b, step, o->steps, loss,
             tps, lr_at(o, step), (unsigned long long)st.ops, (double)st.host_ns / 1e6);
      if (do_eval) printf("  eval %.4f", eval);
      printf("\n");
      fflush(stdout);
      window_start = now;
      window_tok = 0;
    }
  }
  double secs = (double)(lm_now_ns() - start) / 1e9;
  if (rc == 0) {
    eval = evaluate(m, t, o->eval_batches, ids, tg);
    double fin = tail_sum / tail;
    printf("%s: %d steps, %.1f s, %.0f tokens/s (evaluation included); %.2f ms a training step\n", prog, o->steps,
           secs, (double)n_tok * o->steps / secs, (double)step_ns / 1e6 / o->steps);
    printf("%s: unigram entropy of the text %.4f nats/byte (%.3f bits)\n", prog, t->unigram_nats,
           t->unigram_nats / log(2.0));
    printf("%s: first loss %.4f; final train loss (mean of the last %d steps) %.4f nats (%.3f bits); "
           "held-out loss %.4f nats (%.3f bits)\n",
           prog, first, tail, fin, fin / log(2.0), eval, eval / log(2.0));
    int down = fin < first, below = eval < t->unigram_nats;
    printf("%s: loss %s; held-out loss %s the unigram entropy by %.4f nats\n", prog,
           down ? "decreased" : "did NOT decrease", below ? "below" : "NOT below", t->unigram_nats - eval);
    if (!down || (o->below_unigram && !below) || !isfinite(eval)) rc = 1;
  }
  free(ids);
  free(tg);
  return rc;
}

/* ---- --data-parallel ---------------------------------------------------------- */

/* n ranks: in this process, or (mpi) one per MPI process */
static int run_dp(const opts *o, const lm_text *t, int n, const char *kind, float *losses, int mpi) {
  lm_dp *d = calloc(1, sizeof *d);
  if (!d) return 2;
  lm_config cfg = o->cfg;
  cfg.batch /= n;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  uint32_t threads = cpus > n ? (uint32_t)(cpus / n) : 1; /* cpu actors share the cores */
  int rc = 2;
  if (lm_dp_init(d, n, kind, &cfg, o->seed, o->bucket_kb, threads, mpi) == 0) {
    printf("%s: data-parallel: %d rank%s on %s (%s%s), %d x %d tokens each, %d gradient buckets of ~%d KiB, "
           "%s\n",
           prog, n, n == 1 ? "" : "s", gpa_actor_backend(d->a[0]), kind, mpi ? ", one MPI process each" : "",
           cfg.batch, cfg.ctx, d->n_buckets, o->bucket_kb,
           o->no_overlap ? "reduced after the backward" : "reduced during the backward");
    rc = train(&d->m[0], d, t, o, losses);
  } else {
    fprintf(stderr, "%s: %s\n", prog, d->err_msg);
  }
  lm_dp_free(d);
  free(d);
  return rc;
}

/* Started by mpirun (Open MPI's or PMI's variables): the ranks are the
 * processes (-np 1 too: one rank through MPI's bootstrap, a check of that
 * path on a machine with one GPU). */
static int mpi_world(int *rank) {
  const char *n = getenv("OMPI_COMM_WORLD_SIZE"), *r = getenv("OMPI_COMM_WORLD_RANK");
  if (!n) n = getenv("PMI_SIZE"), r = getenv("PMI_RANK");
  *rank = r ? atoi(r) : 0;
  return n && atoi(n) >= 1;
}

/* A process that fails under mpirun leaves without MPI_Finalize, which
 * would wait for peers that may sit in a collective with it: mpirun then
 * ends the whole job instead of letting it hang. */
static int dp_exit(int mpi, int rc) {
  if (mpi && rc) {
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  return rc;
}

static int dp_run(const opts *o, const lm_text *t, int mpi, int rank);

static int dp_main(const opts *o, const lm_text *t) {
  int rank, mpi = mpi_world(&rank);
  return dp_exit(mpi, dp_run(o, t, mpi, rank));
}

static int dp_run(const opts *o, const lm_text *t, int mpi, int rank) {
  /* GPA_DEVICE names the kind; each rank gets its own device, which the
   * variable would override: read it, then drop it. */
  const char *env = getenv("GPA_DEVICE");
  char kind[32];
  snprintf(kind, sizeof kind, "%s", env && *env ? env : "auto");
  unsetenv("GPA_DEVICE");
  if (mpi && rank != 0 && !freopen("/dev/null", "w", stdout)) return 2; /* rank 0 reports */
  if (!strcmp(kind, "auto")) {
    gpa_actor *probe = NULL;
    if (check(gpa_actor_create(NULL, &probe), "gpa_actor_create")) return 2;
    snprintf(kind, sizeof kind, "%s", strcmp(gpa_actor_backend(probe), "cpu") ? "cuda" : "cpu");
    gpa_actor_destroy(probe);
  }
  if (!strncmp(kind, "sim", 3)) {
    char n[8];
    snprintf(n, sizeof n, "%d", o->dp);
    setenv("GPA_SIM_DEVICES", n, 0);
  }
  if (mpi && strcmp(kind, "cpu")) {
    /* one process per device: this one takes the device of its rank among
     * the processes of its machine (lm_dp_init keeps a device that names
     * its index), joined to the others through NCCL */
    int32_t local = 0, nlocal = 0;
    if (check(gpa_comm_mpi_local_rank(&local, &nlocal), "gpa_comm_mpi_local_rank")) return 2;
    char dev[32];
    snprintf(dev, sizeof dev, "%.*s:%d", (int)strcspn(kind, ":"), kind, (int)local);
    snprintf(kind, sizeof kind, "%s", dev);
    fprintf(stderr, "%s: MPI rank %d, local rank %d of %d: device %s\n", prog, rank, (int)local, (int)nlocal, kind);
  }
  if (!o->parity) return run_dp(o, t, o->dp, kind, NULL, mpi);
  /* the baseline: one rank in this process (each MPI process runs it) */
  float *one = calloc((size_t)o->steps, sizeof *one), *many = calloc((size_t)o->steps, sizeof *many);
  int rc = !one || !many ? 2 : run_dp(o, t, 1, kind, one, 0);
  if (!rc) rc = run_dp(o, t, o->dp, kind, many, mpi);
  if (!rc) {
    double worst = 0;
    int at = 0;
    for (int i = 0; i < o->steps; i++) {
      double rel = fabs((double)many[i] - one[i]) / fmax(fabs((double)one[i]), 1e-30);
      if (rel > worst) worst = rel, at = i + 1;
    }
    rc = worst <= o->parity_tol ? 0 : 1;
    printf("%s: parity: 1 rank x batch %d against %d ranks x batch %d over %d steps: largest relative loss "
           "difference %.3g (step %d; tolerance %.3g): %s\n",
           prog, o->cfg.batch, o->dp, o->cfg.batch / o->dp, o->steps, worst, at, o->parity_tol,
           rc ? "FAILED" : "ok");
  }
  free(one);
  free(many);
  return rc;
}

int main(int argc, char **argv) {
  opts o = {.steps = 600,
            .eval_every = 100,
            .eval_batches = 8,
            .lr = 3e-3,
            .weight_decay = 0.01,
            .bucket_kb = 128,
            .parity_tol = 1e-5,
            .seed = 1,
            .data = GPA_LM_DATA,
            .cfg = {.dim = 96, .heads = 3, .blocks = 4, .kernel = 3, .ctx = 128, .batch = 32}};
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--gradcheck")) /* small sizes: finite differences in f32 need few tokens */
      o.cfg = (lm_config){.dim = 16, .heads = 2, .blocks = 2, .kernel = 3, .ctx = 12, .batch = 2};
  if (parse(argc, argv, &o)) return 2;
  graphs = o.graphs;
  lm_text text;
  if (lm_text_load(o.data, 0.1, &text)) {
    fprintf(stderr, "%s: cannot read the text %s (--data PATH)\n", prog, o.data);
    return 2;
  }
  o.cfg.vocab = text.vocab;
  if (text.n - text.n_train < (int64_t)o.cfg.ctx + 2) {
    fprintf(stderr, "%s: the text is too short for --ctx %d\n", prog, o.cfg.ctx);
    lm_text_free(&text);
    return 2;
  }
  if (o.dp) {
    int rc = dp_main(&o, &text);
    lm_text_free(&text);
    return rc;
  }
  gpa_actor *a = NULL;
  if (check(gpa_actor_create(NULL, &a), "gpa_actor_create")) {
    lm_text_free(&text);
    return 2;
  }
  lm_model m;
  int rc = 2;
  if (lm_model_init(&m, a, &o.cfg, o.seed) == 0) {
    const lm_config *c = &o.cfg;
    printf("%s: backend %s; text %s: %lld bytes, %d distinct (train %lld, held out %lld)\n", prog,
           gpa_actor_backend(a), o.data, (long long)text.n, text.vocab, (long long)text.n_train,
           (long long)(text.n - text.n_train));
    printf("%s: model: embedding %d -> %d causal conv blocks (k=%d, dilations 1..%d) -> attention (%d heads of %d) "
           "-> head; %lld parameters\n",
           prog, c->dim, c->blocks, c->kernel, c->blocks ? 1 << (c->blocks - 1) : 0, c->heads, c->dim / c->heads,
           (long long)m.n_weights);
    if (o.gradcheck) {
      rc = gradcheck(&m, &text);
    } else {
      printf("%s: %d steps of %d x %d tokens, AdamW lr %g (warmup, cosine), weight decay %g; %s\n", prog, o.steps,
             c->batch, c->ctx, o.lr, o.weight_decay,
             c->bf16 ? "bf16 mixed precision (fp32 masters and AdamW state)" : "fp32");
      rc = train(&m, NULL, &text, &o, NULL);
      if (c->bf16) /* how many casts the whole run submitted: 0 would mean fp32 ran */
        printf("%s: bf16: %lld casts submitted (weights to bf16 copies, fp32 <-> bf16 activations)\n", prog,
               (long long)m.casts);
    }
  } else {
    lm_failed(&m, prog);
  }
  lm_model_free(&m);
  gpa_actor_destroy(a);
  lm_text_free(&text);
  return rc;
}
