/* embedding_bwd on CUDA without a sort (ops/embedding/cuda_rows.c, the
 * rows path) against the sort path (ops/embedding/cuda.c), both forced by
 * GPA_EMB_BWD_ROWS, on sim and on a GPU:
 *   - the two paths give the same bits (the rows path cuts each id's run
 *     where the sort path's chunks do and adds the pieces in its order),
 *     on dy built so that another order of the double sums shows in the
 *     f32 result (cancelling(): summing each run whole, without the pieces,
 *     fails here), and on dy spread over 48 binades; each is within an f32
 *     rounding of a long double reference (plus the double sums' error);
 *     two runs of the rows path agree to the bit;
 *     cases: the main job's shape with text-like ids, bf16 dy (16-byte and
 *     scalar loads), accumulate, every id equal (one run of 4000: 125
 *     pieces), runs that begin on chunk edges, n not a multiple of 32, d
 *     not a multiple of 4, n at the rows path's limit;
 *   - an id out of range (-100, PyTorch's ignore index, has no meaning
 *     here; V itself) fails the op with GPA_ERANGE naming the first bad
 *     position on both paths;
 * and on sim only (its fault injection):
 *   - the launches of each path, counted by refusing the k-th launch until
 *     the op succeeds: the rows path is 1 (gpa_emb_bwd_rows_*), the sort
 *     path 5 at 4096 ids (index check and fetch, block sort, chunk sums,
 *     join);
 *   - the size rule (knob unset): rows up to 1024 vocabulary rows and 8192
 *     ids, the sort past either; GPA_EMB_BWD_ROWS=1 past 8192 ids sorts;
 *   - a refused launch of the rows kernel fails the op with GPA_EDEVICE
 *     naming it, and the next run gives the earlier bits. */
#include <math.h>
#include <stdlib.h>

#include "test_cuda_util.h"

typedef struct ecase {
  const char *label;
  int B, L, V, D, bf, acc;
  int ids;    /* 0 uniform, 1 all equal (V / 2), 2 text-like (a fifth one id), 3 runs on chunk edges */
  int cancel; /* dy from cancelling(), else random over 48 binades */
} ecase;

typedef struct emb {
  ecase c;
  int64_t n, nd, nt; /* ids, dy values, dtable values */
  gpa_tensor dy, ids, dt;
  int32_t *hid;
  float *hdy, *prior; /* dy widened (bf16: the exact values uploaded) */
} emb;

static uint64_t rnd(uint64_t *r) { return (*r = *r * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; }

/* sign, 23 (f32) or 7 (bf16) random mantissa bits, exponent in [lo, hi] */
static float wide_in(uint64_t *r, int bf, int lo, int hi) {
  uint32_t bits = (uint32_t)(127 + lo + (int)(rnd(r) % (uint64_t)(hi - lo + 1))) << 23 | (uint32_t)(rnd(r) & 0x7fffff) |
                  (uint32_t)(rnd(r) & 1) << 31;
  if (bf) bits &= 0xffff0000u;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static float wide(uint64_t *r, int bf) { return wide_in(r, bf, -24, 24); }

/* dy where the order of the double sums shows in the f32 result: an id's
 * occurrences 0, 4, 8, ... are large (about 2^20), occurrences 2, 6, ...
 * cancel them exactly, the odd ones are small (2^-24 to 2^-16): a small
 * value added to a large partial keeps only some 13 to 21 of its bits, and
 * which ones depends on where the partial sums break, so summing a run in
 * other pieces or another order changes the rounded result. */
static void cancelling(emb *e, const ecase *c) {
  int32_t *occ = calloc((size_t)c->V, sizeof *occ);
  for (int64_t i = 0; i < e->n; i++) {
    const int k = occ[e->hid[i]]++;
    for (int64_t d = 0; d < c->D; d++) {
      /* the large value of pair k / 4 of this id and column, again at k + 2 */
      uint64_t h = ((uint64_t)e->hid[i] * 1000003u + (uint64_t)(k / 4)) * 7919u + (uint64_t)d + 1;
      const float big = wide_in(&h, c->bf, 19, 21);
      e->hdy[i * c->D + d] = k % 4 == 0 ? big : k % 4 == 2 ? -big : wide_in(&h, c->bf, -24, -16);
    }
  }
  free(occ);
}

static gpa_tensor tensor(gpa_actor *a, int dt, int rank, int64_t d0, int64_t d1, int64_t d2, size_t es) {
  gpa_tensor t = {0};
  const int64_t n = d0 * d1 * (rank > 2 ? d2 : 1);
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)(n ? n : 1) * es, &t.buffer));
  t.dtype = dt;
  t.rank = (uint32_t)rank;
  t.shape[0] = d0, t.shape[1] = d1, t.shape[2] = d2;
  return t;
}

