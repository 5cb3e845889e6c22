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
  /* Copies. Return GPA_OK when done, or GPA__DEFERRED when the copy was
   * enqueued and gpa__complete_async(m) will follow (then also set
   * m->device_ns). With m == NULL: enqueue only, no completion (src stays
   * valid until a later fence completes); return GPA_OK. */
  gpa_status (*upload)(void *bctx, void *bq, gpa__msg *m, void *dst, const void *src, uint64_t n);
  gpa_status (*readback)(void *bctx, void *bq, gpa__msg *m, void *dst_host, const void *src, uint64_t n);
  /* The implementation of an op for this backend (the chain walk is generic). */
  gpa_op_impl_fn (*impl_of)(const gpa__op *op);
  /* Optional: runs impl, the implementation of registration op, for message
   * m. An asynchronous backend enqueues the work and the completion and
   * returns GPA__DEFERRED. NULL: impl(x) runs synchronously. */
  gpa_status (*run)(void *bctx, gpa__msg *m, const gpa__op *op, gpa_op_impl_fn impl, gpa_op_exec *x);
  /* Optional (asynchronous backends): completes m once the work already
   * enqueued on bq has finished; returns GPA__DEFERRED. Used after copies
   * issued with m == NULL (several copies, one completion: feed ops). */
  gpa_status (*fence)(void *bctx, void *bq, gpa__msg *m);
  gpa_exec_env *(*env)(void *bctx);
  /* Optional: called on the actor thread for each message that
   * gpa__complete_async pushed, in completion order, before it is finished;
   * returns its final status (a device backend turns a sticky device error
   * into GPA_EDEVICE here and recycles its per-message resources). */
  gpa_status (*complete)(void *bctx, gpa__msg *m, gpa_status st);
  /* Optional (asynchronous backends): the actor calls it while messages are
   * in flight and it is about to sleep, at most every GPA__POLL_NS, and then
   * sleeps no longer than that. It finds what no completion will report (a
   * real GPU calls no host function after a sticky error), completes those
   * messages through gpa__complete_async, and returns how many. */
  uint32_t (*poll)(void *bctx);
  /* Optional (asynchronous backends): called after each pass of the actor
   * loop that handled messages. Work deferred since the last flush gets its
   * completions enqueued here, one per stream rather than one per message. */
  void (*flush)(void *bctx);
  /* Optional: whether caller-owned memory [ptr, ptr + bytes) of kind
   * (gpa_mem_kind) can be a buffer here (gpa_buffer_wrap); GPA_OK or a
   * status with the reason in msg. NULL: host memory only. */
  gpa_status (*external_check)(void *bctx, int kind, const void *ptr, uint64_t bytes, char *msg, size_t cap);
  /* Optional: queue bq's stream waits for event (wait) or records it (!wait),
   * a CUevent of the caller's (include/gpuactor/external.h). NULL: no streams. */
  gpa_status (*external_event)(void *bctx, void *bq, void *event, bool wait, char *msg, size_t cap);
  /* Every method completes before it returns (never GPA__DEFERRED): the
   * actor then times runs of one queue's messages instead of each one. */
  bool synchronous;
};
#define GPA__POLL_NS 5000000 /* 5 ms */

extern const gpa__backend gpa__backend_host;
/* backends/cuda (only in builds with the CUDA toolkit; weak elsewhere). */
extern const gpa__backend gpa__backend_cuda __attribute__((weak));
extern const gpa__backend gpa__backend_sim __attribute__((weak));
/* A CUDA driver with at least one device can be opened ("auto"). */
bool gpa__cuda_probe(void) __attribute__((weak));
/* Picks the backend for a device string ("auto", "cpu", "cuda:N", "sim"). */
gpa_status gpa__backend_select(const char *device, const gpa__backend **out);

#endif
