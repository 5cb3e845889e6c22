#ifndef GPUACTOR_PLUGIN_H
#define GPUACTOR_PLUGIN_H
#include <stdint.h>

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* Plugins: shared libraries that register ops.
 *
 * A plugin exports two symbols:
 *   const uint32_t gpa_plugin_abi = GPA_PLUGIN_ABI;
 *   gpa_status gpa_plugin_init(gpa_registry *reg);  (registers its ops)
 * and links against libgpuactor. GPA_PLUGIN_ABI changes whenever
 * gpa_op_desc or gpa_op_exec change incompatibly. */
#define GPA_PLUGIN_ABI 1u

typedef gpa_status (*gpa_plugin_init_fn)(gpa_registry *reg);

/* dlopens path, checks gpa_plugin_abi, calls gpa_plugin_init(reg). The
 * library stays loaded until the registry's actor is destroyed. Any thread.
 * Errors: EINVAL (NULL), ENOTFOUND (cannot open, or a symbol is missing; the
 * message carries dlerror's text), EUNSUPPORTED (ABI mismatch), ENOMEM
 * (GPA_MAX_PLUGINS loaded already), or whatever gpa_plugin_init returned,
 * with its message. */
gpa_status gpa_plugin_load(gpa_registry *reg, const char *path);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
