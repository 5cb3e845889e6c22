/* CUDA backend: batches replayed as CUDA graphs (backends/cuda/graph.c,
 * docs/graphs.md). One schedule of training-like steps (an upload whose
 * contents change, ops with a scalar that changes every step, AdamW with its
 * step count, a readback) runs on one actor eagerly and on another with
 * graphs; every readback must be bit-identical, and each batch must report
 * how it ran: recorded, replayed, or eager where the schedule diverges (an
 * extra op, a batch that ends early, a handle awaited mid-batch). Then
 * the automatic mode (GPA_GRAPHS=2), the faults of the simulated device
 * (capture refused, instantiate failing, launch failing, a sticky error in a
 * replay), and a shutdown with held messages. The sim's counters check that
 * a replay is one cuGraphLaunch; on a real GPU those checks are skipped. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_cuda_util.h"

enum { N = 1000, STEPS = 14 };
enum { NORMAL, EXTRA, SHORT, AWAIT_MID };

typedef struct net {
  gpa_actor *a;
  gpa_queue *q;
  gpa_tensor x, w, y, z, g, p, m, v, e;
} net;

typedef struct simc {
  size_t (*launches)(void), (*captures)(void), (*updates)(void);
  void (*capture)(unsigned), (*instantiate)(unsigned), (*launch)(unsigned), (*sticky)(unsigned);
} simc;

static simc sim_counters(gpa_actor *a) {
  simc s = {0};
  if (strcmp(gpa_actor_backend(a), "sim")) return s; /* a real GPU: no counters */
  void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
  *(void **)&s.launches = dlsym(lib, "gpa_sim_graph_launches");
  *(void **)&s.captures = dlsym(lib, "gpa_sim_graph_captures");
  *(void **)&s.updates = dlsym(lib, "gpa_sim_graph_updates");
  *(void **)&s.capture = dlsym(lib, "gpa_sim_fault_capture");
  *(void **)&s.instantiate = dlsym(lib, "gpa_sim_fault_instantiate");
  *(void **)&s.launch = dlsym(lib, "gpa_sim_fault_graph_launch");
  *(void **)&s.sticky = dlsym(lib, "gpa_sim_fault_sticky");
  CHECK(s.launches && s.captures && s.updates && s.capture && s.instantiate && s.launch && s.sticky);
  dlclose(lib);
  return s;
}

static net net_open(void) {
  net n;
  n.a = tu_actor(NULL);
  n.q = gpa_actor_default_queue(n.a);
  gpa_tensor *t[] = {&n.x, &n.w, &n.y, &n.z, &n.g, &n.p, &n.m, &n.v, &n.e};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) *t[i] = tu_f32(n.a, N);
  float buf[N];
  for (int i = 0; i < N; i++) buf[i] = (float)sin(i * 0.37) * 0.5f;
  tu_put(n.q, &n.w, buf, N);
  for (int i = 0; i < N; i++) buf[i] = (float)cos(i * 0.11);
  tu_put(n.q, &n.p, buf, N);
  CHECK_OK(tu_fill(n.q, &n.m, 0, NULL));
  CHECK_OK(tu_fill(n.q, &n.v, 0, NULL));
  CHECK_OK(gpa_sync_batch(n.q, NULL));
  return n;
}

/* The batch's last message: a readback of t into out[N]; then the sync.
 * Returns how the batch ran (gpa_batch_stats.graph). */
static uint32_t read_and_sync(net *n, const gpa_tensor *t, float *out) {
  gpa_handle *rb;
  CHECK_OK(gpa_readback(n->q, t, &rb));
  gpa_batch_stats st = {.size = sizeof st};
  CHECK_OK(gpa_sync_batch(n->q, &st));
  const void *d;
  uint64_t size;
  CHECK_OK(gpa_handle_data(rb, &d, &size));
  CHECK(size == sizeof(float) * N);
  memcpy(out, d, size);
  gpa_handle_release(rb);
  return st.graph;
}

/* One step k of kind `kind`; the parameters after it land in out[N].
 * Returns how the batch ran (gpa_batch_stats.graph). */
