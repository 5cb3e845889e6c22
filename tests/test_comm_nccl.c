/* Collectives of cuda actors through NCCL, on the simulated devices and the
 * simulator's NCCL subset (sim/nccl): every case of util/comm_cases.c with
 * 2 and 4 actors, each on its own simulated device (GPA_SIM_DEVICES=4), in
 * one process; the references are the LOCAL transport's results, bit for
 * bit. Then the faults: an init that fails, a collective that fails on its
 * stream, a hung rank and a missing one (the communicator's timeout), abort,
 * shutdown with a collective in flight, and NCCL absent. Init is NCCL's
 * non-blocking one: a rank whose peer never joins times out while its actor
 * keeps running ops, a shutdown ends a pending init, and an NCCL too old
 * for it (the simulator reporting 2.13) falls back to the blocking init. Every handle
 * completes once; nothing hangs. Skipped (77) in builds without the
 * simulator's NCCL. Where a real GPU and libnccl.so.2 are present, the
 * shared cases also run with one rank on cuda:0 through the real NCCL (one
 * card cannot host two NCCL ranks). */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "actor/internal.h"
#include "backends/coll.h"
#include "util/comm_cases.h"

static void *sim_nccl; /* the simulator's NCCL, for its fault switches */

static gpa_actor *on(int dev) {
  char name[16];
  snprintf(name, sizeof name, "sim:%d", dev);
  gpa_actor_options o = {.device = name, .threads = 1};
  return tu_actor(&o);
}

static void fault(const char *which, unsigned n) {
  char sym[64];
  snprintf(sym, sizeof sym, "gpa_sim_nccl_fault_%s", which);
  void (*fn)(unsigned) = (void (*)(unsigned))dlsym(sim_nccl, sym);
  CHECK(fn != NULL);
  fn(n);
}

static void all_cases(int n) {
  gpa_actor *a[4];
  gpa_comm *c[4];
  for (int i = 0; i < n; i++) a[i] = on(i);
  CHECK_OK(gpa_comm_init_all(a, n, NULL, c));
  for (int i = 0; i < n; i++) CHECK(gpa_comm_rank(c[i]) == i && gpa_comm_size(c[i]) == n);
  comm_cases_threads(a, c, n);
}

typedef struct pair {
  gpa_actor *a[2];
  gpa_comm *c[2];
  gpa_tensor x[2];
} pair;

static void pair_up(pair *p, int64_t timeout_ms) {
  gpa_comm_options o = {.size = sizeof o, .timeout_ns = timeout_ms * 1000000};
  for (int i = 0; i < 2; i++) p->a[i] = on(i);
  CHECK_OK(gpa_comm_init_all(p->a, 2, &o, p->c));
  for (int i = 0; i < 2; i++) p->x[i] = tu_f32(p->a[i], 64);
}

static void pair_down(pair *p) {
  for (int i = 0; i < 2; i++) {
    CHECK_OK(gpa_comm_destroy(p->c[i]));
    CHECK_OK(gpa_actor_destroy(p->a[i]));
  }
}

static gpa_queue *q_of(pair *p, int i) { return gpa_actor_default_queue(p->a[i]); }

