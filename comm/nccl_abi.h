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

/* ncclConfig_t as NCCL 2.14 laid it out, the first version with `blocking`
 * (non-blocking init). NCCL copies min(size, its own sizeof) bytes of it and
 * resets every field newer than `version` to its default, so this prefix
 * with version 2.14 means the same to every NCCL from 2.14 on. `pad` is
 * where 2.17 put cgaClusterSize: it holds NCCL_CONFIG_UNDEF_INT (INT_MIN),
 * the initializer's "undefined", should a library read it anyway. */
typedef struct gpa__ncclConfig {
  size_t size;           /* sizeof(gpa__ncclConfig) */
  unsigned int magic;    /* GPA__NCCL_CONFIG_MAGIC (NCCL_CONFIG_INITIALIZER's) */
  unsigned int version;  /* GPA__NCCL_CONFIG_VERSION */
  int blocking;          /* 0: calls may return ncclInProgress */
  int pad;
} gpa__ncclConfig;
#define GPA__NCCL_CONFIG_MAGIC 0xcafebeefu
#define GPA__NCCL_CONFIG_VERSION 21400 /* NCCL_VERSION(2, 14, 0) */
#define GPA__NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)

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

/* Resolved only where the library has it (NCCL 2.14 and later; else
 * NULL, and init is ncclCommInitRank's blocking one). */
typedef gpa__ncclResult_t (*gpa__ncclCommInitRankConfig_fn)(gpa__ncclComm_t *, int, gpa__ncclUniqueId, int,
                                                            gpa__ncclConfig *);

typedef struct gpa__nccl_api {
  void *lib;
  int version;
  gpa__ncclCommInitRankConfig_fn ncclCommInitRankConfig;
#define GPA__NCCL_FIELD(ret, name, args) ret(*name) args;
  GPA__NCCL_API(GPA__NCCL_FIELD)
#undef GPA__NCCL_FIELD
} gpa__nccl_api;

#endif
