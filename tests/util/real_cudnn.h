/* The real libcudnn.so.9 for tests that check our graphs against it (no
 * GPU needed: descriptors, operation graphs and heuristics finalize on the
 * host). Include only where the CUDA backend is built. */
#ifndef GPA_TESTS_REAL_CUDNN_H
#define GPA_TESTS_REAL_CUDNN_H
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cudnn.h"
#include "util/testutil.h"

/* Opens it into *d (its function table and version): 1, or 0 after saying
 * why the part is skipped (a sanitizer build: an uninstrumented library
 * with its own threads is not ours to leak- or race-check; no library).
 * The caller dlcloses d->api.lib. */
static inline int tu_real_cudnn_open(gpa__dnn *d) {
  memset(d, 0, sizeof *d);
#if defined(GPA_ASAN) || defined(GPA_TSAN)
  printf("skipped part: the real libcudnn in a sanitizer build\n");
  return 0;
#endif
  const char *cand[] = {getenv("GPA_CUDNN"), "libcudnn.so.9", "/usr/local/cuda/lib/libcudnn.so.9",
                        "/usr/local/cuda/lib64/libcudnn.so.9", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9"};
  for (size_t i = 0; i < sizeof cand / sizeof cand[0] && !d->api.lib; i++)
    if (cand[i] && *cand[i] && !strstr(cand[i], "gpa_sim")) d->api.lib = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
  if (!d->api.lib) {
    printf("skipped part: no libcudnn.so.9 on this machine\n");
    return 0;
  }
#define RESOLVE(name)                                  \
  *(void **)&d->api.name = dlsym(d->api.lib, #name); \
  CHECK(d->api.name);
  GPA__CUDNN_API(RESOLVE)
#undef RESOLVE
  d->version = d->api.cudnnGetVersion();
  return 1;
}
#endif
