/* Allocation failure at each allocation site in turn (simulated device).
 *
 * A workload (buffer acquisitions, uploads through pinned staging, layernorm
 * forward and backward, gelu, embedding with its device-side id check, a
 * user op taking gpa_exec_scratch, readbacks, batch syncs, on two queues)
 * makes `count` device and pinned allocations in a fresh actor. For every
 * N = 1..count, in two modes, a fresh actor runs the workload with
 *   - "single": only the N-th allocation failing (the retry paths: buffer
 *     and scratch allocation evict the cache and retry, staging gives its
 *     cached blocks back and retries), or
 *   - "oom": the N-th allocation and every later one failing,
 * then the faults are cleared and the workload runs again. Asserted each time:
 * every handle completes (no hang: awaits are bounded) with GPA_OK or
 * GPA_ENOMEM, a counting profiler sees every message finish exactly once,
 * the second run gives bitwise the results of a fault-free run (the actor
 * recovered), and the device holds no more allocations afterwards than after
 * a fault-free iteration (nothing leaked; host memory: the ASan build). */
#include <stdatomic.h>

#include "test_cuda_util.h"

/* N = 64 rows: on CUDA layernorm_bwd's dgamma/dbeta split into two chunks,
 * whose partials take scratch and whose last block a stream's split-sum
 * counters (kernels/cuda/split_sum.h): both allocation sites fail in turn */
enum { N = 64, D = 64, B = 4, L = 8, V = 50, DE = 32 };
#define AWAIT_NS (60 * 1000000000ll)

static _Atomic uint64_t finished;
static void on_op(const gpa_prof_op *op, void *ud) {
  (void)op;
  (void)ud;
  atomic_fetch_add(&finished, 1);
}

/* A user op whose CUDA implementation needs device scratch: y = x + 1
 * through the scratch (memset-free: a D2D copy there and back). */
typedef int (*copy_dd_fn)(unsigned long long dst, unsigned long long src, size_t n, void *stream);
static copy_dd_fn cu_copy_dd;
static gpa_status via_scratch_cuda(const gpa_op_exec *x) {
  uint64_t n = (uint64_t)gpa_tensor_numel(&x->inputs[0]) * 4;
  void *s = gpa_exec_scratch(x->env, n);
  if (!s) return GPA_ENOMEM;
  unsigned long long d = (unsigned long long)(uintptr_t)s;
  if (cu_copy_dd(d, (unsigned long long)(uintptr_t)x->in[0], n, x->stream) ||
      cu_copy_dd((unsigned long long)(uintptr_t)x->out[0], d, n, x->stream)) {
    snprintf(x->msg, x->msg_size, "via_scratch: copy failed");
    return GPA_EDEVICE;
  }
  return GPA_OK;
}
static gpa_status same_shape(const gpa_op_sig *sig, gpa_tensor *out, char *msg, size_t cap) {
  (void)msg;
  (void)cap;
  out[0] = sig->inputs[0];
  return GPA_OK;
}

typedef struct run {
  uint64_t submitted, ok, enomem;
  float y[N * D], dx[N * D], e[B * L * DE], c[N * D];
} run;

static gpa_tensor t2(gpa_buffer_id b, int dt, int64_t r, int64_t c) {
  gpa_tensor t = {0};
  t.buffer = b;
  t.dtype = dt;
  t.rank = c ? 2 : 1;
  t.shape[0] = r;
  t.shape[1] = c;
  return t;
}

/* Counts a submitted message, or fails the test if the submit was refused. */
static void sub(run *r, gpa_status st) {
  CHECK_OK(st);
  r->submitted++;
}

