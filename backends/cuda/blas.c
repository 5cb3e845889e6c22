/* cuBLAS, loaded by the first op that needs it (dlopen of libcublas costs
 * 0.3-0.8 s; most actors never need it). GPA_CUBLAS overrides the library;
 * GPA_DEVICE=sim uses the simulator's subset. */
#include <stdio.h>

#include "backends/cuda/cuda_internal.h"

#ifndef GPA_SIM_CUBLAS_DEFAULT
#define GPA_SIM_CUBLAS_DEFAULT "libgpa_sim_cublas.so"
#endif

/* cuBLAS 12.2 and later take the workspace of a handle that has none set
 * from cudaMallocAsync on the call's stream. Captured into a graph, that is
 * a memory allocation node and a free node, which a child graph may not
 * hold: on an H100 every batch's graph failed to build with
 * CUDA_ERROR_NOT_SUPPORTED and stayed eager. So each queue gets a workspace
 * of its own, made on its stream outside any capture and set after every
 * cublasSetStream (which resets the handle to the default pool). The size is
 * cuBLAS's own recommendation: 32 MiB on Hopper and later, 4 MiB before. */
static gpa_status blas_workspace(const gpa_op_exec *x, gpa__cu_ctx *C, gpa__cu_queue *q) {
  if (!q->blas_ws) {
    int major = 0;
    C->cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, C->dev);
    uint64_t size = major >= 9 ? 32u << 20 : 4u << 20;
    /* as the scratch: never made inside a capture, the cache evicted once when out of memory */
    CUresult r = gpa__cu_queue_block(C, q, "cuBLAS workspace", size, size, &q->blas_ws, x->msg, x->msg_size);
    if (r != CUDA_SUCCESS)
      return r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ? GPA_ENOMEM : GPA_EDEVICE;
    q->blas_ws_size = size;
  }
  cublasStatus_t s = C->blas.cublasSetWorkspace(C->blas_h, (void *)(uintptr_t)q->blas_ws, q->blas_ws_size);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(x->msg, x->msg_size, "cublasSetWorkspace: %s", C->blas.cublasGetStatusString(s));
    return GPA_EDEVICE;
  }
  return GPA_OK;
}

gpa_status gpa__cu_blas(const gpa_op_exec *x, cublasHandle_t *h) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (C->blas_state == 0) {
    const char *path = C->host.cublas;
    if (!path && C->sim) path = GPA_SIM_CUBLAS_DEFAULT;
    C->blas_state = -1;
    if (gpa__cublas_open(&C->blas, path, C->blas_msg, sizeof C->blas_msg) == GPA_OK) {
      cublasStatus_t s = C->blas.cublasCreate(&C->blas_h);
      if (s == CUBLAS_STATUS_SUCCESS) {
        C->blas.cublasSetMathMode(C->blas_h, CUBLAS_DEFAULT_MATH);
        C->blas_state = 1;
      } else {
        snprintf(C->blas_msg, sizeof C->blas_msg, "cublasCreate failed: %s", C->blas.cublasGetStatusString(s));
        gpa__cublas_close(&C->blas);
      }
    }
  }
  if (C->blas_state < 0) {
    snprintf(x->msg, x->msg_size, "%s", C->blas_msg);
    return GPA_EUNSUPPORTED;
  }
  /* The handle follows the op's stream and its queue's workspace, set only
   * when either changed (as cuDNN's stream, cudnn.c): an actor with one
   * queue paid two library calls per GEMM for settings it already had.
   * Only this code sets them. A queue's first GEMM always sets them (its
   * workspace is made then), so a new queue on a pooled stream, or on a
   * new stream at a destroyed one's address, never inherits them. */
  gpa__cu_queue *q = C->cur_q;
  if (C->blas_stream != q->s || !q->blas_ws || C->blas_ws != q->blas_ws) {
    C->blas_stream = NULL;
    cublasStatus_t s = C->blas.cublasSetStream(C->blas_h, (cudaStream_t)q->s);
    if (s != CUBLAS_STATUS_SUCCESS) {
      snprintf(x->msg, x->msg_size, "cublasSetStream: %s", C->blas.cublasGetStatusString(s));
      return GPA_EDEVICE;
    }
    gpa_status st = blas_workspace(x, C, q);
    if (st != GPA_OK) return st;
    C->blas_stream = q->s;
    C->blas_ws = q->blas_ws;
    C->blas_sets++;
  }
  *h = C->blas_h;
  return GPA_OK;
}

uint64_t gpa__cu_blas_sets(const gpa__cu_ctx *C) { return C->blas_sets; }

void gpa__cu_blas_release(gpa__cu_ctx *C) {
  gpa__cu_lt_release(C);
  if (C->blas_state == 1) {
    C->blas.cublasDestroy(C->blas_h);
    gpa__cublas_close(&C->blas);
  }
  C->blas_state = 0;
  C->blas_stream = NULL;
  C->blas_ws = 0;
}
