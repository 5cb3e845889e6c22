/* CUDA backend: how the driver table fails. Each failure is GPA_ENODEVICE
 * with a message saying which: no driver library, not a driver, the
 * toolkit's stub library, no device. The backend reads GPA_CUDA_DRIVER at
 * each actor creation; the device is the suite's (GPA_DEVICE). */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>

#include "backends/cuda/cu.h"
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
  if (!strcmp(dev, "sim")) {
    tcu_sim s = tcu_sim_api(a);
    /* The table's cuCtxSynchronize is the (void) export cuda.h declares, not
     * what the name means at 13.0 (cuCtxSynchronize_v2, which takes the
     * context: the sim maps it as a driver does). */
#ifdef GPA_HAVE_CUDA_BACKEND /* without it there is no sim device to get here */
    void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
    Dl_info info;
    CHECK(lib && dladdr(dlsym(lib, "cuInit"), &info) && info.dli_fname);
    gpa__cu_api api;
    char msg[256];
    CHECK_OK(gpa__cu_open(&api, info.dli_fname, msg, sizeof msg));
    void *plain = dlsym(lib, "cuCtxSynchronize");
    CHECK(plain && memcmp(&api.cuCtxSynchronize, &plain, sizeof plain) == 0);
    gpa__cu_close(&api);
    dlclose(lib);
#endif
    /* A clean shutdown synchronizes the context and does not reset it. It
     * did reset when the _v2 form was called as the (void) one. */
    size_t resets = s.primary_resets();
    CHECK_OK(gpa_actor_destroy(a));
    CHECK(s.primary_resets() == resets);
    printf("ok: a clean shutdown does not reset the context\n");
    return 0;
  }
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
