/* The cuda backend's side of NCCL collectives (backends/coll.h): which
 * library to load and which stream a queue runs on. The loading, the
 * function table and the collectives are comm/nccl.c's: NCCL needs nothing
 * else of the backend, since a collective is one call on the queue's stream
 * followed by the backend's usual fence. */
#include "backends/coll.h"
#include "backends/cuda/cuda_internal.h"

#ifndef GPA_SIM_NCCL_DEFAULT
#define GPA_SIM_NCCL_DEFAULT "libgpa_sim_nccl.so"
#endif

const char *gpa__cu_nccl_path(void *bctx) {
  const gpa__cu_ctx *C = bctx;
  if (C->host.nccl) return C->host.nccl;
  return C->sim ? GPA_SIM_NCCL_DEFAULT : "libnccl.so.2";
}

void *gpa__cu_stream_of(void *bctx, void *bq) {
  (void)bctx;
  return ((gpa__cu_queue *)bq)->s;
}
