/* Dtypes and tensor checks shared by every submit path. */
#include <inttypes.h>
#include <stdio.h>

#include "actor/bufcache.h"
#include "actor/dtype.h"

static const char *const dtype_names[GPA_DTYPE_COUNT_] = {"invalid", "f32", "f16", "bf16", "i32", "u8", "i64"};

uint32_t gpa_dtype_size(int dtype) {
  return gpa__dtype_size(dtype);
}

const char *gpa_dtype_name(int dtype) {
  return dtype > 0 && dtype < GPA_DTYPE_COUNT_ ? dtype_names[dtype] : "invalid";
}

/* Overflow by the multiply's own flag, not a division per dimension (a
 * 64-bit division is tens of cycles, and every tensor of every message is
 * counted at submit). Same answer: for n, d >= 0, n * d > INT64_MAX exactly
 * when n > INT64_MAX / d. */
static inline int64_t numel_of(const gpa_tensor *t) {
  if (t->rank > GPA_MAX_RANK) return -1;
  int64_t n = 1;
  for (uint32_t i = 0; i < t->rank; i++)
    if (t->shape[i] < 0 || __builtin_mul_overflow(n, t->shape[i], &n)) return -1;
  return n;
}

int64_t gpa_tensor_numel(const gpa_tensor *t) { return t ? numel_of(t) : -1; }

/* The argument's name for a message: "what" or "what: list[index]". Built
 * only on failure, so that a valid call formats nothing. */
typedef struct argname { char s[112]; } argname;
static argname arg_name(const char *what, const char *list, uint32_t index) {
  argname n;
  if (list) snprintf(n.s, sizeof n.s, "%s: %s[%u]", what, list, index);
  else snprintf(n.s, sizeof n.s, "%s", what);
  return n;
}
#define ARG arg_name(what, list, index).s

/* Why gpa__tensor_bytes_at's one pass failed, in the order the checks are
 * made (dtype, rank, a negative dimension, overflow). */
__attribute__((noinline, cold)) static gpa_status bytes_fail(const gpa_tensor *t, const char *what, const char *list,
                                                             uint32_t index) {
  uint32_t es = gpa_dtype_size(t->dtype);
  if (!es) return gpa__fail(GPA_EDTYPE, "%s: invalid dtype %d", ARG, t->dtype);
  if (t->rank > GPA_MAX_RANK) return gpa__fail(GPA_EINVAL, "%s: rank %u exceeds %d", ARG, t->rank, GPA_MAX_RANK);
  for (uint32_t i = 0; i < t->rank; i++)
    if (t->shape[i] < 0) return gpa__fail(GPA_ESHAPE, "%s: shape[%u] = %" PRId64 " is negative", ARG, i, t->shape[i]);
  return gpa__fail(GPA_EOVERFLOW, "%s: element count overflows", ARG);
}

/* The byte size of a valid tensor, in one pass; false when any check
 * fails (bytes_fail says which). Inline in the checks below: every tensor
 * of every message passes here at submit. */
static inline bool bytes_of(const gpa_tensor *t, uint64_t *bytes) {
  uint32_t es = gpa__dtype_size(t->dtype);
  int64_t n = es ? numel_of(t) : -1;
  return n >= 0 && !__builtin_mul_overflow((uint64_t)n, (uint64_t)es, bytes);
}

gpa_status gpa__tensor_bytes_at(const gpa_tensor *t, uint64_t *bytes, const char *what, const char *list,
                                uint32_t index) {
  return bytes_of(t, bytes) ? GPA_OK : bytes_fail(t, what, list, index);
}

gpa_status gpa__tensor_bytes(const gpa_tensor *t, uint64_t *bytes, const char *what) {
  return gpa__tensor_bytes_at(t, bytes, what, NULL, 0);
}

gpa_status gpa__check_tensor_at(gpa_actor *a, const gpa_tensor *t, const char *what, const char *list,
                                uint32_t index) {
  uint64_t bytes;
  if (!bytes_of(t, &bytes)) return bytes_fail(t, what, list, index);
  if (!t->buffer) return gpa__fail(GPA_EINVAL, "%s: buffer id is 0 (no buffer)", ARG);
  gpa__slot *s = gpa__bufcache_peek(a->cache, t->buffer);
  if (!s) {
    /* A shutdown unpublishes every buffer: say what really happened. */
    if (atomic_load_explicit(&a->closing, memory_order_acquire))
      return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
    return gpa__fail(GPA_ESTALE, "%s: buffer 0x%" PRIx64 " is stale or was never acquired", ARG, t->buffer);
  }
  uint64_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
  if (t->offset > size || bytes > size - t->offset)
    return gpa__fail(GPA_ERANGE, "%s: %" PRIu64 " bytes at offset %" PRIu64 " exceed buffer size %" PRIu64, ARG,
                     bytes, t->offset, size);
  return GPA_OK;
}

gpa_status gpa__check_tensor(gpa_actor *a, const gpa_tensor *t, const char *what) {
  return gpa__check_tensor_at(a, t, what, NULL, 0);
}

gpa_status gpa__check_queue_slow(gpa_queue *q) {
  if (!q) return gpa__fail(GPA_EINVAL, "queue is NULL");
  if (atomic_load_explicit(&q->actor->closing, memory_order_acquire))
    return gpa__fail(GPA_ESHUTDOWN, "actor is shutting down");
  if (atomic_load_explicit(&q->closed, memory_order_acquire))
    return gpa__fail(GPA_ECLOSED, "queue '%s' was destroyed", q->name);
  return GPA_OK;
}
