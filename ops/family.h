/* What an op family's files include: the public op API, the shape-check,
 * bf16 and scratch helpers, the typed-call helper, and GPA__CUDA, the one
 * place where a family's CUDA implementation is bound or left out.
 *
 * A family lives in ops/<family>/: <family>.h (its params structs, shared by
 * every backend's adapter, and its CUDA kernel list), <family>.c
 * (descriptors: attribute schema, shape checks, host adapter, typed calls)
 * and cuda.c (the CUDA adapter, built with the CUDA backend). Families
 * depend on this header and the runtime's status.h, never on the actor's
 * internals; docs/architecture.md has the recipe for a new op. */
#ifndef GPA_OPS_FAMILY_H
#define GPA_OPS_FAMILY_H
#include <stddef.h>
#include <stdint.h>

#include "actor/limits.h"
#include "actor/registry.h"
#include "actor/status.h"
#include "gpuactor.h"
#include "ops/basic_check.h"
#include "ops/bf16_host.h"

/* A descriptor's .cuda: the family's CUDA implementation in builds with the
 * CUDA backend (its cuda.c is compiled), NULL elsewhere. A NULL .cuda makes
 * the CUDA backend run the host implementation on staged copies. */
#ifdef GPA_HAVE_CUDA_BACKEND
#define GPA__CUDA(fn) fn
#else
#define GPA__CUDA(fn) NULL
#endif

/* A family's table of built-in descriptors (gpa__family: actor/registry.h;
 * ops/builtin.c lists the families). */
#define GPA__FAMILY(name, descs) \
  const gpa__family gpa__family_##name = {descs, (uint32_t)(sizeof descs / sizeof descs[0])}

/* Typed calls: lays the arrays out as a gpa_op_call and submits it. args is
 * the typed call's argument struct, checked for NULL (fn names the call). */
gpa_status gpa__typed_submit(gpa_queue *q, const void *args, const char *fn, const char *op, const gpa_tensor *in,
                             uint32_t n_in, const gpa_tensor *outs, uint32_t n_out, const gpa_attr *attrs,
                             uint32_t n_attrs, gpa_handle **out);
#define GPA__T(...) ((const gpa_tensor[]){__VA_ARGS__})
#define GPA__A(...) ((const gpa_attr[]){__VA_ARGS__})
#define GPA__AF(n, v) {n, GPA_ATTR_FLOAT, 0, v}
#define GPA__AI(n, v) {n, GPA_ATTR_INT, v, 0.0}
/* CALL(op, ...) inside a typed call whose parameters are (q, args, out). */
#define GPA__CALL(op, in, n_in, outs, n_out, attrs, n_attrs)                                                    \
  gpa__typed_submit(q, args, __func__, op, args ? in : NULL, n_in, args ? outs : NULL, n_out, args ? attrs : NULL, \
                    n_attrs, out)
#define GPA__OR(v, d) ((v) != 0 ? (v) : (d))

#endif
