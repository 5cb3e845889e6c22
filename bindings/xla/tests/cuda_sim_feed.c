/* The CUDA feed calls on the simulated device (test_xla_cuda_sim): a
 * session opened on device 0, infeed and outfeed of XLA's device buffers
 * (several tensors a call), ordered with a late XLA stream by events with
 * no call waiting for it, and the errors, each naming the session. */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_sim.h"
#include "gpuactor/feed.h"
#include "gpuactor/handle.h"

enum { FN = 1024, SMALL = 16 };
dptr feed_ack_named; /* see feeds() */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void expect_feed_error(XLA_FFI_Error *e, XLA_FFI_Error_Code code, const char *text) {
  if (!e || e->code != code || !strstr(e->msg, text)) {
    fprintf(stderr, "expected error %d containing '%s', got %s%s\n", code, text, e ? "" : "none",
            e ? e->msg : "");
    exit(1);
  }
  free(e);
}

/* An infeed into (a[FN], b[SMALL]), or an outfeed of them with its ack. */
static XLA_FFI_Error *call(int in, const char *session, dptr a, dptr b, dptr ack, int timeout_ms) {
  ff_frame f;
  int64_t na = FN, nb = SMALL;
  ff_init(&f, &api, &xla);
  ff_buf(&f, in, XLA_FFI_DataType_F32, a, 1, &na);
  ff_buf(&f, in, XLA_FFI_DataType_F32, b, 1, &nb);
  if (!in) ff_buf(&f, 1, XLA_FFI_DataType_S32, ack, 0, NULL);
  if (session) ff_attr_str(&f, "session", session);
  if (timeout_ms) ff_attr_i32(&f, "timeout_ms", timeout_ms);
  return in ? gpa_xla_cuda_infeed(&f.f) : gpa_xla_cuda_outfeed(&f.f);
}

static void push(gpa_feed *s, const float *a, const float *b) {
  gpa_host_tensor t[2] = {{a, FN * sizeof(float), GPA_F32, 1, {FN}}, {b, SMALL * sizeof(float), GPA_F32, 1, {SMALL}}};
  gpa_status st = gpa_infeed_push(s, t, 2);
  if (st != GPA_OK) fprintf(stderr, "gpa_infeed_push: %s\n", gpa_last_error_message());
  CHECK(st == GPA_OK);
}

static void pop_equal(gpa_feed *s, const float *a, const float *b) {
  gpa_handle *item = NULL;
  CHECK(gpa_outfeed_pop(s, 5000000000ll, &item) == GPA_OK);
  CHECK(gpa_outfeed_item_count(item) == 2);
  gpa_host_tensor t;
  CHECK(gpa_outfeed_item_tensor(item, 0, &t) == GPA_OK && t.bytes == FN * sizeof(float));
  CHECK(!memcmp(t.data, a, FN * sizeof(float)));
  CHECK(gpa_outfeed_item_tensor(item, 1, &t) == GPA_OK && t.bytes == SMALL * sizeof(float));
  CHECK(!memcmp(t.data, b, SMALL * sizeof(float)));
  gpa_handle_release(item);
}

static void read_equal(dptr p, const float *want, size_t n) {
  static float got[FN];
  xla_read(p, got, n);
  CHECK(!memcmp(got, want, n * sizeof(float)));
}

static void *close_later(void *s) {
  usleep(100000);
  CHECK(gpa_xla_session_close(s) == 0);
  return NULL;
}