/* Later collectives fail at the call, the message naming the first failure (why); local work goes on. */
static void failed_after(pair *p, int i, const char *why) {
  CHECK_ST(gpa_allreduce(q_of(p, i), p->c[i], &p->x[i], &p->x[i], GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  CHECK_MSG("the communicator failed"); /* and why: the first failure's text */
  if (why) CHECK_MSG(why);
  CHECK_OK(tu_fill(q_of(p, i), &p->x[i], 2.0, NULL));
  float v[64];
  tu_get(q_of(p, i), &p->x[i], v, 64);
  CHECK(v[63] == 2.0f);
}

static void init_fault(void) {
  gpa_actor *a[2] = {on(0), on(1)};
  gpa_comm *c[2];
  fault("init", 1);
  CHECK_ST(gpa_comm_init_all(a, 2, NULL, c), GPA_EDEVICE);
  CHECK_MSG("init fail"); /* the injected one, or a peer's that waited for it */
  for (int i = 0; i < 2; i++) CHECK_OK(gpa_actor_destroy(a[i]));
}

/* One rank's collective fails on its stream: both handles fail (the peer's
 * with NCCL's remote error), the batch reports it, the communicator is
 * failed on both. */
static void async_fault(void) {
  pair p;
  pair_up(&p, 0);
  fault("async", 1);
  gpa_handle *h[2];
  for (int i = 0; i < 2; i++) {
    CHECK_OK(gpa_batch_begin(q_of(&p, i), "async"));
    CHECK_OK(gpa_allreduce(q_of(&p, i), p.c[i], &p.x[i], &p.x[i], GPA_REDUCE_SUM, &h[i]));
  }
  for (int i = 0; i < 2; i++) {
    CHECK_ST(gpa_await(h[i], 10ll * 1000000000), GPA_EDEVICE);
    CHECK(strstr(gpa_handle_error_message(h[i]), "injected asynchronous failure")); /* rank 1: a peer's */
    CHECK_ST(gpa_sync_batch(q_of(&p, i), NULL), GPA_EDEVICE);
    gpa_handle_release(h[i]);
    failed_after(&p, i, "injected asynchronous failure");
  }
  pair_down(&p);
}

/* Mismatched collectives (rank 0 sums 64 floats, rank 1 32): NCCL does not
 * detect them (undefined behaviour, usually a hang that the timeout ends);
 * the simulator's subset does (ncclInvalidUsage on the stream): both
 * handles fail with EDEVICE naming the difference, and the communicator is
 * failed on both ranks. */
static void mismatch_case(void) {
  pair p;
  pair_up(&p, 2000);
  gpa_tensor half = p.x[1];
  half.shape[0] = 32;
  gpa_handle *h[2];
  CHECK_OK(gpa_allreduce(q_of(&p, 0), p.c[0], &p.x[0], &p.x[0], GPA_REDUCE_SUM, &h[0]));
  CHECK_OK(gpa_allreduce(q_of(&p, 1), p.c[1], &half, &half, GPA_REDUCE_SUM, &h[1]));
  for (int i = 0; i < 2; i++) {
    CHECK_ST(gpa_await(h[i], 10ll * 1000000000), GPA_EDEVICE);
    CHECK(strstr(gpa_handle_error_message(h[i]), "different collectives"));
    gpa_handle_release(h[i]);
    failed_after(&p, i, "different collectives");
  }
  pair_down(&p);
}

/* hung: a rank whose collective never takes part (the simulator's hang);
 * missing: rank 1 never issues it. The waiting ranks time out (100 ms):
 * ETIMEDOUT; a rank whose peer timed out first and aborted may instead see
 * NCCL's remote error (EDEVICE, "a peer failed"), as with NCCL. At least
 * one rank times out, and the queue's later work still runs. */
static void timeout_case(bool hung) {
  pair p;
  pair_up(&p, 100);
  if (hung) fault("hang", 1);
  gpa_handle *h[2] = {NULL, NULL}, *after;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < (hung ? 2 : 1); i++)
    CHECK_OK(gpa_allreduce(q_of(&p, i), p.c[i], &p.x[i], &p.x[i], GPA_REDUCE_SUM, &h[i]));
  CHECK_OK(tu_fill(q_of(&p, 0), &p.x[0], 3.0, &after));
  int timed_out = 0;
  for (int i = 0; i < (hung ? 2 : 1); i++) {
    gpa_status st = gpa_await(h[i], 10ll * 1000000000);
    const char *why = gpa_handle_error_message(h[i]);
    CHECK((st == GPA_ETIMEDOUT && strstr(why, "timeout")) || (st == GPA_EDEVICE && strstr(why, "a peer failed")));
    timed_out += st == GPA_ETIMEDOUT;
    gpa_handle_release(h[i]);
  }
  CHECK(timed_out >= 1);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  CHECK(ms >= 99 && ms < 10000);
  CHECK_OK(gpa_await(after, -1)); /* the stream went on after the abort */
  gpa_handle_release(after);
  failed_after(&p, 0, hung ? NULL : "(the communicator's timeout)"); /* missing: rank 0 timed out itself */
  if (!hung) CHECK_OK(gpa_comm_abort(p.c[1])); /* its peer is gone: the program ends it */
  pair_down(&p);
}

static void abort_case(void) {
  pair p;
  pair_up(&p, 0);
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(q_of(&p, 0), p.c[0], &p.x[0], &p.x[0], GPA_REDUCE_SUM, &h));
  CHECK_ST(gpa_await(h, 30 * 1000000), GPA_ETIMEDOUT); /* rank 1 never comes */
  CHECK_ST(gpa_comm_destroy(p.c[0]), GPA_EBUSY);
  CHECK_OK(gpa_comm_abort(p.c[0]));
  CHECK_ST(gpa_await(h, 10ll * 1000000000), GPA_ECANCELED);
  CHECK(strstr(gpa_handle_error_message(h), "aborted"));
  gpa_handle_release(h);
  failed_after(&p, 0, "aborted");
  CHECK_OK(gpa_comm_abort(p.c[1]));
  pair_down(&p);
}

