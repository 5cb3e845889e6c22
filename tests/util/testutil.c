#include "util/testutil.h"

gpa_actor *tu_actor(const gpa_actor_options *opts) {
  gpa_actor *a = NULL;
  gpa_status st = gpa_actor_create(opts, &a);
  if (st == GPA_EUNSUPPORTED || st == GPA_ENODEVICE) {
    fprintf(stderr, "skipped: %s\n", gpa_last_error_message());
    exit(77);
  }
  CHECK_OK(st);
  return a;
}

gpa_tensor tu_f32(gpa_actor *a, int64_t n) {
  gpa_tensor t = {0};
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)(n ? n : 1) * 4, &t.buffer));
  t.dtype = GPA_F32;
  t.rank = 1;
  t.shape[0] = n;
  return t;
}

void tu_put_bytes(gpa_queue *q, const gpa_tensor *t, const void *src, uint64_t bytes) {
  gpa_handle *h;
  CHECK_OK(gpa_upload(q, t, src, bytes, 0, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
}

void *tu_download(gpa_queue *q, const gpa_tensor *t, uint64_t *bytes) {
  gpa_handle *h;
  CHECK_OK(gpa_readback(q, t, &h));
  CHECK_OK(gpa_await(h, -1));
  const void *d;
  uint64_t sz;
  CHECK_OK(gpa_handle_data(h, &d, &sz));
  void *out = malloc(sz ? sz : 1);
  CHECK(out != NULL);
  if (sz) memcpy(out, d, sz); /* an empty readback has no data pointer */
  gpa_handle_release(h);
  if (bytes) *bytes = sz;
  return out;
}

void tu_get_bytes(gpa_queue *q, const gpa_tensor *t, void *dst, uint64_t bytes) {
  uint64_t sz;
  void *got = tu_download(q, t, &sz);
  CHECK(sz == bytes);
  memcpy(dst, got, sz);
  free(got);
}

void tu_put(gpa_queue *q, const gpa_tensor *t, const float *src, int64_t n) { tu_put_bytes(q, t, src, (uint64_t)n * 4); }

void tu_get(gpa_queue *q, const gpa_tensor *t, float *dst, int64_t n) { tu_get_bytes(q, t, dst, (uint64_t)n * 4); }

gpa_status tu_fill(gpa_queue *q, const gpa_tensor *t, double v, gpa_handle **h) {
  gpa_attr at = {"value", GPA_ATTR_FLOAT, 0, v};
  gpa_op_call c = {"fill", NULL, 0, t, 1, &at, 1};
  return gpa_submit(q, &c, h);
}

int tu_fill_until_again(gpa_queue *q, const gpa_tensor *t, int max) {
  for (int i = 0; i < max; i++) {
    gpa_status st = tu_fill(q, t, i, NULL);
    CHECK(st == GPA_OK || st == GPA_EAGAIN);
    if (st == GPA_EAGAIN) return 1;
  }
  return 0;
}
