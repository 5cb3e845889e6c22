/* cuBLAS, loaded by the first op that needs it (dlopen of libcublas costs
 * 0.3-0.8 s; most actors never need it). GPA_CUBLAS overrides the library;
 * GPA_DEVICE=sim uses the simulator's subset. */
#include <stdio.h>

#include "backends/cuda/cuda_internal.h"

#ifndef GPA_SIM_CUBLAS_DEFAULT
#define GPA_SIM_CUBLAS_DEFAULT "libgpa_sim_cublas.so"
#endif

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
  cublasStatus_t s = C->blas.cublasSetStream(C->blas_h, (cudaStream_t)C->cur_q->s);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(x->msg, x->msg_size, "cublasSetStream: %s", C->blas.cublasGetStatusString(s));
    return GPA_EDEVICE;
  }
  *h = C->blas_h;
  return GPA_OK;
}

void gpa__cu_blas_release(gpa__cu_ctx *C) {
  gpa__cu_lt_release(C);
  if (C->blas_state == 1) {
    C->blas.cublasDestroy(C->blas_h);
    gpa__cublas_close(&C->blas);
  }
  C->blas_state = 0;
}