static void shutdown_case(void) {
  pair p;
  pair_up(&p, 0);
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(q_of(&p, 0), p.c[0], &p.x[0], &p.x[0], GPA_REDUCE_SUM, &h));
  CHECK_ST(gpa_await(h, 20 * 1000000), GPA_ETIMEDOUT);
  CHECK_OK(gpa_actor_shutdown(p.a[0]));
  CHECK_ST(gpa_await(h, -1), GPA_ECANCELED);
  CHECK(strstr(gpa_handle_error_message(h), "shut down"));
  gpa_handle_release(h);
  CHECK_OK(gpa_comm_abort(p.c[1]));
  pair_down(&p);
}

/* NCCL reclaims a non-blocking communicator in the background after its
 * destroy or abort (the simulator about a millisecond later): whether every
 * simulated communicator is gone within a second. */
static bool none_left(void) {
  int (*live)(void) = (int (*)(void))dlsym(sim_nccl, "gpa_sim_nccl_live_comms");
  CHECK(live != NULL);
  for (int i = 0; i < 1000 && live(); i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
  return live() == 0;
}

/* The shared-memory segments of groups whose id maker_pid made that are
 * still named in /dev/shm (sim/nccl/xproc.c: every group has one until all
 * its ranks joined, or it ended). */
static int segments_of(int maker_pid) {
  char prefix[48];
  snprintf(prefix, sizeof prefix, "gpa-sim-nccl-%d-", maker_pid);
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

/* Rank 0 holds 1s, rank 1 2s; their in-place sum is 3 on both. */
static void sum_checked(pair *p) {
  for (int i = 0; i < 2; i++) {
    CHECK_OK(tu_fill(q_of(p, i), &p->x[i], 1.0 + i, NULL));
    CHECK_OK(gpa_allreduce(q_of(p, i), p->c[i], &p->x[i], &p->x[i], GPA_REDUCE_SUM, NULL));
  }
  for (int i = 0; i < 2; i++) {
    float v[64];
    tu_get(q_of(p, i), &p->x[i], v, 64);
    CHECK(v[0] == 3.0f && v[63] == 3.0f);
  }
}

/* Destroying a non-blocking communicator: NCCL answers ncclInProgress and
 * ends it in the background, and refuses one that is not ready (here an
 * asynchronous error since its last collective: a peer failed while it was
 * idle), which only ncclCommAbort ends. Either way gpa_comm_destroy
 * succeeds, nothing is left behind, and the actors go on with local work. */
static void destroy_case(void) {
  for (int refused = 0; refused < 2; refused++) {
    pair p;
    pair_up(&p, 1000);
    sum_checked(&p);
    if (refused) fault("destroy", 1); /* rank 0's destroy is refused */
    for (int i = 0; i < 2; i++) {
      CHECK_OK(gpa_comm_destroy(p.c[i]));
      CHECK_OK(tu_fill(q_of(&p, i), &p.x[i], 5.0, NULL));
      float v[64];
      tu_get(q_of(&p, i), &p.x[i], v, 64);
      CHECK(v[63] == 5.0f);
      CHECK_OK(gpa_actor_destroy(p.a[i]));
    }
    CHECK(none_left());
  }
}

/* ---- init ------------------------------------------------------------------------ */

/* gpa_comm_init of rank 0 of a 2-rank communicator whose rank 1 never
 * comes, on its own thread. */
typedef struct lone_init {
  gpa_actor *a;
  gpa_comm_id id;
  int64_t timeout_ns;
  pthread_t t;
  gpa_status st;
  char why[256];
  double ms;
  atomic_int done;
} lone_init;

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (t1.tv_sec - t0->tv_sec) * 1e3 + (t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void *lone_main(void *p) {
  lone_init *x = p;
  gpa_comm_options o = {.size = sizeof o, .timeout_ns = x->timeout_ns};
  gpa_comm *c = NULL;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  x->st = gpa_comm_init(x->a, &x->id, 2, 0, &o, &c);
  x->ms = ms_since(&t0);
  snprintf(x->why, sizeof x->why, "%s", gpa_last_error_message());
  if (c) gpa_comm_destroy(c);
  atomic_store(&x->done, 1);
  return NULL;
}

static void lone_start(lone_init *x, gpa_actor *a, int64_t timeout_ms) {
  memset(x, 0, sizeof *x);
  x->a = a;
  x->timeout_ns = timeout_ms * 1000000;
  CHECK_OK(gpa_comm_id_make(&x->id));
  CHECK(pthread_create(&x->t, NULL, lone_main, x) == 0);
}

/* Joins the init thread, failing (not hanging) when it has not returned
 * within limit_ms: an init without a deadline would wait forever. */
static void lone_join(lone_init *x, double limit_ms) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!atomic_load(&x->done)) {
    if (ms_since(&t0) > limit_ms) {
      fprintf(stderr, "gpa_comm_init still waiting after %.0f ms\n", limit_ms);
      exit(1);
    }
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  pthread_join(x->t, NULL);
}

/* Its peer never joins: ETIMEDOUT after the communicator's timeout (200
 * ms), naming the rank and what it waited for; meanwhile the actor runs ops
 * of the queue the init went through, at once (a blocking init would hold
 * its thread until the peer came). */
static void init_timeout(void) {
  gpa_actor *a = on(0);
  gpa_tensor x = tu_f32(a, 64);
  gpa_queue *q = gpa_actor_default_queue(a);
  lone_init li;
  lone_start(&li, a, 200);
  nanosleep(&(struct timespec){0, 20 * 1000000}, NULL); /* the init is pending by now */
  for (int i = 0; i < 3; i++) {
    gpa_handle *h;
    CHECK_OK(tu_fill(q, &x, 4.0 + i, &h));
    CHECK_OK(gpa_await(h, 100 * 1000000ll));
    gpa_handle_release(h);
  }
  float v[64];
  tu_get(q, &x, v, 64);
  CHECK(v[63] == 6.0f);
  CHECK(!atomic_load(&li.done)); /* the ops ran while the init waited */
  lone_join(&li, 5000);
  printf("comm_nccl: init without its peer: %s after %.0f ms: %s\n", gpa_status_name(li.st), li.ms, li.why);
  CHECK(li.st == GPA_ETIMEDOUT);
  CHECK(strstr(li.why, "rank 0 of 2") && strstr(li.why, "waited 200 ms") && strstr(li.why, "join"));
  CHECK(li.ms >= 199 && li.ms < 1500);
  tu_get(q, &x, v, 64); /* the actor is still usable */
  CHECK(v[0] == 6.0f);
  CHECK_OK(gpa_actor_destroy(a));
}

/* A shutdown of the actor ends an init that has no timeout: ESHUTDOWN, and
 * the simulated communicator is gone (aborted). */
static void init_shutdown(void) {
  gpa_actor *a = on(1);
  lone_init li;
  lone_start(&li, a, 0);
  nanosleep(&(struct timespec){0, 50 * 1000000}, NULL);
  CHECK(!atomic_load(&li.done));
  CHECK_OK(gpa_actor_shutdown(a));
  lone_join(&li, 5000);
  CHECK(li.st == GPA_ESHUTDOWN && strstr(li.why, "shut down") && strstr(li.why, "rank 0 of 2"));
  CHECK_OK(gpa_actor_destroy(a));
}

/* NCCL 2.13 (no ncclCommInitRankConfig for us): the blocking init, which
 * still joins and reduces; NCCL 2.9: refused (no bf16, no avg). */
static void init_old_nccl(void) {
  void (*set_version)(int) = (void (*)(int))dlsym(sim_nccl, "gpa_sim_nccl_set_version");
  CHECK(set_version != NULL);
  set_version(21300);
  pair p;
  pair_up(&p, 1000);
  sum_checked(&p);
  pair_down(&p);
  set_version(2908);
  gpa_actor *a = on(0);
  gpa_comm *c;
  CHECK_ST(gpa_comm_init_all(&a, 1, NULL, &c), GPA_EUNSUPPORTED);
  CHECK_MSG("older than");
  CHECK_OK(gpa_actor_destroy(a));
  set_version(0);
}

static void errors(void) {
  gpa_actor *a = on(0);
  gpa_comm *c;
  gpa_comm_id id;
  CHECK_OK(gpa_comm_id_make(&id));
  gpa_comm_options local = {.size = sizeof local, .transport = GPA_COMM_LOCAL};
  CHECK_ST(gpa_comm_init(a, &id, 1, 0, &local, &c), GPA_EUNSUPPORTED);
  CHECK_MSG("cpu actors");
  /* one rank: its own communicator; an id carrying NCCL's id works too */
  CHECK_OK(gpa_comm_id_make_nccl(a, &id));
  CHECK_OK(gpa_comm_init(a, &id, 1, 0, NULL, &c));
  gpa_tensor x = tu_f32(a, 5);
  CHECK_OK(tu_fill(gpa_actor_default_queue(a), &x, 1.5, NULL));
  CHECK_OK(gpa_allreduce(gpa_actor_default_queue(a), c, &x, &x, GPA_REDUCE_AVG, NULL));
  float v[5];
  tu_get(gpa_actor_default_queue(a), &x, v, 5);
  CHECK(v[4] == 1.5f);
  CHECK_OK(gpa_comm_destroy(c));
  /* an NCCL id made by another process (the pid the subset records sits
   * at 40 in NCCL's id, which sits at 64 in ours: comm/nccl.c,
   * sim/nccl/nccl.c) whose rank 0 never comes: the subset waits for it in
   * shared memory (sim/nccl/xproc.c) until the timeout, and the group's
   * segment goes with the communicator (comm_nccl_xproc_sim runs ranks in
   * several processes) */
  gpa_comm_id other = id;
  other.bytes[64 + 40] ^= 0x5a;
  gpa_comm_options short_wait = {.size = sizeof short_wait, .timeout_ns = 100ll * 1000000};
  CHECK_ST(gpa_comm_init(a, &other, 2, 1, &short_wait, &c), GPA_ETIMEDOUT);
  CHECK_MSG("rank 1 of 2 waited 100 ms");
  int32_t fake_pid;
  memcpy(&fake_pid, other.bytes + 64 + 40, sizeof fake_pid);
  CHECK(none_left() && segments_of(fake_pid) == 0);
  CHECK_OK(gpa_actor_destroy(a));
  /* a cpu actor and a sim actor do not share a communicator */
  gpa_actor_options co = {.device = "cpu", .threads = 1};
  gpa_actor *mix[2] = {tu_actor(&co), on(1)};
  gpa_comm *cs[2];
  CHECK_ST(gpa_comm_init_all(mix, 2, NULL, cs), GPA_EUNSUPPORTED);
  CHECK_MSG("do not mix");
  /* nor one id: a LOCAL rank 0 on the cpu actor, then an NCCL rank 1 */
  gpa_comm_id mixed;
  CHECK_OK(gpa_comm_id_make(&mixed));
  CHECK_OK(gpa_comm_init(mix[0], &mixed, 2, 0, NULL, &cs[0]));
  CHECK_ST(gpa_comm_init(mix[1], &mixed, 2, 1, NULL, &cs[1]), GPA_EUNSUPPORTED);
  CHECK_MSG("through NCCL, but 1 rank(s) of this process joined it through LOCAL");
  CHECK_OK(gpa_comm_destroy(cs[0]));
  CHECK_OK(gpa_actor_destroy(mix[0]));
  CHECK_OK(gpa_actor_destroy(mix[1]));
  /* NCCL absent: EUNSUPPORTED naming the library */
  setenv("GPA_NCCL", "/nonexistent/libnccl.so.2", 1);
  a = on(0);
  unsetenv("GPA_NCCL");
  CHECK_ST(gpa_comm_init_all(&a, 1, NULL, &c), GPA_EUNSUPPORTED);
  CHECK_MSG("/nonexistent/libnccl.so.2");
  printf("comm_nccl: without NCCL: %s\n", gpa_last_error_message());
  CHECK_OK(gpa_actor_destroy(a));
}

/* Two ranks on cuda:0 and cuda:1 through the real NCCL, a thread each,
 * where the machine has a second GPU; else it says why it did not run. */
static void real_two(void) {
  gpa_actor_options o = {.device = "cuda:1", .threads = 1};
  gpa_actor *a[2] = {NULL, NULL};
  if (gpa_actor_create(&o, &a[1]) != GPA_OK) {
    printf("comm_nccl: no second GPU (%s): the two-rank real-NCCL case is skipped\n", gpa_last_error_message());
    return;
  }
  o.device = "cuda:0";
  a[0] = tu_actor(&o);
  gpa_comm *c[2];
  CHECK_OK(gpa_comm_init_all(a, 2, NULL, c));
  comm_cases_threads(a, c, 2);
  printf("comm_nccl: two ranks on cuda:0 and cuda:1 through the real NCCL: ok\n");
}

/* One rank on the real card, through the real NCCL; skipped quietly
 * without a GPU or NCCL. Whether it ran. */
static bool real_gpu(void) {
  gpa_actor_options o = {.device = "cuda:0", .threads = 1};
  gpa_actor *a = NULL;
  if (getenv("GPA_CUDA_DRIVER")) { /* another driver (the simulator's): not a real card */
    printf("comm_nccl: GPA_CUDA_DRIVER is set: the real-NCCL case is skipped\n");
    return false;
  }
  if (gpa_actor_create(&o, &a) != GPA_OK) {
    printf("comm_nccl: no GPU (%s): the real-NCCL case is skipped\n", gpa_last_error_message());
    return false;
  }
  bool ran = false;
  gpa_comm *c;
  gpa_status st = gpa_comm_init_all(&a, 1, NULL, &c);
  if (st == GPA_EUNSUPPORTED) {
    printf("comm_nccl: GPU without NCCL (%s): the real-NCCL case is skipped\n", gpa_last_error_message());
  } else {
    CHECK_OK(st);
    comm_case_env e = {a, gpa_actor_default_queue(a), c, 0, 1};
    comm_cases_run(&e);
    CHECK_OK(gpa_comm_destroy(c));
    printf("comm_nccl: one rank on cuda:0 through the real NCCL: ok\n");
    ran = true;
  }
  CHECK_OK(gpa_actor_destroy(a));
  if (ran) real_two();
  return ran;
}

/* A collective in a batch replayed as a CUDA graph is never captured: the
 * batch runs eagerly from it, in order (docs/graphs.md), with the right sums. */
static void graph_batch(void) {
  pair p;
  pair_up(&p, 10000);
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < 2; i++) {
      gpa_queue *q = q_of(&p, i);
      CHECK_OK(gpa_batch_begin_opts(q, "dp", &(gpa_batch_options){.graph = GPA_GRAPH_ON}));
      CHECK_OK(tu_fill(q, &p.x[i], i + step, NULL));
      CHECK_OK(gpa_allreduce(q, p.c[i], &p.x[i], &p.x[i], GPA_REDUCE_SUM, NULL));
      CHECK_OK(gpa_scale(q, &(gpa_scale_args){.x = p.x[i], .y = p.x[i], .alpha = 2.0}, NULL));
    }
    for (int i = 0; i < 2; i++) {
      gpa_batch_stats st = {.size = sizeof st};
      CHECK_OK(gpa_sync_batch(q_of(&p, i), &st));
      CHECK(st.graph == 0);
      float v[64];
      tu_get(q_of(&p, i), &p.x[i], v, 64);
      CHECK(v[0] == (float)(2 * (2 * step + 1)) && v[63] == v[0]);
    }
  }
  pair_down(&p);
}