void feeds(void) {
  static float a[FN], b[SMALL], a2[FN], b2[SMALL], junk[FN];
  rnd(a, FN, 51), rnd(b, SMALL, 52), rnd(a2, FN, 53), rnd(b2, SMALL, 54), rnd(junk, FN, 55);
  char msg[256];
  gpa_feed *s = NULL;
  gpa_feed_options o = {.size = sizeof o, .tag = "cf", .tag_len = 2};
  CHECK(gpa_xla_cuda_session_open(0, &o, &s, msg, sizeof msg) == 0);
  gpa_feed *s2 = NULL;
  CHECK(gpa_xla_cuda_session_open(0, &o, &s2, msg, sizeof msg) == -1 && strstr(msg, "open already") && !s2);
  CHECK(gpa_xla_cuda_session_open(2, &o, &s2, msg, sizeof msg) == -1 && strstr(msg, "device 0 only"));
  dptr da = zeros(FN), db = zeros(SMALL), ack = zeros(1);
  /* The simulator's allocation table is a static map, gone when LeakSanitizer
   * looks at exit; the buffers the handlers wrapped are still named by the
   * wrap cache, the ack (never wrapped) only here. */
  feed_ack_named = ack;

  /* Round trip: an item into XLA's buffers, then those buffers out. */
  push(s, a, b);
  expect_ok(call(1, "cf", da, db, 0, 0), "infeed");
  read_equal(da, a, FN), read_equal(db, b, SMALL);
  static const int32_t seven = 7;
  CHECK(cu.htod(ack, &seven, sizeof seven) == 0);
  expect_ok(call(0, "cf", da, db, ack, 0), "outfeed");
  int32_t got_ack = -1;
  xla_read(ack, (float *)&got_ack, 1);
  CHECK(got_ack == 0);
  pop_equal(s, a, b);

  /* XLA's stream 300 ms late. Outfeed: its operand is written by XLA late;
   * the outfeed must send what XLA wrote. Infeed: XLA writes its result
   * buffer late (the buffer's previous use); the item must land after. No
   * call waits for the stream. */
  CHECK(cu.htod(db, b2, sizeof b2) == 0);
  cu.delay(xla.stream, 300000);
  static float *pin;
  CHECK(cu.alloc_host((void **)&pin, 2 * FN * sizeof(float)) == 0);
  memcpy(pin, a2, FN * sizeof(float));
  memcpy(pin + FN, junk, FN * sizeof(float));
  CHECK(cu.htod_async(da, pin, FN * sizeof(float), xla.stream) == 0);
  double t0 = now_ms();
  expect_ok(call(0, "cf", da, db, ack, 0), "outfeed behind a late write");
  double took_out = now_ms() - t0;
  CHECK(cu.htod_async(da, pin + FN, FN * sizeof(float), xla.stream) == 0); /* the infeed's buffer, written late */
  push(s, a, b);
  t0 = now_ms();
  expect_ok(call(1, "cf", da, db, 0, 0), "infeed behind a late write");
  double took_in = now_ms() - t0;
  printf("feed calls with XLA's stream 300 ms behind returned in %.2f ms (outfeed) and %.2f ms (infeed)\n", took_out,
         took_in);
  CHECK(took_out < 150 && took_in < 150);
  pop_equal(s, a2, b2);
  cu.delay(xla.stream, 0);
  read_equal(da, a, FN), read_equal(db, b, SMALL);
  cu.free_host(pin);

  /* Errors, each naming the session or the attribute. */
  expect_feed_error(call(1, NULL, da, db, 0, 0), XLA_FFI_Error_Code_INVALID_ARGUMENT, "missing attribute 'session'");
  expect_feed_error(call(1, "nope", da, db, 0, 0), XLA_FFI_Error_Code_NOT_FOUND,
                    "attribute 'session': no open session 'nope'");
  t0 = now_ms();
  expect_feed_error(call(1, "cf", da, db, 0, 50), XLA_FFI_Error_Code_DEADLINE_EXCEEDED, "session 'cf'");
  CHECK(now_ms() - t0 < 5000);
  push(s, a2, b2); /* the timeout tainted nothing after it */
  expect_ok(call(1, "cf", da, db, 0, 0), "infeed after a timeout");
  read_equal(da, a2, FN);
  gpa_host_tensor wrong = {a, FN * sizeof(float), GPA_F32, 2, {FN / 2, 2}};
  gpa_host_tensor t2 = {b, SMALL * sizeof(float), GPA_F32, 1, {SMALL}};
  gpa_host_tensor item[2] = {wrong, t2};
  CHECK(gpa_infeed_push(s, item, 2) == GPA_OK);
  expect_feed_error(call(1, "cf", da, db, 0, 0), XLA_FFI_Error_Code_INVALID_ARGUMENT, "session 'cf': infeed:");
  pthread_t th;
  CHECK(pthread_create(&th, NULL, close_later, s) == 0);
  expect_feed_error(call(1, "cf", da, db, 0, 10000), XLA_FFI_Error_Code_CANCELLED, "session 'cf'");
  pthread_join(th, NULL);
  expect_feed_error(call(0, "cf", da, db, ack, 0), XLA_FFI_Error_Code_NOT_FOUND, "no open session 'cf'");
  CHECK(cu.stream_sync(xla.stream) == 0); /* XLA frees its buffers in its stream's order */
  CHECK(cu.free(da) == 0 && cu.free(db) == 0 && cu.free(ack) == 0);
}
