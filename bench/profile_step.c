#include "profile_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Under callgrind (bench/profile_callgrind.sh) the counts start after the
 * warm-up step and are written at the end of each timed run: instructions
 * of the steps alone. Natively these are a few no-op instructions. */
#if defined(GPA_BENCH_CALLGRIND)
#include <valgrind/callgrind.h>
#define COUNT_START() CALLGRIND_ZERO_STATS
#define COUNT_DUMP() CALLGRIND_DUMP_STATS_AT("steps")
#else
#define COUNT_START() ((void)0)
#define COUNT_DUMP() ((void)0)
#endif

enum { N = 256, D = 512 };

struct gpa_pstep {
  gpa_actor *a;
  gpa_queue *q;
  gpa_tensor x, w1, b1, pre, h, y, mean, rstd, gam, bet, w2, b2, out, t, loss;
  gpa_tensor dout, dy, dh, dpre, dx, dw1, db1, dw2, db2, dgam, dbet;
  gpa_tensor m[6], v[6];
  int64_t step;
};

static gpa_tensor mk(gpa_actor *a, int rank, int64_t d0, int64_t d1) {
  gpa_tensor t = {0, 0, GPA_F32, (uint32_t)rank, {d0, d1}};
  uint64_t n = (uint64_t)d0 * (rank > 1 ? (uint64_t)d1 : 1);
  if (gpa_buffer_acquire(a, NULL, (n ? n : 1) * 4, &t.buffer) != GPA_OK) {
    fprintf(stderr, "profile_step: %s\n", gpa_last_error_message());
    exit(1);
  }
  return t;
}

static void fill(gpa_queue *q, gpa_tensor *t, double v) {
  gpa_attr at = {"value", GPA_ATTR_FLOAT, 0, v};
  gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = t, .n_outputs = 1, .attrs = &at, .n_attrs = 1}, NULL);
}

gpa_pstep *gpa_pstep_new(gpa_actor *a) {
  gpa_pstep *p = calloc(1, sizeof *p);
  p->a = a;
  p->q = gpa_actor_default_queue(a);
  p->x = mk(a, 2, N, D), p->w1 = mk(a, 2, D, D), p->b1 = mk(a, 1, D, 0), p->pre = mk(a, 2, N, D);
  p->h = mk(a, 2, N, D), p->y = mk(a, 2, N, D), p->mean = mk(a, 1, N, 0), p->rstd = mk(a, 1, N, 0);
  p->gam = mk(a, 1, D, 0), p->bet = mk(a, 1, D, 0), p->w2 = mk(a, 2, D, D), p->b2 = mk(a, 1, D, 0);
  p->out = mk(a, 2, N, D), p->t = mk(a, 2, N, D), p->loss = mk(a, 1, 1, 0);
  p->dout = mk(a, 2, N, D), p->dy = mk(a, 2, N, D), p->dh = mk(a, 2, N, D), p->dpre = mk(a, 2, N, D);
  p->dx = mk(a, 2, N, D), p->dw1 = mk(a, 2, D, D), p->db1 = mk(a, 1, D, 0), p->dw2 = mk(a, 2, D, D);
  p->db2 = mk(a, 1, D, 0), p->dgam = mk(a, 1, D, 0), p->dbet = mk(a, 1, D, 0);
  gpa_tensor *params[6] = {&p->w1, &p->b1, &p->w2, &p->b2, &p->gam, &p->bet};
  for (int i = 0; i < 6; i++) {
    p->m[i] = mk(a, (int)params[i]->rank, params[i]->shape[0], params[i]->shape[1]);
    p->v[i] = mk(a, (int)params[i]->rank, params[i]->shape[0], params[i]->shape[1]);
    fill(p->q, &p->m[i], 0);
    fill(p->q, &p->v[i], 0);
  }
  fill(p->q, &p->x, 0.5), fill(p->q, &p->w1, 0.01), fill(p->q, &p->b1, 0), fill(p->q, &p->w2, 0.01);
  fill(p->q, &p->b2, 0), fill(p->q, &p->gam, 1), fill(p->q, &p->bet, 0), fill(p->q, &p->t, 0.25);
  gpa_sync_batch(p->q, NULL);
  return p;
}