int main(void) {
  /* this test picks its devices; four simulated ones */
  unsetenv("GPA_DEVICE");
  setenv("GPA_SIM_DEVICES", "4", 1);
  /* first, so that a GPU machine whose build has no simulator runs it too */
  bool real = real_gpu();
  gpa_actor_options o = {.device = "sim:3", .threads = 1};
  gpa_actor *probe = NULL;
  if (gpa_actor_create(&o, &probe) != GPA_OK) {
    printf("%s: no simulated device (%s)\n", real ? "comm_nccl: ok on the real GPU; sim cases skipped" : "skipped",
           gpa_last_error_message());
    return real ? 0 : 77;
  }
  const char *path = gpa__cu_nccl_path ? gpa__cu_nccl_path(probe->bctx) : NULL;
  sim_nccl = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  CHECK_OK(gpa_actor_destroy(probe));
  if (!sim_nccl || !dlsym(sim_nccl, "gpa_sim_nccl_fault_init")) {
    printf("%s: no simulated NCCL (%s)\n", real ? "comm_nccl: ok on the real GPU; sim cases skipped" : "skipped",
           path ? path : "no cuda backend");
    return real ? 0 : 77;
  }
  errors();
  all_cases(2);
  all_cases(4);
  init_fault();
  init_timeout();
  init_shutdown();
  init_old_nccl();
  async_fault();
  mismatch_case();
  timeout_case(false);
  timeout_case(true);
  abort_case();
  shutdown_case();
  graph_batch();
  destroy_case();
  CHECK(none_left());
  CHECK(segments_of(getpid()) == 0);
  dlclose(sim_nccl);
  printf("comm_nccl: ok\n");
  return 0;
}
