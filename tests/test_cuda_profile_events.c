/* CUDA backend, profiling on: consecutive timed ops of a stream share their
 * boundary events (op i's end event starts op i+1: N+1 cuEventRecord calls
 * for N ops, not 2N) and each op still gets its own device time
 * (backends/cuda/timing.c). On sim, whose events carry host timestamps
 * taken when the stream reaches them, and which counts cuEventRecord calls;
 * on a GPU the same times are checked, without the counts.
 *
 * The ops: `nap` enqueues a host function that sleeps `ms` on its stream, so
 * its device time is known (at least ms, and not much more), neighbours
 * differ by 40 ms or more (a time that took its neighbour's nap, or lost
 * its own, is far out), and the stream stays busy ahead of the actor (the
 * condition for sharing). Checked on one queue; on two queues interleaved;
 * and in a chain broken by an upload, a host-fallback op (which drains the
 * stream), an op that fails after enqueuing its nap (the next op must not
 * count that nap), all of them completing exactly once with their status;
 * and across an idle stream (the next op must not count the idle time).
 * Without a profiler: groups share boundaries the same way, and the host
 * fallback's op still has its time. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "test_cuda_util.h"

#define MS 1000000ll
#define SLACK (25 * MS) /* a loaded machine's lateness of a sleep or a stream worker; every
                            wrong attribution checked adds 60 ms or more */

typedef struct prof_row {
  char name[16];
  uint32_t queue_id; /* 1: the queue named "second", else 0 */
  int32_t status;
  int64_t device_ns;
} prof_row;

static prof_row rows[256];
static atomic_uint n_rows;

static void on_op(const gpa_prof_op *op, void *ud) {
  (void)ud;
  unsigned i = atomic_load_explicit(&n_rows, memory_order_relaxed);
  if (i == sizeof rows / sizeof rows[0]) return;
  snprintf(rows[i].name, sizeof rows[i].name, "%s", op->name);
  rows[i].queue_id = !strcmp(op->queue, "second");
  rows[i].status = op->status;
  rows[i].device_ns = op->device_ns;
  atomic_store_explicit(&n_rows, i + 1, memory_order_release);
}

typedef int (*host_fn_launch)(void *stream, void (*fn)(void *), void *arg);
static host_fn_launch launch_host_fn;
static size_t (*event_records)(void); /* sim only */
static size_t records(void) { return event_records ? event_records() : 0; }

static void nap_fn(void *arg) { usleep((useconds_t)(intptr_t)arg * 1000); }

typedef struct nap_params {
  int64_t ms;
} nap_params;
static const gpa_attr_spec nap_attrs[] = {{"ms", GPA_ATTR_INT, 1, 0, 0, 0, 0, 1000}};

static gpa_status nap_cuda(const gpa_op_exec *x) {
  const nap_params *p = x->params;
  if (launch_host_fn(x->stream, nap_fn, (void *)(intptr_t)p->ms)) {
    snprintf(x->msg, x->msg_size, "nap: cuLaunchHostFunc failed");
    return GPA_EDEVICE;
  }
  return GPA_OK;
}

/* Fails after its nap is on the stream: the stream holds work of no record. */
static gpa_status napfail_cuda(const gpa_op_exec *x) {
  gpa_status st = nap_cuda(x);
  if (st != GPA_OK) return st;
  snprintf(x->msg, x->msg_size, "napfail: failed on purpose");
  return GPA_EINVAL;
}

/* No CUDA implementation: runs on the host fallback (the stream drained). */
static gpa_status hostnap(const gpa_op_exec *x) {
  const nap_params *p = x->params;
  usleep((useconds_t)p->ms * 1000);
  return GPA_OK;
}

static void reg(gpa_actor *a) {
  gpa_registry *r = gpa_actor_registry(a);
  CHECK_OK(gpa_op_register(r, &(gpa_op_desc){.name = "nap", .attrs = nap_attrs, .n_attrs = 1,
                                              .params_size = sizeof(nap_params), .cuda = nap_cuda}));
  CHECK_OK(gpa_op_register(r, &(gpa_op_desc){.name = "napfail", .attrs = nap_attrs, .n_attrs = 1,
                                              .params_size = sizeof(nap_params), .cuda = napfail_cuda}));
  CHECK_OK(gpa_op_register(r, &(gpa_op_desc){.name = "hostnap", .attrs = nap_attrs, .n_attrs = 1,
                                              .params_size = sizeof(nap_params), .host = hostnap}));
}

