/* The feed calls through XLA's asynchronous FFI, called the way XLA's CPU
 * runtime calls them (ffi_frame.h: call frames and futures against
 * jaxlib's header, no XLA in the process): a call returns at once with a
 * future, also when its infeed has no item yet; the future completes once
 * the item has landed in XLA's buffer (or the outfeed's tensors have left
 * it, before anyone pops them), exactly once; a timeout and a close fail the
 * future with the error the blocking path gives; without futures the call
 * blocks as before. Runs on the host (GPA_DEVICE cpu or unset); skips (77)
 * in the suite's other passes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ffi_frame.h"
#include "gpuactor/feed.h"
#include "gpuactor/handle.h"
#include "gpuactor_xla.h"

static XLA_FFI_Api api;
static int64_t four = 4;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* An infeed of one f32[4] into `out`, or an outfeed of `out` with its ack. */
static XLA_FFI_Error *feed(ff_frame *b, int in, float *out, int32_t *ack, int timeout_ms, double *took) {
  ff_init(b, &api, NULL);
  if (in) {
    ff_buf(b, 1, XLA_FFI_DataType_F32, (uintptr_t)out, 1, &four);
  } else {
    ff_buf(b, 0, XLA_FFI_DataType_F32, (uintptr_t)out, 1, &four);
    ff_buf(b, 1, XLA_FFI_DataType_S32, (uintptr_t)ack, 0, NULL);
  }
  ff_attr_str(b, "session", "t");
  if (in) ff_attr_i32(b, "timeout_ms", timeout_ms);
  double t0 = now_ms();
  XLA_FFI_Error *e = in ? gpa_xla_infeed(&b->f) : gpa_xla_outfeed(&b->f);
  *took = now_ms() - t0;
  return e;
}

static void push(gpa_feed *s, float v) {
  float x[4] = {v, v + 1, v + 2, v + 3};
  gpa_host_tensor t = {x, sizeof x, GPA_F32, 1, {4}};
  CHECK(gpa_infeed_push(s, &t, 1) == GPA_OK);
}

static void expect_failed(XLA_FFI_Future *f, XLA_FFI_Error_Code code, const char *text) {
  CHECK(ff_future_wait(f, 10000) == 1);
  if (!f->error || f->error->code != code || !strstr(f->error->msg, text)) {
    fprintf(stderr, "expected error %d with '%s', got %s\n", code, text, f->error ? f->error->msg : "none");
    exit(1);
  }
  free(f->error);
  free(f);
}

int main(void) {
  const char *dev = getenv("GPA_DEVICE");
  if (dev && strcmp(dev, "cpu") && strcmp(dev, "auto") && dev[0]) {
    fprintf(stderr, "skipped: the feed calls are XLA host handlers (the cpu pass runs them)\n");
    return 77;
  }
  api = ff_api();
  char msg[256];
  gpa_feed_options o = {.size = sizeof o, .tag = "t", .tag_len = 1};
  gpa_feed *s;
  CHECK(gpa_xla_session_open(&o, &s, msg, sizeof msg) == 0);
  ff_frame b;
  float out[4] = {0};
  int32_t ack = -1;
  double took;

  /* An infeed with no item yet: the call returns, the future waits. */
  XLA_FFI_Error *e = feed(&b, 1, out, NULL, 10000, &took);
  if (e) fprintf(stderr, "infeed: %s\n", e->msg);
  CHECK(!e);
  XLA_FFI_Future *f = b.f.future;
  printf("infeed without an item returned in %.3f ms\n", took);
  CHECK(f && took < 1000);
  CHECK(ff_future_wait(f, 100) == 0);
  push(s, 10);
  CHECK(ff_future_wait(f, 10000) == 1 && !f->error);
  CHECK(out[0] == 10 && out[3] == 13);
  free(f);

  /* An outfeed completes once its tensors have left XLA's buffer, before
   * anyone pops them. */
  float v[4] = {1, 2, 3, 4};
  CHECK(feed(&b, 0, v, &ack, 0, &took) == NULL && b.f.future);
  f = b.f.future;
  CHECK(ff_future_wait(f, 10000) == 1 && !f->error && ack == 0);
  free(f);
  v[0] = 99; /* XLA may reuse its buffer now */
  gpa_handle *item;
  gpa_host_tensor t;
  CHECK(gpa_outfeed_pop(s, 5000000000ll, &item) == GPA_OK);
  CHECK(gpa_outfeed_item_tensor(item, 0, &t) == GPA_OK && ((const float *)t.data)[0] == 1);
  gpa_handle_release(item);

  /* A timeout fails the future, not the call; the session works after. */
  CHECK(feed(&b, 1, out, NULL, 100, &took) == NULL && b.f.future);
  expect_failed(b.f.future, XLA_FFI_Error_Code_DEADLINE_EXCEEDED, "gpuactor_infeed: session 't'");
  push(s, 20);
  CHECK(feed(&b, 1, out, NULL, 10000, &took) == NULL && b.f.future);
  f = b.f.future;
  CHECK(ff_future_wait(f, 10000) == 1 && !f->error && out[0] == 20);
  free(f);

  /* Without futures (an XLA that makes none) the call blocks as before. */
  push(s, 30);
  api.XLA_FFI_Future_Create = NULL;
  CHECK(feed(&b, 1, out, NULL, 10000, &took) == NULL && !b.f.future && out[0] == 30);
  api = ff_api();

  /* Closing the session fails a parked call's future; later calls fail at
   * once. */
  CHECK(feed(&b, 1, out, NULL, 20000, &took) == NULL && b.f.future);
  f = b.f.future;
  CHECK(ff_future_wait(f, 50) == 0);
  CHECK(gpa_xla_session_close(s) == 0);
  expect_failed(f, XLA_FFI_Error_Code_CANCELLED, "the session was closed");
  e = feed(&b, 1, out, NULL, 100, &took);
  CHECK(e && e->code == XLA_FFI_Error_Code_NOT_FOUND && strstr(e->msg, "no open session 't'") && !b.f.future);
  free(e);
  printf("xla feed calls with futures: ok\n");
  return 0;
}
