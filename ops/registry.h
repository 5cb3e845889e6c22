/* The op registry: name -> chain of registrations (newest first).
 *
 * Reads (every submit) are lock-free: the table has a fixed number of slots,
 * an entry is immutable once published with a release store, and entries are
 * freed only with the registry. Writers serialize on a mutex. */
#ifndef GPA_OPS_REGISTRY_H
#define GPA_OPS_REGISTRY_H
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "gpuactor/op.h"

typedef struct gpa__op {
  gpa_op_desc d;        /* name points at name_buf */
  struct gpa__op *next; /* the registration this one overrides */
  char name_buf[64];
  gpa_attr_spec *attrs; /* owned copy; names point into attr_names */
  char *attr_names;
  bool builtin; /* registered by the library: backends may supply its impl by name */
  char kernel_buf[128];
} gpa__op;

#define GPA__REG_SLOTS 1024 /* power of two; names registered per actor */

#define GPA__MAX_PLUGINS 64

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
gpa_status gpa__register_builtins(gpa_registry *reg);
/* gpa_op_register that marks the entry as built-in. */
gpa_status gpa__op_register_builtin(gpa_registry *reg, const gpa_op_desc *desc);

#endif
