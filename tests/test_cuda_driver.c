/* CUDA backend: how the driver table fails. Each failure is GPA_ENODEVICE
 * with a message saying which: no driver library, not a driver, the
 * toolkit's stub library, no device. The backend reads GPA_CUDA_DRIVER at
 * each actor creation; the device is the suite's (GPA_DEVICE). */
#include <libgen.h>
#include <limits.h>
#include <unistd.h>

#include "test_cuda_util.h"

static void expect_nodevice(const char *driver, const char *needle) {
  setenv("GPA_CUDA_DRIVER", driver, 1);
  gpa_actor *a = NULL;
  CHECK_ST(gpa_actor_create(NULL, &a), GPA_ENODEVICE);
  CHECK(a == NULL);
  CHECK_MSG(needle);
  printf("ok: %s -> %s\n", driver, gpa_last_error_message());
}

int main(void) {
  const char *dev = tcu_device_or_skip();
  const char *real = getenv("GPA_CUDA_DRIVER");
  char saved[PATH_MAX] = "";
  if (real) snprintf(saved, sizeof saved, "%s", real);

  expect_nodevice("/nonexistent/libcuda.so.1", "no CUDA driver: cannot open /nonexistent/libcuda.so.1");
  expect_nodevice("libm.so.6", "is not a CUDA driver");
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) == 0) expect_nodevice(stub, "stub library");
  else printf("note: %s absent, stub case not run\n", stub);
  char self[PATH_MAX], nodev[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0);
  self[n] = 0;
  snprintf(nodev, sizeof nodev, "%s/libgpa_cuda_nodev.so", dirname(self));
  expect_nodevice(nodev, "no CUDA device");

  /* The suite's own driver still opens afterwards. */
  if (saved[0]) setenv("GPA_CUDA_DRIVER", saved, 1);
  else unsetenv("GPA_CUDA_DRIVER");
  gpa_actor *a = NULL;
  gpa_status st = gpa_actor_create(NULL, &a);
  if (st == GPA_ENODEVICE) {
    printf("no device for the last case: %s\n", gpa_last_error_message());
    return 0;
  }
  CHECK_OK(st);
  CHECK(!strcmp(gpa_actor_backend(a), !strcmp(dev, "sim") ? "sim" : "cuda"));
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
