/* Data-parallel training of the language model (gpa-train-lm
 * --data-parallel N, docs/collectives.md "Data-parallel training").
 *
 * N replicas in this process, one actor each on its own device (cpu actors
 * on the host, sim:0..N-1 on the simulator, cuda:0..N-1 on GPUs), joined in
 * one communicator (LOCAL for cpu actors, NCCL for cuda ones); or, under
 * mpirun, one actor per process: cpu actors joined through MPI, or cuda
 * actors (each on the device its caller named, cuda:<local rank>) joined
 * through NCCL with rank 0's unique id broadcast by MPI
 * (gpa_comm_bootstrap_mpi_nccl). Each rank
 * takes an equal shard of the global batch; its gradients are averaged over
 * the ranks, so every replica applies the same AdamW step and the
 * parameters stay identical.
 *
 * Overlap (what DDP does). Every gradient lives in one buffer, the last
 * parameter first (lm_model.grads), cut into buckets of about bucket_kb.
 * While the backward is being submitted, a hook (lm_model.on_grads) puts a
 * noop with a handle on the rank's queue as soon as the ops writing a
 * bucket's gradients are submitted: the noop completes when they have run.
 * Then, bucket by bucket, the thread waits for that fence and submits on the
 * rank's second queue the bucket's allreduce (avg) followed by the AdamW
 * steps of its parameters, while the first queue goes on with the backward.
 * (No op of the backward reads a parameter after the op that wrote its
 * gradient, so the update may run beside it.) The step ends with both
 * queues' batches synced. One thread drives every rank: it never waits for
 * anything but fences of work already submitted, so no rank waits for a
 * collective the thread has not issued yet.
 *
 * Reduction order: the mean over the global batch is the average of the
 * ranks' means over their shards (equal shards); LOCAL (and the simulator's
 * NCCL) add the ranks' gradients in rank order in f32 and scale by 1/N once,
 * so the result is the same on every rank and every run (MPI sums in f32 in
 * its own order, the same on every rank, then scales). It is not bitwise
 * the single-rank gradient (each rank's GEMMs sum over its shard's rows, the
 * single rank over all of them), which is why the parity test has a
 * tolerance (train_lm.c, --parity-check). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lm.h"

static int fail(lm_dp *d, gpa_status st, const char *what) {
  if (!d->err) {
    d->err = st;
    snprintf(d->err_msg, sizeof d->err_msg, "%s: %s (%s)", what, gpa_status_name(st), gpa_last_error_message());
  }
  return -1;
}

/* Buckets over the params, last first (the order of lm_model.grads). */
static void make_buckets(lm_dp *d, int64_t bucket_floats) {
  lm_model *m = &d->m[0];
  d->n_buckets = 0;
  for (int i = m->n_params - 1; i >= 0;) {
    lm_dp_bucket *b = &d->b[d->n_buckets++];
    b->hi_param = i;
    b->lo = m->params[i].g_off;
    int64_t end = b->lo;
    do {
      end = m->params[i].g_off + (m->params[i].n + 15) / 16 * 16;
      i--;
    } while (i >= 0 && end - b->lo < bucket_floats);
    b->lo_param = i + 1;
    b->hi = end;
  }
}

/* lm_backward's hook: fence every bucket whose gradients are all submitted. */
static void on_grads(lm_model *m, void *user) {
  struct lm_dp_hook *h = user;
  lm_dp *d = h->d;
  int r = h->r;
  while (d->next_fence[r] < d->n_buckets) {
    lm_dp_bucket *b = &d->b[d->next_fence[r]];
    for (int i = b->lo_param; i <= b->hi_param; i++)
      if (!m->params[i].ready) return;
    gpa_op_call noop = {"noop", NULL, 0, NULL, 0, NULL, 0};
    gpa_status st = gpa_submit(m->q, &noop, &d->fence[r][d->next_fence[r]]);
    if (st) {
      fail(d, st, "noop (bucket fence)");
      return;
    }
    d->next_fence[r]++;
  }
}

