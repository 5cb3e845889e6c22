/* Collectives across processes (the MPI transport). Run by ctest without
 * MPI, the test starts its own mpirun (-np 2, then -np 3, --oversubscribe:
 * the CI machine has 2 cores) on itself; each rank then bootstraps through
 * gpa_comm_bootstrap_mpi, runs every case of util/comm_cases.c, and the
 * MPI-only ones: a second rank in one process, a size the processes
 * disagree with, abort and a timeout with a collective in flight (MPI
 * cannot take it back: the peer completes it later, unwatched).
 * Skipped (77) without mpirun or the MPI module, and in sanitizer builds:
 * Open MPI's own allocations and threads flood ASan and TSan (and it
 * cannot run under valgrind's pace without timeouts of its own). On cuda
 * and sim actors the MPI transport answers EUNSUPPORTED: checked without
 * MPI. */
#include <stdlib.h>
#include <unistd.h>

#include "util/comm_cases.h"
#include "util/mpi_launch.h"

#define CHILD_ENV "GPA_TEST_COMM_MPI_CHILD"

static gpa_actor *actor1(void) {
  gpa_actor_options o = {.threads = 1};
  return tu_actor(&o);
}

/* The late rank's side of abort_case and timeout_case: every rank meets on
 * the second communicator (a barrier of sorts), then the ranks other than 0
 * join the allreduce rank 0 gave up on, completing the request rank 0 left
 * to MPI; everything is destroyed. */
