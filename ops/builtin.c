/* The built-in op families. Each family file defines its table; a family not
 * built yet is a weak symbol that stays NULL, so this list can name the whole
 * op library while it is being written. */
#include "ops/registry.h"

#define GPA__OP_FAMILIES(X) \
  X(core)                   \
  X(elementwise)            \
  X(gelu)                   \
  X(layernorm)              \
  X(linear)                 \
  X(conv1d)                 \
  X(embedding)              \
  X(metrics)                \
  X(optim)                  \
  X(attention)              \
  X(feed)

#define GPA__DECLARE(fam)                                           \
  extern const gpa_op_desc gpa__ops_##fam[] __attribute__((weak)); \
  extern const uint32_t gpa__ops_##fam##_count __attribute__((weak));
GPA__OP_FAMILIES(GPA__DECLARE)
#undef GPA__DECLARE

gpa_status gpa__register_builtins(gpa_registry *reg) {
#define GPA__REGISTER(fam)                                          \
  if (gpa__ops_##fam && &gpa__ops_##fam##_count)                    \
    for (uint32_t i = 0; i < gpa__ops_##fam##_count; i++) {         \
      gpa_status st = gpa__op_register_builtin(reg, &gpa__ops_##fam[i]);     \
      if (st != GPA_OK) return st;                                  \
    }
  GPA__OP_FAMILIES(GPA__REGISTER)
#undef GPA__REGISTER
  return GPA_OK;
}