static gpa_status nap(gpa_queue *q, const char *op, int ms, gpa_handle **h) {
  gpa_attr at = {"ms", GPA_ATTR_INT, ms, 0};
  return gpa_submit(q, &(gpa_op_call){.op = op, .attrs = &at, .n_attrs = 1}, h);
}

/* Row i is op `name` on queue qid, with status st (else the test fails)
 * and, for a nap, a device time of its own nap: at least ms (else the test
 * fails), less than ms + SLACK (else false: a late stream worker on a
 * loaded machine can make any op slow once, so the scenario is tried again;
 * a wrong attribution is late every time). */
static bool expect(unsigned i, const char *name, uint32_t qid, gpa_status st, int ms) {
  CHECK(i < atomic_load_explicit(&n_rows, memory_order_acquire));
  const prof_row *r = &rows[i];
  printf("  op %u: %-8s queue %u status %d device %.2f ms (nap %d ms)\n", i, r->name, r->queue_id, r->status,
         r->device_ns / 1e6, ms);
  CHECK(!strcmp(r->name, name));
  CHECK(r->queue_id == qid);
  CHECK(r->status == st);
  if (!ms) return true;
  CHECK(r->device_ns >= ms * MS - MS / 2); /* the sim's clock: ms-exact sleeps, allow rounding */
  return r->device_ns < ms * MS + SLACK;
}

/* The k-th row from `from` on queue qid, named name (NULL: any name). Rows
 * come in completion order: that of a stream's deferred ops, but an op that
 * runs synchronously (the host fallback) finishes before the ops enqueued
 * ahead of it. */
static unsigned row_of(unsigned from, uint32_t qid, const char *name, unsigned k) {
  unsigned n = atomic_load_explicit(&n_rows, memory_order_acquire);
  for (unsigned i = from; i < n; i++)
    if (rows[i].queue_id == qid && (!name || !strcmp(rows[i].name, name)) && k-- == 0) return i;
  fprintf(stderr, "no row %u of queue %u named %s\n", k, qid, name ? name : "(any)");
  exit(1);
}

typedef struct env {
  gpa_actor *a;
  gpa_queue *q, *q2;
  bool sim;
} env;
enum { Q1 = 0, Q2 = 1 }; /* queue ids of the rows: the default queue, "second" */

/* One queue: six naps submitted at once; N + 1 event records when every
 * boundary is shared (two per op without sharing; a machine so loaded that
 * the stream catches up with the actor records a few more starts, which
 * the bound allows). */
static bool one_queue(const env *e) {
  static const int one[] = {20, 80, 20, 60, 20, 90};
  enum { N1 = sizeof one / sizeof one[0] };
  unsigned from = atomic_load(&n_rows);
  CHECK_OK(gpa_batch_begin(e->q, "one"));
  size_t rec0 = records();
  for (int i = 0; i < N1; i++) CHECK_OK(nap(e->q, "nap", one[i], NULL));
  CHECK_OK(gpa_sync_batch(e->q, NULL));
  size_t recs = records() - rec0;
  printf("one queue: %d timed ops, %zu event records\n", N1, recs);
  CHECK(atomic_load(&n_rows) == from + N1);
  bool ok = !e->sim || recs <= N1 + 3;
  for (unsigned i = 0; i < N1; i++) ok &= expect(from + i, "nap", Q1, GPA_OK, one[i]);
  return ok;
}

/* Two queues, interleaved: each stream's chain is its own. */
static bool two_queues(const env *e) {
  static const int two1[] = {30, 80, 30}, two2[] = {70, 20, 60};
  unsigned from = atomic_load(&n_rows);
  size_t rec0 = records();
  for (int i = 0; i < 3; i++) {
    CHECK_OK(nap(e->q, "nap", two1[i], NULL));
    CHECK_OK(nap(e->q2, "nap", two2[i], NULL));
  }
  CHECK_OK(gpa_sync_batch(e->q, NULL));
  CHECK_OK(gpa_sync_batch(e->q2, NULL));
  size_t recs = records() - rec0;
  printf("two queues: 6 timed ops, %zu event records\n", recs);
  CHECK(atomic_load(&n_rows) == from + 6);
  bool ok = !e->sim || recs <= 6 + 2 + 3;
  for (unsigned i = 0; i < 3; i++) {
    ok &= expect(row_of(from, Q1, NULL, i), "nap", Q1, GPA_OK, two1[i]);
    ok &= expect(row_of(from, Q2, NULL, i), "nap", Q2, GPA_OK, two2[i]);
  }
  return ok;
}

