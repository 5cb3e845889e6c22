/* cross_entropy_fwd/bwd with masked logits (-inf entries, as a vocabulary
 * mask writes them): the loss and the gradient stay finite and match a
 * double reference, whichever lanes the -inf entries fall on (a lane's
 * first entries, every other entry, all but the target's region); a NaN
 * logit makes the loss and its row's gradient NaN. Rows of 200 and 4096
 * (on CUDA the backward's lane-group and block-per-row kernels). On every
 * device the suite runs (GPA_DEVICE). */
#include <math.h>

#include "util/testutil.h"

enum { N = 4, VMAX = 4096 };
static int V;

static gpa_tensor tensor(gpa_actor *a, int dt, uint32_t rank, int64_t d0, int64_t d1) {
  gpa_tensor t = {.dtype = dt, .rank = rank, .shape = {d0, d1}};
  int64_t n = rank == 1 ? d0 : d0 * d1;
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)n * gpa_dtype_size(dt), &t.buffer));
  return t;
}

static void read_f32(gpa_queue *q, const gpa_tensor *t, float *out, size_t n) {
  gpa_handle *h;
  CHECK_OK(gpa_readback(q, t, &h));
  CHECK_OK(gpa_sync_batch(q, NULL));
  const void *p;
  uint64_t size;
  CHECK_OK(gpa_handle_data(h, &p, &size));
  CHECK(size == n * sizeof(float));
  memcpy(out, p, size);
  gpa_handle_release(h);
}

/* Logits x into lg, then cross_entropy_fwd and _bwd on them and targets t:
 * the loss into *l, dlogits into got. */
static void fwd_bwd(gpa_queue *q, const float *x, gpa_tensor lg, gpa_tensor t, gpa_tensor loss, gpa_tensor dl, float *l,
                    float *got) {
  gpa_handle *h;
  CHECK_OK(gpa_upload(q, &lg, x, sizeof(float) * N * V, 0, NULL));
  CHECK_OK(gpa_cross_entropy_fwd(q, &(gpa_cross_entropy_fwd_args){.logits = lg, .targets = t, .loss = loss}, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  CHECK_OK(gpa_cross_entropy_bwd(q, &(gpa_cross_entropy_bwd_args){.logits = lg, .targets = t, .dlogits = dl}, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  read_f32(q, &loss, l, 1);
  read_f32(q, &dl, got, N * V);
}

/* loss and dlogits of logits x (N x V), targets tg, in double */
static double reference(const float *x, const int32_t *tg, double *dl) {
  double loss = 0;
  for (int r = 0; r < N; r++) {
    const float *row = x + r * V;
    double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) m = row[i] > m ? row[i] : m;
    for (int i = 0; i < V; i++) z += exp((double)row[i] - m);
    loss += log(z) + m - row[tg[r]];
    for (int i = 0; i < V; i++) dl[r * V + i] = (exp((double)row[i] - m) / z - (i == tg[r])) / N;
  }
  return loss / N;
}

static int run(gpa_actor *a, int v) {
  V = v;
  gpa_queue *q = gpa_actor_default_queue(a);
  static float x[N * VMAX], got[N * VMAX];
  static double want[N * VMAX];
  int32_t tg[N] = {150, 4, V - 1, 120}; /* targets on finite entries */
  uint64_t s = 7;
  for (int i = 0; i < N * V; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 8.0 - 4.0);
  }
  for (int i = 0; i < 100; i++) x[0 * V + i] = -INFINITY; /* the first 100: each lane's first entries */
  for (int i = 1; i < V; i += 2) x[1 * V + i] = -INFINITY;      /* every other entry */
  for (int i = 0; i < V - 8; i++) x[2 * V + i] = -INFINITY;     /* all but the last eight */
  gpa_tensor lg = tensor(a, GPA_F32, 2, N, V), t = tensor(a, GPA_I32, 1, N, 0);
  gpa_tensor loss = tensor(a, GPA_F32, 1, 1, 0), dl = tensor(a, GPA_F32, 2, N, V);
  CHECK_OK(gpa_upload(q, &t, tg, sizeof tg, 0, NULL));
  float l;
  fwd_bwd(q, x, lg, t, loss, dl, &l, got);
  double wl = reference(x, tg, want);
  if (!(fabs(l - wl) <= 1e-5 * fabs(wl) + 1e-6)) {
    fprintf(stderr, "cross_entropy_fwd with -inf logits (V %d): %.9g, expected %.9g\n", V, l, wl);
    return 1;
  }
  for (int i = 0; i < N * V; i++)
    if (!(fabs(got[i] - want[i]) <= 1e-5 * fabs(want[i]) + 1e-7)) {
      fprintf(stderr, "cross_entropy_bwd with -inf logits (V %d): [%d] %.9g, expected %.9g\n", V, i, got[i], want[i]);
      return 1;
    }
  x[3 * V + 77] = NAN; /* a lane's entry in the middle of its row */
  fwd_bwd(q, x, lg, t, loss, dl, &l, got);
  if (!isnan(l)) {
    fprintf(stderr, "cross_entropy_fwd with a NaN logit (V %d): %.9g, expected NaN\n", V, l);
    return 1;
  }
  for (int i = 3 * V; i < 4 * V; i++)
    if (!isnan(got[i])) {
      fprintf(stderr, "cross_entropy_bwd with a NaN logit (V %d): [%d] %.9g, expected NaN\n", V, i, got[i]);
      return 1;
    }
  const gpa_tensor all[4] = {lg, t, loss, dl};
  for (int i = 0; i < 4; i++) gpa_buffer_release(a, all[i].buffer);
  return 0;
}

int main(void) {
  gpa_actor *a;
  CHECK_OK(gpa_actor_create(NULL, &a));
  const int widths[] = {200, VMAX};
  for (int i = 0; i < 2; i++)
    if (run(a, widths[i])) return 1;
  gpa_actor_destroy(a);
  printf("ce_masked: ok on %s\n", getenv("GPA_DEVICE") ? getenv("GPA_DEVICE") : "the default device");
  return 0;
}
