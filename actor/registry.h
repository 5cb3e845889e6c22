/* The op registry: name -> chain of registrations (newest first).
 *
 * Reads (every submit) are lock-free: the table has a fixed number of slots,
 * an entry is immutable once published with a release store, and entries are
 * freed only with the registry. Writers serialize on a mutex. */
#ifndef GPA_ACTOR_REGISTRY_H
#define GPA_ACTOR_REGISTRY_H
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "actor/limits.h"
#include "gpuactor/op.h"

typedef struct gpa__op {
  gpa_op_desc d;        /* name points at name_buf */
  struct gpa__op *next; /* the registration this one overrides */
  char name_buf[GPA_OP_NAME_MAX];
  gpa_attr_spec *attrs; /* owned copy; names point into attr_names */
  char *attr_names;
  char kernel_buf[GPA_OP_KERNEL_NAME_MAX];
} gpa__op;


struct gpa_registry {
  _Atomic(gpa__op *) slot[GPA__REG_SLOTS];
  pthread_mutex_t lock;
  uint32_t count;
  void *plugins[GPA__MAX_PLUGINS]; /* dlopen handles, closed with the registry */
  uint32_t n_plugins;
};

gpa_status gpa__registry_init(gpa_registry *reg);
void gpa__registry_fini(gpa_registry *reg);
/* The newest registration of name, or NULL. Any thread. */
const gpa__op *gpa__registry_find(const gpa_registry *reg, const char *name);
/* The same, also giving the slot that holds it. */
const gpa__op *gpa__registry_find_slot(const gpa_registry *reg, const char *name, uint32_t *slot);
/* The built-in op families (ops/builtin.c lists them; each family's
 * descriptors carry their host and CUDA implementations). A registry starts
 * with every one of them registered, in this order, through gpa_op_register. */
typedef struct gpa__family {
  const gpa_op_desc *ops;
  uint32_t count;
} gpa__family;
extern const gpa__family *const gpa__builtin_families[];
extern const uint32_t gpa__builtin_family_count;

#endif
