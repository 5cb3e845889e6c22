/* gpuactor ops as XLA FFI handlers (docs/xla.md).
 *
 * Each gpa_xla_* handler below is an XLA_FFI_Handler (xla/ffi/api/c_api.h)
 * for the host platform ("cpu" in JAX, "Host" in XLA): XLA's buffers are
 * wrapped as gpuactor external buffers and used in place, the op is
 * submitted to the process's actor and awaited before the handler returns.
 * Custom call target names (what gpa_xla_register uses, and what
 * bindings/python/gpuactor/jax.py registers with jax.ffi):
 *
 *   gpuactor_attention_fwd  gpa_xla_attention_fwd   q k v [lengths] -> o lse;  causal (int), scale (float, optional)
 *   gpuactor_attention_bwd  gpa_xla_attention_bwd   dout q k v o lse [lengths] -> dq dk dv;  causal, scale
 *   gpuactor_layernorm_fwd  gpa_xla_layernorm_fwd   x gamma beta -> y mean rstd;  eps (optional)
 *   gpuactor_layernorm_bwd  gpa_xla_layernorm_bwd   x dy gamma mean rstd -> dx dgamma dbeta
 *   gpuactor_gelu_fwd       gpa_xla_gelu_fwd        x -> y;  approximate (optional)
 *   gpuactor_gelu_bwd       gpa_xla_gelu_bwd        x dy -> dx;  approximate (optional)
 *   gpuactor_linear_fwd     gpa_xla_linear_fwd      x W [b] -> y
 *   gpuactor_linear_bwd     gpa_xla_linear_bwd      dy x W -> dx dW [db]
 *   gpuactor_op             gpa_xla_op              any registered op: string attribute "op" names it,
 *                                                   every other scalar attribute is passed to it
 *   gpuactor_nothing        gpa_xla_nothing         does nothing (the baseline of the overhead measurement)
 *   gpuactor_infeed         gpa_xla_infeed          [operands: ordering only] -> the next item of a session;
 *                                                   session (string: its tag), timeout_ms (optional, 10000; < 0 none)
 *   gpuactor_outfeed        gpa_xla_outfeed         tensors -> the session; result: an s32 scalar (0) that later
 *                                                   calls take as an operand to come after it;  session
 *
 * The actor also has the op "xla_probe" (inputs: any tensors; output: i32
 * [n_inputs + 1, 2]): it writes the address of each input and of its output,
 * as its implementation sees them on the actor thread, as (low, high) 32-bit
 * halves, so a test can check that an op runs on XLA's own memory.
 *
 * The same op handlers for XLA's CUDA platform are gpa_xla_cuda_* (same
 * target names; gpuactor_nothing serves both): XLA's device buffers are
 * used in place by the actor of XLA's device ("cuda:N", N from the call's
 * device ordinal), whose default queue waits for XLA's stream by an event;
 * XLA's stream then waits for the op by another. The handler returns once
 * the op is enqueued, without waiting for the GPU; an op that fails later
 * fails the device's next call. Each XLA stream has a queue of its own (up
 * to 16 streams a device; more share one), so calls of different streams
 * never wait for each other. The CUDA feed calls
 * (gpa_xla_cuda_infeed/outfeed, same targets) move XLA's device buffers
 * from and to a session opened on that device (gpa_xla_cuda_session_open),
 * ordered with XLA's stream the same way; the call waits on the host only
 * for the session (an item to take, room for an outfeed), never for the
 * GPU.
 *
 * An actor is created on the first call (one per process for the host, one
 * per device for CUDA); GPA_* environment variables configure it as for any
 * actor (GPA_DEVICE=sim runs the CUDA handlers on the simulated device). */
#ifndef GPUACTOR_XLA_H
#define GPUACTOR_XLA_H
#include <stdint.h>

#include "xla/ffi/api/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

