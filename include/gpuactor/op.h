#ifndef GPUACTOR_OP_H
#define GPUACTOR_OP_H
#include <stddef.h>
#include <stdint.h>

#include "actor.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

/* One op message. Everything is copied at submit time. */
typedef struct gpa_op_call {
  const char *op; /* registry name, e.g. "noop", "fill", "copy" */
  const gpa_tensor *inputs;
  uint32_t n_inputs;
  const gpa_tensor *outputs;
  uint32_t n_outputs;
  const gpa_attr *attrs;
  uint32_t n_attrs;
} gpa_op_call;

/* Validates the call on the calling thread (op name, arity, attributes,
 * dtypes, shapes, buffer ids and bounds) and enqueues it. out may be NULL:
 * the message is then tracked by the batch only. Any thread except inside an
 * op implementation. Errors: EINVAL (also past GPA_MAX_INPUTS /
 * GPA_MAX_OUTPUTS, limits.h), ENOTFOUND, ESHAPE, EDTYPE, ERANGE, EOVERFLOW,
 * ESTALE, ECLOSED, ESHUTDOWN, EAGAIN (mailbox full with GPA_FULL_FAIL),
 * ETIMEDOUT (mailbox full past full_timeout_ns), ENOMEM. */
gpa_status gpa_submit(gpa_queue *q, const gpa_op_call *call, gpa_handle **out);

/* The op registry ------------------------------------------------------------
 * Each actor has one. Built-in ops are registered in it through
 * gpa_op_register, the same call users use; a later registration of a name
 * overrides the earlier one, which stays next in line: an implementation that
 * returns GPA_SKIP hands the call to the next registration of that name. */
typedef struct gpa_registry gpa_registry;
gpa_registry *gpa_actor_registry(gpa_actor *actor);

/* Attribute schema: parsed at submit into the op's params block. */
typedef struct gpa_attr_spec {
  const char *name;
  int32_t type;       /* GPA_ATTR_INT (stored as int64_t) or GPA_ATTR_FLOAT (double) */
  int32_t required;   /* 1: missing is an error; 0: default_* is stored */
  uint32_t offset;    /* byte offset of the value in the params block: a multiple of 8, one attribute
                         each (gpa_op_register: EINVAL otherwise) */
  int64_t default_i;
  double default_f;
  double min, max;    /* accepted range, inclusive; min > max = unbounded */
} gpa_attr_spec;

/* What shape() sees: validate inputs and params, describe expected outputs. */
typedef struct gpa_op_sig {
  const gpa_tensor *inputs;
  uint32_t n_inputs;
  const gpa_tensor *outputs; /* as given by the caller */
  uint32_t n_outputs;
  const void *params;        /* parsed attributes */
  void *user_data;
} gpa_op_sig;

typedef struct gpa_exec_env gpa_exec_env; /* backend services, see below */

/* What an implementation sees at execution, on the actor thread. */
typedef struct gpa_op_exec {
  const gpa_tensor *inputs;
  uint32_t n_inputs;
  const gpa_tensor *outputs;
  uint32_t n_outputs;
  void *const *in;     /* data pointers (host or device), offset applied */
  void *const *out;
  const void *params;
  void *stream;        /* CUstream on cuda; NULL on the host */
  gpa_exec_env *env;
  void *user_data;
  char *msg;           /* error detail buffer for the implementation */
  size_t msg_size;
} gpa_op_exec;

/* Host parallel loop: calls fn(begin, end, ctx) over [0, n) on the backend's
 * threads (the actor thread included), in chunks of at least `grain`. */
typedef void (*gpa_range_fn)(int64_t begin, int64_t end, void *ctx);
void gpa_exec_parallel_for(gpa_exec_env *env, int64_t n, int64_t grain, gpa_range_fn fn, void *ctx);
/* Scratch memory of the backend (host memory on cpu, device memory on cuda),
 * valid until the implementation returns. NULL on failure. */
void *gpa_exec_scratch(gpa_exec_env *env, uint64_t bytes);
/* Threads gpa_exec_parallel_for uses. */
uint32_t gpa_exec_threads(const gpa_exec_env *env);

typedef gpa_status (*gpa_op_shape_fn)(const gpa_op_sig *sig, gpa_tensor *expected_outputs, char *msg,
                                      size_t msg_size);
typedef gpa_status (*gpa_op_impl_fn)(const gpa_op_exec *x);

typedef struct gpa_op_desc {
  uint32_t size;               /* sizeof(gpa_op_desc), or 0 */
  const char *name;
  uint32_t min_inputs, max_inputs;
  uint32_t n_outputs;
  const gpa_attr_spec *attrs;
  uint32_t n_attrs;
  uint32_t params_size;        /* <= GPA_OP_PARAMS_MAX (limits.h) */
  /* Checks inputs and params; writes the expected dtype/rank/shape of each
   * output into expected_outputs[0..n_outputs) (the caller's outputs are then
   * compared with them). NULL: no check beyond arity. Called on the submitting
   * thread; must be thread-safe and must not block. */
  gpa_op_shape_fn shape;
  gpa_op_impl_fn host;         /* NULL: not on the host */
  gpa_op_impl_fn cuda;         /* NULL: not on cuda */
  uint64_t (*bytes_moved)(const gpa_op_sig *sig); /* for stats; NULL = 0 */
  void *user_data;
  /* CUDA as a kernel from the caller's image instead of a function: the
   * fatbin/cubin/PTX image (kept alive by the caller while the actor lives),
   * the kernel's name, and the launch shape for a call. The kernel receives
   * the input then output device pointers, then the params block by value
   * if params_size > 0, then each tensor's element count (long long), inputs
   * then outputs. Used when cuda is NULL. */
  const void *cuda_image;
  const char *cuda_kernel;
  gpa_status (*cuda_launch_shape)(const gpa_op_sig *sig, uint32_t grid[3], uint32_t block[3],
                                  uint32_t *shared_bytes);
  /* Variadic outputs: a call may pass n_outputs..max_outputs outputs (shape
   * then writes expected_outputs[0..sig->n_outputs)). 0, or a desc whose
   * size ends before this field: exactly n_outputs. At most GPA_MAX_OUTPUTS. */
  uint32_t max_outputs;
} gpa_op_desc;

/* Registers desc (copied, name included). Any thread; takes effect for
 * submits that start after it returns. Errors: EINVAL (message says why; the
 * name must be shorter than GPA_OP_NAME_MAX, arity and params_size within
 * limits.h), ENOMEM (out of memory, or the registry holds GPA_MAX_OP_NAMES
 * names already: "registry full"; a name it holds can still be
 * re-registered). */
gpa_status gpa_op_register(gpa_registry *reg, const gpa_op_desc *desc);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
