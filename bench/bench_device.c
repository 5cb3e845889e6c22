/* What the cuda_* attention benches share: random device tensors, the best
 * device time of a batch of one op, and PyTorch's figures for a shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

gpa_tensor gpa_bench_device_tensor(gpa_actor *a, gpa_queue *q, int dt, int rank, const int64_t *shape,
                                   uint64_t *seed) {
  gpa_tensor t = {0};
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i], t.shape[i] = shape[i];
  t.rank = (uint32_t)rank, t.dtype = dt;
  size_t es = dt == GPA_F32 ? 4 : 2, bytes = (size_t)n * es;
  if (gpa_buffer_acquire(a, NULL, bytes, &t.buffer) != GPA_OK) {
    fprintf(stderr, "gpa-bench: %s\n", gpa_last_error_message());
    exit(1);
  }
  uint16_t *h = malloc(bytes); /* random, never zeros: |x| in [0.25, 1) (f32: pairs of those bits) */
  for (size_t i = 0; i < bytes / 2; i++) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (uint16_t)((dt == GPA_F16 ? 0x3400u : 0x3e80u) | ((*seed >> 33) & 0x7fu) | ((*seed >> 60) & 1) << 15);
  }
  gpa_upload(q, &t, h, bytes, 0, NULL);
  gpa_sync_batch(q, NULL);
  free(h);
  return t;
}

double gpa_bench_batch_ns(gpa_queue *q, const gpa_op_call *call, int k, int reps, void (*warmed)(void), char *err,
                          size_t n) {
  double best = 1e300;
  for (int r = 0; r <= reps; r++) { /* r == 0: warm-up (module load, plan build) */
    gpa_sync_batch(q, NULL);
    for (int i = 0; i < k; i++) gpa_submit(q, call, NULL);
    gpa_batch_stats st = {.size = sizeof st};
    if (gpa_sync_batch(q, &st) != GPA_OK) {
      snprintf(err, n, "%s", st.first_error_message);
      return 0;
    }
    if (r && (double)st.device_ns / k < best) best = (double)st.device_ns / k;
    if (!r && warmed) warmed();
  }
  return best;
}

/* GPA_BENCH_SDPA_TORCH_CACHE: the output of "sdpa_torch.py -" (each line
 * its shape's fields, then "name fwd bwd"), measured once for every bench. */
static int torch_cached(const char *shape_args, gpa_bench_torch_row *rows, int max) {
  const char *path = getenv("GPA_BENCH_SDPA_TORCH_CACHE");
  FILE *f = path && *path ? fopen(path, "r") : NULL;
  if (!f) return 0;
  int n = 0;
  size_t k = strlen(shape_args);
  char line[512];
  while (n < max && fgets(line, sizeof line, f))
    if (!strncmp(line, shape_args, k) && line[k] == ' ' &&
        sscanf(line + k + 1, "%15s %lf %lf", rows[n].backend, &rows[n].fwd, &rows[n].bwd) == 3)
      n++;
  fclose(f);
  return n;
}

FILE *gpa_bench_script(const char *env, const char *args) {
  const char *script = getenv(env);
  if (!script || !*script) return NULL;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "python3 %s %s 2>/dev/null", script, args);
  return popen(cmd, "r");
}

int gpa_bench_torch_sdpa(const char *shape_args, gpa_bench_torch_row *rows, int max) {
  int cached = torch_cached(shape_args, rows, max);
  if (cached) return cached;
  FILE *f = gpa_bench_script("GPA_BENCH_SDPA_TORCH", shape_args);
  if (!f) return 0;
  int n = 0;
  char line[512];
  while (n < max && fgets(line, sizeof line, f))
    if (sscanf(line, "%15s %lf %lf", rows[n].backend, &rows[n].fwd, &rows[n].bwd) == 3) n++;
  pclose(f);
  return n;
}
