/* The MPI engine, library side: loads the MPI module (comm/mpi_abi.h) at
 * run time, so that libgpuactor itself never links MPI: programs without
 * collectives load no MPI, and the library's consumers need no MPI to link.
 * The module is found next to libgpuactor, then in the build tree it was
 * built in, then on the loader's path. One rank per process: MPI numbers
 * processes, not actors. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_id.h"
#include "comm/comm_internal.h"
#include "comm/mpi_abi.h"

#ifndef GPA_MPI_MODULE_BUILD
#define GPA_MPI_MODULE_BUILD ""
#endif
#define MODULE_NAME "libgpuactor_mpi.so"
#define OPEN_MPI_SONAME "libmpi.so.40"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const gpa__mpi_fns *F;
static char load_err[512];

static void load(void) {
  char paths[3][1024];
  int n = 0;
  Dl_info info;
  if (dladdr((void *)&gpa__comm_mpi, &info) && info.dli_fname) {
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash) snprintf(paths[n++], sizeof paths[0], "%.*s/" MODULE_NAME, (int)(slash - info.dli_fname), info.dli_fname);
  }
  if (GPA_MPI_MODULE_BUILD[0]) snprintf(paths[n++], sizeof paths[0], "%s", GPA_MPI_MODULE_BUILD);
  snprintf(paths[n++], sizeof paths[0], MODULE_NAME);
  int k = snprintf(load_err, sizeof load_err, "cannot load the MPI module " MODULE_NAME
                   " (built where MPI's headers were found at configure time; Debian: libopenmpi-dev):");
  for (int i = 0; i < n; i++) {
    /* GLOBAL: Open MPI's own plugins resolve libmpi's symbols through it. */
    void *h = dlopen(paths[i], RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      if (k < (int)sizeof load_err) k += snprintf(load_err + k, sizeof load_err - (size_t)k, " %s", dlerror());
      continue;
    }
    const gpa__mpi_fns *(*entry)(void) = (const gpa__mpi_fns *(*)(void))dlsym(h, GPA__MPI_ENTRY);
    const gpa__mpi_fns *f = entry ? entry() : NULL;
    if (!f || f->abi != GPA__MPI_ABI) {
      snprintf(load_err, sizeof load_err, "%.300s is not a module of this library (ABI %u, expected %d)", paths[i],
               f ? f->abi : 0, GPA__MPI_ABI);
      dlclose(h);
      return;
    }
    F = f;
    return;
  }
}

static void *host_done(void *ctx, int st, const char *why) { return gpa__coll_done_held(ctx, st, why); }

static void host_wake(void *a) { gpa__coll_wake(a, 1); }

static const gpa__mpi_host host = {host_done, host_wake, gpa__comm_combine16};

/* The module, with MPI initialized and the progress thread running. */
static gpa_status ready(const char *what) {
  pthread_once(&once, load);
  if (!F) return gpa__fail(GPA_EUNSUPPORTED, "%s: %s", what, load_err);
  char err[512] = "";
  gpa_status st = F->init(&host, err, sizeof err);
  if (st != GPA_OK) return gpa__fail(st, "%s: %s", what, err);
  return GPA_OK;
}

