/* Stream-ordered device memory (issue 30; backends/cuda/alloc.c). Buffers
 * are released, evicted under a memory budget (a buffer of a new label each
 * round fills the cache with blocks no later acquire reuses) and acquired
 * again, and each queue's scratch grows (mse with more rows), while two
 * queues' work is in flight on slowed streams. Every result read back must be right: a
 * block freed before the work using it had run (a free on the wrong stream,
 * or without the pins) reads the simulator's 0xDD quarantine fill.
 *   - with memory pools (the default), the loop makes no device-wide
 *     synchronization (gpa_sim_device_syncs stays put) though it evicts
 *     buffers and grows scratch;
 *   - without (gpa_sim_mempools(0): the cuMemAlloc/cuMemFree fallback) the
 *     same loop is right too, and its evictions' cuMemFree calls are
 *     counted: the counter would see a synchronization on the first path.
 * Runs on sim only (skipped elsewhere). */
#include "test_cuda_util.h"

enum { ITER = 30, DEPTH = 4, COLS = 8 };

typedef struct sim_mem {
  size_t (*device_syncs)(void);
  void (*mempools)(int on);
} sim_mem;

typedef struct pending {
  gpa_handle *h;
  float want;
} pending;

/* y (rows x COLS) of a, t of a + d: mse = d * d, on q; the buffers are
 * released at once (the work in flight keeps them). */
static pending mse_on(gpa_actor *a, gpa_queue *q, int64_t rows, float base, float d) {
  int64_t n = rows * COLS;
  gpa_tensor y = tu_f32(a, n), t = tu_f32(a, n), out = tu_f32(a, 1);
  y.rank = t.rank = 2;
  y.shape[0] = t.shape[0] = rows;
  y.shape[1] = t.shape[1] = COLS;
  float *hy = malloc((size_t)n * sizeof *hy), *ht = malloc((size_t)n * sizeof *ht);
  CHECK(hy && ht);
  for (int64_t i = 0; i < n; i++) {
    hy[i] = base + (float)(i % 7);
    ht[i] = hy[i] + d;
  }
  CHECK_OK(gpa_upload(q, &y, hy, (uint64_t)n * 4, 0, NULL));
  CHECK_OK(gpa_upload(q, &t, ht, (uint64_t)n * 4, 0, NULL));
  free(hy);
  free(ht);
  gpa_tensor in[2] = {y, t};
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "mse", .inputs = in, .n_inputs = 2, .outputs = &out, .n_outputs = 1},
                      NULL));
  pending p = {NULL, d * d};
  CHECK_OK(gpa_readback(q, &out, &p.h));
  CHECK_OK(gpa_buffer_release(a, y.buffer));
  CHECK_OK(gpa_buffer_release(a, t.buffer));
  CHECK_OK(gpa_buffer_release(a, out.buffer));
  return p;
}

static void check(pending *p) {
  CHECK_OK(gpa_await(p->h, -1));
  const void *data;
  uint64_t size;
  CHECK_OK(gpa_handle_data(p->h, &data, &size));
  float got = *(const float *)data;
  if (got != p->want) {
    fprintf(stderr, "mse read back %g, want %g\n", (double)got, (double)p->want);
    exit(1);
  }
  gpa_handle_release(p->h);
}

/* The loop on a new actor; returns its device-wide synchronizations and
 * sets *evicted to the buffers it evicted. */
static size_t churn(const sim_mem *sm, tcu_sim *sim, uint64_t *evicted) {
  /* above what is ever in flight (~80 KiB), below what the rounds acquire */
  gpa_actor_options o = {.size = sizeof o, .mem_budget = 160 << 10};
  gpa_actor *a = tu_actor(&o);
  gpa_queue *qa, *qb;
  CHECK_OK(gpa_queue_create(a, "a", &qa));
  CHECK_OK(gpa_queue_create(a, "b", &qb));
  pending warm = mse_on(a, qa, 1, 0.0f, 1.0f); /* the allocation stream, staging, kernels */
  check(&warm);
  sim->fault_stream_delay(NULL, 200); /* every stream: the work stays in flight */
  size_t syncs0 = sm->device_syncs();
  pending p[ITER * 2];
  for (int i = 0; i < ITER; i++) {
    p[2 * i] = mse_on(a, qa, 16 + (i % 5) * 24, (float)i, (float)(1 + i % 3));
    p[2 * i + 1] = mse_on(a, qb, 8 + (i % 4) * 40, (float)-i, (float)(2 + i % 2));
    char label[32]; /* a label of its own: cached at once, never reused, evicted in turn */
    snprintf(label, sizeof label, "junk%d", i);
    gpa_buffer_id junk;
    CHECK_OK(gpa_buffer_acquire(a, label, 16 << 10, &junk));
    CHECK_OK(gpa_buffer_release(a, junk));
    if (i >= DEPTH) check(&p[2 * (i - DEPTH)]), check(&p[2 * (i - DEPTH) + 1]);
  }
  for (int i = ITER - DEPTH; i < ITER; i++) check(&p[2 * i]), check(&p[2 * i + 1]);
  size_t syncs = sm->device_syncs() - syncs0;
  sim->fault_stream_delay(NULL, 0);
  gpa_actor_stats st = {.size = sizeof st};
  CHECK_OK(gpa_actor_stats_get(a, &st));
  *evicted = st.evictions;
  CHECK_OK(gpa_actor_destroy(a));
  return syncs;
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *keep = tu_actor(NULL); /* keeps the simulator loaded between the actors below */
  tcu_sim sim = tcu_sim_api(keep);
  void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
  sim_mem sm;
  *(void **)&sm.device_syncs = dlsym(lib, "gpa_sim_device_syncs");
  *(void **)&sm.mempools = dlsym(lib, "gpa_sim_mempools");
  CHECK(sm.device_syncs && sm.mempools);
  dlclose(lib);

  uint64_t ev_pool = 0, ev_plain = 0;
  size_t s_pool = churn(&sm, &sim, &ev_pool);
  sm.mempools(0);
  size_t s_plain = churn(&sm, &sim, &ev_plain);
  sm.mempools(1);
  printf("stream_alloc: with pools %zu device syncs (%llu evictions); cuMemAlloc/cuMemFree %zu (%llu evictions)\n",
         s_pool, (unsigned long long)ev_pool, s_plain, (unsigned long long)ev_plain);
  CHECK(ev_pool > 0 && ev_plain > 0); /* the budget made the cache free memory */
  CHECK(s_pool == 0);
  CHECK(s_plain > 0);
  CHECK_OK(gpa_actor_destroy(keep));
  return 0;
}