#define OP(name, ins, nin, outs, nout, attrs, nattr)                                                  \
  do {                                                                                              \
    gpa_status st_ = gpa_submit(p->q, &(gpa_op_call){name, ins, nin, outs, nout, attrs, nattr}, NULL); \
    if (st_ != GPA_OK) {                                                                            \
      fprintf(stderr, "profile_step: %s: %s\n", name, gpa_last_error_message());                   \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)

static void step(gpa_pstep *p) {
  gpa_batch_begin(p->q, "step");
  /* forward: pre = x W1^T + b1, h = gelu(pre), y = LN(h), out = y W2^T + b2 */
  OP("linear_fwd", ((gpa_tensor[]){p->x, p->w1, p->b1}), 3, &p->pre, 1, NULL, 0);
  OP("gelu_fwd", &p->pre, 1, &p->h, 1, NULL, 0);
  OP("layernorm_fwd", ((gpa_tensor[]){p->h, p->gam, p->bet}), 3, ((gpa_tensor[]){p->y, p->mean, p->rstd}), 3, NULL,
     0);
  OP("linear_fwd", ((gpa_tensor[]){p->y, p->w2, p->b2}), 3, &p->out, 1, NULL, 0);
  OP("mse", ((gpa_tensor[]){p->out, p->t}), 2, &p->loss, 1, NULL, 0);
  /* backward (d mse / d out is 2 (out - t) / numel: axpy then scale) */
  gpa_attr neg = {"alpha", GPA_ATTR_FLOAT, 0, -1};
  OP("axpy", ((gpa_tensor[]){p->t, p->out}), 2, &p->dout, 1, &neg, 1);
  gpa_attr sc = {"alpha", GPA_ATTR_FLOAT, 0, 2.0 / (N * D)};
  OP("scale", &p->dout, 1, &p->dout, 1, &sc, 1);
  OP("linear_bwd", ((gpa_tensor[]){p->dout, p->y, p->w2}), 3, ((gpa_tensor[]){p->dy, p->dw2, p->db2}), 3, NULL, 0);
  OP("layernorm_bwd", ((gpa_tensor[]){p->h, p->dy, p->gam, p->mean, p->rstd}), 5,
     ((gpa_tensor[]){p->dh, p->dgam, p->dbet}), 3, NULL, 0);
  OP("gelu_bwd", ((gpa_tensor[]){p->pre, p->dh}), 2, &p->dpre, 1, NULL, 0);
  OP("linear_bwd", ((gpa_tensor[]){p->dpre, p->x, p->w1}), 3, ((gpa_tensor[]){p->dx, p->dw1, p->db1}), 3, NULL, 0);
  /* AdamW on every parameter */
  p->step++;
  gpa_attr aw[2] = {{"lr", GPA_ATTR_FLOAT, 0, 1e-3}, {"step", GPA_ATTR_INT, p->step, 0}};
  gpa_tensor *prm[6] = {&p->w1, &p->b1, &p->w2, &p->b2, &p->gam, &p->bet};
  gpa_tensor *grd[6] = {&p->dw1, &p->db1, &p->dw2, &p->db2, &p->dgam, &p->dbet};
  for (int i = 0; i < 6; i++)
    OP("adamw", ((gpa_tensor[]){*prm[i], *grd[i], p->m[i], p->v[i]}), 4, ((gpa_tensor[]){*prm[i], p->m[i], p->v[i]}),
       3, aw, 2);
  gpa_handle *rb;
  gpa_readback(p->q, &p->loss, &rb);
  gpa_sync_batch(p->q, NULL);
  gpa_handle_release(rb);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double gpa_pstep_best_ns(gpa_pstep *p, int steps, int reps) {
  step(p);
  double best = 1e300;
  for (int r = 0; r < reps; r++) {
    COUNT_START();
    double t0 = now_ns();
    for (int s = 0; s < steps; s++) step(p);
    /* A profiler may keep records and format them later (the trace writer
     * does): flushing inside the timed span charges that work to the steps. */
    gpa_actor_profile_flush(p->a);
    double t = (now_ns() - t0) / steps;
    COUNT_DUMP();
    if (t < best) best = t;
  }
  return best;
}

void gpa_pstep_free(gpa_pstep *p) { free(p); }