int lm_dp_init(lm_dp *d, int n, const char *device, const lm_config *cfg, uint64_t seed, int bucket_kb,
               uint32_t threads, int mpi) {
  memset(d, 0, sizeof *d);
  if (n < 1 || n > LM_DP_MAX) return fail(d, GPA_EINVAL, "--data-parallel: 1 to 8 ranks");
  d->n = d->size = n;
  gpa_comm_id id;
  if (mpi) {
    int32_t rank = 0, size = 0;
    gpa_status st = gpa_comm_bootstrap_mpi(&id, &rank, &size);
    if (st) return fail(d, st, "gpa_comm_bootstrap_mpi");
    if (size != n) {
      snprintf(d->err_msg, sizeof d->err_msg, "--data-parallel %d under mpirun with %d processes (one rank each)", n,
               (int)size);
      return d->err = GPA_EINVAL, -1;
    }
    d->n = 1;
    d->rank0 = rank;
  }
  bool cpu = !strncmp(device, "cpu", 3);
  for (int r = 0; r < d->n; r++) {
    char dev[32];
    if (cpu || (d->n == 1 && strchr(device, ':'))) snprintf(dev, sizeof dev, "%s", device); /* one named */
    else snprintf(dev, sizeof dev, "%.*s:%d", (int)strcspn(device, ":"), device, r);
    gpa_actor_options o = {.size = sizeof o, .device = dev, .threads = threads};
    gpa_status st = gpa_actor_create(&o, &d->a[r]);
    if (st) return fail(d, st, "gpa_actor_create");
    if (lm_model_init(&d->m[r], d->a[r], cfg, seed)) {
      snprintf(d->err_msg, sizeof d->err_msg, "%s", d->m[r].err_msg);
      d->err = d->m[r].err;
      return -1;
    }
    if ((st = gpa_queue_create(d->a[r], "dp.reduce", &d->q2[r]))) return fail(d, st, "gpa_queue_create");
    d->hook[r] = (struct lm_dp_hook){d, r};
    d->m[r].on_grads = on_grads;
    d->m[r].on_grads_user = &d->hook[r];
  }
  gpa_comm_options co = {.size = sizeof co, .timeout_ns = 600ll * 1000000000};
  if (mpi) co.transport = cpu ? GPA_COMM_MPI : GPA_COMM_NCCL;
  if (mpi && !cpu) { /* NCCL's unique id from rank 0, through MPI */
    int32_t rank = 0, size = 0;
    gpa_status st = gpa_comm_bootstrap_mpi_nccl(d->a[0], &id, &rank, &size);
    if (st) return fail(d, st, "gpa_comm_bootstrap_mpi_nccl");
  }
  gpa_status st = mpi ? gpa_comm_init(d->a[0], &id, n, d->rank0, &co, &d->c[0]) : gpa_comm_init_all(d->a, n, &co, d->c);
  if (st) return fail(d, st, "gpa_comm_init");
  make_buckets(d, (int64_t)bucket_kb * 1024 / 4);
  return 0;
}

void lm_dp_free(lm_dp *d) {
  for (int r = 0; r < d->n; r++) {
    /* after a failed step collectives may still wait for their peers:
     * abort, and give them a moment to complete (ECANCELED) */
    if (d->c[r] && d->err) gpa_comm_abort(d->c[r]);
    for (int i = 0; d->c[r] && gpa_comm_destroy(d->c[r]) == GPA_EBUSY && i < 1000; i++)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (d->a[r]) {
      lm_model_free(&d->m[r]);
      gpa_actor_destroy(d->a[r]);
    }
  }
  memset(d, 0, sizeof *d);
}

/* Each rank's readback of its loss, read after the sync. */
static int read_loss(lm_dp *d, gpa_handle *h, double *sum) {
  const void *data = NULL;
  uint64_t size = 0;
  gpa_status st = gpa_handle_data(h, &data, &size);
  if (st || size != sizeof(float)) return fail(d, st ? st : GPA_EINTERNAL, "the loss readback");
  float v;
  memcpy(&v, data, sizeof v);
  *sum += v;
  return 0;
}

