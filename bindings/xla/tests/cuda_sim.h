/* Shared by the two files of test_xla_cuda_sim: the simulated driver's
 * entry points, the test's XLA (api, execution context) and the helpers
 * that move data and compare results. */
#ifndef GPA_XLA_TEST_CUDA_SIM_H
#define GPA_XLA_TEST_CUDA_SIM_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ffi_frame.h"
#include "gpuactor_xla.h"

typedef unsigned long long dptr; /* CUdeviceptr */
typedef struct sim_driver {
  int (*init)(unsigned);
  int (*device_get)(int *, int);
  int (*primary_retain)(void **, int);
  int (*ctx_set)(void *);
  int (*alloc)(dptr *, size_t);
  int (*free)(dptr);
  int (*htod)(dptr, const void *, size_t);
  int (*htod_async)(dptr, const void *, size_t, void *);
  int (*dtoh_async)(void *, dptr, size_t, void *);
  int (*alloc_host)(void **, size_t);
  int (*free_host)(void *);
  int (*stream_create)(void **, unsigned);
  int (*stream_sync)(void *);
  int (*stream_destroy)(void *);
  void (*delay)(void *stream, unsigned us);
  void (*fault_launch)(unsigned n);
} sim_driver;

extern sim_driver cu;
extern XLA_FFI_Api api;
extern XLA_FFI_ExecutionContext xla; /* XLA's stream for the calls */
extern uint64_t calls_ok;            /* calls that enqueued an op */

dptr upload(const float *x, size_t n);
dptr zeros(size_t n);
/* XLA's later work: a copy on XLA's stream, then a wait for that stream. */
void xla_read(dptr p, float *out, size_t n);
void rnd(float *x, size_t n, unsigned seed);
/* The parity harness's rule: |got - ref| <= rtol |ref| + rtol 1e-2 max|ref|. */
void close_to(const char *what, const float *got, const double *ref, size_t n, double rtol);
void expect_ok(XLA_FFI_Error *e, const char *what);

/* cuda_sim_ops.c: every op handler against references in double. */
void ops(void);
void ops_backward(void);
/* cuda_sim_feed.c: the feed calls on a session of device 0. */
void feeds(void);
#endif
