/* submit / await through the generic path: fill, copy, noop, readback. */
#include "util/testutil.h"

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  CHECK(q && gpa_queue_actor(q) == a);
  enum { N = 100003 }; /* prime: no size lines up with a chunk */
  gpa_tensor x = tu_f32(a, N), y = tu_f32(a, N);
  gpa_handle *h;
  CHECK_OK(tu_fill(q, &x, 1.5, &h));
  CHECK_OK(gpa_await(h, -1));
  CHECK(gpa_handle_status(h) == GPA_OK);
  CHECK(gpa_handle_error_message(h)[0] == 0);
  gpa_handle_release(h);

  gpa_op_call cp = {"copy", &x, 1, &y, 1, NULL, 0};
  CHECK_OK(gpa_submit(q, &cp, NULL)); /* tracked by the batch only */
  float *out = malloc(N * 4);
  tu_get(q, &y, out, N);
  for (int i = 0; i < N; i++) CHECK(out[i] == 1.5f);

  /* copy into a view: second half of y gets the first half of x, reshaped. */
  gpa_tensor xv = x, yv = y;
  xv.shape[0] = 10;
  yv.offset = 4 * 100;
  yv.rank = 2;
  yv.shape[0] = 2;
  yv.shape[1] = 5;
  CHECK_OK(tu_fill(q, &xv, -2, NULL));
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"copy", &xv, 1, &yv, 1, NULL, 0}, NULL));
  tu_get(q, &y, out, N);
  for (int i = 0; i < N; i++) CHECK(out[i] == ((i >= 100 && i < 110) ? -2.0f : 1.5f));

  /* fill of every dtype */
  gpa_tensor ti = {0};
  CHECK_OK(gpa_buffer_acquire(a, NULL, 64, &ti.buffer));
  ti.dtype = GPA_I32;
  ti.rank = 1;
  ti.shape[0] = 16;
  CHECK_OK(tu_fill(q, &ti, -7, NULL));
  gpa_handle *rb;
  CHECK_OK(gpa_readback(q, &ti, &rb));
  CHECK_OK(gpa_await(rb, 1000000000));
  const void *d;
  uint64_t sz;
  CHECK_OK(gpa_handle_data(rb, &d, &sz));
  CHECK(sz == 64 && ((const int32_t *)d)[15] == -7);
  gpa_handle_release(rb);
  CHECK_ST(tu_fill(q, &ti, 0.5, NULL), GPA_ERANGE); /* not an integer */
  CHECK_MSG("not a i32");
  ti.dtype = GPA_BF16;
  ti.shape[0] = 32;
  CHECK_OK(tu_fill(q, &ti, 1.0, NULL));
  CHECK_OK(gpa_readback(q, &ti, &rb));
  CHECK_OK(gpa_await(rb, -1));
  CHECK_OK(gpa_handle_data(rb, &d, &sz));
  CHECK(((const uint16_t *)d)[31] == 0x3f80); /* bf16 1.0 */
  gpa_handle_release(rb);

  /* noop: a fence with any number of inputs */
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"noop", &x, 1, NULL, 0, NULL, 0}, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);

  /* await with a zero timeout polls; handles can be retained */
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "noop"}, &h));
  gpa_handle_retain(h);
  CHECK_OK(gpa_await(h, -1));
  CHECK_OK(gpa_await(h, 0));
  gpa_handle_release(h);
  gpa_handle_release(h);

  CHECK_OK(gpa_sync_batch(q, NULL));
  free(out);
  CHECK_OK(gpa_actor_destroy(a));
  printf("submit_await: ok\n");
  return 0;
}
