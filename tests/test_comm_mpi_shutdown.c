/* Shutting down with MPI collectives in flight (docs/collectives.md,
 * "Faults" and "Shutdown rules"). Like comm_mpi it starts its own
 * `mpirun -np 2 --oversubscribe` on itself; rank 0 leaves collectives that
 * rank 1 joins late or never, and shuts down in the orders a program would:
 *
 * 1. abort, destroy the communicator, go on: the handle completes once
 *    (ECANCELED), destroy returns at once (no timeout set: it used to wait
 *    for MPI forever), and when rank 1 joins late MPI's write lands in
 *    memory the buffer no longer uses (the buffer keeps what rank 0 wrote
 *    into it after the abort);
 * 2. destroy the actor with collectives pending and no abort: destroy of
 *    the communicator first is EBUSY, the actor's destroy returns, every
 *    handle completes once (ECANCELED, "actor destroyed"), the
 *    communicator's destroy then succeeds at once; rank 1 joins late, and
 *    MPI writes memory the actor gave up rather than memory it freed;
 * 3. a peer that never comes: a timeout (ETIMEDOUT) on one communicator,
 *    a pending collective, the actor destroyed, abort and destroy after it
 *    on another; the process then exits, MPI_Finalize with the requests
 *    never matched, and mpirun reports success.
 *
 * A hard limit (alarm, and ctest's timeout) turns a hang into a failure.
 * Skipped (77) as comm_mpi is: no mpirun, sanitizer builds, non-cpu
 * backends. */
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "util/mpi_launch.h"
#include "util/testutil.h"

#define CHILD_ENV "GPA_TEST_COMM_MPI_SHUTDOWN_CHILD"
#define N 4096

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static gpa_actor *actor1(void) {
  gpa_actor_options o = {.threads = 1};
  return tu_actor(&o);
}

static gpa_comm_id id_n(const gpa_comm_id *id, int n) {
  gpa_comm_id x = *id;
  x.bytes[12] ^= (unsigned char)(0x10 * n + 1); /* another communicator of the same processes */
  return x;
}

/* Both ranks meet on side (an allreduce of one float). */
static void barrier(gpa_actor *a, gpa_comm *side) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor f = tu_f32(a, 1);
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(q, side, &f, &f, GPA_REDUCE_SUM, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  gpa_buffer_release(a, f.buffer);
}

/* The handle completed once with want, and stays so. */
static void completed(gpa_handle *h, gpa_status want, const char *needle) {
  CHECK_ST(gpa_await(h, 5000 * 1000000ll), want);
  CHECK(strstr(gpa_handle_error_message(h), needle));
  CHECK_ST(gpa_await(h, 0), want);
  gpa_handle_release(h);
}

/* Rank 1 joins the allreduce rank 0 gave up on. */
static void join_late(gpa_actor *a, gpa_comm *c, float v) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, N);
  CHECK_OK(tu_fill(q, &x, v, NULL));
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  gpa_buffer_release(a, x.buffer);
}

static void abort_then_late_peer(gpa_actor *a, gpa_comm *side, const gpa_comm_id *id, int rank) {
  gpa_comm_id i1 = id_n(id, 1);
  gpa_comm *c;
  CHECK_OK(gpa_comm_init(a, &i1, 2, rank, NULL, &c)); /* no timeout */
  if (rank == 0) {
    gpa_queue *q = gpa_actor_default_queue(a);
    gpa_tensor x = tu_f32(a, N);
    CHECK_OK(tu_fill(q, &x, 1.0, NULL));
    gpa_handle *h;
    CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
    CHECK_ST(gpa_await(h, 20 * 1000000), GPA_ETIMEDOUT); /* still waiting for rank 1 */
    CHECK_OK(gpa_comm_abort(c));
    completed(h, GPA_ECANCELED, "aborted");
    int64_t t0 = now_ms();
    CHECK_OK(gpa_comm_destroy(c)); /* MPI still holds the request: destroy does not wait for it */
    CHECK(now_ms() - t0 < 1000);
    CHECK_ST(gpa_sync_batch(q, NULL), GPA_ECANCELED); /* the batch's first error */
    CHECK_OK(tu_fill(q, &x, 7.0, NULL)); /* the buffer is the actor's again */
    CHECK_OK(gpa_sync_batch(q, NULL));
    barrier(a, side); /* rank 1 may join now */
    barrier(a, side); /* it has: rank 0's half of the allreduce lands meanwhile */
    float *got = malloc(N * sizeof *got);
    /* the late data goes to memory the buffer left: look a while for it */
    for (int i = 0; i < 20; i++) {
      tu_get(q, &x, got, N);
      for (int j = 0; j < N; j++) CHECK(got[j] == 7.0f);
      nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    free(got);
    gpa_buffer_release(a, x.buffer);
  } else {
    barrier(a, side);
    join_late(a, c, 2.0f);
    barrier(a, side);
    CHECK_OK(gpa_comm_destroy(c));
  }
}

static void actor_destroyed_then_late_peer(gpa_actor *a, gpa_comm *side, const gpa_comm_id *id, int rank) {
  gpa_comm_id i2 = id_n(id, 2);
  gpa_actor *b = actor1();
  gpa_comm *c;
  CHECK_OK(gpa_comm_init(b, &i2, 2, rank, NULL, &c)); /* no timeout */
  if (rank == 0) {
    gpa_queue *q = gpa_actor_default_queue(b), *q2;
    CHECK_OK(gpa_queue_create(b, "second", &q2));
    gpa_tensor x = tu_f32(b, N), y = tu_f32(b, 2 * N), z = tu_f32(b, N);
    gpa_handle *h1, *h2, *h3, *h4;
    CHECK_OK(gpa_batch_begin(q, "pending"));
    CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h1));
    CHECK_OK(gpa_allgather(q, c, &x, &y, &h2)); /* queued behind it, never started */
    CHECK_OK(tu_fill(q, &x, 3.0, &h3));
    CHECK_OK(tu_fill(q2, &z, 3.0, &h4)); /* another queue runs meanwhile */
    CHECK_OK(gpa_await(h4, -1));
    CHECK_ST(gpa_await(h1, 20 * 1000000), GPA_ETIMEDOUT);
    CHECK_ST(gpa_comm_destroy(c), GPA_EBUSY);
    CHECK_MSG("have not finished");
    int64_t t0 = now_ms();
    CHECK_OK(gpa_actor_destroy(b)); /* no abort first */
    CHECK(now_ms() - t0 < 2000);
    completed(h1, GPA_ECANCELED, "actor destroyed");
    completed(h2, GPA_ECANCELED, "actor destroyed");
    completed(h3, GPA_ECANCELED, "actor destroyed");
    CHECK_OK(gpa_await(h4, -1));
    gpa_handle_release(h4);
    t0 = now_ms();
    CHECK_OK(gpa_comm_destroy(c)); /* after its actor: allowed, and at once */
    CHECK(now_ms() - t0 < 1000);
    barrier(a, side);
    barrier(a, side); /* rank 1 joined: MPI wrote memory the actor gave it, not memory it freed */
  } else {
    barrier(a, side);
    join_late(b, c, 5.0f);
    barrier(a, side);
    CHECK_OK(gpa_comm_destroy(c));
    CHECK_OK(gpa_actor_destroy(b));
  }
}

