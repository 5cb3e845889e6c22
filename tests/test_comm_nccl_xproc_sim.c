/* Collectives of cuda actors in several processes, on the simulated devices
 * and the simulator's NCCL subset (sim/nccl/xproc.c: groups in shared
 * memory): the path of `mpirun -np N gpa-train-lm --data-parallel N` with
 * one process per device, checked in CI without a GPU.
 *
 * Part one forks its ranks (no MPI, so it runs in the sanitizer builds
 * too): 2 and then 3 processes, each on its own simulated device, share an
 * id made by rank 0 with gpa_comm_id_make_nccl through a file, and run
 * every case of util/comm_cases.c (and 3 ranks in 2 processes, ranks 0
 * and 1 in one of them) (each collective and dtype against the
 * reference computed there, in place and not, odd sizes and 0,
 * send/recv, ordering with other ops, errors at the call). Then the faults,
 * with no communicator timeout, so that only the subset's own detection can
 * end the waits: mismatched allreduces (both ranks: EDEVICE naming the
 * difference), a rank that aborts while its peer waits in an allreduce
 * (the peer: EDEVICE naming the abort, within seconds), a rank whose
 * process exits while its peer waits (EDEVICE naming the exit), and a rank
 * that never joins (the other's init: ETIMEDOUT after its 300 ms timeout).
 * No shared-memory segment of the ranks is left in /dev/shm afterwards.
 *
 * Part two (left out without mpirun and in the sanitizer builds, where
 * comm_mpi is skipped; the test then passes on part one) starts
 * `mpirun -np 2` on itself: each process takes sim:<local rank>
 * (gpa_comm_mpi_local_rank), bootstraps with
 * gpa_comm_bootstrap_mpi_nccl and runs the same cases, then the abort
 * case. */
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "actor/internal.h"
#include "backends/coll.h"
#include "util/comm_cases.h"
#include "util/mpi_launch.h"

#define CHILD_ENV "GPA_TEST_COMM_XPROC_CHILD"
#define SKIP 77
#define DIES 42 /* the exit code of the rank that dies on purpose */

static char dir[64];

static gpa_actor *on(int dev) {
  char name[16];
  snprintf(name, sizeof name, "sim:%d", dev);
  gpa_actor_options o = {.device = name, .threads = 1};
  gpa_actor *a = NULL;
  if (gpa_actor_create(&o, &a) != GPA_OK) {
    printf("skipped: no simulated device (%s)\n", gpa_last_error_message());
    exit(SKIP);
  }
  return a;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The id of `name`: made by rank 0 (NCCL's unique id inside), read by the
 * others from the file rank 0 writes. */
static void share_id(gpa_actor *a, int rank, const char *name, gpa_comm_id *id) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (rank == 0) {
    CHECK_OK(gpa_comm_id_make_nccl(a, id));
    CHECK_OK(gpa_comm_id_write_file(path, id));
  } else {
    CHECK_OK(gpa_comm_id_read_file(path, 20ll * 1000000000, id));
  }
}

/* The simulator's segments of ids pid made still named in /dev/shm;
 * removed too when `remove` (a failed run cleans up after its ranks). */
static int segments_of_x(int pid, bool remove) {
  char prefix[48];
  snprintf(prefix, sizeof prefix, "gpa-sim-nccl-%d-", pid);
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
    n++;
    char name[300];
    snprintf(name, sizeof name, "/%s", e->d_name);
    if (remove) shm_unlink(name);
  }
  closedir(d);
  return n;
}

static int segments_of(int pid) { return segments_of_x(pid, false); }

/* Waits until the subset freed every communicator of this process (a
 * non-blocking one goes about a millisecond after its abort or destroy). */
static void subset_idle(gpa_actor *a) {
  const char *path = gpa__cu_nccl_path ? gpa__cu_nccl_path(a->bctx) : NULL;
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  CHECK(lib);
  int (*live)(void) = (int (*)(void))dlsym(lib, "gpa_sim_nccl_live_comms");
  CHECK(live);
  for (int i = 0; i < 1000 && live(); i++) usleep(1000);
  CHECK(live() == 0);
  dlclose(lib);
}

static void cases(gpa_actor *a, const gpa_comm_id *id, int rank, int size) {
  gpa_comm *c;
  CHECK_OK(gpa_comm_init(a, id, size, rank, NULL, &c));
  comm_case_env e = {a, gpa_actor_default_queue(a), c, rank, size};
  comm_cases_run(&e);
  CHECK_OK(gpa_comm_destroy(c));
}

/* Rank 1 waits in an allreduce; rank 0 aborts its communicator without
 * joining it. No timeout: the abort, published in the group's segment,
 * must end rank 1's wait. */
