/* The built-in op families, in registration order: the one list a new
 * family joins (docs/architecture.md, "Adding an op"). */
#include "ops/family.h"

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
  X(optim_multi)            \
  X(attention)              \
  X(cast)

#define GPA__DECLARE(fam) extern const gpa__family gpa__family_##fam;
GPA__OP_FAMILIES(GPA__DECLARE)
#undef GPA__DECLARE

const gpa__family *const gpa__builtin_families[] = {
#define GPA__ENTRY(fam) &gpa__family_##fam,
    GPA__OP_FAMILIES(GPA__ENTRY)
#undef GPA__ENTRY
};
const uint32_t gpa__builtin_family_count = sizeof gpa__builtin_families / sizeof gpa__builtin_families[0];