static void setup(gpa_actor *a, gpa_queue *q, emb *e, ecase c, uint64_t seed) {
  e->c = c;
  e->n = (int64_t)c.B * c.L, e->nd = e->n * c.D, e->nt = (int64_t)c.V * c.D;
  e->dy = tensor(a, c.bf ? GPA_BF16 : GPA_F32, 3, c.B, c.L, c.D, c.bf ? 2 : 4);
  e->ids = tensor(a, GPA_I32, 2, c.B, c.L, 0, 4);
  e->dt = tensor(a, GPA_F32, 2, c.V, c.D, 0, 4);
  e->hid = malloc(sizeof(int32_t) * (size_t)(e->n + 1));
  e->hdy = malloc(sizeof(float) * (size_t)(e->nd + 1));
  e->prior = malloc(sizeof(float) * (size_t)(e->nt + 1));
  for (int64_t i = 0; i < e->n; i++) {
    const uint64_t u = rnd(&seed);
    e->hid[i] = c.ids == 1   ? c.V / 2
                : c.ids == 2 ? (u % 5 == 0 ? 32 % c.V : (int32_t)(u / 5 % 60 % (uint64_t)c.V))
                             : (int32_t)(u % (uint64_t)c.V);
  }
  if (c.ids == 3) /* ids 0, 1, 2, 3 with 32, 64, 31, 1 positions (n = 128), shuffled */
    for (int64_t i = 0; i < e->n; i++) e->hid[i] = i < 32 ? 0 : i < 96 ? 1 : i < 127 ? 2 : 3;
  if (c.ids == 3)
    for (int64_t i = e->n - 1; i > 0; i--) {
      const int64_t j = (int64_t)(rnd(&seed) % (uint64_t)(i + 1));
      const int32_t t = e->hid[i];
      e->hid[i] = e->hid[j], e->hid[j] = t;
    }
  for (int64_t i = 0; i < e->nd; i++) e->hdy[i] = wide(&seed, c.bf);
  if (c.cancel) cancelling(e, &c);
  for (int64_t i = 0; i < e->nt; i++) e->prior[i] = c.acc ? wide(&seed, 0) : NAN; /* NaN: every row is written */
  if (c.bf) {
    uint16_t *h = malloc(2 * (size_t)(e->nd + 1));
    for (int64_t i = 0; i < e->nd; i++) {
      uint32_t b;
      memcpy(&b, &e->hdy[i], 4);
      h[i] = (uint16_t)(b >> 16);
    }
    tu_put_bytes(q, &e->dy, h, 2 * (uint64_t)e->nd);
    free(h);
  } else {
    tu_put(q, &e->dy, e->hdy, e->nd);
  }
  tu_put_bytes(q, &e->ids, e->hid, 4 * (uint64_t)e->n);
}

static void release(gpa_actor *a, emb *e) {
  CHECK_OK(gpa_buffer_release(a, e->dy.buffer));
  CHECK_OK(gpa_buffer_release(a, e->ids.buffer));
  CHECK_OK(gpa_buffer_release(a, e->dt.buffer));
  free(e->hid);
  free(e->hdy);
  free(e->prior);
}

/* An actor whose embedding_bwd calls see GPA_EMB_BWD_ROWS = v (NULL:
 * unset). The options table reads it at actor creation; it is set only
 * while no actor exists (no setenv beside another thread's getenv). */
static gpa_actor *with_knob(const char *v, gpa_queue **q) {
  if (v) setenv("GPA_EMB_BWD_ROWS", v, 1);
  else unsetenv("GPA_EMB_BWD_ROWS");
  gpa_actor *a = tu_actor(NULL);
  *q = gpa_actor_default_queue(a);
  return a;
}

static void done(gpa_actor *a) {
  CHECK_OK(gpa_actor_destroy(a));
  unsetenv("GPA_EMB_BWD_ROWS");
}

/* dtable set to the prior, then embedding_bwd; its status */
static gpa_status run(gpa_queue *q, emb *e, gpa_handle **h) {
  tu_put(q, &e->dt, e->prior, e->nt);
  gpa_tensor in[2] = {e->dy, e->ids};
  gpa_attr at = {"accumulate", GPA_ATTR_INT, e->c.acc, 0};
  gpa_op_call call = {"embedding_bwd", in, 2, &e->dt, 1, &at, 1};
  gpa_status st = gpa_submit(q, &call, h);
  return st == GPA_OK ? gpa_await(*h, -1) : st;
}

static void out(gpa_queue *q, emb *e, float *dst) {
  gpa_handle *h = NULL;
  gpa_status st = run(q, e, &h);
  if (st != GPA_OK) {
    fprintf(stderr, "%s: embedding_bwd: %s\n", e->c.label, h ? gpa_handle_error_message(h) : gpa_last_error_message());
    exit(1);
  }
  gpa_handle_release(h);
  tu_get(q, &e->dt, dst, e->nt);
}