static void abort_case(gpa_actor *a, const gpa_comm_id *id, int rank) {
  gpa_comm *c;
  CHECK_OK(gpa_comm_init(a, id, 2, rank, NULL, &c));
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 300);
  if (rank == 0) {
    usleep(200 * 1000); /* rank 1's allreduce is waiting by now */
    CHECK_OK(gpa_comm_abort(c));
    CHECK_ST(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  } else {
    gpa_handle *h;
    double t0 = now_s();
    CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
    CHECK_ST(gpa_await(h, 30ll * 1000000000), GPA_EDEVICE);
    const char *why = gpa_handle_error_message(h);
    printf("comm_nccl_xproc_sim: rank 1 after rank 0's abort (%.2f s): %s\n", now_s() - t0, why);
    CHECK(strstr(why, "aborted") && strstr(why, "rank 0"));
    gpa_handle_release(h);
    CHECK_ST(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, NULL), GPA_ECLOSED);
  }
  CHECK_ST(gpa_sync_batch(q, NULL), rank == 0 ? GPA_OK : GPA_EDEVICE);
  CHECK_OK(tu_fill(q, &x, 2.0, NULL)); /* local work goes on */
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_comm_destroy(c));
  gpa_buffer_release(a, x.buffer);
}

/* The ranks issue different allreduces (64 against 32 floats): every
 * rank compares what all staged, so both fail naming the difference. */
static void mismatch_case(gpa_actor *a, const gpa_comm_id *id, int rank) {
  gpa_comm *c;
  CHECK_OK(gpa_comm_init(a, id, 2, rank, NULL, &c));
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, rank ? 32 : 64);
  gpa_handle *h;
  CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
  CHECK_ST(gpa_await(h, 30ll * 1000000000), GPA_EDEVICE);
  CHECK(strstr(gpa_handle_error_message(h), "different collectives"));
  gpa_handle_release(h);
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_EDEVICE);
  CHECK_OK(gpa_comm_destroy(c));
  gpa_buffer_release(a, x.buffer);
}

/* Rank 1's process exits while rank 0 waits in an allreduce (no timeout). */
static void death_case(gpa_actor *a, const gpa_comm_id *id, int rank) {
  gpa_comm *c;
  CHECK_OK(gpa_comm_init(a, id, 2, rank, NULL, &c));
  if (rank == 1) {
    usleep(200 * 1000);
    _exit(DIES); /* no destroy, no abort: as if killed */
  }
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 300);
  gpa_handle *h;
  double t0 = now_s();
  CHECK_OK(gpa_allreduce(q, c, &x, &x, GPA_REDUCE_SUM, &h));
  CHECK_ST(gpa_await(h, 30ll * 1000000000), GPA_EDEVICE);
  const char *why = gpa_handle_error_message(h);
  printf("comm_nccl_xproc_sim: rank 0 after rank 1's exit (%.2f s): %s\n", now_s() - t0, why);
  CHECK(strstr(why, "rank 1") && strstr(why, "exited"));
  gpa_handle_release(h);
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_EDEVICE);
  CHECK_OK(gpa_comm_destroy(c));
  gpa_buffer_release(a, x.buffer);
}

/* Rank 1 never joins: rank 0's init ends with ETIMEDOUT after its timeout,
 * and the group's segment goes with it. */
static void never_case(gpa_actor *a, const gpa_comm_id *id, int rank) {
  if (rank == 1) return;
  gpa_comm *c;
  gpa_comm_options o = {.size = sizeof o, .timeout_ns = 300ll * 1000000};
  double t0 = now_s();
  CHECK_ST(gpa_comm_init(a, id, 2, 0, &o, &c), GPA_ETIMEDOUT);
  double took = now_s() - t0;
  printf("comm_nccl_xproc_sim: rank 0 alone (%.2f s): %s\n", took, gpa_last_error_message());
  CHECK(took >= 0.29 && took < 3.0);
  subset_idle(a);
  CHECK(segments_of(getpid()) == 0);
}

static int fork_rank(int rank, int size) {
  alarm(60); /* a hang fails the test, and its parent sees why */
  gpa_actor *a = on(rank);
  gpa_comm_id id;
  share_id(a, rank, size == 2 ? "cases2" : "cases3", &id);
  cases(a, &id, rank, size);
  if (size == 2) {
    share_id(a, rank, "mismatch", &id);
    mismatch_case(a, &id, rank);
    share_id(a, rank, "abort", &id);
    abort_case(a, &id, rank);
    share_id(a, rank, "never", &id);
    never_case(a, &id, rank);
    share_id(a, rank, "death", &id);
    death_case(a, &id, rank);
  }
  subset_idle(a);
  CHECK(segments_of(getpid()) == 0);
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}

typedef struct rank_arg {
  gpa_actor *a;
  const gpa_comm_id *id;
  int rank;
} rank_arg;

static void *rank_thread(void *p) {
  rank_arg *r = p;
  cases(r->a, r->id, r->rank, 3);
  return NULL;
}