static void workload(gpa_actor *a, run *r) {
  memset(r, 0, sizeof *r);
  enum { NB = 14 };
  static const uint64_t sizes[NB] = {N * D * 4, D * 4, D * 4, N * D * 4, N * 4, N * 4, N * D * 4,
                                     N * D * 4, D * 4, D * 4, B * L * 4, V * DE * 4, B * L * DE * 4, N * D * 4};
  gpa_buffer_id b[NB];
  int nb = 0;
  for (; nb < NB; nb++) {
    gpa_status st = gpa_buffer_acquire(a, NULL, sizes[nb], &b[nb]);
    if (st == GPA_ENOMEM) break;
    CHECK_OK(st);
  }
  if (nb < NB) { /* no buffers, no work: give back what we have */
    r->enomem++;
    for (int i = 0; i < nb; i++) CHECK_OK(gpa_buffer_release(a, b[i]));
    return;
  }
  gpa_tensor x = t2(b[0], GPA_F32, N, D), g = t2(b[1], GPA_F32, D, 0), be = t2(b[2], GPA_F32, D, 0),
             y = t2(b[3], GPA_F32, N, D), mean = t2(b[4], GPA_F32, N, 0), rstd = t2(b[5], GPA_F32, N, 0),
             gy = t2(b[6], GPA_F32, N, D), dx = t2(b[7], GPA_F32, N, D), dg = t2(b[8], GPA_F32, D, 0),
             db = t2(b[9], GPA_F32, D, 0), ids = t2(b[10], GPA_I32, B, L), tab = t2(b[11], GPA_F32, V, DE),
             e = t2(b[12], GPA_F32, B * L, DE), c = t2(b[13], GPA_F32, N, D);
  e.rank = 3;
  e.shape[0] = B;
  e.shape[1] = L;
  e.shape[2] = DE;
  static float xv[N * D], gv[D], bv[D], tv[V * DE];
  static int32_t iv[B * L];
  for (int i = 0; i < N * D; i++) xv[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < D; i++) gv[i] = 1.0f + (float)i / D, bv[i] = (float)i / (2 * D);
  for (int i = 0; i < V * DE; i++) tv[i] = (float)((i * 13) % 29) / 7.0f;
  for (int i = 0; i < B * L; i++) iv[i] = (i * 7) % V;

  gpa_queue *q = gpa_actor_default_queue(a), *q2;
  CHECK_OK(gpa_queue_create(a, "second", &q2));
  enum { H = 16 };
  gpa_handle *h[H];
  int nh = 0;
  sub(r, gpa_upload(q, &x, xv, sizeof xv, 0, &h[nh++]));
  sub(r, gpa_upload(q, &g, gv, sizeof gv, 0, &h[nh++]));
  sub(r, gpa_upload(q, &be, bv, sizeof bv, 0, &h[nh++]));
  gpa_tensor lin[3] = {x, g, be}, lout[3] = {y, mean, rstd};
  gpa_op_call lf = {"layernorm_fwd", lin, 3, lout, 3, NULL, 0};
  sub(r, gpa_submit(q, &lf, &h[nh++]));
  gpa_op_call gf = {"gelu_fwd", &y, 1, &gy, 1, NULL, 0};
  sub(r, gpa_submit(q, &gf, &h[nh++]));
  gpa_tensor bin[5] = {x, gy, g, mean, rstd}, bout[3] = {dx, dg, db};
  gpa_op_call lb = {"layernorm_bwd", bin, 5, bout, 3, NULL, 0};
  sub(r, gpa_submit(q, &lb, &h[nh++]));
  sub(r, gpa_readback(q, &y, &h[nh++]));
  sub(r, gpa_readback(q, &dx, &h[nh++]));
  /* second queue: its own data */
  sub(r, gpa_upload(q2, &ids, iv, sizeof iv, 0, &h[nh++]));
  sub(r, gpa_upload(q2, &tab, tv, sizeof tv, 0, &h[nh++]));
  gpa_tensor ein[2] = {ids, tab};
  gpa_op_call ef = {"embedding_fwd", ein, 2, &e, 1, NULL, 0};
  sub(r, gpa_submit(q2, &ef, &h[nh++]));
  sub(r, gpa_readback(q2, &e, &h[nh++]));
  gpa_status s0 = gpa_sync_batch(q, NULL); /* x was uploaded on q: q2 reads it after this */
  CHECK(s0 == GPA_OK || s0 == GPA_ENOMEM);
  gpa_op_call vs = {"via_scratch", &x, 1, &c, 1, NULL, 0};
  sub(r, gpa_submit(q2, &vs, &h[nh++]));
  sub(r, gpa_readback(q2, &c, &h[nh++]));
  gpa_status ids_st = GPA_OK;
  for (int i = 0; i < nh; i++) {
    gpa_status st = gpa_await(h[i], AWAIT_NS);
    if (i == 8) ids_st = st;
    /* ids that never arrived are garbage: the device's id check says so */
    if (i == 10 && st == GPA_ERANGE && ids_st != GPA_OK) st = GPA_ENOMEM;
    if (st != GPA_OK && st != GPA_ENOMEM) {
      fprintf(stderr, "handle %d: %s: %s\n", i, gpa_status_name(st), gpa_handle_error_message(h[i]));
      CHECK(0);
    }
    if (st == GPA_OK) r->ok++;
    else r->enomem++;
  }
  const void *d;
  uint64_t sz;
  float *dst[4] = {r->y, r->dx, r->e, r->c};
  int rb[4] = {6, 7, 11, 13};
  for (int k = 0; k < 4; k++)
    if (gpa_handle_data(h[rb[k]], &d, &sz) == GPA_OK) memcpy(dst[k], d, sz);
  for (int i = 0; i < nh; i++) gpa_handle_release(h[i]);
  gpa_status s1 = gpa_sync_batch(q, NULL), s2 = gpa_sync_batch(q2, NULL);
  CHECK(s1 == GPA_OK || s1 == GPA_ENOMEM);
  CHECK(s2 == GPA_OK || s2 == GPA_ENOMEM);
  CHECK_OK(gpa_queue_destroy(q2));
  for (int i = 0; i < NB; i++) CHECK_OK(gpa_buffer_release(a, b[i]));
}