static void join_late(gpa_actor *a, gpa_queue *q, gpa_queue *q2, gpa_comm *c, gpa_comm *side, gpa_tensor x,
                      gpa_tensor flag, int rank) {
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(q2, side, &flag, &flag, GPA_REDUCE_SUM, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  if (rank != 0) {
    CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
    CHECK_OK(gpa_await(h, -1));
    gpa_handle_release(h);
  }
  CHECK_OK(gpa_comm_destroy(c));
  CHECK_OK(gpa_comm_destroy(side));
  CHECK_OK(gpa_queue_destroy(q2));
  gpa_buffer_release(a, x.buffer);
  gpa_buffer_release(a, flag.buffer);
}

/* Rank 0 starts an allreduce rank 1 does not join yet, and aborts: its
 * handle completes ECANCELED at once, later collectives on the
 * communicator ECLOSED. Rank 1 then joins the allreduce (told through a
 * second communicator), which completes the request rank 0 left to MPI. */
static void abort_case(gpa_actor *a, const gpa_comm_id *id, int rank, int size) {
  if (size < 2) return;
  gpa_comm *c, *side;
  gpa_comm_id id2 = *id;
  id2.bytes[8] ^= 0x55; /* another communicator of the same processes */
  CHECK_OK(gpa_comm_init(a, id, size, rank, NULL, &c));
  CHECK_OK(gpa_comm_init(a, &id2, size, rank, NULL, &side));
  gpa_queue *q = gpa_actor_default_queue(a), *q2;
  CHECK_OK(gpa_queue_create(a, "side", &q2));
  gpa_tensor x = tu_f32(a, 256), flag = tu_f32(a, 1);
  gpa_handle *h;
  if (rank == 0) {
    CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
    CHECK_ST(gpa_await(h, 30 * 1000000), GPA_ETIMEDOUT);
    CHECK_OK(gpa_comm_abort(c));
    CHECK_ST(gpa_await(h, -1), GPA_ECANCELED);
    CHECK(strstr(gpa_handle_error_message(h), "aborted"));
    gpa_handle_release(h);
    CHECK_ST(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
    CHECK_ST(gpa_sync_batch(q, NULL), GPA_ECANCELED); /* the batch's first error */
    CHECK_OK(tu_fill(q, &x, 1.0, NULL)); /* the actor works on */
    CHECK_OK(gpa_sync_batch(q, NULL));
  }
  join_late(a, q, q2, c, side, x, flag, rank);
}

/* Rank 0's allreduce times out (rank 1 comes late): ETIMEDOUT after the
 * communicator's timeout, the rest of the batch skipped, the communicator
 * failed; rank 1 joins afterwards (told through a second communicator),
 * completing the request rank 0 left to MPI. */
static void timeout_case(gpa_actor *a, const gpa_comm_id *id, int rank, int size) {
  if (size < 2) return;
  gpa_comm *c, *side;
  gpa_comm_id id1 = *id, id2 = *id;
  id1.bytes[10] ^= 0x11;
  id2.bytes[10] ^= 0x22;
  gpa_comm_options o = {.size = sizeof o, .transport = GPA_COMM_MPI, .timeout_ns = 150 * 1000000};
  CHECK_OK(gpa_comm_init(a, &id1, size, rank, &o, &c));
  CHECK_OK(gpa_comm_init(a, &id2, size, rank, NULL, &side));
  gpa_queue *q = gpa_actor_default_queue(a), *q2;
  CHECK_OK(gpa_queue_create(a, "side", &q2));
  gpa_tensor x = tu_f32(a, 1000), flag = tu_f32(a, 1);
  gpa_handle *h, *later;
  if (rank == 0) {
    CHECK_OK(gpa_batch_begin(q, "timeout"));
    CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
    CHECK_OK(tu_fill(q, &x, 1.0, &later));
    CHECK_ST(gpa_await(h, -1), GPA_ETIMEDOUT);
    CHECK(strstr(gpa_handle_error_message(h), "timeout"));
    CHECK_ST(gpa_await(later, -1), GPA_ETIMEDOUT); /* skipped */
    CHECK_ST(gpa_sync_batch(q, NULL), GPA_ETIMEDOUT);
    CHECK_ST(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
    gpa_handle_release(h);
    gpa_handle_release(later);
  }
  join_late(a, q, q2, c, side, x, flag, rank);
}

static int child(void) {
  /* A failed CHECK exits, and MPI_Finalize at exit then waits for the
   * peers: the alarm ends such a job instead of ctest's timeout. */
  alarm(100);
  gpa_comm_id id;
  int32_t rank = -1, size = 0;
  CHECK_OK(gpa_comm_bootstrap_mpi(&id, &rank, &size));
  CHECK(rank >= 0 && rank < size);
  gpa_actor *a = actor1();
  gpa_comm *c;
  gpa_comm_options mpi = {.size = sizeof mpi, .transport = GPA_COMM_MPI};
  CHECK_OK(gpa_comm_init(a, &id, size, rank, NULL, &c)); /* AUTO: MPI with 2+ processes */
  gpa_comm *again;
  CHECK_ST(gpa_comm_init(a, &id, size, rank, &mpi, &again), GPA_EUNSUPPORTED);
  CHECK_MSG("one rank per");
  comm_case_env e = {a, gpa_actor_default_queue(a), c, rank, size};
  comm_cases_run(&e);
  CHECK_OK(gpa_comm_destroy(c));
  /* a wrong size: every process learns it */
  gpa_comm_id id3 = id;
  id3.bytes[9] ^= 0x33;
  CHECK_ST(gpa_comm_init(a, &id3, size + 1, rank, &mpi, &again), GPA_EINVAL);
  CHECK_MSG("processes joined");
  /* one machine: the local ranks are the world's */
  int32_t lr = -1, ls = 0;
  CHECK_OK(gpa_comm_mpi_local_rank(&lr, &ls));
  CHECK(lr == rank && ls == size);
  /* NCCL's bootstrap refuses a cpu actor on every process, none waits */
  gpa_comm_id nid;
  CHECK_ST(gpa_comm_bootstrap_mpi_nccl(a, &nid, NULL, NULL), GPA_EUNSUPPORTED);
  CHECK_MSG("cpu");
  abort_case(a, &id, rank, size);
  timeout_case(a, &id, rank, size);
  CHECK_OK(gpa_actor_destroy(a));
  if (rank == 0) printf("comm_mpi: %d ranks ok\n", size);
  return 0;
}

int main(int argc, char **argv) {
  (void)argc;
  if (getenv(CHILD_ENV)) return child();
  gpa_actor *probe = actor1();
  if (strcmp(gpa_actor_backend(probe), "cpu") != 0) {
    gpa_comm_id id;
    gpa_comm *c;
    gpa_comm_options mpi = {.size = sizeof mpi, .transport = GPA_COMM_MPI};
    CHECK_OK(gpa_comm_id_make(&id));
    CHECK_ST(gpa_comm_init(probe, &id, 2, 0, &mpi, &c), GPA_EUNSUPPORTED);
    CHECK_MSG("cpu actors");
    printf("comm_mpi: %s actors: %s\n", gpa_actor_backend(probe), gpa_last_error_message());
    CHECK_OK(gpa_actor_destroy(probe));
    return 0;
  }
  CHECK_OK(gpa_actor_destroy(probe));
  const char *mpirun = tu_mpirun_or_skip();
  for (int np = 2; np <= 3; np++) {
    int rc = tu_mpi_launch(mpirun, argv[0], np, CHILD_ENV);
    if (rc) {
      fprintf(stderr, "comm_mpi: mpirun -np %d exited with %d\n", np, rc);
      return 1;
    }
  }
  return 0;
}
