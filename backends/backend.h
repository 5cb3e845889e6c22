/* The backend interface: how an actor executes. One backend per file, chosen
 * in one place (backends/select.c). Every method is called on the actor
 * thread. Optional methods may be NULL. */
#ifndef GPA_BACKENDS_BACKEND_H
#define GPA_BACKENDS_BACKEND_H
#include "actor/internal.h"

struct gpa__backend {
  const char *name; /* "cpu", "cuda", "sim" */
  gpa_status (*init)(gpa_actor *a, void **bctx, char *msg, size_t cap);
  void (*fini)(void *bctx);
  gpa_status (*mem_alloc)(void *bctx, uint64_t size, void **ptr);
  void (*mem_free)(void *bctx, void *ptr);
  gpa_status (*queue_init)(void *bctx, void **bq);
  void (*queue_fini)(void *bctx, void *bq);
  /* Copies; the host backend completes them before returning. */
  gpa_status (*upload)(void *bctx, void *bq, void *dst, const void *src, uint64_t n);
  gpa_status (*readback)(void *bctx, void *bq, void *dst_host, const void *src, uint64_t n);
  /* Runs one implementation of an op (the registry chain walk is generic). */
  gpa_op_impl_fn (*impl_of)(const gpa__op *op);
  gpa_exec_env *(*env)(void *bctx);
};

extern const gpa__backend gpa__backend_host;
/* Picks the backend for a device string ("auto", "cpu", "cuda:N", "sim"). */
gpa_status gpa__backend_select(const char *device, const gpa__backend **out);

#endif