bool gpa__comm_mpi_world(void) {
  /* Only a process that already has Open MPI loaded can be running it. */
  void *h = dlopen(OPEN_MPI_SONAME, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  dlclose(h);
  pthread_once(&once, load);
  int inited = 0, rank = 0, size = 0;
  if (!F || F->world(&inited, &rank, &size) != GPA_OK) return false;
  return inited && size > 1;
}

gpa_status gpa_comm_bootstrap_mpi(gpa_comm_id *id, int32_t *rank, int32_t *size) {
  if (!id) return gpa__fail(GPA_EINVAL, "gpa_comm_bootstrap_mpi: NULL id");
  gpa_status st = ready("gpa_comm_bootstrap_mpi");
  if (st != GPA_OK) return st;
  int inited = 0, r = 0, s = 0;
  F->world(&inited, &r, &s);
  if (r == 0 && (st = gpa_comm_id_make(id)) != GPA_OK) return st;
  char err[512] = "";
  if ((st = F->bcast_world(id->bytes, GPA_COMM_ID_BYTES, 0, err, sizeof err)) != GPA_OK)
    return gpa__fail(st, "gpa_comm_bootstrap_mpi: %s", err);
  if (rank) *rank = r;
  if (size) *size = s;
  return GPA_OK;
}

gpa_status gpa_comm_mpi_local_rank(int32_t *local_rank, int32_t *local_size) {
  gpa_status st = ready("gpa_comm_mpi_local_rank");
  if (st != GPA_OK) return st;
  char err[512] = "";
  int r = 0, n = 0;
  if ((st = F->local_rank(&r, &n, err, sizeof err)) != GPA_OK)
    return gpa__fail(st, "gpa_comm_mpi_local_rank: %s", err);
  if (local_rank) *local_rank = r;
  if (local_size) *local_size = n;
  return GPA_OK;
}

/* What rank 0 broadcasts: its status first, so that a rank 0 that could
 * not make the id fails every process the same way instead of leaving
 * them in gpa_comm_init. */
typedef struct nccl_boot {
  int32_t status;
  char why[252];
  gpa_comm_id id;
} nccl_boot;

gpa_status gpa_comm_bootstrap_mpi_nccl(gpa_actor *a, gpa_comm_id *id, int32_t *rank, int32_t *size) {
  static const char what[] = "gpa_comm_bootstrap_mpi_nccl";
  if (!a || !id) return gpa__fail(GPA_EINVAL, "%s: NULL argument", what);
  gpa_status st = ready(what);
  if (st != GPA_OK) return st;
  int inited = 0, r = 0, n = 0;
  F->world(&inited, &r, &n);
  char err[512] = "", mine[GPA__ERR_MAX] = "";
  /* Every process checks its own NCCL first and they agree: a process that
   * cannot join (cpu actor, no NCCL, the simulator's subset) fails them all
   * here, before any of them waits in an init. */
  int v = n > 1 ? gpa__comm_nccl_across_processes(a, what) : GPA_OK;
  if (v != GPA_OK) snprintf(mine, sizeof mine, "%s", gpa_last_error_message());
  int agreed = v;
  if ((st = F->min_world(&agreed, err, sizeof err)) != GPA_OK) return gpa__fail(st, "%s: %s", what, err);
  if (v != GPA_OK) return gpa__fail(v, "%s", mine);
  if (agreed != GPA_OK)
    return gpa__fail(agreed, "%s: another process cannot join NCCL ranks across processes (%s; its message is on "
                             "its stderr)", what, gpa_status_name(agreed));
  nccl_boot b;
  memset(&b, 0, sizeof b);
  if (r == 0) {
    b.status = gpa_comm_id_make_nccl(a, &b.id);
    if (b.status != GPA_OK) snprintf(b.why, sizeof b.why, "%s", gpa_last_error_message());
  }
  if ((st = F->bcast_world(&b, (int)sizeof b, 0, err, sizeof err)) != GPA_OK)
    return gpa__fail(st, "%s: %s", what, err);
  if (b.status != GPA_OK) return gpa__fail(b.status, "%s: rank 0: %s", what, b.why);
  *id = b.id;
  if (rank) *rank = r;
  if (size) *size = n;
  return GPA_OK;
}

/* The ids this process joined through MPI: a second rank of one id in one
 * process would be a second MPI process that does not exist. */
static pthread_mutex_t joined_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct joined {
  struct joined *next;
  unsigned char token[GPA__COMM_TOKEN_BYTES];
  gpa_comm *c;
} joined;
static joined *joined_list;

typedef struct mpi_state {
  void *comm;
} mpi_state;

gpa_status gpa__comm_mpi_join(gpa_comm *c, const gpa_comm_id *id) {
  gpa_status st = ready("gpa_comm_init (MPI)");
  if (st != GPA_OK) return st;
  const unsigned char *token = id->bytes + GPA__COMM_TOKEN_OFF;
  pthread_mutex_lock(&joined_lock);
  for (joined *j = joined_list; j; j = j->next)
    if (!memcmp(j->token, token, GPA__COMM_TOKEN_BYTES)) {
      pthread_mutex_unlock(&joined_lock);
      return gpa__fail(GPA_EUNSUPPORTED,
                       "gpa_comm_init (MPI): this process already holds rank %d of this id; MPI has one rank per "
                       "process (ranks of one process: transport GPA_COMM_LOCAL)",
                       j->c->rank);
    }
  joined *j = calloc(1, sizeof *j);
  mpi_state *s = calloc(1, sizeof *s);
  if (!j || !s) {
    pthread_mutex_unlock(&joined_lock);
    free(j);
    free(s);
    return gpa__fail(GPA_ENOMEM, "gpa_comm_init: out of memory");
  }
  memcpy(j->token, token, GPA__COMM_TOKEN_BYTES);
  j->c = c;
  j->next = joined_list;
  joined_list = j;
  pthread_mutex_unlock(&joined_lock);
  char err[512] = "";
  int r = -1, n = 0;
  st = F->comm_create(gpa__comm_id_color(id), c->rank, &s->comm, &r, &n, err, sizeof err);
  if (st == GPA_OK && (n != c->size || r != c->rank)) {
    F->comm_free(s->comm);
    st = gpa__fail(GPA_EINVAL,
                   "gpa_comm_init (MPI): %d processes joined this id, this one as rank %d of them; it asked for rank "
                   "%d of %d (every process passes its own rank, 0 to size - 1, and the same size)",
                   n, r, c->rank, c->size);
  } else if (st != GPA_OK) {
    st = gpa__fail(st, "gpa_comm_init (MPI): %s", err);
  }
  if (st != GPA_OK) {
    pthread_mutex_lock(&joined_lock);
    for (joined **pp = &joined_list; *pp; pp = &(*pp)->next)
      if (*pp == j) {
        *pp = j->next;
        break;
      }
    pthread_mutex_unlock(&joined_lock);
    free(j);
    free(s);
    return st;
  }
  c->es = s;
  return GPA_OK;
}

static gpa_status start(gpa_comm *c, gpa__coll *op, char *err, size_t cap) {
  mpi_state *s = c->es;
  gpa__mpi_op mo = {op->kind, op->op, op->dtype, op->peer, op->count, op->send, op->recv, op->in_place};
  if (op->op == GPA_REDUCE_AVG) {
    mo.op = GPA_REDUCE_SUM; /* MPI has no average: run() divides */
    op->scale_after = true;
  }
  return F->start(s->comm, &mo, op, err, cap);
}

static bool poll_op(gpa_comm *c, gpa__coll *op) {
  (void)c;
  return F->test(op) != 0;
}

static bool held(gpa_comm *c, gpa__coll *op) {
  (void)c;
  return F->held(op) != 0;
}

static int detach(gpa_comm *c, gpa__coll *op, void *const *blocks, const size_t *bytes, int n) {
  (void)c;
  return F->detach(op, blocks, bytes, n);
}

static void cancel(gpa_comm *c, gpa__coll *op) {
  (void)c;
  F->cancel(op);
}

static void abort_comm(gpa_comm *c, gpa_status st, const char *why) {
  F->abort(((mpi_state *)c->es)->comm, st, why);
}

static void destroy(gpa_comm *c) {
  mpi_state *s = c->es;
  F->comm_free(s->comm);
  free(s);
  pthread_mutex_lock(&joined_lock);
  for (joined **pp = &joined_list; *pp; pp = &(*pp)->next)
    if ((*pp)->c == c) {
      joined *j = *pp;
      *pp = j->next;
      free(j);
      break;
    }
  pthread_mutex_unlock(&joined_lock);
}

const gpa__comm_engine gpa__comm_mpi = {.name = "mpi", .start = start, .poll = poll_op, .cancel = cancel, .held = held,
                                        .detach = detach, .abort = abort_comm, .destroy = destroy};
