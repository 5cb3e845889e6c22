/* The host backend's bf16 storage path (docs/ops.md, "bf16"): an op whose
 * tensors are partly bf16 runs its fp32 host implementation on fp32 copies:
 * bf16 inputs are widened (exact), the fp32 kernel computes, bf16 outputs
 * are rounded to nearest even. So the host's bf16 result is the fp32 result
 * rounded once: the reference the CUDA bf16 kernels are held to. */
#ifndef GPA_OPS_BF16_HOST_H
#define GPA_OPS_BF16_HOST_H
#include "gpuactor/op.h"

/* 1 when an input or an output of x is bf16. */
int gpa__has_bf16(const gpa_op_exec *x);
/* Runs f32_impl on fp32 copies of x's bf16 tensors (an output that is the
 * same memory as an input shares that input's copy: in place stays in
 * place). ENOMEM when the copies cannot be allocated. */
gpa_status gpa__bf16_host_run(const gpa_op_exec *x, gpa_op_impl_fn f32_impl);

/* Defines name_any: f32 tensors go straight to fn, bf16 ones through the copies. */
#define GPA__BF16_HOST(fn)                                                   \
  static gpa_status fn##_any(const gpa_op_exec *x) {                         \
    return gpa__has_bf16(x) ? gpa__bf16_host_run(x, fn) : fn(x);             \
  }

#endif
