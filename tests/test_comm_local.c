/* Collectives among actors of one process (the LOCAL transport): every
 * case of util/comm_cases.c with 1 to 4 ranks, then what only one
 * process can stage: collectives that differ across ranks, abort, a
 * timeout, a queue parked on a collective while the actor's other queues
 * run, destroy while busy, init errors, and shutdown with a collective in
 * flight. On cuda and sim actors LOCAL answers EUNSUPPORTED: checked, then
 * the test ends (their collectives are NCCL's: test_comm_nccl.c). */
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "util/comm_cases.h"

static gpa_actor *actor1(void) {
  gpa_actor_options o = {.threads = 1};
  return tu_actor(&o);
}

static void all_cases(int n) {
  gpa_actor *a[4];
  gpa_comm *c[4];
  for (int i = 0; i < n; i++) a[i] = actor1();
  CHECK_OK(gpa_comm_init_all(a, n, NULL, c));
  comm_cases_threads(a, c, n);
}

static gpa_tensor f32(gpa_actor *a, int64_t n) { return tu_f32(a, n); }

/* rank 0: allreduce of 10 floats, rank 1 of 12: both fail, naming both */
static void mismatch(gpa_actor **a, gpa_comm **c) {
  gpa_tensor x = f32(a[0], 10), y = f32(a[1], 12);
  gpa_handle *h0, *h1;
  CHECK_OK(gpa_allreduce(gpa_actor_default_queue(a[0]), c[0], &x, &x, GPA_REDUCE_SUM, &h0));
  CHECK_OK(gpa_allreduce(gpa_actor_default_queue(a[1]), c[1], &y, &y, GPA_REDUCE_SUM, &h1));
  CHECK_ST(gpa_await(h0, -1), GPA_EINVAL);
  CHECK_ST(gpa_await(h1, -1), GPA_EINVAL);
  CHECK(strstr(gpa_handle_error_message(h0), "different collectives"));
  CHECK(strstr(gpa_handle_error_message(h1), "f32 x 12"));
  gpa_handle_release(h0);
  gpa_handle_release(h1);
  /* a send and a recv of different counts */
  gpa_handle *s, *r;
  CHECK_OK(gpa_send(gpa_actor_default_queue(a[0]), c[0], &x, 1, &s));
  CHECK_OK(gpa_recv(gpa_actor_default_queue(a[1]), c[1], &y, 0, &r));
  CHECK_ST(gpa_await(s, -1), GPA_EINVAL);
  CHECK_ST(gpa_await(r, -1), GPA_EINVAL);
  CHECK(strstr(gpa_handle_error_message(r), "expects f32 x 12"));
  gpa_handle_release(s);
  gpa_handle_release(r);
}

/* Rank 0 waits for rank 1, which never comes; meanwhile rank 0's other
 * queue runs. Then rank 0 aborts: its handle ECANCELED, later collectives
 * on either rank ECLOSED, the actors still work. */
