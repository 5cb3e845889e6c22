/* gpa-sim NCCL subset: ranks in several processes of one machine (mpirun
 * with one process per simulated device; docs/sim.md, "NCCL subset").
 *
 * Every group also has a POSIX shared-memory segment named by its unique id
 * (/dev/shm/gpa-sim-nccl-<maker pid>-<hash>): the first rank to come, in
 * whatever process, makes it; every rank writes its pid in its place there.
 * Once every rank joined, the group knows whether all its ranks are in this
 * process (then nothing more goes through the segment: coll.c's in-process
 * rendezvous, as before) or not (g->cross: xcoll.c stages every rank's data
 * in its area of the segment). The name is unlinked as soon as every rank
 * joined (each process keeps its mapping), so a process that dies later
 * leaves nothing behind; before that, by any rank whose init ends otherwise
 * and by the group's release.
 *
 * The segment is a header of per-rank counters, each written by its own
 * rank only (C11 atomics on shared memory: lock-free, so valid across
 * processes), and the ranks' staging areas after it: XCAP bytes for a
 * collective's input and XPCAP for a send, per rank. The file is sparse;
 * a rank fallocates what it stages first, so a full /dev/shm is an error
 * (ncclSystemError) instead of a SIGBUS. Nothing blocks on another
 * process: the waits poll the counters with naps on snc_cv (which the
 * process's own events, an abort, still wake at once), and look every
 * 20 ms whether a peer they wait for has gone (its process exited, or its
 * communicator was freed): then the group fails for everyone with that
 * reason (ncclRemoteError), as does an abort or an asynchronous failure in
 * any process. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "xseg.h"

#define XMAGIC 0x676e63636c787031ULL /* written last by the maker */

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t fnv(const unsigned char *p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

static size_t seg_bytes(int nranks) { return XDATA_OFF + (size_t)nranks * (XCAP + XPCAP); }

void snc_x_nap_locked(long *ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += *ns;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_cond_timedwait(&snc_cv, &snc_mu, &ts);
  if (*ns < 500000) *ns *= 2;
}

void snc_x_unlink_locked(group *g) {
  if (g->xnamed) shm_unlink(g->xname);
  g->xnamed = false;
}

ncclResult_t snc_x_attach_locked(group *g, const ncclUniqueId *id, int nranks) {
  int32_t maker;
  memcpy(&maker, id->internal + 16 + 3 * sizeof(unsigned long long), sizeof maker);
  bool remote = maker != (int32_t)getpid();
  uint64_t h1 = fnv((const unsigned char *)id->internal, sizeof id->internal, 0xcbf29ce484222325ULL);
  uint64_t h2 = fnv((const unsigned char *)id->internal, sizeof id->internal, h1 ^ 0x9e3779b97f4a7c15ULL);
  snprintf(g->xname, sizeof g->xname, "/gpa-sim-nccl-%d-%016llx%016llx", (int)maker, (unsigned long long)h1,
           (unsigned long long)h2);
  size_t len = seg_bytes(nranks);
  bool made = true;
  int fd = shm_open(g->xname, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {
    made = false;
    fd = shm_open(g->xname, O_RDWR | O_CLOEXEC, 0600);
  }
  char why[160] = "";
  if (fd < 0) snprintf(why, sizeof why, "shm_open %s: %s", g->xname, strerror(errno));
  else if (made && ftruncate(fd, (off_t)len) != 0)
    snprintf(why, sizeof why, "ftruncate %s: %s", g->xname, strerror(errno));
  if (!why[0] && !made) { /* the maker may still be sizing it: bounded */
    struct stat st;
    int64_t until = mono_ns() + 5000000000LL;
    while (fstat(fd, &st) == 0 && st.st_size == 0 && mono_ns() < until) usleep(100);
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < XDATA_OFF)
      snprintf(why, sizeof why, "%s: not sized by its maker within 5 s", g->xname);
    else len = (size_t)st.st_size;
  }
  struct xseg *x = MAP_FAILED;
  if (!why[0] && (x = mmap(NULL, XDATA_OFF, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    snprintf(why, sizeof why, "mmap %s: %s", g->xname, strerror(errno));
  if (!why[0]) {
    if (made) {
      x->nranks = nranks;
      atomic_store(&x->magic, XMAGIC);
    } else {
      int64_t until = mono_ns() + 5000000000LL;
      while (atomic_load(&x->magic) != XMAGIC && mono_ns() < until) usleep(100);
      if (atomic_load(&x->magic) != XMAGIC) snprintf(why, sizeof why, "%s: not set up by its maker within 5 s", g->xname);
    }
  }
  if (why[0]) {
    if (x != MAP_FAILED) munmap(x, XDATA_OFF);
    if (fd >= 0) close(fd);
    if (made && fd >= 0) shm_unlink(g->xname);
    /* ranks of this process still meet without the segment; those of
     * another process would wait forever */
    if (remote) return snc_fail(NULL, ncclSystemError, "ncclCommInitRank: ranks across processes: %s", why);
    return ncclSuccess;
  }
  (void)len;
  g->x = x;
  g->xfd = fd;
  g->xnamed = true;
  return ncclSuccess;
}

ncclResult_t snc_x_join_locked(group *g, int rank) {
  struct xseg *x = g->x;
  if (!x) return ncclSuccess;
  if (x->nranks != g->nranks)
    return snc_fail(NULL, ncclInvalidUsage, "ncclCommInitRank: nranks %d differs from another process's ranks' %d",
                    g->nranks, x->nranks);
  int32_t none = 0;
  if (!atomic_compare_exchange_strong(&x->r[rank].pid, &none, (int32_t)getpid()))
    return snc_fail(NULL, ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice (process %d has it)", rank,
                    (int)none);
  atomic_fetch_add(&x->joined, 1);
  return ncclSuccess;
}

bool snc_x_remote_seen(group *g) {
  if (!g->x) return false;
  for (int r = 0; r < g->nranks; r++) {
    int32_t pid = atomic_load(&g->x->r[r].pid);
    if (pid && pid != (int32_t)getpid()) return true;
  }
  return false;
}

void snc_x_publish_failure(group *g, const char *why) {
  struct xseg *x = g->x;
  if (!x) return;
  int32_t zero = 0;
  if (atomic_compare_exchange_strong(&x->failed, &zero, 1)) {
    snprintf(x->fail_why, sizeof x->fail_why, "%s", why);
    atomic_store(&x->failed, 2);
  }
  /* the name stays until the group's release: a rank still to come then
   * joins, finds the failure and fails at once */
}

bool snc_x_complete_locked(group *g) {
  if (!g->x) return g->joined == g->nranks;
  if (g->xdecided) return true;
  if (atomic_load(&g->x->joined) < g->nranks) return false;
  snc_x_unlink_locked(g);
  g->cross = snc_x_remote_seen(g);
  if (g->cross) {
    void *d = mmap(NULL, seg_bytes(g->nranks) - XDATA_OFF, PROT_READ | PROT_WRITE, MAP_SHARED, g->xfd, XDATA_OFF);
    if (d == MAP_FAILED) {
      char why[160];
      snprintf(why, sizeof why, "mapping the staging areas: %s", strerror(errno));
      int mine = 0; /* a rank of this process, for the text */
      while (mine < g->nranks - 1 && !g->rank[mine]) mine++;
      snc_fail_group_locked(g, mine, why);
    } else {
      g->xdata = d;
    }
  }
  g->xdecided = true;
  return true;
}

/* Whether pid's process has exited (gone, or a zombie not yet reaped). */
static bool process_gone(int32_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false; /* no /proc: kill's answer is all we have */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')'); /* the state follows the command's closing parenthesis */
  return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

void snc_x_sync_locked(group *g) {
  struct xseg *x = g->x;
  if (!x || g->failed) return;
  if (atomic_load(&x->failed)) {
    int64_t until = mono_ns() + 100000000; /* the writer is between two stores */
    while (atomic_load(&x->failed) != 2 && mono_ns() < until) {
    }
    g->failed = true;
    snprintf(g->fail_why, sizeof g->fail_why, "%s", atomic_load(&x->failed) == 2 ? x->fail_why : "a peer failed");
    pthread_cond_broadcast(&snc_cv);
    return;
  }
  static __thread int64_t next_look;
  int64_t now = mono_ns();
  if (now < next_look) return;
  next_look = now + 20000000;
  for (int r = 0; r < g->nranks; r++) {
    int32_t pid = atomic_load(&x->r[r].pid);
    if (!pid || pid == (int32_t)getpid()) continue;
    char why[160] = "";
    /* a rank whose communicator was freed is a failure only to a step
     * that still needs it (xcoll.c); a process that exited is one to all */
    if (process_gone(pid)) {
      snprintf(why, sizeof why, "its process %d exited", (int)pid);
      snc_fail_group_locked(g, r, why);
      return;
    }
  }
}

void snc_x_left_locked(group *g, int rank) {
  if (g->x) atomic_store(&g->x->r[rank].state, X_LEFT);
}

void snc_x_detach_locked(group *g) {
  if (!g->x) return;
  snc_x_unlink_locked(g);
  if (g->xdata) munmap(g->xdata, seg_bytes(g->nranks) - XDATA_OFF);
  munmap(g->x, XDATA_OFF);
  close(g->xfd);
  g->x = NULL;
  g->xdata = NULL;
}

/* ---- what xcoll.c reads ---- */

ncclResult_t snc_x_check_size(ncclComm_t c, const char *api, size_t stage_bytes, bool p2p) {
  size_t cap = p2p ? XPCAP : XCAP;
  if (stage_bytes <= cap) return ncclSuccess;
  return snc_fail(c, ncclInvalidArgument,
                  "%s: %zu bytes to stage; the simulator's ranks across processes stage at most %zu MiB per %s", api,
                  stage_bytes, cap >> 20, p2p ? "send" : "rank and collective");
}
