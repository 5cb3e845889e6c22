/* The SDPA plans' experiment knobs (gpa__dnn_tune in cudnn.h), read once
 * per actor when it loads cuDNN. They exist to measure, on one GPU run,
 * what separates our backward from PyTorch's (docs/cuda.md): which
 * heuristics list, which of its engine configs, how the graph types dS;
 * and whether replaying an execute as a CUDA graph saves host time.
 * A value we do not know keeps the default and says so on stderr: a typo
 * in an experiment must not pass for a measurement of the default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cudnn.h"

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static void unknown(const char *name, const char *v, const char *want) {
  fprintf(stderr, "gpuactor: %s=%s is not %s: the default is used\n", name, v, want);
}

void gpa__dnn_tune_read(gpa__dnn_tune *t) {
  memset(t, 0, sizeof *t);
  const char *v = env("GPA_CUDNN_SDPA_HEUR");
  if (v) {
    if (!strcmp(v, "a") || !strcmp(v, "A")) t->heur = 0;
    else if (!strcmp(v, "b") || !strcmp(v, "B")) t->heur = 1;
    else if (!strcmp(v, "fallback")) t->heur = 2;
    else unknown("GPA_CUDNN_SDPA_HEUR", v, "a, b or fallback");
  }
  if ((v = env("GPA_CUDNN_SDPA_BWD_ENGINE"))) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > 1000) unknown("GPA_CUDNN_SDPA_BWD_ENGINE", v, "a candidate index 0..1000");
    else t->first = (int)n;
  }
  if ((v = env("GPA_CUDNN_SDPA_DS"))) {
    if (!strcmp(v, "io")) t->ds_io = 1;
    else if (strcmp(v, "f32")) unknown("GPA_CUDNN_SDPA_DS", v, "f32 or io");
  }
  if ((v = env("GPA_CUDNN_VERBOSE"))) t->verbose = !strcmp(v, "2") ? 2 : strcmp(v, "0") != 0;
  if ((v = env("GPA_CUDNN_GRAPHS"))) {
    if (!strcmp(v, "1")) t->graphs = 1;
    else if (strcmp(v, "0")) unknown("GPA_CUDNN_GRAPHS", v, "0 or 1");
  }
}