/* Rank 1 never joins these: rank 0 exits with the requests unmatched. */
static void never_joined(const gpa_comm_id *id, int rank) {
  gpa_comm_id i3 = id_n(id, 3), i4 = id_n(id, 4);
  gpa_actor *b = actor1();
  gpa_comm *c3, *c4;
  gpa_comm_options o = {.size = sizeof o, .transport = GPA_COMM_MPI, .timeout_ns = 60 * 1000000};
  CHECK_OK(gpa_comm_init(b, &i3, 2, rank, &o, &c3));
  CHECK_OK(gpa_comm_init(b, &i4, 2, rank, NULL, &c4));
  if (rank == 0) {
    gpa_queue *q = gpa_actor_default_queue(b), *q2;
    CHECK_OK(gpa_queue_create(b, "second", &q2));
    gpa_tensor x = tu_f32(b, N), y = tu_f32(b, N);
    gpa_handle *h3, *h4;
    CHECK_OK(gpa_allreduce(q, c3, &x, &x, GPA_REDUCE_MAX, &h3));
    completed(h3, GPA_ETIMEDOUT, "timeout");
    CHECK_ST(gpa_allreduce(q, c3, &x, &x, GPA_REDUCE_MAX, NULL), GPA_ECLOSED);
    CHECK_OK(gpa_comm_destroy(c3));
    CHECK_OK(gpa_broadcast(q2, c4, &y, &y, 1, &h4)); /* root 1 never sends */
    CHECK_ST(gpa_await(h4, 20 * 1000000), GPA_ETIMEDOUT);
    CHECK_OK(gpa_actor_destroy(b));
    completed(h4, GPA_ECANCELED, "actor destroyed");
    CHECK_OK(gpa_comm_abort(c4)); /* after the actor: nothing left to fail */
    CHECK_OK(gpa_comm_destroy(c4));
  } else {
    CHECK_OK(gpa_comm_destroy(c3));
    CHECK_OK(gpa_comm_destroy(c4));
    CHECK_OK(gpa_actor_destroy(b));
  }
}

static int child(void) {
  alarm(30); /* a hang anywhere, MPI_Finalize included, fails the job */
  gpa_comm_id id;
  int32_t rank = -1, size = 0;
  CHECK_OK(gpa_comm_bootstrap_mpi(&id, &rank, &size));
  CHECK(size == 2);
  gpa_actor *a = actor1();
  gpa_comm *side;
  CHECK_OK(gpa_comm_init(a, &id, size, rank, NULL, &side));
  abort_then_late_peer(a, side, &id, rank);
  actor_destroyed_then_late_peer(a, side, &id, rank);
  barrier(a, side);
  CHECK_OK(gpa_comm_destroy(side));
  never_joined(&id, rank);
  CHECK_OK(gpa_actor_destroy(a));
  if (rank == 0) printf("comm_mpi_shutdown: ok\n");
  fflush(stdout);
  return 0; /* MPI_Finalize at exit, with rank 0's requests never matched */
}

int main(int argc, char **argv) {
  (void)argc;
  if (getenv(CHILD_ENV)) return child();
  gpa_actor *probe = actor1();
  bool cpu = strcmp(gpa_actor_backend(probe), "cpu") == 0;
  CHECK_OK(gpa_actor_destroy(probe));
  if (!cpu) {
    printf("skipped: MPI collectives run on cpu actors (comm_mpi checks the refusal)\n");
    return 77;
  }
  const char *mpirun = tu_mpirun_or_skip();
  int rc = tu_mpi_launch(mpirun, argv[0], 2, CHILD_ENV);
  if (rc) fprintf(stderr, "comm_mpi_shutdown: mpirun -np 2 exited with %d\n", rc);
  return rc ? 1 : 0;
}