static uint32_t step(net *n, uint32_t mode, int k, int kind, float *out) {
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)((i * 7 + k * 13) % 101) / 50.0f - 1.0f;
  CHECK_OK(gpa_batch_begin_opts(n->q, "step", &(gpa_batch_options){.size = sizeof(gpa_batch_options), .graph = mode}));
  CHECK_OK(gpa_upload(n->q, &n->x, x, sizeof x, 0, NULL));
  gpa_handle *mid = NULL;
  CHECK_OK(gpa_add(n->q, &(gpa_add_args){.a = n->x, .b = n->w, .y = n->y}, kind == AWAIT_MID ? &mid : NULL));
  if (mid) { /* before the rest is even submitted: only a release can finish it */
    CHECK_OK(gpa_await(mid, -1));
    gpa_handle_release(mid);
  }
  CHECK_OK(gpa_scale(n->q, &(gpa_scale_args){.x = n->y, .y = n->z, .alpha = 0.5 + 0.01 * k}, NULL));
  if (kind == EXTRA) CHECK_OK(gpa_scale(n->q, &(gpa_scale_args){.x = n->z, .y = n->z, .alpha = 1.5}, NULL));
  CHECK_OK(gpa_gelu_fwd(n->q, &(gpa_gelu_fwd_args){.x = n->z, .y = n->g}, NULL));
  if (kind != SHORT)
    CHECK_OK(gpa_adamw(n->q, &(gpa_adamw_args){.param = n->p, .grad = n->g, .m = n->m, .v = n->v, .lr = 1e-2 / (1 + k),
                                                .beta1 = 0.9, .beta2 = 0.999, .weight_decay = 0.01, .step = k + 1},
                       NULL));
  return read_and_sync(n, &n->p, out);
}

/* A long batch: 1 upload + 80 ops + 1 readback, three 32-message segments
 * of graph (launched as each has matched). diverge_at >= 0: op number
 * diverge_at is another op (a later segment diverges after earlier ones
 * were launched); await_at >= 0: that op is awaited as soon as submitted. */
enum { LONG_OPS = 80 };
static uint32_t long_step(net *n, uint32_t mode, int k, int diverge_at, int await_at, float *out) {
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)((i * 3 + k) % 17) / 16.0f;
  CHECK_OK(gpa_batch_begin_opts(n->q, "long", &(gpa_batch_options){.graph = mode}));
  CHECK_OK(gpa_upload(n->q, &n->x, x, sizeof x, 0, NULL));
  for (int i = 0; i < LONG_OPS; i++) {
    gpa_handle *h = NULL;
    gpa_handle **hp = i == await_at ? &h : NULL;
    if (i == diverge_at) CHECK_OK(gpa_add(n->q, &(gpa_add_args){.a = n->x, .b = n->w, .y = n->x}, hp));
    else if (i % 2) CHECK_OK(gpa_axpy(n->q, &(gpa_axpy_args){.x = n->w, .y0 = n->x, .y = n->x, .alpha = 0.01 * (i % 5)}, hp));
    else CHECK_OK(gpa_scale(n->q, &(gpa_scale_args){.x = n->x, .y = n->x, .alpha = i % 10 ? 0.99 : 1.0 + 0.001 * k}, hp));
    if (h) {
      CHECK_OK(gpa_await(h, -1));
      gpa_handle_release(h);
    }
  }
  return read_and_sync(n, &n->x, out);
}

static const int schedule[STEPS] = {NORMAL, NORMAL, NORMAL, NORMAL, EXTRA, NORMAL, NORMAL, NORMAL,
                                    SHORT, NORMAL, NORMAL, AWAIT_MID, NORMAL, NORMAL};
/* recorded 1, replayed 2, eager 0: a divergence (EXTRA, SHORT, AWAIT_MID)
 * runs eagerly and the label records again at its next batch */
static const uint32_t expect_on[STEPS] = {1, 2, 2, 2, 0, 1, 2, 2, 0, 1, 2, 0, 1, 2};

