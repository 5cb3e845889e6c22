/* gpa-train-mlp: trains a small residual MLP classifier through the actor.
 *
 *   h   = gelu(x W1^T + b1)            linear_gelu_fwd (keeps the pre-activation)
 *   n   = layernorm(h; gamma, beta)    layernorm_fwd
 *   r   = h + (n W2^T + b2)            linear_fwd, add
 *   z   = r W3^T + b3                  linear_fwd (logits)
 *   loss = cross_entropy(z, labels)    cross_entropy_fwd
 * then the backward chain (cross_entropy_bwd, linear_bwd, layernorm_bwd, add,
 * linear_bwd with gelu=1) and one AdamW step per parameter.
 *
 * Data: every step draws a fresh batch of x ~ U(-1,1)^32 from a fixed-seed
 * generator; the label is the argmax of a fixed random "teacher" network
 * (tanh MLP), so the task is learnable and the run is reproducible.
 *
 * One batch per step: gpa_batch_begin, uploads, every op submitted without
 * waiting, a readback of the loss, gpa_sync_batch; the loss is read from the
 * readback handle after the sync (a deferred readback). Exits 1 when the
 * final loss is not below the first one.
 *
 * usage: gpa-train-mlp [--steps N] [--batch N] [--lr F] [--quiet] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor.h"

enum { DIN = 32, HID = 128, NCLS = 8, TEACH = 64 };

typedef struct model {
  gpa_actor *a;
  gpa_queue *q;
  gpa_buffer_id ids[64];
  int n_ids;
} model;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double nrand(void) {
  double u = urand() + 1e-12, v = urand();
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static int check(gpa_status st, const char *what) {
  if (st == GPA_OK) return 0;
  fprintf(stderr, "gpa-train-mlp: %s failed: %s (%s)\n", what, gpa_status_name(st), gpa_last_error_message());
  return 1;
}

/* A tensor in a labeled buffer (the same label returns the same buffer). */
static gpa_tensor tensor(model *m, const char *label, int dtype, uint32_t rank, int64_t d0, int64_t d1) {
  gpa_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  t.shape[0] = d0;
  t.shape[1] = d1;
  uint64_t n = (uint64_t)(rank == 0 ? 1 : d0) * (uint64_t)(rank == 2 ? d1 : 1);
  if (check(gpa_buffer_acquire(m->a, label, n * gpa_dtype_size(dtype), &t.buffer), label)) exit(2);
  m->ids[m->n_ids++] = t.buffer;
  return t;
}

static int upload(model *m, const gpa_tensor *t, const float *data, uint64_t version) {
  uint64_t bytes = (uint64_t)gpa_tensor_numel(t) * gpa_dtype_size(t->dtype);
  return check(gpa_upload(m->q, t, data, bytes, version, NULL), "gpa_upload");
}

static int op(model *m, const char *name, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
              uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs) {
  gpa_op_call c = {name, in, n_in, out, n_out, attrs, n_attrs};
  return check(gpa_submit(m->q, &c, NULL), name);
}

typedef struct param {
  const char *name;
  gpa_tensor p, g, m, v;
} param;

