/* gpa-sim SIMT executor: runs one grid of an emulated kernel.
 * Internal to libgpa_sim_cuda.so (the driver calls it from stream threads). */
#ifndef GPA_SIM_SIMT_H
#define GPA_SIM_SIMT_H
#include <mutex>
#include <string>
#include "gpa_sim_abi.h"

struct gpa_sim_launch {
  const gpa_sim_kernel *kernel;
  const unsigned char *args; /* packed parameters (natural C layout) */
  dim3 grid, block;
  size_t dyn_shared;
  std::mutex *serial; /* non-NULL: the module's blocks must not run concurrently */
  std::string error;  /* set when the grid fails: first failure, with block and thread ids */
};

/* Runs every block of the grid on the worker pool and the calling thread.
 * Returns 0, or -1 with L->error set (barrier divergence, deadlock, trap,
 * dynamic shared memory overrun, bad warp mask). Called from any thread. */
int gpa_sim__grid_run(gpa_sim_launch *L);
/* Runs one block on the calling OS thread (used by the pool). */
int gpa_sim__block_run(gpa_sim_launch *L, uint3 block_idx, std::string *error);
/* Number of extra block workers (GPA_SIM_WORKERS), from the options table. */
unsigned gpa_sim__opt_workers(void);
size_t gpa_sim__opt_stack_bytes(void);
#endif