int main(void) {
  tcu_device_or_skip();
  setenv("GPA_GRAPHS", "2", 1); /* read once per process: the DEFAULT mode below */
  static float eager[STEPS][N], graph[STEPS][N], out[N];

  net e = net_open();
  for (int k = 0; k < STEPS; k++) CHECK(step(&e, GPA_GRAPH_OFF, k, schedule[k], eager[k]) == 0);

  net g = net_open();
  simc sim = sim_counters(g.a);
  size_t l0 = sim.launches ? sim.launches() : 0, u0 = sim.updates ? sim.updates() : 0;
  for (int k = 0; k < STEPS; k++) {
    uint32_t how = step(&g, GPA_GRAPH_ON, k, schedule[k], graph[k]);
    if (how != expect_on[k]) {
      fprintf(stderr, "step %d (kind %d): ran as %u, expected %u\n", k, schedule[k], how, expect_on[k]);
      exit(1);
    }
    CHECK(!memcmp(graph[k], eager[k], sizeof eager[k])); /* bit for bit */
    if (getenv("GPA_TEST_VERBOSE") && sim.launches) printf("step %d: %u, launches %zu\n", k, how, sim.launches() - l0);
  }
  if (sim.launches) {
    size_t launches = sim.launches() - l0, updates = sim.updates() - u0;
    printf("graph: %d steps, %zu graph launches, %zu node updates\n", STEPS, launches, updates);
    size_t graphs = 0, replays = 0;
    for (int k = 0; k < STEPS; k++) graphs += expect_on[k] != 0, replays += expect_on[k] == 2;
    CHECK(launches == graphs); /* one per recorded or replayed batch */
    CHECK(updates == 2 * replays); /* scale's alpha, AdamW's lr and step change in every replay: two nodes */
  }

  /* Long batches in segments: a divergence in the third segment (the first
   * two launched already), an await in the second, each against eager. */
  {
    const struct {
      int diverge_at, await_at;
      uint32_t how;
    } lk[] = {{-1, -1, 1}, {-1, -1, 2}, {70, -1, 0}, {-1, -1, 1}, {-1, -1, 2}, {-1, 40, 0}, {-1, -1, 1}, {-1, -1, 2}};
    size_t l1 = sim.launches ? sim.launches() : 0;
    for (int k = 0; k < (int)(sizeof lk / sizeof lk[0]); k++) {
      float lg[N], le[N];
      uint32_t how = long_step(&g, GPA_GRAPH_ON, k, lk[k].diverge_at, lk[k].await_at, lg);
      long_step(&e, GPA_GRAPH_OFF, k, lk[k].diverge_at, lk[k].await_at, le);
      if (how != lk[k].how) {
        fprintf(stderr, "long step %d: ran as %u, expected %u\n", k, how, lk[k].how);
        exit(1);
      }
      CHECK(!memcmp(lg, le, sizeof le));
    }
    /* 82 messages: segments of 32, 32, 18; the divergence at op 70 (message
     * 71) launched two, the await at op 40 (message 41) one */
    if (sim.launches) CHECK(sim.launches() - l1 == 6 * 3 + 2 + 1);
  }

  /* Faults: each batch still gives the eager results. */
  if (sim.launches) {
    const struct {
      void (*arm)(unsigned);
      uint32_t how;
    } faults[] = {
        {sim.capture, 0},     /* a replay whose changed op cannot be captured again: eager */
        {sim.capture, 0},     /* recording: the capture is refused */
        {sim.instantiate, 0}, /* recording: instantiate fails; twice failed, the label stays eager */
        {NULL, 0},
    };
    for (int i = 0; i < 4; i++) {
      int k = STEPS + i;
      if (faults[i].arm) faults[i].arm(1);
      float fg[N], fe[N];
      CHECK(step(&g, GPA_GRAPH_ON, k, NORMAL, fg) == faults[i].how);
      CHECK(step(&e, GPA_GRAPH_OFF, k, NORMAL, fe) == 0);
      CHECK(!memcmp(fg, fe, sizeof fe));
    }
  }
  CHECK_OK(gpa_actor_destroy(g.a));
  CHECK_OK(gpa_actor_destroy(e.a));

  /* Launch failure on a fresh actor: a replay that cannot launch runs eagerly. */
  if (sim.launches) {
    net f = net_open();
    net r = net_open();
    float a1[N], b1[N];
    for (int k = 0; k < 4; k++) {
      if (k == 2) sim.launch(1);
      uint32_t how = step(&f, GPA_GRAPH_ON, k, NORMAL, a1);
      step(&r, GPA_GRAPH_OFF, k, NORMAL, b1);
      CHECK(how == (k == 0 ? 1u : k == 2 ? 0u : k == 3 ? 1u : 2u));
      CHECK(!memcmp(a1, b1, sizeof a1));
    }
    CHECK_OK(gpa_actor_destroy(r.a));
    /* A sticky device error inside a replay fails the batch's messages. */
    sim.sticky(1);
    float x[N] = {0};
    CHECK_OK(gpa_batch_begin_opts(f.q, "step", &(gpa_batch_options){.graph = GPA_GRAPH_ON}));
    gpa_handle *h;
    CHECK_OK(gpa_upload(f.q, &f.x, x, sizeof x, 0, &h));
    CHECK_OK(gpa_add(f.q, &(gpa_add_args){.a = f.x, .b = f.w, .y = f.y}, NULL));
    CHECK_OK(gpa_scale(f.q, &(gpa_scale_args){.x = f.y, .y = f.z, .alpha = 0.1}, NULL));
    CHECK_OK(gpa_gelu_fwd(f.q, &(gpa_gelu_fwd_args){.x = f.z, .y = f.g}, NULL));
    CHECK_OK(gpa_adamw(f.q, &(gpa_adamw_args){.param = f.p, .grad = f.g, .m = f.m, .v = f.v, .lr = 1e-3, .beta1 = 0.9,
                                              .beta2 = 0.999, .step = 9},
                       NULL));
    gpa_handle *rb;
    CHECK_OK(gpa_readback(f.q, &f.p, &rb));
    gpa_status st = gpa_sync_batch(f.q, NULL);
    CHECK(st == GPA_EDEVICE);
    CHECK_MSG("device failed");
    CHECK(gpa_await(h, 0) == GPA_EDEVICE || gpa_await(h, 0) == GPA_OK); /* the upload may precede the fault */
    CHECK(gpa_await(rb, 0) == GPA_EDEVICE);
    gpa_handle_release(h);
    gpa_handle_release(rb);
    CHECK_OK(gpa_actor_destroy(f.a));
    sim.sticky(0);
  }

  /* The automatic mode: GPA_GRAPHS=2, two alike batches, then graphs. */
  net au = net_open();
  const uint32_t expect_auto[5] = {0, 0, 1, 2, 2};
  for (int k = 0; k < 5; k++) {
    CHECK(step(&au, GPA_GRAPH_DEFAULT, k, NORMAL, out) == expect_auto[k]);
    if (k < 4) CHECK(!memcmp(out, eager[k], sizeof out)); /* the schedule's first steps are NORMAL */
  }

  /* Shutdown with held messages: a replay that never syncs. */
  float x[N] = {0};
  CHECK_OK(gpa_batch_begin_opts(au.q, "step", &(gpa_batch_options){.graph = GPA_GRAPH_ON}));
  gpa_handle *h1, *h2;
  CHECK_OK(gpa_upload(au.q, &au.x, x, sizeof x, 0, &h1));
  CHECK_OK(gpa_add(au.q, &(gpa_add_args){.a = au.x, .b = au.w, .y = au.y}, &h2));
  CHECK_OK(gpa_actor_destroy(au.a));
  CHECK_OK(gpa_await(h1, 0));
  CHECK_OK(gpa_await(h2, 0));
  gpa_handle_release(h1);
  gpa_handle_release(h2);

  /* Bad options. */
  net b = net_open();
  CHECK(gpa_batch_begin_opts(b.q, "x", &(gpa_batch_options){.graph = 7}) == GPA_EINVAL);
  CHECK_MSG("gpa_graph_mode");
  CHECK(gpa_batch_begin_opts(b.q, "x", &(gpa_batch_options){.size = 4}) == GPA_EINVAL);
  CHECK_OK(gpa_actor_destroy(b.a));
  return 0;
}