int lm_dp_step(lm_dp *d, const int32_t *ids, const int32_t *tg, double lr, double wd, int step, int overlap,
               float *loss, gpa_batch_stats *stats) {
  const lm_config *c = &d->m[0].cfg;
  int64_t shard = (int64_t)c->batch * c->ctx; /* tokens per rank */
  gpa_handle *lh[LM_DP_MAX] = {0};
  for (int r = 0; r < d->n && !d->err; r++) {
    lm_model *m = &d->m[r];
    if (gpa_batch_begin(m->q, "train_step") || gpa_batch_begin(d->q2[r], "dp_reduce"))
      return fail(d, GPA_EINVAL, "gpa_batch_begin");
    lm_upload_batch(m, ids + (d->rank0 + r) * shard, tg + (d->rank0 + r) * shard);
    lm_forward(m);
    d->next_fence[r] = 0;
    lm_backward(m);
    if (m->err) {
      snprintf(d->err_msg, sizeof d->err_msg, "%s", m->err_msg);
      d->err = m->err;
    }
  }
  /* Without overlap (a baseline): the reductions wait for the whole backward. */
  if (!overlap)
    for (int r = 0; r < d->n && !d->err; r++) {
      gpa_status st = gpa_await(d->fence[r][d->n_buckets - 1], -1);
      if (st) fail(d, st, "the backward");
    }
  for (int k = 0; k < d->n_buckets; k++)
    for (int r = 0; r < d->n; r++) {
      gpa_handle *f = d->fence[r][k];
      d->fence[r][k] = NULL;
      if (!f) continue;
      gpa_status st = d->err ? GPA_OK : gpa_await(f, -1);
      gpa_handle_release(f);
      if (d->err) continue;
      if (st) {
        fail(d, st, "the backward");
        continue;
      }
      lm_dp_bucket *b = &d->b[k];
      gpa_tensor g = d->m[r].grads;
      g.offset = (uint64_t)b->lo * sizeof(float);
      g.shape[0] = b->hi - b->lo;
      if ((st = gpa_allreduce(d->q2[r], d->c[r], &g, &g, GPA_REDUCE_AVG, NULL))) fail(d, st, "gpa_allreduce");
      lm_adamw_range(&d->m[r], d->q2[r], b->lo_param, b->hi_param, lr, wd, step);
    }
  /* The loss averaged over the ranks, after the buckets on the same queue:
   * every rank issues the communicator's collectives in one order (the last
   * bucket's fence came after the loss was computed). */
  for (int r = 0; r < d->n && !d->err; r++) {
    gpa_status st = gpa_allreduce(d->q2[r], d->c[r], &d->m[r].loss, &d->m[r].loss, GPA_REDUCE_AVG, NULL);
    if (st || (st = gpa_readback(d->q2[r], &d->m[r].loss, &lh[r]))) fail(d, st, "the loss's allreduce");
  }
  double sum = 0; /* rank 0's: every rank holds the average */
  for (int r = 0; r < d->n; r++) {
    gpa_batch_stats s2 = {.size = sizeof s2}, s1 = {.size = sizeof s1};
    gpa_status st2 = gpa_sync_batch(d->q2[r], &s2), st1 = gpa_sync_batch(d->m[r].q, &s1);
    if (st2) fail(d, st2, s2.first_error_message[0] ? s2.first_error_message : "the reductions' batch");
    if (st1) fail(d, st1, s1.first_error_message[0] ? s1.first_error_message : "the step's batch");
    if (d->m[r].err && !d->err) {
      snprintf(d->err_msg, sizeof d->err_msg, "%s", d->m[r].err_msg);
      d->err = d->m[r].err;
    }
    if (!d->err && r == 0) read_loss(d, lh[r], &sum);
    gpa_handle_release(lh[r]);
    if (r == 0 && stats) {
      *stats = s1;
      stats->ops += s2.ops;
    }
  }
  *loss = (float)sum;
  return d->err ? -1 : 0;
}
