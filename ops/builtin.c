/* The built-in op families. Each family file defines its table. The
 * references are strong so that linking the static library pulls every
 * family in. */
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
  X(attention)

#define GPA__DECLARE(fam)                  \
  extern const gpa_op_desc gpa__ops_##fam[]; \
  extern const uint32_t gpa__ops_##fam##_count;
GPA__OP_FAMILIES(GPA__DECLARE)
#undef GPA__DECLARE

gpa_status gpa__register_builtins(gpa_registry *reg) {
#define GPA__REGISTER(fam)                                            \
  for (uint32_t i = 0; i < gpa__ops_##fam##_count; i++) {             \
    gpa_status st = gpa__op_register_builtin(reg, &gpa__ops_##fam[i]); \
    if (st != GPA_OK) return st;                                      \
  }
  GPA__OP_FAMILIES(GPA__REGISTER)
#undef GPA__REGISTER
  return GPA_OK;
}
