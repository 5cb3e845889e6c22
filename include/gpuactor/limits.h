#ifndef GPUACTOR_LIMITS_H
#define GPUACTOR_LIMITS_H
/* Every fixed limit that can make a call fail, by name. Each is in the error
 * list of the calls it bounds (the headers' comments and docs/api.md): going
 * past it is an error with a message that names it, never a truncation or a
 * crash. The runtime's own code uses these names (actor/limits.h). Names
 * that only label (a queue's, 31 bytes; a batch's, 63) are cut short
 * instead. */

/* Tensors ------------------------------------------------------------------ */
#define GPA_MAX_RANK 8                          /* dimensions of a tensor (EINVAL past it) */
#define GPA_MAX_BUFFER_BYTES (1ull << 48)       /* one buffer (acquire, wrap: EOVERFLOW past it) */
#define GPA_LABEL_MAX 64                        /* a buffer label's bytes, terminator included (EINVAL) */

/* Ops and their registry --------------------------------------------------- */
#define GPA_MAX_INPUTS 64                       /* inputs of one op call, and a registration's max_inputs (EINVAL) */
#define GPA_MAX_OUTPUTS 64                      /* outputs of one op call, and a registration's n_outputs (EINVAL) */
#define GPA_OP_PARAMS_MAX 256                   /* an op's params block in bytes (EINVAL at register); it holds
                                                   the attributes, 8 bytes each, so an op takes at most 32 */
#define GPA_OP_NAME_MAX 64                      /* an op name's bytes, terminator included (EINVAL at register) */
#define GPA_OP_KERNEL_NAME_MAX 128              /* a custom kernel's name (cuda_kernel), terminator included */
#define GPA_MAX_OP_NAMES 768                    /* distinct names one registry holds, built-ins included
                                                   (gpa_op_register: ENOMEM "registry full") */
#define GPA_MAX_PLUGINS 64                      /* gpa_plugin_load per registry (ENOMEM) */

/* Actors -------------------------------------------------------------------- */
#define GPA_MAILBOX_MIN 4u                      /* mailbox_size range (a power of two; EINVAL outside) */
#define GPA_MAILBOX_MAX (1u << 24)
#define GPA_MAX_THREADS 256                     /* options.threads (EINVAL past it) */
#define GPA_MAX_PROFILERS 8                     /* gpa_actor_add_profiler per actor (ENOMEM) */
#define GPA_TRACE_PATH_MAX 256                  /* options.trace_path, terminator included (EINVAL at create) */

/* Feed sessions ------------------------------------------------------------- */
#define GPA_FEED_TAG_MAX 64                     /* a session's tag bytes (EINVAL past it) */
#define GPA_FEED_MAX_TENSORS 64                 /* tensors of one infeed item / infeed or outfeed op (EINVAL) */

#endif
