/* Options: device strings, the environment over program options, malformed
 * environment values ignored with a warning. */
#include <stddef.h>
#include <stdlib.h>

#include "util/testutil.h"

int main(void) {
  /* This process's environment is read once; set it before the first actor. */
  setenv("GPA_MAILBOX_SIZE", "8", 1);
  setenv("GPA_FULL_POLICY", "fail", 1);
  setenv("GPA_THREADS", "not-a-number", 1); /* warned about and ignored */
  const char *dev = getenv("GPA_DEVICE");
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mailbox_size = 1024});
  /* env mailbox (8) and fail policy win over the program's 1024/wait: a burst
   * of slow-ish submits from one thread must hit EAGAIN quickly */
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 1 << 20);
  CHECK(tu_fill_until_again(q, &x, 2000));
  CHECK_MSG("8 slots");
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_actor_destroy(a));

  gpa_actor *b = NULL;
  if (!dev || !strcmp(dev, "cpu") || !strcmp(dev, "auto")) {
    CHECK_OK(gpa_actor_create(&(gpa_actor_options){.device = "cpu"}, &b));
    CHECK(!strcmp(gpa_actor_backend(b), "cpu"));
    CHECK_OK(gpa_actor_destroy(b));
  }
  /* A program built against the first layout (no trace fields) still works:
   * the fields it does not know are read as zero. */
  gpa_actor_options v1 = {.size = offsetof(gpa_actor_options, trace_path), .trace_path = "/nonexistent/x.json"};
  CHECK_OK(gpa_actor_create(&v1, &b));
  CHECK_OK(gpa_actor_destroy(b));
  v1.size = offsetof(gpa_actor_options, log_level);
  CHECK_ST(gpa_actor_create(&v1, &b), GPA_EINVAL);
  CHECK_ST(gpa_actor_create(&(gpa_actor_options){.device = "cuda:x"}, &b), GPA_EINVAL);
  CHECK_MSG("cuda:x");
  CHECK_ST(gpa_actor_create(&(gpa_actor_options){.device = "gpu"}, &b), GPA_EINVAL);
  printf("options: ok\n");
  return 0;
}
