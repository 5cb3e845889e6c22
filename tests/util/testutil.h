/* Minimal test helpers: every check prints where it failed and exits 1. */
#ifndef GPA_TESTUTIL_H
#define GPA_TESTUTIL_H
#include <gpuactor.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              gpa_last_error_message());                                                 \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

#define CHECK_ST(expr, want)                                                                        \
  do {                                                                                              \
    gpa_status st_ = (expr);                                                                        \
    if (st_ != (want)) {                                                                            \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #expr,       \
              gpa_status_name(st_), gpa_status_name(want), gpa_last_error_message());                \
      exit(1);                                                                                      \
    }                                                                                               \
  } while (0)

#define CHECK_OK(expr) CHECK_ST(expr, GPA_OK)

/* The last error message must mention `needle`. */
#define CHECK_MSG(needle)                                                                          \
  do {                                                                                             \
    if (!strstr(gpa_last_error_message(), (needle))) {                                             \
      fprintf(stderr, "%s:%d: last error '%s' does not mention '%s'\n", __FILE__, __LINE__,       \
              gpa_last_error_message(), (needle));                                                 \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* An actor on the device GPA_DEVICE selects (the suite runs once per device). */
gpa_actor *tu_actor(const gpa_actor_options *opts);
/* A rank-1 f32 tensor over a new anonymous buffer of n floats. */
gpa_tensor tu_f32(gpa_actor *a, int64_t n);
/* Uploads n floats and waits. */
void tu_put(gpa_queue *q, const gpa_tensor *t, const float *src, int64_t n);
/* Reads n floats back into dst (awaits). */
void tu_get(gpa_queue *q, const gpa_tensor *t, float *dst, int64_t n);
/* The same for tensors of any dtype: `bytes` bytes, the readback checked to
 * be exactly that size. */
void tu_put_bytes(gpa_queue *q, const gpa_tensor *t, const void *src, uint64_t bytes);
void tu_get_bytes(gpa_queue *q, const gpa_tensor *t, void *dst, uint64_t bytes);
/* Reads t back (awaits) into a fresh allocation the caller frees (at least
 * one byte: a readback may be empty); its size into *bytes (nullable). */
void *tu_download(gpa_queue *q, const gpa_tensor *t, uint64_t *bytes);
/* fill via the generic submit path. */
gpa_status tu_fill(gpa_queue *q, const gpa_tensor *t, double v, gpa_handle **h);
/* Submits fills of t (not awaited) until the queue refuses one with
 * GPA_EAGAIN, at most max: whether it did (any other refusal fails the
 * test). A full mailbox under the fail policy. */
int tu_fill_until_again(gpa_queue *q, const gpa_tensor *t, int max);

#endif