/* every value within an f32 rounding (plus the double sums' error) of the
 * long double sums in position order */
static void near_ref(const emb *e, const float *got) {
  const int64_t D = e->c.D;
  long double *s = calloc((size_t)e->nt + 1, sizeof *s), *m = calloc((size_t)e->nt + 1, sizeof *m);
  for (int64_t i = 0; i < e->n; i++)
    for (int64_t d = 0; d < D; d++) {
      s[e->hid[i] * D + d] += e->hdy[i * D + d];
      m[e->hid[i] * D + d] += fabsl((long double)e->hdy[i * D + d]);
    }
  for (int64_t i = 0; i < e->nt; i++) {
    const long double p = e->c.acc ? e->prior[i] : 0, ref = p + s[i];
    const long double tol = fabsl(ref) * 0x1p-23L + (m[i] + fabsl(p)) * 0x1p-48L;
    if (!(fabsl((long double)got[i] - ref) <= tol)) {
      fprintf(stderr, "%s: dtable[%lld] = %.9g, reference %.12Lg (tolerance %.3Lg)\n", e->c.label, (long long)i,
              got[i], ref, tol);
      exit(1);
    }
  }
  free(s);
  free(m);
}

/* ids[pos] = bad (and ids[pos + 7] = -1, a later bad id that must not be
 * the one named): the op fails with GPA_ERANGE naming pos */
static void bad_id(gpa_queue *q, emb *e, int64_t pos, int32_t bad, const char *path) {
  const int32_t keep = e->hid[pos], keep7 = pos + 7 < e->n ? e->hid[pos + 7] : 0;
  e->hid[pos] = bad;
  if (pos + 7 < e->n) e->hid[pos + 7] = -1;
  tu_put_bytes(q, &e->ids, e->hid, 4 * (uint64_t)e->n);
  char want[128];
  snprintf(want, sizeof want, "embedding_bwd: ids[%lld,%lld] = %d out of range [0, %d)", (long long)(pos / e->c.L),
           (long long)(pos % e->c.L), bad, e->c.V);
  gpa_handle *h = NULL;
  CHECK_ST(run(q, e, &h), GPA_ERANGE);
  const char *m = gpa_handle_error_message(h);
  if (!strstr(m, want)) {
    fprintf(stderr, "%s path: '%s' is not '%s'\n", path, m, want);
    exit(1);
  }
  gpa_handle_release(h);
  printf("ok: %s path: %s\n", path, want);
  e->hid[pos] = keep;
  if (pos + 7 < e->n) e->hid[pos + 7] = keep7;
  tu_put_bytes(q, &e->ids, e->hid, 4 * (uint64_t)e->n);
}

/* case c on an actor of each path (the same data: the same seed): the rows
 * path twice, the sort path once; bad >= 0: then ids[bad_pos] = bad_v */
static void paths_agree(const ecase *c, uint64_t seed, int64_t bad_pos, int32_t bad_v) {
  const size_t bytes = sizeof(float) * (size_t)((int64_t)c->V * c->D + 1);
  float *rows = malloc(bytes), *again = malloc(bytes), *sorted = malloc(bytes);
  for (int k = 0; k < 2; k++) {
    gpa_queue *q;
    gpa_actor *a = with_knob(k ? "0" : "1", &q);
    emb e;
    setup(a, q, &e, *c, seed);
    out(q, &e, k ? sorted : rows);
    if (!k) {
      out(q, &e, again);
      near_ref(&e, rows);
    }
    if (bad_pos >= 0) bad_id(q, &e, bad_pos, bad_v, k ? "sort" : "rows");
    release(a, &e);
    done(a);
  }
  CHECK(!memcmp(rows, again, bytes - sizeof(float)));
  if (memcmp(rows, sorted, bytes - sizeof(float))) {
    for (int64_t i = 0; i < (int64_t)c->V * c->D; i++)
      if (memcmp(&rows[i], &sorted[i], 4)) {
        fprintf(stderr, "%s: dtable[%lld]: rows path %.9g, sort path %.9g\n", c->label, (long long)i, rows[i],
                sorted[i]);
        break;
      }
    exit(1);
  }
  printf("ok: %s: the rows path (twice) and the sort path give the same bits, near the reference\n", c->label);
  free(rows);
  free(again);
  free(sorted);
}

/* launches of one embedding_bwd: the k-th is refused for k = 1, 2, ...
 * until the op succeeds; the first refused names `first` */
