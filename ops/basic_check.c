/* Validation and adapter helpers of the basic op families; see basic_check.h. */
#include "ops/basic_check.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

void gpa__chk_fmt_shape(char *buf, size_t size, uint32_t rank, const int64_t *shape) {
  size_t k = 0;
  if (!size) return;
  buf[0] = 0;
  k += (size_t)snprintf(buf + k, size - k, "[");
  for (uint32_t i = 0; i < rank && k < size; i++)
    k += (size_t)snprintf(buf + k, size - k, i ? ",%" PRId64 : "%" PRId64, shape[i]);
  if (k < size) snprintf(buf + k, size - k, "]");
}

gpa_status gpa__chk_dtype(const char *op, const char *arg, const gpa_tensor *t, int dtype, int alt, char *msg,
                          size_t msg_size) {
  if (t->dtype == dtype || (alt && t->dtype == alt)) return GPA_OK;
  if (alt)
    snprintf(msg, msg_size, "%s: %s has dtype %s, expected %s or %s", op, arg, gpa_dtype_name(t->dtype),
             gpa_dtype_name(dtype), gpa_dtype_name(alt));
  else
    snprintf(msg, msg_size, "%s: %s has dtype %s, expected %s", op, arg, gpa_dtype_name(t->dtype),
             gpa_dtype_name(dtype));
  return GPA_EDTYPE;
}

gpa_status gpa__chk_rank(const char *op, const char *arg, const gpa_tensor *t, uint32_t rank,
                         const char *layout, char *msg, size_t msg_size) {
  if (t->rank == rank) return GPA_OK;
  char s[160];
  gpa__chk_fmt_shape(s, sizeof s, t->rank < GPA_MAX_RANK ? t->rank : GPA_MAX_RANK, t->shape);
  snprintf(msg, msg_size, "%s: %s has shape %s (rank %u), expected rank %u %s", op, arg, s, t->rank, rank,
           layout ? layout : "");
  return GPA_ESHAPE;
}

bool gpa__chk_shape_is(const gpa_tensor *t, uint32_t rank, const int64_t *shape) {
  bool ok = t->rank == rank;
  for (uint32_t i = 0; ok && i < rank; i++) ok = t->shape[i] == shape[i];
  return ok;
}

gpa_status gpa__chk_shape(const char *op, const char *arg, const gpa_tensor *t, uint32_t rank,
                          const int64_t *shape, const char *why, char *msg, size_t msg_size) {
  if (gpa__chk_shape_is(t, rank, shape)) return GPA_OK;
  char s[160], w[160];
  gpa__chk_fmt_shape(s, sizeof s, t->rank < GPA_MAX_RANK ? t->rank : GPA_MAX_RANK, t->shape);
  gpa__chk_fmt_shape(w, sizeof w, rank, shape);
  if (why)
    snprintf(msg, msg_size, "%s: %s has shape %s, expected %s (%s)", op, arg, s, w, why);
  else
    snprintf(msg, msg_size, "%s: %s has shape %s, expected %s", op, arg, s, w);
  return GPA_ESHAPE;
}

gpa_status gpa__chk_f32_like(const char *op, const char *arg, const gpa_tensor *t, const gpa_tensor *like,
                             const char *like_arg, char *msg, size_t msg_size) {
  gpa_status st = gpa__chk_dtype(op, arg, t, GPA_F32, 0, msg, msg_size);
  if (st != GPA_OK) return st;
  if (gpa__chk_shape_is(t, like->rank, like->shape)) return GPA_OK; /* the reason is formatted only for a message */
  char why[96];
  snprintf(why, sizeof why, "shape of %s", like_arg);
  return gpa__chk_shape(op, arg, t, like->rank, like->shape, why, msg, msg_size);
}

gpa_status gpa__chk_float(const char *op, const char *arg, const gpa_tensor *t, char *msg, size_t msg_size) {
  return gpa__chk_dtype(op, arg, t, GPA_F32, GPA_BF16, msg, msg_size);
}

gpa_status gpa__chk_disjoint(const char *op, const char *arg, const gpa_tensor *t, const char *u_arg,
                             const gpa_tensor *u, char *msg, size_t msg_size) {
  uint64_t tb = (uint64_t)gpa__chk_numel(t) * gpa_dtype_size(t->dtype);
  uint64_t ub = (uint64_t)gpa__chk_numel(u) * gpa_dtype_size(u->dtype);
  if (t->buffer != u->buffer || !tb || !ub || t->offset >= u->offset + ub || u->offset >= t->offset + tb)
    return GPA_OK;
  snprintf(msg, msg_size, "%s: %s (%s) overlaps %s (%s): an output of another dtype than the operand it meets "
           "cannot run in place", op, arg, gpa_dtype_name(t->dtype), u_arg, gpa_dtype_name(u->dtype));
  return GPA_EINVAL;
}

gpa_status gpa__chk_like(const char *op, const char *arg, const gpa_tensor *t, const gpa_tensor *like,
                         const char *like_arg, char *msg, size_t msg_size) {
  if (t->dtype != like->dtype) {
    snprintf(msg, msg_size, "%s: %s has dtype %s, expected %s (the dtype of %s)", op, arg, gpa_dtype_name(t->dtype),
             gpa_dtype_name(like->dtype), like_arg);
    return GPA_EDTYPE;
  }
  if (gpa__chk_shape_is(t, like->rank, like->shape)) return GPA_OK; /* the reason is formatted only for a message */
  char why[96];
  snprintf(why, sizeof why, "shape of %s", like_arg);
  return gpa__chk_shape(op, arg, t, like->rank, like->shape, why, msg, msg_size);
}

void gpa__chk_set(gpa_tensor *out, int dtype, uint32_t rank, const int64_t *shape) {
  out->dtype = dtype;
  out->rank = rank;
  /* the dims, then zeros: no test per dim (every valid submit passes here) */
  uint32_t i = 0;
  for (; i < rank && i < GPA_MAX_RANK; i++) out->shape[i] = shape[i];
  for (; i < GPA_MAX_RANK; i++) out->shape[i] = 0;
}

void gpa__chk_set_scalar(gpa_tensor *out, const gpa_tensor *given) {
  static const int64_t one[1] = {1};
  if (given && given->rank == 1 && given->shape[0] == 1)
    gpa__chk_set(out, GPA_F32, 1, one);
  else
    gpa__chk_set(out, GPA_F32, 0, one);
}

static void pfor_env(void *self, int64_t n, int64_t grain, gpa__range_fn fn, void *ctx) {
  gpa_exec_parallel_for((gpa_exec_env *)self, n, grain, fn, ctx);
}

gpa__par gpa__ops_par(gpa_exec_env *env) {
  gpa__par p = {env ? pfor_env : NULL, env, env ? (int)gpa_exec_threads(env) : 1};
  return p;
}

void *gpa__ops_scratch(gpa_exec_env *env, uint64_t bytes, void **owned) {
  *owned = NULL;
  if (bytes == 0) bytes = 16;
  if (env) return gpa_exec_scratch(env, bytes);
  *owned = malloc((size_t)bytes);
  return *owned;
}
