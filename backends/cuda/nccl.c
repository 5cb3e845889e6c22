/* The cuda backend's side of NCCL collectives (backends/coll.h): which
 * library to load and which stream a queue runs on. The loading, the
 * function table and the collectives are comm/nccl.c's: NCCL needs nothing
 * else of the backend, since a collective is one call on the queue's stream
 * followed by the backend's usual fence. */
#include "backends/coll.h"
#include "backends/cuda/graph.h"

#ifndef GPA_SIM_NCCL_DEFAULT
#define GPA_SIM_NCCL_DEFAULT "libgpa_sim_nccl.so"
#endif

const char *gpa__cu_nccl_path(void *bctx) {
  const gpa__cu_ctx *C = bctx;
  if (C->host.nccl) return C->host.nccl;
  return C->sim ? GPA_SIM_NCCL_DEFAULT : "libnccl.so.2";
}

/* The caller enqueues on it outside the backend's methods: work held for
 * a graph batch starts first (a collective is never captured: the batch
 * runs eagerly from here), so the stream keeps the queue's order. */
void *gpa__cu_stream_of(void *bctx, void *bq) {
  gpa__cu_release(bctx, bq, GPA__RELEASE_OTHER);
  return ((gpa__cu_queue *)bq)->s;
}