static void abort_case(void) {
  gpa_actor *a[2] = {actor1(), actor1()};
  gpa_comm *c[2];
  CHECK_OK(gpa_comm_init_all(a, 2, NULL, c));
  gpa_queue *q0 = gpa_actor_default_queue(a[0]), *side;
  CHECK_OK(gpa_queue_create(a[0], "side", &side));
  gpa_tensor x = f32(a[0], 64), y = f32(a[0], 64);
  gpa_handle *h, *after, *f;
  CHECK_OK(gpa_allreduce(q0, c[0], &x, &x, GPA_REDUCE_SUM, &h));
  CHECK_OK(tu_fill(q0, &x, 3.0, &after)); /* behind the collective */
  CHECK_OK(tu_fill(side, &y, 2.0, &f));   /* another queue: not held up */
  CHECK_OK(gpa_await(f, 5ll * 1000000000));
  CHECK_ST(gpa_await(h, 50 * 1000000), GPA_ETIMEDOUT);
  CHECK_ST(gpa_handle_status(after), GPA_EPENDING);
  CHECK_ST(gpa_comm_destroy(c[0]), GPA_EBUSY);
  CHECK_MSG("have not finished");
  CHECK_OK(gpa_comm_abort(c[0]));
  CHECK_ST(gpa_await(h, -1), GPA_ECANCELED);
  CHECK(strstr(gpa_handle_error_message(h), "aborted"));
  CHECK_OK(gpa_await(after, -1)); /* the queue goes on */
  CHECK_ST(gpa_allreduce(q0, c[0], &x, &x, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  CHECK_MSG("aborted");
  gpa_tensor z = f32(a[1], 64);
  CHECK_ST(gpa_allreduce(gpa_actor_default_queue(a[1]), c[1], &z, &z, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  float v[64];
  tu_get(q0, &x, v, 64);
  CHECK(v[0] == 3.0f);
  gpa_handle_release(h);
  gpa_handle_release(after);
  gpa_handle_release(f);
  CHECK_OK(gpa_comm_destroy(c[0]));
  CHECK_OK(gpa_comm_destroy(c[1]));
  CHECK_OK(gpa_actor_destroy(a[0]));
  CHECK_OK(gpa_actor_destroy(a[1]));
}

/* A rank that never joins: ETIMEDOUT after the communicator's timeout, the
 * rest of the batch skipped, the communicator failed on both ranks. */
static void timeout_case(void) {
  gpa_actor *a[2] = {actor1(), actor1()};
  gpa_comm *c[2];
  gpa_comm_options o = {.size = sizeof o, .timeout_ns = 100 * 1000000};
  CHECK_OK(gpa_comm_init_all(a, 2, &o, c));
  gpa_queue *q = gpa_actor_default_queue(a[0]);
  gpa_tensor x = f32(a[0], 16);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(gpa_batch_begin(q, "timeout"));
  gpa_handle *h, *later;
  CHECK_OK(gpa_allreduce(q, c[0], &x, &x, GPA_REDUCE_SUM, &h));
  CHECK_OK(tu_fill(q, &x, 1.0, &later));
  CHECK_ST(gpa_await(h, -1), GPA_ETIMEDOUT);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  CHECK(ms >= 99 && ms < 5000);
  CHECK(strstr(gpa_handle_error_message(h), "timeout"));
  CHECK_ST(gpa_await(later, -1), GPA_ETIMEDOUT); /* skipped: the batch depended on it */
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_ETIMEDOUT);
  CHECK_ST(gpa_allreduce(q, c[0], &x, &x, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  gpa_tensor z = f32(a[1], 16);
  CHECK_ST(gpa_allreduce(gpa_actor_default_queue(a[1]), c[1], &z, &z, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  CHECK_OK(tu_fill(q, &x, 1.0, NULL)); /* local work goes on */
  CHECK_OK(gpa_sync_batch(q, NULL));
  gpa_handle_release(h);
  gpa_handle_release(later);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(gpa_comm_destroy(c[i]));
    CHECK_OK(gpa_actor_destroy(a[i]));
  }
}

/* An actor shut down while its collective waits for a peer: the handle
 * completes (ECANCELED) and nothing hangs; the peer's later part then
 * finds no partner and is aborted by the program. */
static void shutdown_case(void) {
  gpa_actor *a[2] = {actor1(), actor1()};
  gpa_comm *c[2];
  CHECK_OK(gpa_comm_init_all(a, 2, NULL, c));
  gpa_tensor x = f32(a[0], 16);
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(gpa_actor_default_queue(a[0]), c[0], &x, &x, GPA_REDUCE_SUM, &h));
  CHECK_ST(gpa_await(h, 20 * 1000000), GPA_ETIMEDOUT);
  CHECK_OK(gpa_actor_shutdown(a[0]));
  CHECK_ST(gpa_await(h, -1), GPA_ECANCELED);
  gpa_handle_release(h);
  CHECK_OK(gpa_comm_destroy(c[0]));
  CHECK_OK(gpa_comm_abort(c[1]));
  CHECK_OK(gpa_comm_destroy(c[1]));
  CHECK_OK(gpa_actor_destroy(a[0]));
  CHECK_OK(gpa_actor_destroy(a[1]));
}

static void init_errors(void) {
  gpa_actor *a = actor1(), *b = actor1();
  gpa_comm_id id;
  gpa_comm *c = (gpa_comm *)1, *d;
  CHECK_OK(gpa_comm_id_make(&id));
  CHECK_ST(gpa_comm_init(a, &id, 2, 2, NULL, &c), GPA_EINVAL);
  CHECK_MSG("rank 2 outside [0, 2)");
  CHECK(c == NULL);
  CHECK_ST(gpa_comm_init(a, &id, 0, 0, NULL, &c), GPA_EINVAL);
  CHECK_MSG("size 0");
  CHECK_ST(gpa_comm_init(a, &id, 2, -1, NULL, &c), GPA_EINVAL);
  CHECK_ST(gpa_comm_init(NULL, &id, 2, 0, NULL, &c), GPA_EINVAL);
  gpa_comm_id junk = {{0}};
  CHECK_ST(gpa_comm_init(a, &junk, 2, 0, NULL, &c), GPA_EINVAL);
  CHECK_MSG("gpa_comm_id_make");
  gpa_comm_options bad = {.size = sizeof bad, .transport = 9};
  CHECK_ST(gpa_comm_init(a, &id, 2, 0, &bad, &c), GPA_EINVAL);
  gpa_comm_options nccl = {.size = sizeof nccl, .transport = GPA_COMM_NCCL};
  CHECK_ST(gpa_comm_init(a, &id, 2, 0, &nccl, &c), GPA_EUNSUPPORTED);
  gpa_comm_options local = {.size = sizeof local, .transport = GPA_COMM_LOCAL};
  CHECK_OK(gpa_comm_init(a, &id, 2, 0, &local, &c));
  CHECK_ST(gpa_comm_init(b, &id, 2, 0, &local, &d), GPA_EINVAL);
  CHECK_MSG("already taken");
  CHECK_ST(gpa_comm_init(b, &id, 3, 1, &local, &d), GPA_EINVAL);
  CHECK_MSG("said 2");
  /* one communicator, one transport: rank 1 through MPI beside a LOCAL rank 0 */
  gpa_comm_options mpi = {.size = sizeof mpi, .transport = GPA_COMM_MPI};
  CHECK_ST(gpa_comm_init(b, &id, 2, 1, &mpi, &d), GPA_EUNSUPPORTED);
  CHECK_MSG("joined it through LOCAL");
  CHECK_OK(gpa_comm_init(b, &id, 2, 1, &local, &d));
  /* a queue of another actor */
  gpa_tensor x = f32(a, 4);
  CHECK_ST(gpa_allreduce(gpa_actor_default_queue(b), c, &x, &x, GPA_REDUCE_SUM, NULL), GPA_EINVAL);
  CHECK_MSG("another actor");
  gpa_actor *same[2] = {a, a};
  gpa_comm *cc[2];
  CHECK_ST(gpa_comm_init_all(same, 2, NULL, cc), GPA_EINVAL);
  CHECK_OK(gpa_comm_destroy(c));
  CHECK_OK(gpa_comm_destroy(d));
  /* ids as text and in a file */
  char text[GPA_COMM_ID_TEXT], path[] = "/tmp/gpa_comm_id_XXXXXX";
  gpa_comm_id back;
  CHECK_OK(gpa_comm_id_format(&id, text, sizeof text));
  CHECK_ST(gpa_comm_id_format(&id, text, 10), GPA_EINVAL);
  CHECK_OK(gpa_comm_id_parse(text, &back));
  CHECK(memcmp(&back, &id, sizeof id) == 0);
  text[5] = 'x';
  CHECK_ST(gpa_comm_id_parse(text, &back), GPA_EINVAL);
  CHECK_ST(gpa_comm_id_parse("abc", &back), GPA_EINVAL);
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  unlink(path);
  CHECK_ST(gpa_comm_id_read_file(path, 20 * 1000000, &back), GPA_ETIMEDOUT);
  CHECK_OK(gpa_comm_id_write_file(path, &id));
  memset(&back, 0, sizeof back);
  CHECK_OK(gpa_comm_id_read_file(path, 0, &back));
  CHECK(memcmp(&back, &id, sizeof id) == 0);
  unlink(path);
  CHECK_ST(gpa_comm_id_write_file("/nonexistent/dir/id", &id), GPA_ENOTFOUND);
  CHECK_OK(gpa_actor_destroy(a));
  CHECK_OK(gpa_actor_destroy(b));
}

/* A rank's actor finishes the peer's part of a collective too and wakes
 * the peer's actor after dropping the engine's lock. The peer's actor may
 * find its part done sooner (a pass of its loop, here for a message on
 * another queue), its owner see the handle complete and destroy that
 * actor before the wake-up comes: the actor must outlive the wake-up
 * (actor_free waits for the holds). Staged with a pause before the wake. */
static void wake_after_destroy_case(void) {
  gpa_actor *a[2] = {actor1(), actor1()};
  gpa_comm *c[2];
  CHECK_OK(gpa_comm_init_all(a, 2, NULL, c));
  gpa_tensor x = f32(a[0], 16), y = f32(a[1], 16);
  gpa_handle *h0, *h1;
  CHECK_OK(gpa_allreduce(gpa_actor_default_queue(a[0]), c[0], &x, &x, GPA_REDUCE_SUM, &h0));
  CHECK_ST(gpa_await(h0, 20 * 1000000), GPA_ETIMEDOUT); /* parked: the peer has not come */
  atomic_store(&gpa__coll_wake_pause_ns, 1000000000);
  uint64_t wakes = atomic_load(&gpa__coll_wakes);
  CHECK_OK(gpa_allreduce(gpa_actor_default_queue(a[1]), c[1], &y, &y, GPA_REDUCE_SUM, &h1));
  /* a[1] finishes both parts, then pauses 1 s before waking a[0] */
  for (int i = 0; i < 10000 && atomic_load(&a[0]->holds) == 0; i++) usleep(1000);
  CHECK(atomic_load(&a[0]->holds) == 1); /* held by a[1]'s pending wake-up */
  gpa_queue *q2;
  CHECK_OK(gpa_queue_create(a[0], "other", &q2));
  gpa_tensor z = f32(a[0], 4);
  CHECK_OK(tu_fill(q2, &z, 1.0f, NULL));
  CHECK_OK(gpa_sync_batch(q2, NULL));
  CHECK_OK(gpa_await(h0, -1)); /* done before the wake-up */
  CHECK(atomic_load(&gpa__coll_wakes) == wakes);
  gpa_handle_release(h0);
  CHECK_OK(gpa_comm_destroy(c[0]));
  CHECK_OK(gpa_actor_destroy(a[0])); /* waits for the wake-up */
  CHECK(atomic_load(&gpa__coll_wakes) > wakes);
  atomic_store(&gpa__coll_wake_pause_ns, 0);
  CHECK_OK(gpa_await(h1, -1));
  gpa_handle_release(h1);
  CHECK_OK(gpa_comm_destroy(c[1]));
  CHECK_OK(gpa_actor_destroy(a[1]));
}

int main(void) {
  gpa_actor *probe = actor1();
  if (strcmp(gpa_actor_backend(probe), "cpu") != 0) {
    /* LOCAL is the cpu actors' transport; NCCL on sim is comm_nccl's test */
    gpa_comm *c;
    gpa_comm_options local = {.size = sizeof local, .transport = GPA_COMM_LOCAL};
    CHECK_ST(gpa_comm_init_all(&probe, 1, &local, &c), GPA_EUNSUPPORTED);
    CHECK_MSG("cpu actors");
    printf("comm_local: %s actors: %s\n", gpa_actor_backend(probe), gpa_last_error_message());
    CHECK_OK(gpa_actor_destroy(probe));
    return 0;
  }
  CHECK_OK(gpa_actor_destroy(probe));
  init_errors();
  for (int n = 1; n <= 4; n++) all_cases(n);
  gpa_actor *a[2] = {actor1(), actor1()};
  gpa_comm *c[2];
  CHECK_OK(gpa_comm_init_all(a, 2, NULL, c));
  mismatch(a, c);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(gpa_comm_destroy(c[i]));
    CHECK_OK(gpa_actor_destroy(a[i]));
  }
  abort_case();
  timeout_case();
  shutdown_case();
  wake_after_destroy_case();
  printf("comm_local: ok\n");
  return 0;
}
