/* Tests that start their own mpirun on themselves (comm_mpi,
 * comm_mpi_shutdown): ctest runs them without MPI. */
#ifndef GPA_TEST_MPI_LAUNCH_H
#define GPA_TEST_MPI_LAUNCH_H

#include <stdio.h>
#include <stdlib.h>

/* mpirun's path on PATH, or NULL. */
const char *tu_mpirun(void);
/* mpirun's path, or the test skips (exit 77, saying why): in a sanitizer
 * build (inline, so GPA_ASAN / GPA_TSAN are the test's own) or with no
 * mpirun on PATH. */
static inline const char *tu_mpirun_or_skip(void) {
#if defined(GPA_ASAN) || defined(GPA_TSAN)
  printf("skipped: Open MPI under a sanitizer reports its own allocations and threads\n");
  exit(77);
#endif
  const char *mpirun = tu_mpirun();
  if (!mpirun) {
    printf("skipped: no mpirun on PATH (Debian: openmpi-bin)\n");
    exit(77);
  }
  return mpirun;
}
/* Runs `mpirun -np np --oversubscribe self` with child_env=1 in the
 * environment (so that self knows it is a rank); mpirun's exit code. */
int tu_mpi_launch(const char *mpirun, const char *self, int np, const char *child_env);

#endif
