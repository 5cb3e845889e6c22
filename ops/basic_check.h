/* Validation and adapter helpers shared by the host op families of the basic
 * op library (elementwise, gelu, layernorm, embedding, metrics, optim).
 * Checks write "op: arg has shape [a,b], expected [c,d] (why)" style messages
 * and return ESHAPE / EDTYPE / EINVAL / ERANGE. Any thread. */
#ifndef GPA_OPS_BASIC_CHECK_H
#define GPA_OPS_BASIC_CHECK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpuactor/op.h"
#include "kernels/host/host_par.h"

/* Returns the status of e when it is not GPA_OK. */
#define GPA__CHK(e)                          \
  do {                                       \
    gpa_status chk_st_ = (e);                \
    if (chk_st_ != GPA_OK) return chk_st_;   \
  } while (0)

/* "[2,3,4]" into buf. */
void gpa__chk_fmt_shape(char *buf, size_t size, uint32_t rank, const int64_t *shape);
/* t's dtype is `dtype` (or `alt`, when alt != 0). */
gpa_status gpa__chk_dtype(const char *op, const char *arg, const gpa_tensor *t, int dtype, int alt, char *msg,
                          size_t msg_size);
/* t has rank `rank`; `layout` names the dims ("[N,D]"). */
gpa_status gpa__chk_rank(const char *op, const char *arg, const gpa_tensor *t, uint32_t rank,
                         const char *layout, char *msg, size_t msg_size);
/* t has exactly this rank and shape; `why` (nullable) explains the expectation. */
bool gpa__chk_shape_is(const gpa_tensor *t, uint32_t rank, const int64_t *shape);
/* gpa__chk_shape with its message; a caller whose `why` must be formatted
 * asks gpa__chk_shape_is first (a valid submit formats nothing). */
gpa_status gpa__chk_shape(const char *op, const char *arg, const gpa_tensor *t, uint32_t rank,
                          const int64_t *shape, const char *why, char *msg, size_t msg_size);
/* f32 tensor of exactly the shape of `like` (named like_arg). */
gpa_status gpa__chk_f32_like(const char *op, const char *arg, const gpa_tensor *t, const gpa_tensor *like,
                             const char *like_arg, char *msg, size_t msg_size);
/* t is a floating-point storage type of the ops with bf16 variants: f32 or bf16. */
gpa_status gpa__chk_float(const char *op, const char *arg, const gpa_tensor *t, char *msg, size_t msg_size);
/* t has the dtype and exactly the shape of `like` (named like_arg). */
gpa_status gpa__chk_like(const char *op, const char *arg, const gpa_tensor *t, const gpa_tensor *like,
                         const char *like_arg, char *msg, size_t msg_size);
/* t and u (named arg, u_arg) share no byte: a mixed-dtype op's output may
 * not overlap an operand of another element size (EINVAL). */
gpa_status gpa__chk_disjoint(const char *op, const char *arg, const gpa_tensor *t, const char *u_arg,
                             const gpa_tensor *u, char *msg, size_t msg_size);
/* Writes dtype/rank/shape into an expected output. */
void gpa__chk_set(gpa_tensor *out, int dtype, uint32_t rank, const int64_t *shape);
/* Expected output of a scalar result: [] unless the caller passed [1]. */
void gpa__chk_set_scalar(gpa_tensor *out, const gpa_tensor *given);
/* Element count (dims checked non-negative by the runtime). Inline: ops'
 * bytes_moved count every tensor of every message on the actor thread. */
static inline int64_t gpa__chk_numel(const gpa_tensor *t) {
  int64_t n = 1;
  for (uint32_t i = 0; i < t->rank && i < GPA_MAX_RANK; i++) n *= t->shape[i];
  return n;
}

/* The parallel-loop hook over the backend's threads (env NULL: inline). */
gpa__par gpa__ops_par(gpa_exec_env *env);
/* Scratch for a kernel: the backend's (env) or malloc'ed (env NULL, then
 * *owned is set and the caller frees it). NULL on failure; bytes 0 gives a
 * non-NULL pointer. */
void *gpa__ops_scratch(gpa_exec_env *env, uint64_t bytes, void **owned);

#endif