int main(int argc, char **argv) {
  int steps = 60, batch = 256, quiet = 0;
  double lr = 3e-3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lr") && i + 1 < argc) lr = atof(argv[++i]);
    else if (!strcmp(argv[i], "--quiet")) quiet = 1;
    else {
      fprintf(stderr, "usage: %s [--steps N] [--batch N] [--lr F] [--quiet]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 1 || batch < 1 || !(lr > 0)) {
    fprintf(stderr, "gpa-train-mlp: --steps and --batch must be >= 1 and --lr > 0\n");
    return 2;
  }
  model M = {0};
  model *m = &M;
  if (check(gpa_actor_create(NULL, &m->a), "gpa_actor_create")) return 2;
  m->q = gpa_actor_default_queue(m->a);
  printf("gpa-train-mlp: backend %s; residual MLP %d -> %d (GELU, LayerNorm, residual) -> %d classes\n",
         gpa_actor_backend(m->a), DIN, HID, NCLS);
  printf("gpa-train-mlp: %d steps of %d samples, AdamW lr %g; labels from a fixed random teacher network\n", steps,
         batch, lr);

  /* parameters, gradients and AdamW moments */
  int64_t N = batch;
  param P[8] = {{.name = "W1"}, {.name = "b1"}, {.name = "gamma"}, {.name = "beta"},
               {.name = "W2"}, {.name = "b2"}, {.name = "W3"}, {.name = "b3"}};
  int64_t shp[8][2] = {{HID, DIN}, {HID, 0}, {HID, 0}, {HID, 0}, {HID, HID}, {HID, 0}, {NCLS, HID}, {NCLS, 0}};
  char label[64];
  for (int i = 0; i < 8; i++) {
    uint32_t rank = shp[i][1] ? 2 : 1;
    snprintf(label, sizeof label, "mlp.%s", P[i].name);
    P[i].p = tensor(m, label, GPA_F32, rank, shp[i][0], shp[i][1]);
    snprintf(label, sizeof label, "mlp.%s.grad", P[i].name);
    P[i].g = tensor(m, label, GPA_F32, rank, shp[i][0], shp[i][1]);
    snprintf(label, sizeof label, "mlp.%s.adam_m", P[i].name);
    P[i].m = tensor(m, label, GPA_F32, rank, shp[i][0], shp[i][1]);
    snprintf(label, sizeof label, "mlp.%s.adam_v", P[i].name);
    P[i].v = tensor(m, label, GPA_F32, rank, shp[i][0], shp[i][1]);
    int64_t n = gpa_tensor_numel(&P[i].p), fan_in = shp[i][1] ? shp[i][1] : 1;
    float *init = calloc((size_t)n, sizeof(float)), *zero = calloc((size_t)n, sizeof(float));
    if (!init || !zero) return 2;
    for (int64_t k = 0; k < n; k++)
      init[k] = rank == 2 ? (float)(nrand() / sqrt((double)fan_in)) : (!strcmp(P[i].name, "gamma") ? 1.0f : 0.0f);
    int bad = upload(m, &P[i].p, init, 1) || upload(m, &P[i].m, zero, 0) || upload(m, &P[i].v, zero, 0);
    free(init);
    free(zero);
    if (bad) return 2;
  }
  /* activations and their gradients */
  gpa_tensor x = tensor(m, "act.x", GPA_F32, 2, N, DIN), y = tensor(m, "act.labels", GPA_I32, 1, N, 0);
  gpa_tensor h = tensor(m, "act.h", GPA_F32, 2, N, HID), pre = tensor(m, "act.pre", GPA_F32, 2, N, HID);
  gpa_tensor nrm = tensor(m, "act.n", GPA_F32, 2, N, HID), mean = tensor(m, "act.mean", GPA_F32, 1, N, 0);
  gpa_tensor rstd = tensor(m, "act.rstd", GPA_F32, 1, N, 0), t2 = tensor(m, "act.t2", GPA_F32, 2, N, HID);
  gpa_tensor r = tensor(m, "act.r", GPA_F32, 2, N, HID), z = tensor(m, "act.logits", GPA_F32, 2, N, NCLS);
  gpa_tensor loss = tensor(m, "act.loss", GPA_F32, 0, 1, 0);
  gpa_tensor dz = tensor(m, "grad.logits", GPA_F32, 2, N, NCLS), dr = tensor(m, "grad.r", GPA_F32, 2, N, HID);
  gpa_tensor dn = tensor(m, "grad.n", GPA_F32, 2, N, HID), dh = tensor(m, "grad.h", GPA_F32, 2, N, HID);
  gpa_tensor dx = tensor(m, "grad.x", GPA_F32, 2, N, DIN);

  /* the teacher: labels = argmax(tanh(x A) B) */
  float *A = malloc(sizeof(float) * DIN * TEACH), *Bt = malloc(sizeof(float) * TEACH * NCLS);
  float *xb = malloc(sizeof(float) * (size_t)(N * DIN));
  int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
  if (!A || !Bt || !xb || !yb) return 2;
  for (int i = 0; i < DIN * TEACH; i++) A[i] = (float)(nrand() * 0.6);
  for (int i = 0; i < TEACH * NCLS; i++) Bt[i] = (float)nrand();

  double first = 0, last = 0;
  int fails = 0;
  for (int step = 1; step <= steps; step++) {
    for (int64_t s = 0; s < N; s++) {
      double logit[NCLS] = {0};
      for (int j = 0; j < DIN; j++) xb[s * DIN + j] = (float)(2 * urand() - 1);
      for (int t = 0; t < TEACH; t++) {
        double a = 0;
        for (int j = 0; j < DIN; j++) a += xb[s * DIN + j] * A[j * TEACH + t];
        a = tanh(a);
        for (int c = 0; c < NCLS; c++) logit[c] += a * Bt[t * NCLS + c];
      }
      int best = 0;
      for (int c = 1; c < NCLS; c++)
        if (logit[c] > logit[best]) best = c;
      yb[s] = best;
    }
    if (check(gpa_batch_begin(m->q, "train_step"), "gpa_batch_begin")) return 2;
    int bad = upload(m, &x, xb, 0) || upload(m, &y, (const float *)yb, 0);
    /* forward */
    gpa_tensor i1[3] = {x, P[0].p, P[1].p}, o1[2] = {h, pre};
    bad = bad || op(m, "linear_gelu_fwd", i1, 3, o1, 2, NULL, 0);
    gpa_tensor i2[3] = {h, P[2].p, P[3].p}, o2[3] = {nrm, mean, rstd};
    bad = bad || op(m, "layernorm_fwd", i2, 3, o2, 3, NULL, 0);
    gpa_tensor i3[3] = {nrm, P[4].p, P[5].p};
    bad = bad || op(m, "linear_fwd", i3, 3, &t2, 1, NULL, 0);
    gpa_tensor i4[2] = {t2, h};
    bad = bad || op(m, "add", i4, 2, &r, 1, NULL, 0);
    gpa_tensor i5[3] = {r, P[6].p, P[7].p};
    bad = bad || op(m, "linear_fwd", i5, 3, &z, 1, NULL, 0);
    gpa_tensor i6[2] = {z, y};
    bad = bad || op(m, "cross_entropy_fwd", i6, 2, &loss, 1, NULL, 0);
    /* backward */
    bad = bad || op(m, "cross_entropy_bwd", i6, 2, &dz, 1, NULL, 0);
    gpa_tensor i7[3] = {dz, r, P[6].p}, o7[3] = {dr, P[6].g, P[7].g};
    bad = bad || op(m, "linear_bwd", i7, 3, o7, 3, NULL, 0);
    gpa_tensor i8[3] = {dr, nrm, P[4].p}, o8[3] = {dn, P[4].g, P[5].g};
    bad = bad || op(m, "linear_bwd", i8, 3, o8, 3, NULL, 0);
    gpa_tensor i9[5] = {h, dn, P[2].p, mean, rstd}, o9[3] = {dh, P[2].g, P[3].g};
    bad = bad || op(m, "layernorm_bwd", i9, 5, o9, 3, NULL, 0);
    gpa_tensor i10[2] = {dh, dr};
    bad = bad || op(m, "add", i10, 2, &dh, 1, NULL, 0); /* the residual's gradient */
    gpa_attr gelu = {"gelu", GPA_ATTR_INT, 1, 0};
    gpa_tensor i11[4] = {dh, x, P[0].p, pre}, o11[3] = {dx, P[0].g, P[1].g};
    bad = bad || op(m, "linear_bwd", i11, 4, o11, 3, &gelu, 1);
    /* AdamW, in place */
    gpa_attr hp[3] = {{"lr", GPA_ATTR_FLOAT, 0, lr}, {"step", GPA_ATTR_INT, step, 0},
                      {"weight_decay", GPA_ATTR_FLOAT, 0, 1e-4}};
    for (int i = 0; i < 8 && !bad; i++) {
      gpa_tensor ia[4] = {P[i].p, P[i].g, P[i].m, P[i].v}, oa[3] = {P[i].p, P[i].m, P[i].v};
      bad = op(m, "adamw", ia, 4, oa, 3, hp, 3);
    }
    gpa_handle *lh = NULL;
    if (!bad) bad = check(gpa_readback(m->q, &loss, &lh), "gpa_readback");
    gpa_batch_stats st = {.size = sizeof st};
    gpa_status ss = gpa_sync_batch(m->q, &st);
    if (bad || check(ss, "gpa_sync_batch")) {
      if (ss != GPA_OK) fprintf(stderr, "gpa-train-mlp: first error of the step: %s\n", st.first_error_message);
      gpa_handle_release(lh);
      fails = 1;
      break;
    }
    const void *data = NULL;
    uint64_t size = 0;
    if (check(gpa_handle_data(lh, &data, &size), "gpa_handle_data") || size != 4) {
      gpa_handle_release(lh);
      fails = 1;
      break;
    }
    float lv;
    memcpy(&lv, data, 4);
    gpa_handle_release(lh);
    if (step == 1) first = lv;
    last = lv;
    if (!quiet || step == 1 || step == steps) {
      int width = 30, done = (int)((int64_t)step * width / steps);
      char bar[64];
      for (int i = 0; i < width; i++) bar[i] = i < done ? '#' : '.';
      bar[width] = 0;
      printf("[%s] step %4d/%d  loss %.5f  (%llu ops, %.2f ms)\n", bar, step, steps, lv,
             (unsigned long long)st.ops, (double)st.host_ns / 1e6);
      fflush(stdout);
    }
    if (!isfinite(lv)) {
      fprintf(stderr, "gpa-train-mlp: loss is not finite\n");
      fails = 1;
      break;
    }
  }
  free(A);
  free(Bt);
  free(xb);
  free(yb);
  for (int i = 0; i < m->n_ids; i++) gpa_buffer_release(m->a, m->ids[i]);
  gpa_actor_destroy(m->a);
  if (fails) return 1;
  printf("gpa-train-mlp: loss %.5f -> %.5f over %d steps: %s\n", first, last, steps,
         last < first ? "decreased" : "did NOT decrease");
  return last < first ? 0 : 1;
}
