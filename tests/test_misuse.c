/* Every public call given NULLs, zero sizes, overflowing sizes, wrong dtypes,
 * bad attributes: an error status with a message, never a crash. */
#include "util/testutil.h"

static void expect(gpa_status got, gpa_status want, const char *needle, int line) {
  if (got != want) {
    fprintf(stderr, "line %d: got %s, expected %s (%s)\n", line, gpa_status_name(got), gpa_status_name(want),
            gpa_last_error_message());
    exit(1);
  }
  if (needle && !strstr(gpa_last_error_message(), needle)) {
    fprintf(stderr, "line %d: message '%s' lacks '%s'\n", line, gpa_last_error_message(), needle);
    exit(1);
  }
  if (!gpa_last_error_message()[0]) {
    fprintf(stderr, "line %d: no message\n", line);
    exit(1);
  }
}
#define EXPECT(call, st, needle) expect((call), (st), (needle), __LINE__)

int main(void) {
  EXPECT(gpa_actor_create(NULL, NULL), GPA_EINVAL, "NULL");
  gpa_actor *bad;
  EXPECT(gpa_actor_create(&(gpa_actor_options){.device = "tpu"}, &bad), GPA_EINVAL, "tpu");
  EXPECT(gpa_actor_create(&(gpa_actor_options){.mailbox_size = 3}, &bad), GPA_EINVAL, "mailbox_size");
  EXPECT(gpa_actor_create(&(gpa_actor_options){.full_policy = 7}, &bad), GPA_EINVAL, "full_policy");
  EXPECT(gpa_actor_create(&(gpa_actor_options){.shutdown_policy = -1}, &bad), GPA_EINVAL, "shutdown_policy");
  EXPECT(gpa_actor_create(&(gpa_actor_options){.size = 3}, &bad), GPA_EINVAL, "size");
  EXPECT(gpa_actor_destroy(NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_queue_create(NULL, "x", NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_queue_destroy(NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_submit(NULL, NULL, NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_await(NULL, 0), GPA_EINVAL, NULL);
  EXPECT(gpa_handle_status(NULL), GPA_EINVAL, NULL);
  CHECK(gpa_handle_error_message(NULL)[0] == 0);
  gpa_handle_release(NULL);
  gpa_handle_retain(NULL);
  EXPECT(gpa_handle_data(NULL, NULL, NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_batch_begin(NULL, "x"), GPA_EINVAL, NULL);
  EXPECT(gpa_sync_batch(NULL, NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_upload(NULL, NULL, NULL, 0, 0, NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_readback(NULL, NULL, NULL), GPA_EINVAL, NULL);
  EXPECT(gpa_op_register(NULL, NULL), GPA_EINVAL, NULL);
  CHECK(gpa_actor_default_queue(NULL) == NULL);
  CHECK(gpa_actor_registry(NULL) == NULL);
  EXPECT(gpa_actor_stats_get(NULL, NULL), GPA_EINVAL, NULL);

  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 64);
  gpa_handle *h = (gpa_handle *)1;

  /* submit: op names, arity, tensors */
  EXPECT(gpa_submit(q, NULL, &h), GPA_EINVAL, NULL);
  CHECK(h == NULL);
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = NULL}, &h), GPA_EINVAL, NULL);
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "no_such_op"}, &h), GPA_ENOTFOUND, "no_such_op");
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &x, .n_inputs = 1}, &h), GPA_EINVAL, "outputs");
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h), GPA_EINVAL,
         "NULL");
  gpa_tensor t = x;
  t.dtype = 0;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_EDTYPE, "inputs[0]");
  t.dtype = 99;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &x, .n_inputs = 1, .outputs = &t, .n_outputs = 1}, &h),
         GPA_EDTYPE, "outputs[0]");
  t = x;
  t.rank = 9;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_EINVAL, "rank");
  t = x;
  t.shape[0] = -1;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_ESHAPE, "negative");
  t = x;
  t.rank = 4;
  t.shape[0] = t.shape[1] = t.shape[2] = t.shape[3] = INT64_MAX / 2;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_EOVERFLOW, "overflow");
  t = x;
  t.shape[0] = 65; /* one past the buffer (64 floats = 256 bytes, class 256) */
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_ERANGE, "exceed");
  t = x;
  t.offset = UINT64_MAX - 2;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_ERANGE, "offset");
  t = x;
  t.buffer = 0;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_EINVAL, "buffer id is 0");
  t.buffer = x.buffer + (1ull << 32); /* right slot, wrong generation */
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &t, .n_inputs = 1, .outputs = &x, .n_outputs = 1}, &h),
         GPA_ESTALE, "stale");
  t = x;
  t.shape[0] = 32; /* element count mismatch */
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = &x, .n_inputs = 1, .outputs = &t, .n_outputs = 1}, &h),
         GPA_ESHAPE, "copy");

  /* attributes */
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1}, &h), GPA_EINVAL, "'value'");
  gpa_attr at[2] = {{"value", GPA_ATTR_FLOAT, 0, 1.0}, {"bogus", GPA_ATTR_INT, 1, 0}};
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = at, .n_attrs = 2}, &h),
         GPA_EINVAL, "bogus");
  at[1] = at[0];
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = at, .n_attrs = 2}, &h),
         GPA_EINVAL, "twice");
  at[0].type = 77;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = at, .n_attrs = 1}, &h),
         GPA_EINVAL, "value");
  at[0] = (gpa_attr){"value", GPA_ATTR_FLOAT, 0, 1.0 / 0.0};
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = at, .n_attrs = 1}, &h),
         GPA_ERANGE, "finite");
  at[0].name = NULL;
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = at, .n_attrs = 1}, &h),
         GPA_EINVAL, "no name");
  EXPECT(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .n_attrs = 1}, &h), GPA_EINVAL,
         "NULL");

  /* transfers */
  float buf[64] = {0};
  EXPECT(gpa_upload(q, &x, NULL, 256, 0, &h), GPA_EINVAL, "src");
  EXPECT(gpa_upload(q, &x, buf, 255, 0, &h), GPA_ESHAPE, "size");
  EXPECT(gpa_upload(q, NULL, buf, 256, 0, &h), GPA_EINVAL, "NULL");
  EXPECT(gpa_readback(q, &x, NULL), GPA_EINVAL, "out");
  t = x;
  t.dtype = GPA_DTYPE_COUNT_;
  EXPECT(gpa_readback(q, &t, &h), GPA_EDTYPE, "dtype");
  /* Element sizes (actor/dtype.h), which every byte count of a tensor uses:
   * an upload of 256 bytes is 256 elements of u8, 32 of i64. */
  CHECK(gpa_dtype_size(GPA_F32) == 4 && gpa_dtype_size(GPA_F16) == 2 && gpa_dtype_size(GPA_BF16) == 2);
  CHECK(gpa_dtype_size(GPA_I32) == 4 && gpa_dtype_size(GPA_U8) == 1 && gpa_dtype_size(GPA_I64) == 8);
  CHECK(gpa_dtype_size(0) == 0 && gpa_dtype_size(GPA_DTYPE_COUNT_) == 0 && gpa_dtype_size(-1) == 0);
  t = x;
  t.dtype = GPA_U8;
  t.shape[0] = 256;
  CHECK_OK(gpa_upload(q, &t, buf, 256, 0, NULL));
  t.dtype = GPA_I64;
  t.shape[0] = 32;
  CHECK_OK(gpa_upload(q, &t, buf, 256, 0, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));

  /* registration */
  gpa_registry *reg = gpa_actor_registry(a);
  EXPECT(gpa_op_register(reg, &(gpa_op_desc){.name = ""}), GPA_EINVAL, "name");
  EXPECT(gpa_op_register(reg, &(gpa_op_desc){.name = "x"}), GPA_EINVAL, "no implementation");
  gpa_attr_spec bad_spec = {"a", GPA_ATTR_INT, 0, 4, 0, 0, 0, 0};
  EXPECT(gpa_op_register(reg, &(gpa_op_desc){.name = "x", .host = (gpa_op_impl_fn)1, .attrs = &bad_spec, .n_attrs = 1,
                                             .params_size = 16}),
         GPA_EINVAL, "offset");
  /* Two attributes in one params slot: one would overwrite the other. Also
   * what bounds an op's attributes to GPA_OP_PARAMS_MAX / 8 (submit.c). */
  gpa_attr_spec shared_slot[2] = {{"a", GPA_ATTR_INT, 0, 8, 0, 0, 0, 0}, {"b", GPA_ATTR_FLOAT, 0, 8, 0, 0, 0, 0}};
  EXPECT(gpa_op_register(reg, &(gpa_op_desc){.name = "x", .host = (gpa_op_impl_fn)1, .attrs = shared_slot,
                                             .n_attrs = 2, .params_size = 16}),
         GPA_EINVAL, "'a' and 'b' share offset 8");
  EXPECT(gpa_op_register(reg, &(gpa_op_desc){.name = "x", .host = (gpa_op_impl_fn)1, .params_size = 100000}), GPA_EINVAL,
         "params_size");
  EXPECT(gpa_op_register(reg, &(gpa_op_desc){.name = "x", .host = (gpa_op_impl_fn)1, .min_inputs = 3, .max_inputs = 2}),
         GPA_EINVAL, "arity");

  /* batches and queues */
  CHECK_OK(gpa_batch_begin(q, NULL));
  EXPECT(gpa_batch_begin(q, NULL), GPA_EBUSY, "already open");
  CHECK_OK(gpa_sync_batch(q, NULL));
  EXPECT(gpa_sync_batch(q, &(gpa_batch_stats){.size = 4}), GPA_EINVAL, "size");
  EXPECT(gpa_queue_destroy(q), GPA_EINVAL, "default");
  gpa_queue *q2;
  CHECK_OK(gpa_queue_create(a, NULL, &q2));
  CHECK_OK(gpa_queue_destroy(q2));
  EXPECT(gpa_queue_destroy(q2), GPA_ECLOSED, "already");
  EXPECT(gpa_submit(q2, &(gpa_op_call){.op = "noop"}, &h), GPA_ECLOSED, "destroyed");
  EXPECT(gpa_upload(q2, &x, buf, 256, 0, &h), GPA_ECLOSED, "destroyed");
  EXPECT(gpa_batch_begin(q2, "x"), GPA_ECLOSED, "destroyed");
  CHECK_OK(gpa_actor_destroy(a));
  printf("misuse: ok\n");
  return 0;
}
