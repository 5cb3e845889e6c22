/* allreduce through the actor against MPI's own call of the same size, in
 * the same run (issue 27's measurement): f32 sums in place, 4 KiB to
 * GPA_BENCH_MAX_MIB (default 256) MiB by factors of 4; one JSON object per
 * size on rank 0, with each side's microseconds per call (median of 5
 * rounds) and algorithm bandwidth (bytes / time). Run:
 *   mpirun -np 2 --oversubscribe build/gpa-bench-allreduce
 * The actor's side submits a round's calls without handles and syncs once,
 * as a trainer would; MPI's side is MPI_Iallreduce + MPI_Wait per call on
 * the same communicator size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[n / 2];
}

int main(int argc, char **argv) {
  int level = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  gpa_comm_id id;
  int32_t rank, size;
  if (gpa_comm_bootstrap_mpi(&id, &rank, &size) != GPA_OK) {
    fprintf(stderr, "bootstrap: %s\n", gpa_last_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  gpa_actor_options o = {.device = "cpu", .threads = 1};
  gpa_actor *a;
  gpa_comm *c;
  gpa_comm_options co = {.size = sizeof co, .transport = GPA_COMM_MPI};
  if (gpa_actor_create(&o, &a) != GPA_OK || gpa_comm_init(a, &id, size, rank, &co, &c) != GPA_OK) {
    fprintf(stderr, "init: %s\n", gpa_last_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  gpa_queue *q = gpa_actor_default_queue(a);
  const char *mx = getenv("GPA_BENCH_MAX_MIB");
  long max_bytes = (mx ? atol(mx) : 256) << 20;
  for (long bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    long n = bytes / 4;
    int calls = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 5 : 2;
    float *host = malloc((size_t)bytes);
    for (long i = 0; i < n; i++) host[i] = 0.0f; /* sums of zeros: no overflow however many calls */
    gpa_tensor t = {0, 0, GPA_F32, 1, {n}};
    gpa_buffer_acquire(a, NULL, (uint64_t)bytes, &t.buffer);
    gpa_upload(q, &t, host, (uint64_t)bytes, 0, NULL);
    gpa_sync_batch(q, NULL);
    double ours[5], theirs[5];
    for (int round = 0; round < 5; round++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int k = 0; k < calls; k++) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, host, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
      theirs[round] = (MPI_Wtime() - t0) / calls;
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      for (int k = 0; k < calls; k++) gpa_allreduce(q, c, &t, &t, GPA_REDUCE_SUM, NULL);
      if (gpa_sync_batch(q, NULL) != GPA_OK) {
        fprintf(stderr, "allreduce: %s\n", gpa_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      ours[round] = (MPI_Wtime() - t0) / calls;
    }
    double to = median(ours, 5), tm = median(theirs, 5);
    if (rank == 0)
      printf("{\"bench\":\"allreduce_mpi\",\"ranks\":%d,\"bytes\":%ld,\"actor_us\":%.1f,\"mpi_us\":%.1f,"
             "\"actor_gbps\":%.3f,\"mpi_gbps\":%.3f,\"ratio\":%.2f}\n",
             size, bytes, to * 1e6, tm * 1e6, bytes / to / 1e9, bytes / tm / 1e9, tm / to);
    fflush(stdout);
    gpa_buffer_release(a, t.buffer);
    free(host);
  }
  gpa_comm_destroy(c);
  gpa_actor_destroy(a);
  MPI_Finalize();
  return 0;
}
