/* Status codes: names, texts, fixed numbers, per-thread last error. */
#include <pthread.h>

#include "util/testutil.h"

static void *other_thread(void *arg) {
  (void)arg;
  /* A fresh thread has no last error, whatever the main thread did. */
  CHECK(gpa_last_error_message()[0] == 0);
  gpa_actor *a = NULL;
  CHECK_ST(gpa_actor_create(NULL, NULL), GPA_EINVAL);
  CHECK(a == NULL);
  CHECK_MSG("out is NULL");
  return NULL;
}

int main(void) {
  CHECK(GPA_OK == 0 && GPA_EINVAL == -1 && GPA_ENOMEM == -2 && GPA_ESTALE == -6 && GPA_ENOTSYNCED == -7);
  CHECK(!strcmp(gpa_status_name(GPA_OK), "GPA_OK"));
  CHECK(!strcmp(gpa_status_name(GPA_ESTALE), "GPA_ESTALE"));
  CHECK(!strcmp(gpa_status_name(GPA_SKIP), "GPA_SKIP"));
  CHECK(!strcmp(gpa_status_name(12345), "GPA_UNKNOWN"));
  CHECK(!strcmp(gpa_strerror(-999), "unknown status"));
  CHECK(!strcmp(gpa_strerror(GPA_OK), "success"));
  /* Every number from EINTERNAL up to OK has a distinct name and a text. */
  for (int s = GPA_EINTERNAL; s <= GPA_OK; s++) {
    CHECK(strcmp(gpa_status_name(s), "GPA_UNKNOWN") != 0);
    CHECK(strcmp(gpa_strerror(s), "unknown status") != 0);
    for (int t = GPA_EINTERNAL; t < s; t++) CHECK(strcmp(gpa_status_name(s), gpa_status_name(t)) != 0);
  }
  CHECK(gpa_version() == GPA_VERSION_HEX);
  CHECK(!strcmp(gpa_version_string(), GPA_VERSION_STRING));

  CHECK_ST(gpa_buffer_acquire(NULL, NULL, 4, NULL), GPA_EINVAL);
  CHECK_MSG("gpa_buffer_acquire");
  pthread_t th;
  CHECK(pthread_create(&th, NULL, other_thread, NULL) == 0);
  pthread_join(th, NULL);
  /* The other thread's error did not overwrite ours. */
  CHECK_MSG("gpa_buffer_acquire");
  printf("status: ok\n");
  return 0;
}
