/* Batches: stats, first error, readbacks readable only after sync/await. */
#include "util/testutil.h"

/* An op that fails when its attribute says so: errors inside a batch. */
typedef struct { int64_t fail; } fail_params;
static gpa_status maybe_fail(const gpa_op_exec *x) {
  const fail_params *p = x->params;
  if (p->fail) {
    snprintf(x->msg, x->msg_size, "planted failure %lld", (long long)p->fail);
    return GPA_EINTERNAL;
  }
  return GPA_OK;
}
static const gpa_attr_spec fail_attrs[] = {{"fail", GPA_ATTR_INT, 1, 0, 0, 0, 0, 1e9}};

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_op_desc d = {.name = "test_maybe_fail", .min_inputs = 0, .max_inputs = 0, .n_outputs = 0,
                   .attrs = fail_attrs, .n_attrs = 1, .params_size = sizeof(fail_params), .host = maybe_fail,
                   .cuda = maybe_fail};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  gpa_queue *q;
  CHECK_OK(gpa_queue_create(a, "train", &q));
  enum { N = 4096 };
  gpa_tensor x = tu_f32(a, N);
  float *host = malloc(N * 4);
  for (int i = 0; i < N; i++) host[i] = (float)i;

  CHECK_OK(gpa_batch_begin(q, "step-1"));
  CHECK_ST(gpa_batch_begin(q, "again"), GPA_EBUSY);
  CHECK_OK(gpa_upload(q, &x, host, N * 4, 0, NULL));
  gpa_handle *rb;
  CHECK_OK(gpa_readback(q, &x, &rb));
  const void *data;
  uint64_t size;
  /* Not readable before the sync, even if the copy has long landed. */
  for (int i = 0; i < 3; i++) {
    CHECK_ST(gpa_handle_data(rb, &data, &size), GPA_ENOTSYNCED);
    CHECK_MSG("not synced");
  }
  CHECK(gpa_handle_status(rb) == GPA_OK || gpa_handle_status(rb) == GPA_EPENDING);
  CHECK_ST(gpa_handle_data(rb, &data, &size), GPA_ENOTSYNCED);
  gpa_attr f1 = {"fail", GPA_ATTR_INT, 1, 0}, f2 = {"fail", GPA_ATTR_INT, 2, 0}, f0 = {"fail", GPA_ATTR_INT, 0, 0};
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"test_maybe_fail", NULL, 0, NULL, 0, &f0, 1}, NULL));
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"test_maybe_fail", NULL, 0, NULL, 0, &f1, 1}, NULL));
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"test_maybe_fail", NULL, 0, NULL, 0, &f2, 1}, NULL));
  gpa_batch_stats st = {.size = sizeof st};
  CHECK_ST(gpa_sync_batch(q, &st), GPA_EINTERNAL);
  CHECK_MSG("planted failure 1"); /* the first error, not the last */
  CHECK(st.first_error == GPA_EINTERNAL);
  CHECK(strstr(st.first_error_message, "planted failure 1"));
  CHECK(st.ops == 5 && st.errors == 2);
  CHECK(st.bytes_moved == 2 * N * 4);
  CHECK(!strcmp(st.label, "step-1"));
  /* the values, for a failure's log: host_ns starts at the producer's clock
   * read in gpa_batch_begin, device_ns is timed on the actor's thread */
  printf("batch step-1: host %lld ns, device %lld ns\n", (long long)st.host_ns, (long long)st.device_ns);
  CHECK(st.host_ns > 0 && st.device_ns >= 0 && st.device_ns <= st.host_ns);
  CHECK_OK(gpa_handle_data(rb, &data, &size));
  CHECK(size == N * 4 && !memcmp(data, host, size));
  gpa_handle_release(rb);

  /* The next batch starts clean; a sync without begin syncs the implicit batch. */
  CHECK_OK(gpa_readback(q, &x, &rb));
  CHECK_OK(gpa_sync_batch(q, &st));
  CHECK(st.ops == 1 && st.errors == 0 && st.first_error == 0 && st.label[0] == 0);
  CHECK_OK(gpa_handle_data(rb, &data, &size));
  gpa_handle_release(rb);

  /* Awaiting a readback also makes it readable. */
  CHECK_OK(gpa_readback(q, &x, &rb));
  CHECK_ST(gpa_handle_data(rb, &data, &size), GPA_ENOTSYNCED);
  CHECK_OK(gpa_await(rb, -1));
  CHECK_OK(gpa_handle_data(rb, &data, &size));
  CHECK(((const float *)data)[N - 1] == (float)(N - 1));
  /* gpa_handle_data on something that is not a readback */
  gpa_handle *h;
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "noop"}, &h));
  CHECK_OK(gpa_await(h, -1));
  CHECK_ST(gpa_handle_data(h, &data, &size), GPA_EINVAL);
  gpa_handle_release(h);
  gpa_handle_release(rb);

  /* A failed op's handle carries its message. */
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"test_maybe_fail", NULL, 0, NULL, 0, &f2, 1}, &h));
  CHECK_ST(gpa_await(h, -1), GPA_EINTERNAL);
  CHECK(strstr(gpa_handle_error_message(h), "planted failure 2"));
  gpa_handle_release(h);
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_EINTERNAL);

  /* Versioned uploads: a repeat of the version is skipped and counted. */
  CHECK_OK(gpa_batch_begin(q, "weights"));
  CHECK_OK(gpa_upload(q, &x, host, N * 4, 7, NULL));
  CHECK_OK(gpa_upload(q, &x, host, N * 4, 7, NULL));
  CHECK_OK(gpa_upload(q, &x, host, N * 4, 7, NULL));
  CHECK_OK(gpa_sync_batch(q, &st));
  CHECK(st.uploads_skipped == 2 && st.bytes_moved == N * 4);

  /* An op's bytes: each input and output once (elementwise's bytes_moved),
   * whether it ran from its ring record or from a message. */
  gpa_tensor y = tu_f32(a, N);
  CHECK_OK(gpa_batch_begin(q, "add"));
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"add", (gpa_tensor[]){x, x}, 2, &y, 1, NULL, 0}, NULL));
  gpa_handle *ha;
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"add", (gpa_tensor[]){x, y}, 2, &y, 1, NULL, 0}, &ha));
  CHECK_OK(gpa_await(ha, -1));
  gpa_handle_release(ha);
  CHECK_OK(gpa_sync_batch(q, &st));
  CHECK(st.ops == 2 && st.errors == 0 && st.bytes_moved == 2 * 3 * N * 4);

  CHECK_OK(gpa_queue_destroy(q));
  free(host);
  CHECK_OK(gpa_actor_destroy(a));
  printf("batch: ok\n");
  return 0;
}
