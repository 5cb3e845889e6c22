/* Tests that start their own mpirun on themselves (comm_mpi,
 * comm_mpi_shutdown): ctest runs them without MPI. */
#ifndef GPA_TEST_MPI_LAUNCH_H
#define GPA_TEST_MPI_LAUNCH_H

/* mpirun's path on PATH, or NULL. */
const char *tu_mpirun(void);
/* Runs `mpirun -np np --oversubscribe self` with child_env=1 in the
 * environment (so that self knows it is a rank); mpirun's exit code. */
int tu_mpi_launch(const char *mpirun, const char *self, int np, const char *child_env);

#endif