static unsigned launches(gpa_queue *q, emb *e, tcu_sim *sim, const char *first) {
  for (unsigned k = 1; k < 64; k++) {
    gpa_handle *h = NULL;
    sim->fault_launch(k);
    gpa_status st = run(q, e, &h);
    sim->fault_clear();
    if (st == GPA_OK) {
      gpa_handle_release(h);
      return k - 1;
    }
    if (k == 1) tcu_expect_refused(q, st, h, "embedding_bwd", 1, first);
    else {
      CHECK_ST(st, GPA_EDEVICE);
      gpa_handle_release(h);
      gpa_sync_batch(q, NULL);
    }
  }
  fprintf(stderr, "%s: more than 63 launches\n", e->c.label);
  exit(1);
}

/* launches of case c with GPA_EMB_BWD_ROWS = setting (the rows path: its
 * kernel named when the first is refused, else the sort path's index check) */
static unsigned launches_with(const char *setting, const ecase *c, int rows) {
  gpa_queue *q;
  gpa_actor *a = with_knob(setting, &q);
  tcu_sim sim = tcu_sim_api(a);
  emb e;
  setup(a, q, &e, *c, 7);
  const unsigned k =
      launches(q, &e, &sim, rows ? (c->bf ? "gpa_emb_bwd_rows_bf16" : "gpa_emb_bwd_rows_f32") : "gpa_idx_check");
  release(a, &e);
  done(a);
  return k;
}

/* the path GPA_EMB_BWD_ROWS = setting takes at B x L ids of V rows */
static void rule(int B, int L, int V, const char *setting, int rows) {
  const ecase c = {"rule", B, L, V, 4, 0, 0, 0, 0};
  const unsigned k = launches_with(setting, &c, rows);
  CHECK(rows ? k == 1 : k >= 4);
  printf("ok: GPA_EMB_BWD_ROWS=%s, %d ids into %d rows: the %s path (%u launches)\n", setting ? setting : "(unset)",
         B * L, V, rows ? "rows" : "sort", k);
}

int main(void) {
  tcu_device_or_skip();
  gpa_queue *q;
  gpa_actor *a = with_knob(NULL, &q);
  const int on_sim = !strcmp(gpa_actor_backend(a), "sim");
  done(a);
  const ecase cases[] = {
      {"main job f32 (32 x 128 ids, V 256, D 96, text-like)", 32, 128, 256, 96, 0, 0, 2, 1},
      {"main job bf16 dy, accumulate", 32, 128, 256, 96, 1, 1, 2, 1},
      {"every id equal (4000 ids, V 7)", 4, 1000, 7, 8, 0, 1, 1, 1},
      {"runs on chunk edges (32, 64, 31, 1)", 2, 64, 4, 4, 0, 0, 3, 1},
      {"n = 111, D 13 (scalar), accumulate", 3, 37, 50, 13, 0, 1, 0, 0},
      {"bf16 dy, D 12 (scalar)", 2, 50, 30, 12, 1, 0, 2, 0},
      {"bf16 dy, D 12 (scalar), cancelling", 2, 50, 30, 12, 1, 0, 2, 1},
      {"D 1, V 1025 (past the rule)", 4, 300, 1025, 1, 0, 0, 0, 1},
      {"8192 ids (the rows path's limit), V 3", 64, 128, 3, 4, 0, 0, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    paths_agree(&cases[i], 1000 + i, i == 4 ? 40 : i == 5 ? 3 : -1, i == 4 ? -100 : 30);
  if (!on_sim) return 0;

  const unsigned rows = launches_with("1", &cases[0], 1), sorted = launches_with("0", &cases[0], 0);
  printf("ok: embedding_bwd at the main job's shape: %u launch (rows path), %u (sort path)\n", rows, sorted);
  CHECK(rows == 1 && sorted == 5);
  CHECK(launches_with("1", &cases[1], 1) == 1);
  /* a refused launch, then the same bits as a run before it */
  a = with_knob("1", &q);
  tcu_sim sim = tcu_sim_api(a);
  emb e;
  setup(a, q, &e, cases[0], 5);
  const size_t bytes = sizeof(float) * (size_t)e.nt;
  float *r1 = malloc(bytes), *r2 = malloc(bytes);
  out(q, &e, r1);
  gpa_handle *h = NULL;
  sim.fault_launch(1);
  gpa_status st = run(q, &e, &h);
  sim.fault_clear();
  tcu_expect_refused(q, st, h, "embedding_bwd", 1, "gpa_emb_bwd_rows_f32");
  out(q, &e, r2);
  CHECK(!memcmp(r1, r2, bytes));
  printf("ok: after a refused launch the rows path gives the same bits\n");
  free(r1);
  free(r2);
  release(a, &e);
  done(a);
  rule(1, 64, 1024, NULL, 1);
  rule(1, 64, 1025, NULL, 0);
  rule(32, 256, 2, NULL, 1);
  rule(1, 8193, 2, NULL, 0);
  rule(1, 8193, 2, "1", 0);
  rule(1, 64, 5000, "1", 1);
  rule(1, 64, 2, "0", 0);
  return 0;
}
