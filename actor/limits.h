/* Named limits of the runtime, in one place. The ones a caller can hit are
 * in the error lists of the calls they bound (docs/api.md). */
#ifndef GPA_ACTOR_LIMITS_H
#define GPA_ACTOR_LIMITS_H
#include "gpuactor/limits.h" /* the limits a caller can hit, public */

#define GPA__MAX_IN GPA_MAX_INPUTS   /* inputs of one op call (a registration's max_inputs) */
#define GPA__MAX_OUT GPA_MAX_OUTPUTS /* outputs of one op call (a registration's n_outputs) */
#define GPA__MAX_TENSORS (GPA__MAX_IN + GPA__MAX_OUT) /* tensors of one message */
#define GPA__MSG_TENSORS 8 /* held inline in a message; more go to a heap array */
#define GPA__ERR_MAX 192   /* a handle's error text, terminator included */
#define GPA__REG_SLOTS 1024 /* registry hash slots (a power of two) */
#define GPA__REG_NAMES GPA_MAX_OP_NAMES /* names a registry holds: past it, ENOMEM */
_Static_assert(GPA__REG_NAMES <= GPA__REG_SLOTS * 3 / 4, "the registry's probes stay short");
#define GPA__MAX_PLUGINS GPA_MAX_PLUGINS     /* gpa_plugin_load per registry */
#define GPA__MAX_PROFILERS GPA_MAX_PROFILERS /* gpa_profiler_add per actor */
#define GPA__LANES 8          /* source rings a queue tracks in lanes before its spill list */
#define GPA__RET_SLOTS 8      /* message owners the actor batches returns for */
#define GPA__MAX_EXTS 4       /* runtime extensions with per-actor state (actor/hooks.h) */

#endif
