/* A program built outside the tree against an installed gpuactor (by
 * tests/install/check.sh, through CMake and through pkg-config): one op and
 * one readback through the public header, checked. */
#include <gpuactor.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (gpa_version() != GPA_VERSION_HEX || strcmp(gpa_version_string(), GPA_VERSION_STRING)) {
    fprintf(stderr, "consumer: header %s, library %s\n", GPA_VERSION_STRING, gpa_version_string());
    return 1;
  }
  gpa_actor *a;
  gpa_status st = gpa_actor_create(NULL, &a); /* GPA_DEVICE picks cpu or sim */
  if (st != GPA_OK) {
    fprintf(stderr, "consumer: gpa_actor_create: %s: %s\n", gpa_status_name(st), gpa_last_error_message());
    return 1;
  }
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_buffer_id b;
  int rc = 1;
  if (gpa_buffer_acquire(a, NULL, 16 * sizeof(float), &b) == GPA_OK) {
    gpa_tensor t = {b, 0, GPA_F32, 1, {16}};
    gpa_attr v = {"value", GPA_ATTR_FLOAT, 0, 2.5};
    gpa_handle *rb = NULL;
    gpa_batch_begin(q, "consumer");
    st = gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = &t, .n_outputs = 1, .attrs = &v, .n_attrs = 1}, NULL);
    if (st == GPA_OK) st = gpa_readback(q, &t, &rb);
    gpa_status sync = gpa_sync_batch(q, NULL);
    const void *data = NULL;
    uint64_t n = 0;
    if (st == GPA_OK && sync == GPA_OK && gpa_handle_data(rb, &data, &n) == GPA_OK && n == sizeof(float) * 16) {
      const float *f = data;
      rc = 0;
      for (int i = 0; i < 16; i++) rc |= f[i] != 2.5f;
    }
    if (rb) gpa_handle_release(rb);
    gpa_buffer_release(a, b);
  }
  printf("consumer: gpuactor %s on %s: %s\n", gpa_version_string(), gpa_actor_backend(a), rc ? "FAILED" : "ok");
  gpa_actor_destroy(a);
  return rc;
}