static gpa_actor *fresh(tcu_sim *sim) {
  gpa_actor *a = tu_actor(NULL);
  *sim = tcu_sim_api(a);
  gpa_profiler prof = {.size = sizeof prof, .on_op = on_op};
  CHECK_OK(gpa_actor_add_profiler(a, &prof));
  gpa_op_desc d = {.size = sizeof d, .name = "via_scratch", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
                   .shape = same_shape, .cuda = via_scratch_cuda};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  return a;
}

/* One iteration: a fresh actor, the workload under `arm`, then again without
 * faults. Returns the device allocations left before the actor goes. */
static size_t iteration(int mode, unsigned n, const run *ref, run *faulted, size_t *allocs) {
  tcu_sim sim;
  gpa_actor *a = fresh(&sim);
  atomic_store(&finished, 0);
  size_t a0 = sim.allocations();
  if (mode == 1) sim.fault_alloc(n);
  else if (mode == 2) sim.fault_oom(n);
  workload(a, faulted);
  if (allocs) *allocs = sim.allocations() - a0;
  sim.fault_clear();
  CHECK(atomic_load(&finished) == faulted->submitted);
  static run again;
  workload(a, &again);
  CHECK(again.ok == again.submitted && again.enomem == 0);
  CHECK(atomic_load(&finished) == faulted->submitted + again.submitted);
  if (ref) {
    CHECK(!memcmp(again.y, ref->y, sizeof ref->y) && !memcmp(again.dx, ref->dx, sizeof ref->dx));
    CHECK(!memcmp(again.e, ref->e, sizeof ref->e) && !memcmp(again.c, ref->c, sizeof ref->c));
  }
  size_t live = sim.live_allocations();
  CHECK_OK(gpa_actor_destroy(a));
  return live;
}

int main(void) {
  tcu_device_or_skip();
  {
    gpa_actor *a = tu_actor(NULL);
    (void)tcu_sim_api(a); /* skips on a real GPU */
    void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib);
    *(void **)&cu_copy_dd = dlsym(lib, "cuMemcpyDtoDAsync_v2");
    CHECK(cu_copy_dd);
    dlclose(lib);
    CHECK_OK(gpa_actor_destroy(a));
  }
  static run ref, f;
  size_t count = 0;
  size_t live_ref = iteration(0, 0, NULL, &ref, &count);
  CHECK(ref.ok == ref.submitted && ref.enomem == 0);
  for (int i = 0; i < N * D; i++) CHECK(ref.c[i] == (float)((i * 37) % 101) / 50.0f - 1.0f);
  printf("workload: %llu messages, %zu allocations, %zu device allocations live at the end\n",
         (unsigned long long)ref.submitted, count, live_ref);
  CHECK(count >= 8);
  static const char *names[] = {"", "single", "oom"};
  uint64_t faults = 0, failed_handles = 0, handles = 0;
  for (int mode = 1; mode <= 2; mode++) {
    uint64_t m_failed = 0, m_recovered = 0;
    for (unsigned n = 1; n <= count; n++) {
      size_t live = iteration(mode, n, &ref, &f, NULL);
      if (live > live_ref) {
        fprintf(stderr, "%s N=%u: %zu device allocations live, %zu after a fault-free run\n", names[mode], n, live,
                live_ref);
        CHECK(0);
      }
      faults++;
      handles += f.submitted;
      failed_handles += f.enomem;
      m_failed += f.enomem;
      m_recovered += f.enomem == 0;
    }
    printf("ok: %s: %zu faults injected, %llu ENOMEM results, %llu runs unaffected (retried), 0 handles lost\n",
           names[mode], count, (unsigned long long)m_failed, (unsigned long long)m_recovered);
  }
  printf("ok: %llu faults, %llu messages, %llu ENOMEM, every message finished exactly once\n",
         (unsigned long long)faults, (unsigned long long)handles, (unsigned long long)failed_handles);
  return 0;
}
