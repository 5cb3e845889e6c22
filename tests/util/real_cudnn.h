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

/* Finalizes cuDNN's heuristics (mode A) on the operation graph g that a
 * build made (built: its success), then frees g. CUDNN_STATUS_SUCCESS, or
 * the failure with why[0..n) saying where (a failed build keeps the
 * builder's reason). */
static inline cudnnStatus_t tu_real_cudnn_heur(gpa__dnn *d, int built, gpa__dnn_descs *g, char *why, size_t n) {
  if (!built) return CUDNN_STATUS_BAD_PARAM;
  cudnnBackendDescriptor_t heur = NULL;
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  cudnnStatus_t s = d->api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
  if (!s) s = d->api.cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->graph);
  if (!s) s = d->api.cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (!s) s = d->api.cudnnBackendFinalize(heur);
  if (s) snprintf(why, n, "heuristics: %s", d->api.cudnnGetErrorString(s));
  if (heur) d->api.cudnnBackendDestroyDescriptor(heur);
  gpa__dnn_descs_free(&d->api, g);
  return s;
}
#endif