/* A chain broken by an upload, the host fallback and a failure; each
 * message completes once, with its status. */
static bool broken_chain(const env *e) {
  unsigned from = atomic_load(&n_rows);
  gpa_tensor t = tu_f32(e->a, 1024);
  float v[1024] = {0};
  gpa_handle *h[7];
  CHECK_OK(nap(e->q, "nap", 20, &h[0]));
  CHECK_OK(gpa_upload(e->q, &t, v, sizeof v, 0, &h[1]));
  CHECK_OK(nap(e->q, "nap", 60, &h[2]));
  CHECK_OK(nap(e->q, "hostnap", 2, &h[3]));
  CHECK_OK(nap(e->q, "nap", 20, &h[4]));
  CHECK_OK(nap(e->q, "napfail", 60, &h[5]));
  CHECK_OK(nap(e->q, "nap", 20, &h[6]));
  static const gpa_status want[7] = {GPA_OK, GPA_OK, GPA_OK, GPA_OK, GPA_OK, GPA_EINVAL, GPA_OK};
  for (int i = 0; i < 7; i++) {
    CHECK_ST(gpa_await(h[i], -1), want[i]);
    gpa_handle_release(h[i]);
  }
  gpa_sync_batch(e->q, NULL); /* the batch saw the failure */
  CHECK_OK(gpa_buffer_release(e->a, t.buffer));
  CHECK(atomic_load(&n_rows) == from + 7); /* each message once */
  bool ok = expect(row_of(from, Q1, "nap", 0), "nap", Q1, GPA_OK, 20);
  unsigned up = row_of(from, Q1, "upload", 0);
  ok &= expect(up, "upload", Q1, GPA_OK, 0);
  ok &= rows[up].device_ns < SLACK; /* its own copy, not the nap before it */
  ok &= expect(row_of(from, Q1, "nap", 1), "nap", Q1, GPA_OK, 60);
  ok &= expect(row_of(from, Q1, "hostnap", 0), "hostnap", Q1, GPA_OK, 0);
  ok &= expect(row_of(from, Q1, "nap", 2), "nap", Q1, GPA_OK, 20);
  ok &= expect(row_of(from, Q1, "napfail", 0), "napfail", Q1, GPA_EINVAL, 0);
  ok &= expect(row_of(from, Q1, "nap", 3), "nap", Q1, GPA_OK, 20); /* not the failed op's 60 ms before it */
  return ok;
}

/* An idle stream between two timed ops: the second starts at its own
 * event, so its time has no part of the gap. Then the same while the actor
 * is busy (80 ms in a host op of the other queue): the first nap is over
 * but not yet completed, its record still the chain's last; its end event
 * has passed, so the next starts at its own. */
static bool idle_stream(const env *e) {
  unsigned from = atomic_load(&n_rows);
  CHECK_OK(nap(e->q, "nap", 20, NULL));
  usleep(80000); /* the first nap is over: the stream idles 60 ms */
  CHECK_OK(nap(e->q, "nap", 20, NULL));
  gpa_handle *hg;
  CHECK_OK(nap(e->q, "nap", 20, &hg));
  CHECK_OK(gpa_await(hg, -1));
  gpa_handle_release(hg);
  usleep(60000); /* idle again, 60 ms */
  CHECK_OK(nap(e->q, "nap", 20, NULL));
  CHECK_OK(nap(e->q2, "hostnap", 80, NULL)); /* the actor is busy 60 ms past the nap */
  CHECK_OK(nap(e->q, "nap", 20, NULL));
  CHECK_OK(gpa_sync_batch(e->q, NULL));
  CHECK_OK(gpa_sync_batch(e->q2, NULL));
  CHECK(atomic_load(&n_rows) == from + 6);
  bool ok = true;
  for (unsigned i = 0; i < 5; i++) ok &= expect(row_of(from, Q1, "nap", i), "nap", Q1, GPA_OK, 20);
  return ok;
}

/* Without a profiler each group of untimed work (what the actor enqueued
 * on a stream in one pass of its loop) is timed, by its first record's
 * start and its last's end, and groups share boundaries too. Six naps,
 * each followed by 63 host ops on the other queue (a pass takes at most 64
 * messages): a group per nap, passes back to back (the actor never parks,
 * which would put a host function on the stream and end the chain), the
 * stream busy: 7 event records, not 12, and the batch's device time is the
 * naps' sum. Across an idle stream a group starts at its own event: the
 * batch's time has no part of the gap. */
