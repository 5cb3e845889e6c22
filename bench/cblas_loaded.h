/* The CBLAS calls of the benchmarks and tests, on the BLAS the library
 * loaded (kernels/host/blas_lib.h: the kernel set the CPU can run best), not
 * on one linked at build time: a linked OpenBLAS initialises when the
 * program starts, with the kernels its model-name lookup picks, before the
 * library could choose. So the reference is the machine's best sgemm. */
#ifndef GPA_BENCH_CBLAS_LOADED_H
#define GPA_BENCH_CBLAS_LOADED_H
#include "kernels/host/blas_lib.h"

#define CblasRowMajor GPA__CBLAS_ROW_MAJOR
#define CblasNoTrans GPA__CBLAS_NO_TRANS
#define CblasTrans GPA__CBLAS_TRANS
#define cblas_sgemm(...) gpa__blas()->sgemm(__VA_ARGS__)

static inline void openblas_set_num_threads(int n) {
  if (gpa__blas()->set_threads) gpa__blas()->set_threads(n);
}
static inline int openblas_get_num_threads(void) {
  return gpa__blas()->get_threads ? gpa__blas()->get_threads() : 1;
}

#endif
