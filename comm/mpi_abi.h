/* Between libgpuactor and its MPI module (libgpuactor_mpi.so, comm/mpi/):
 * the module links MPI and knows nothing of the actor; the library loads it
 * at run time and knows nothing of MPI. Statuses are gpa_status numbers. */
#ifndef GPA_COMM_MPI_ABI_H
#define GPA_COMM_MPI_ABI_H
#include <stddef.h>
#include <stdint.h>

#define GPA__MPI_ABI 5
#define GPA__MPI_ENTRY "gpa_mpi_module_v1"

/* What the library gives the module. */
typedef struct gpa__mpi_host {
  /* op ctx finished: sets its result, never blocks; returns what to pass
   * to wake once the module holds no lock (every done is followed by
   * exactly one wake: the actor's memory is kept for it). Called at most
   * once per ctx, and never after cancel(ctx) returned. */
  void *(*done)(void *ctx, int status, const char *why);
  void (*wake)(void *actor);
  /* inout = op(inout, in), n elements of f16 or bf16 (gpa_dtype) */
  void (*combine16)(int op, int dtype, void *inout, const void *in, uint64_t n);
} gpa__mpi_host;

typedef struct gpa__mpi_op {
  int kind, op, dtype; /* gpa__coll_kind, gpa_reduce_op (never AVG here), gpa_dtype */
  int peer;            /* broadcast: root; send, recv: the other rank */
  uint64_t count;      /* elements of one rank's block */
  void *send, *recv;
  int in_place;
} gpa__mpi_op;

typedef struct gpa__mpi_fns {
  uint32_t abi;
  /* MPI initialized (with MPI_THREAD_MULTIPLE if we initialize it; the
   * program's level otherwise, which must be MULTIPLE) and the progress
   * thread started. */
  int (*init)(const gpa__mpi_host *host, char *err, size_t cap);
  /* whether MPI is initialized (and not finalized); its world */
  int (*world)(int *initialized, int *rank, int *size);
  int (*bcast_world)(void *buf, int bytes, int root, char *err, size_t cap);
  /* *v = the smallest *v of the world's processes (MPI_Allreduce, MIN) */
  int (*min_world)(int *v, char *err, size_t cap);
  /* this process's rank among the processes of its machine, and their
   * number (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED) */
  int (*local_rank)(int *rank, int *size, char *err, size_t cap);
  /* MPI_Comm_split of MPI_COMM_WORLD by color, ordered by key */
  int (*comm_create)(int color, int key, void **comm, int *rank, int *size, char *err, size_t cap);
  void (*comm_free)(void *comm);
  /* starts op on comm; host->done(ctx) follows from the progress thread */
  int (*start)(void *comm, const gpa__mpi_op *op, void *ctx, char *err, size_t cap);
  /* tests ctx's request once on the calling thread (the actor's): 1 if it
   * finished (host->done and host->wake ran, here or at an abort), else 0 */
  int (*test)(void *ctx);
  /* abandons ctx: its request, if any, runs on to completion unwatched
   * (host->done is not called for it) */
  void (*cancel)(void *ctx);
  /* 1 while a request of ctx is in flight (MPI may still touch its memory) */
  int (*held)(void *ctx);
  /* lets go of ctx for good (its message may be reused): if a request of
   * ctx is in flight, the n blocks (malloc'd memory, the buffers it was
   * given) become the module's, freed once no request in flight points
   * into them, and 1 is returned; else 0 and the blocks stay the caller's */
  int (*detach)(void *ctx, void *const *blocks, const size_t *bytes, int n);
  /* host->done(ctx, status, why) for every op of comm not finished; they
   * are abandoned */
  void (*abort)(void *comm, int status, const char *why);
} gpa__mpi_fns;

#endif