static bool untimed_groups(const env *e) {
  gpa_batch_stats st = {.size = sizeof st};
  size_t rec0 = records();
  for (int i = 0; i < 6; i++) {
    CHECK_OK(nap(e->q, "nap", 20, NULL));
    for (int k = 0; k < 63; k++) CHECK_OK(nap(e->q2, "hostnap", 0, NULL));
  }
  CHECK_OK(gpa_sync_batch(e->q, &st));
  size_t recs = records() - rec0;
  printf("untimed: 6 groups of one nap, %zu event records, batch device %.2f ms (naps 120 ms)\n", recs,
         st.device_ns / 1e6);
  CHECK(st.ops == 6 && st.errors == 0);
  CHECK(st.device_ns >= 120 * MS - MS / 2);
  bool ok = st.device_ns < 120 * MS + 4 * SLACK && (!e->sim || recs <= 6 + 3);
  CHECK_OK(gpa_sync_batch(e->q2, NULL));
  CHECK_OK(nap(e->q, "nap", 20, NULL));
  usleep(60000); /* the stream idles */
  CHECK_OK(nap(e->q, "nap", 20, NULL));
  CHECK_OK(gpa_sync_batch(e->q, &st));
  printf("untimed: 2 naps of 20 ms around an idle stream, batch device %.2f ms\n", st.device_ns / 1e6);
  CHECK(st.device_ns >= 40 * MS - MS / 2);
  return ok && st.device_ns < 40 * MS + SLACK;
}

/* Without a profiler the actor reads no clock around a message on CUDA:
 * the host fallback times its own work, which is its op's device time
 * (two host naps of 30 and 20 ms: the batch's device time is their sum). */
static bool fallback_time(const env *e) {
  gpa_batch_stats st = {.size = sizeof st};
  CHECK_OK(gpa_sync_batch(e->q2, NULL));
  CHECK_OK(nap(e->q2, "hostnap", 30, NULL));
  CHECK_OK(nap(e->q2, "hostnap", 20, NULL));
  CHECK_OK(gpa_sync_batch(e->q2, &st));
  printf("untimed: 2 host-fallback naps of 30 and 20 ms, batch device %.2f ms\n", st.device_ns / 1e6);
  CHECK(st.ops == 2 && st.errors == 0);
  CHECK(st.device_ns >= 50 * MS - MS / 2);
  return st.device_ns < 50 * MS + SLACK;
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  /* The driver the backend opened: the simulator's, or on a GPU the real
   * one (or GPA_CUDA_DRIVER's), where the times are checked but the records
   * are not counted. */
  const bool sim = !strcmp(gpa_actor_backend(a), "sim");
  const char *drv = getenv("GPA_CUDA_DRIVER");
  void *lib = dlopen(sim ? "libgpa_sim_cuda.so" : drv && *drv ? drv : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
  *(void **)&launch_host_fn = dlsym(lib, "cuLaunchHostFunc");
  if (sim) *(void **)&event_records = dlsym(lib, "gpa_sim_event_records");
  CHECK(launch_host_fn && (!sim || event_records));
  reg(a);
  CHECK_OK(gpa_actor_add_profiler(a, &(gpa_profiler){sizeof(gpa_profiler), on_op, NULL, NULL, NULL, NULL}));
  env e = {a, gpa_actor_default_queue(a), NULL, sim};
  CHECK_OK(gpa_queue_create(a, "second", &e.q2));
  bool (*const scenario[])(const env *) = {one_queue, two_queues, broken_chain, idle_stream};
  for (unsigned k = 0; k < sizeof scenario / sizeof scenario[0]; k++) {
    int tries = 0;
    while (!scenario[k](&e)) {
      printf("  (an op was late: tried again)\n");
      CHECK(++tries < 3);
    }
  }
  CHECK_OK(gpa_queue_destroy(e.q2));
  CHECK_OK(gpa_actor_destroy(a));

  /* Another actor, no profiler: groups. */
  a = tu_actor(NULL);
  reg(a);
  e = (env){a, gpa_actor_default_queue(a), NULL, sim};
  CHECK_OK(gpa_queue_create(a, "second", &e.q2));
  for (int tries = 0; !untimed_groups(&e);) {
    printf("  (late: tried again)\n");
    CHECK(++tries < 3);
  }
  for (int tries = 0; !fallback_time(&e);) {
    printf("  (late: tried again)\n");
    CHECK(++tries < 3);
  }
  CHECK_OK(gpa_queue_destroy(e.q2));
  CHECK_OK(gpa_actor_destroy(a));
  dlclose(lib);
  printf("ok: shared boundary events, each op's own device time\n");
  return 0;
}