XLA_FFI_Error *gpa_xla_attention_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_attention_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_layernorm_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_layernorm_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_gelu_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_gelu_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_linear_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_linear_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_op(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_nothing(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_infeed(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_outfeed(XLA_FFI_CallFrame *frame);

XLA_FFI_Error *gpa_xla_cuda_attention_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_attention_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_layernorm_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_layernorm_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_gelu_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_gelu_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_linear_fwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_linear_bwd(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_op(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_infeed(XLA_FFI_CallFrame *frame);
XLA_FFI_Error *gpa_xla_cuda_outfeed(XLA_FFI_CallFrame *frame);

/* One entry per handler: its custom call target name and the function. */
typedef struct gpa_xla_target {
  const char *name;
  XLA_FFI_Handler *handler;
} gpa_xla_target;
/* The host table above, terminated by {NULL, NULL}. */
const gpa_xla_target *gpa_xla_targets(void);
/* The CUDA table: the op handlers, gpuactor_nothing and the feed calls. */
const gpa_xla_target *gpa_xla_cuda_targets(void);

/* Registers every handler with XLA through the C API (what a host program
 * that has XLA's api pointer does, e.g. EXLA with XLA_FFI_GetApi()):
 * api->XLA_FFI_Handler_Register for each target on `platform` ("Host" for
 * XLA's CPU client, NULL the same; "CUDA" or "gpu": the CUDA table), named
 * as above with "gpuactor_" replaced by `prefix`
 * (NULL: kept). Registering the same handler under the same name again is
 * accepted by XLA. Returns 0, or -1 with the first XLA error's message
 * copied to msg. */
int gpa_xla_register(const XLA_FFI_Api *api, const char *platform, const char *prefix, char *msg,
                     uint64_t msg_size);
/* The XLA FFI C API version (major, minor) of the header this library was
 * built against: what every handler answers XLA's metadata query with. XLA
 * refuses handlers newer than itself (a library built against jaxlib
 * 0.11's header, 0.4, in jaxlib 0.10, 0.3) and takes older ones. */
void gpa_xla_ffi_version(int32_t *major, int32_t *minor);
/* The api pointer XLA passed to the last handler call (NULL before any):
 * lets a process that reached XLA only through a framework (JAX) register
 * more handlers through the C API. */
const XLA_FFI_Api *gpa_xla_api(void);

/* The process's actor for the host (created if need be), for host code that
 * talks to the same actor the handlers use (feed sessions). NULL if it could
 * not be created; msg gets why. */
struct gpa_actor *gpa_xla_actor(char *msg, uint64_t msg_size);
/* The same for CUDA device `device` (XLA's device ordinal): the actor its
 * CUDA handlers and device sessions use, created if need be. NULL with msg
 * if it cannot be (no CUDA driver or device; GPA_DEVICE chose another
 * backend; GPA_DEVICE=sim has device 0 only). */
struct gpa_actor *gpa_xla_cuda_actor_get(int device, char *msg, uint64_t msg_size);

/* Feed sessions of the custom calls: a gpuactor feed session (feed.h) on
 * the host actor, found by the calls through its tag (opts->tag, 1 to
 * GPA_FEED_TAG_MAX bytes, unique among open sessions), with a queue of its
 * own. Host code pushes and pops with gpa_infeed_push / gpa_outfeed_pop (or
 * opts->sink) on *out, and closes it with gpa_xla_session_close (never
 * gpa_feed_close): calls waiting on it then fail with CANCELLED, later ones
 * with NOT_FOUND. 0, or -1 with msg. */
struct gpa_feed;
struct gpa_feed_options;
int gpa_xla_session_open(const struct gpa_feed_options *opts, struct gpa_feed **out, char *msg, uint64_t msg_size);
/* The same on CUDA device `device` (its actor: XLA's device memory): for the
 * feed calls of a CUDA XLA program on that device. A host call naming it,
 * or a call of another device, fails naming the attribute 'session'. */
int gpa_xla_cuda_session_open(int device, const struct gpa_feed_options *opts, struct gpa_feed **out, char *msg,
                              uint64_t msg_size);
/* 0, or -1 if it was not open (host or device). Any thread but the
 * session's sink. */
int gpa_xla_session_close(struct gpa_feed *session);

/* What the handlers did, for tests and measurements. */
typedef struct gpa_xla_stats {
  uint64_t calls;           /* handler calls that submitted an op */
  uint64_t wraps;           /* XLA buffers wrapped as external buffers */
  uint64_t wrap_hits;       /* buffers found already wrapped (the wrap cache) */
  uint64_t bytes_uploaded;  /* the actor's own stats: copies into its buffers ... */
  uint64_t bytes_read_back; /* ... and out of them; both stay 0 when XLA's memory is used in place */
  uint64_t watched;         /* calls that returned before their op had run (CUDA; GPA_XLA_ASYNC=1) ... */
  uint64_t watched_done;    /* ... of which the op has completed (the handle awaited, the wraps given back) */
  uint64_t deferred_errors; /* CUDA ops that failed after their call returned */
} gpa_xla_stats;
/* Fills *out (the copy counters: of the host actor, 0 before a host call made
 * it); 0, or -1 with msg. */
int gpa_xla_stats_get(gpa_xla_stats *out, char *msg, uint64_t msg_size);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
