/* The part of NCCL's ABI that comm/nccl.c calls, declared here rather than
 * taken from nccl.h: the library builds without NCCL's headers (a CUDA
 * toolkit need not ship them) and loads libnccl.so.2 at run time. These
 * values are NCCL 2.x's ABI (stable since 2.0; bf16 since 2.10, avg since
 * 2.10: older libraries are refused at load). */
#ifndef GPA_COMM_NCCL_ABI_H
#define GPA_COMM_NCCL_ABI_H
#include <stddef.h>

typedef struct gpa__nccl_comm *gpa__ncclComm_t;
typedef struct {
  char internal[128];
} gpa__ncclUniqueId;
typedef int gpa__ncclResult_t; /* 0 success, 7 in progress */
enum { GPA__NCCL_SUCCESS = 0, GPA__NCCL_IN_PROGRESS = 7 };
enum { GPA__NCCL_INT32 = 2, GPA__NCCL_F16 = 6, GPA__NCCL_F32 = 7, GPA__NCCL_BF16 = 9 };
enum { GPA__NCCL_SUM = 0, GPA__NCCL_MAX = 2, GPA__NCCL_MIN = 3, GPA__NCCL_AVG = 4 };
#define GPA__NCCL_MIN_VERSION 21000 /* 2.10.0: bf16 and ncclAvg */

typedef void *gpa__cudaStream_t;
#define GPA__NCCL_API(X)                                                                                         \
  X(gpa__ncclResult_t, ncclGetVersion, (int *))                                                                  \
  X(gpa__ncclResult_t, ncclGetUniqueId, (gpa__ncclUniqueId *))                                                   \
  X(gpa__ncclResult_t, ncclCommInitRank, (gpa__ncclComm_t *, int, gpa__ncclUniqueId, int))                       \
  X(gpa__ncclResult_t, ncclCommDestroy, (gpa__ncclComm_t))                                                       \
  X(gpa__ncclResult_t, ncclCommAbort, (gpa__ncclComm_t))                                                         \
  X(gpa__ncclResult_t, ncclCommGetAsyncError, (gpa__ncclComm_t, gpa__ncclResult_t *))                            \
  X(const char *, ncclGetErrorString, (gpa__ncclResult_t))                                                       \
  X(const char *, ncclGetLastError, (gpa__ncclComm_t))                                                           \
  X(gpa__ncclResult_t, ncclGroupStart, (void))                                                                   \
  X(gpa__ncclResult_t, ncclGroupEnd, (void))                                                                     \
  X(gpa__ncclResult_t, ncclAllReduce,                                                                            \
    (const void *, void *, size_t, int, int, gpa__ncclComm_t, gpa__cudaStream_t))                                \
  X(gpa__ncclResult_t, ncclReduceScatter,                                                                        \
    (const void *, void *, size_t, int, int, gpa__ncclComm_t, gpa__cudaStream_t))                                \
  X(gpa__ncclResult_t, ncclAllGather, (const void *, void *, size_t, int, gpa__ncclComm_t, gpa__cudaStream_t))   \
  X(gpa__ncclResult_t, ncclBroadcast,                                                                            \
    (const void *, void *, size_t, int, int, gpa__ncclComm_t, gpa__cudaStream_t))                                \
  X(gpa__ncclResult_t, ncclSend, (const void *, size_t, int, int, gpa__ncclComm_t, gpa__cudaStream_t))           \
  X(gpa__ncclResult_t, ncclRecv, (void *, size_t, int, int, gpa__ncclComm_t, gpa__cudaStream_t))

typedef struct gpa__nccl_api {
  void *lib;
  int version;
#define GPA__NCCL_FIELD(ret, name, args) ret(*name) args;
  GPA__NCCL_API(GPA__NCCL_FIELD)
#undef GPA__NCCL_FIELD
} gpa__nccl_api;

#endif