/* Several devices per process and several processes: process 0 holds
 * ranks 0 and 1 (a thread each), process 1 rank 2; ranks 0 and 1 meet
 * through the segment too (their send/recv included). */
static int mixed_process(int proc) {
  alarm(60);
  gpa_actor *a = on(proc ? 2 : 0);
  gpa_comm_id id;
  share_id(a, proc, "mixed", &id);
  if (proc) {
    cases(a, &id, 2, 3);
  } else {
    gpa_actor *b = on(1);
    pthread_t t;
    rank_arg r1 = {b, &id, 1};
    CHECK(pthread_create(&t, NULL, rank_thread, &r1) == 0);
    cases(a, &id, 0, 3);
    CHECK(pthread_join(t, NULL) == 0);
    subset_idle(b);
    CHECK_OK(gpa_actor_destroy(b));
  }
  subset_idle(a);
  CHECK(segments_of(getpid()) == 0);
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}

/* Forks the ranks' processes (size of them, or the mixed layout's 2) and
 * waits for them; false when one failed. */
static bool run_forked(int size, bool mixed) {
  pid_t pid[4];
  int procs = mixed ? 2 : size;
  fflush(NULL);
  for (int r = 0; r < procs; r++) {
    pid[r] = fork();
    CHECK(pid[r] >= 0);
    if (pid[r] == 0) exit(mixed ? mixed_process(r) : fork_rank(r, size));
  }
  bool ok = true, skipped = false;
  for (int r = 0; r < procs; r++) {
    int st = 0;
    CHECK(waitpid(pid[r], &st, 0) == pid[r]);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    int want = !mixed && size == 2 && r == 1 ? DIES : 0;
    if (code == SKIP) skipped = true;
    else if (code != want) {
      fprintf(stderr, "comm_nccl_xproc_sim: %d ranks%s: process %d exited with %d, want %d\n", size,
              mixed ? " in 2 processes" : "", r, code, want);
      ok = false;
    }
  }
  if (skipped) exit(SKIP);
  for (int r = 0; r < procs; r++)
    if (segments_of_x(pid[r], true)) {
      fprintf(stderr, "comm_nccl_xproc_sim: a segment of rank %d (process %d) was left in /dev/shm\n", r, (int)pid[r]);
      ok = false;
    }
  return ok;
}

/* One rank of `mpirun -np 2` on this test. */
static int mpi_child(void) {
  alarm(60);
  int32_t local = -1, nlocal = 0;
  CHECK_OK(gpa_comm_mpi_local_rank(&local, &nlocal));
  gpa_actor *a = on(local);
  gpa_comm_id id;
  int32_t rank = -1, size = 0;
  CHECK_OK(gpa_comm_bootstrap_mpi_nccl(a, &id, &rank, &size));
  CHECK(size == 2 && rank == local);
  cases(a, &id, rank, size);
  CHECK_OK(gpa_comm_bootstrap_mpi_nccl(a, &id, NULL, NULL));
  abort_case(a, &id, rank);
  subset_idle(a);
  CHECK(segments_of(getpid()) == 0);
  CHECK_OK(gpa_actor_destroy(a));
  if (rank == 0) printf("comm_nccl_xproc_sim: mpirun -np 2: ok\n");
  return 0;
}

int main(int argc, char **argv) {
  (void)argc;
  unsetenv("GPA_DEVICE"); /* the ranks pick their devices */
  setenv("GPA_SIM_DEVICES", "4", 1);
  if (getenv(CHILD_ENV)) return mpi_child();
  snprintf(dir, sizeof dir, "/tmp/gpa-xproc-XXXXXX");
  CHECK(mkdtemp(dir));
  double t0 = now_s();
  bool ok = run_forked(2, false) && run_forked(3, false) && run_forked(3, true);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "comm_nccl_xproc_sim: could not remove %s\n", dir);
  if (!ok) return 1;
  printf("comm_nccl_xproc_sim: forked 2 and 3 ranks, and 3 in 2 processes: ok (%.1f s)\n", now_s() - t0);
  /* what tu_mpirun_or_skip skips, but the forked part above has run */
#if defined(GPA_ASAN) || defined(GPA_TSAN)
  printf("comm_nccl_xproc_sim: the mpirun part skipped: Open MPI under a sanitizer reports its own allocations "
         "and threads\n");
  return 0;
#endif
  const char *mpirun = tu_mpirun();
  if (!mpirun) {
    printf("comm_nccl_xproc_sim: the mpirun part skipped: no mpirun on PATH (Debian: openmpi-bin)\n");
    return 0;
  }
  int rc = tu_mpi_launch(mpirun, argv[0], 2, CHILD_ENV);
  if (rc) {
    fprintf(stderr, "comm_nccl_xproc_sim: mpirun -np 2 exited with %d\n", rc);
    return 1;
  }
  return 0;
}
