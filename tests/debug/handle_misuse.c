/* In a debug build (GPA_DEBUG, actor/debug.h), handle misuse is reported,
 * not absorbed: a second gpa_handle_release of a handle, and a use after
 * its release, set an error naming the handle and leave the message pool
 * intact (ops submitted afterwards all complete, each exactly once). This
 * program links a debug build of the host library (tests/CMakeLists.txt). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor.h"

static int fails;
#define CHECK(c)                                                      \
  do {                                                                \
    if (!(c)) {                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      fails++;                                                        \
    }                                                                 \
  } while (0)

static gpa_handle *noop(gpa_queue *q) {
  gpa_handle *h = NULL;
  gpa_op_call c = {.op = "noop"};
  if (gpa_submit(q, &c, &h) != GPA_OK) return NULL;
  return h;
}

static int reported(const char *what) {
  const char *m = gpa_last_error_message();
  int ok = strstr(m, "already released") != NULL;
  printf("%s: %s\n", what, m);
  return ok;
}

int main(void) {
  setenv("GPA_DEVICE", "cpu", 1); /* this library has the host backend only */
  gpa_actor *a = NULL;
  if (gpa_actor_create(NULL, &a) != GPA_OK) {
    fprintf(stderr, "actor: %s\n", gpa_last_error_message());
    return 1;
  }
  gpa_queue *q = gpa_actor_default_queue(a);

  /* Released twice: the second release is reported. */
  gpa_handle *h = noop(q);
  CHECK(h && gpa_await(h, -1) == GPA_OK);
  gpa_handle_release(h);
  gpa_handle_release(h);
  CHECK(reported("double release"));
  /* Used after its release. */
  CHECK(gpa_await(h, 0) == GPA_EINVAL);
  CHECK(reported("await after release"));
  CHECK(gpa_handle_status(h) == GPA_EINVAL);

  /* Retained once: two releases are fine, a third is reported. */
  h = noop(q);
  CHECK(h && gpa_await(h, -1) == GPA_OK);
  gpa_handle_retain(h);
  gpa_handle_release(h);
  CHECK(gpa_handle_status(h) == GPA_OK); /* still held once */
  gpa_handle_release(h);
  gpa_handle_release(h);
  CHECK(reported("release past retain"));

  /* The pool is intact: many messages later, each completes once. */
  enum { N = 20000 };
  for (int i = 0; i < N; i++) {
    gpa_handle *x = noop(q);
    CHECK(x != NULL);
    if (!x) break;
    if (gpa_await(x, -1) != GPA_OK) fails++;
    gpa_handle_release(x);
  }
  gpa_batch_stats st;
  CHECK(gpa_sync_batch(q, &st) == GPA_OK);
  CHECK(gpa_actor_destroy(a) == GPA_OK);
  if (fails) return 1;
  printf("ok: misuse reported, %d messages after it completed\n", N);
  return 0;
}
