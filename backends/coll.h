/* What the NCCL engine (comm/nccl.c) needs of a device backend: the NCCL
 * library to load for this actor, and the stream a queue runs on. Defined
 * by backends/cuda/nccl.c; weak, so NULL in builds without the cuda backend
 * (the engine then answers EUNSUPPORTED). Actor thread. */
#ifndef GPA_BACKENDS_COLL_H
#define GPA_BACKENDS_COLL_H
#include <stdbool.h>

/* GPA_NCCL (the options table), else the simulator's subset on sim actors,
 * else libnccl.so.2. */
const char *gpa__cu_nccl_path(void *bctx) __attribute__((weak));
/* The CUstream of backend queue bq. */
void *gpa__cu_stream_of(void *bctx, void *bq) __attribute__((weak));

#endif
