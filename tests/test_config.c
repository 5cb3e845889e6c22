/* Configuration: environment over the GPA_CONFIG file over the program's
 * options over defaults; unknown keys and malformed values are warned about
 * by name and ignored. Everything is read once per process, so this test
 * sets the environment before its first actor. */
#include <stdlib.h>
#include <unistd.h>

#include "util/testutil.h"

#ifndef GPA_HAVE_JANSSON
int main(void) {
  fprintf(stderr, "skipped: built without jansson\n");
  return 77;
}
#else
int main(void) {
  char dir[] = "/tmp/gpa_config_XXXXXX";
  CHECK(mkdtemp(dir));
  char cfg[128], errlog[128];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  snprintf(errlog, sizeof errlog, "%s/stderr.txt", dir);
  FILE *f = fopen(cfg, "w");
  CHECK(f);
  /* file: mailbox 16 (env says 8 and wins), fail policy (file only), a
   * memory budget (file only), an unknown key and a malformed value */
  fputs("{\"mailbox_size\": 16, \"full_policy\": \"fail\", \"mem_budget\": \"1M\",\n"
        " \"bogus_key\": 3, \"threads\": \"many\", \"shutdown\": [1]}\n",
        f);
  fclose(f);
  setenv("GPA_CONFIG", cfg, 1);
  setenv("GPA_MAILBOX_SIZE", "8", 1);
  fflush(stderr);
  int saved = dup(2);
  CHECK(freopen(errlog, "w", stderr));
  /* program options: mailbox 1024 and a 64 MiB budget, both overridden */
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mailbox_size = 1024, .mem_budget = 64u << 20});
  fflush(stderr);
  dup2(saved, 2);
  close(saved);

  f = fopen(errlog, "r");
  char text[4096] = {0};
  CHECK(fread(text, 1, sizeof text - 1, f) > 0);
  fclose(f);
  fprintf(stderr, "%s", text);
  CHECK(strstr(text, "unknown key \"bogus_key\""));
  CHECK(strstr(text, "malformed value 'many' of \"threads\""));
  CHECK(strstr(text, "\"shutdown\""));

  /* budget 1 MiB from the file: a 2 MiB buffer does not fit */
  gpa_buffer_id id;
  CHECK_ST(gpa_buffer_acquire(a, NULL, 2u << 20, &id), GPA_ENOMEM);
  CHECK_OK(gpa_buffer_acquire(a, NULL, 1u << 19, &id));
  /* mailbox 8 from the environment and fail policy from the file: a burst
   * of fills from one thread meets EAGAIN and names 8 slots */
  gpa_tensor t = {id, 0, GPA_F32, 1, {1 << 17}};
  gpa_queue *q = gpa_actor_default_queue(a);
  CHECK(tu_fill_until_again(q, &t, 5000));
  CHECK_MSG("8 slots");
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_actor_destroy(a));
  unlink(cfg);
  unlink(errlog);
  rmdir(dir);
  printf("config: ok\n");
  return 0;
}
#endif
