/* Which GEMM kernels the host backend runs (kernels/host/blas_lib.h): the
 * kernel set asked of OpenBLAS follows the CPU's feature bits as
 * /proc/cpuinfo lists them, the library runs it, GPA_BLAS_CORETYPE forces a
 * lower set (ctest host_blas_kernels_lowest: Prescott) and GPA_BLAS=none runs
 * our own kernel (host_blas_kernels_none); in every case linear_fwd through
 * an actor matches a plain double-precision reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/host/blas_lib.h"
#include "util/testutil.h"

static int has_flag(const char *flags, const char *f) {
  size_t n = strlen(f);
  for (const char *p = flags; (p = strstr(p, f)); p += n)
    if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || !p[n])) return 1;
  return 0;
}

/* What /proc/cpuinfo says the best kernel set is (the kernel lists what the
 * CPU has and the OS enabled), and whether it is an AMD Zen 1-4 (family 23
 * or 25). NULL when it cannot be read. */
static const char *cpuinfo_best(int *zen) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return NULL;
  static char line[8192];
  const char *best = NULL;
  int amd = 0, fam = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "vendor_id", 9))
      amd = strstr(line, "AuthenticAMD") != NULL;
    else if (!strncmp(line, "cpu family", 10))
      fam = atoi(strchr(line, ':') ? strchr(line, ':') + 1 : line);
    else if (!strncmp(line, "flags", 5)) {
      int avx512 = has_flag(line, "avx512f") && has_flag(line, "avx512bw") && has_flag(line, "avx512vl") &&
                   has_flag(line, "avx512dq");
      int avx2 = has_flag(line, "avx2") && has_flag(line, "fma");
      best = avx512 && avx2 && has_flag(line, "avx512_bf16") ? "Cooperlake"
             : avx512 && avx2                                ? "SkylakeX"
             : avx2                                          ? "Haswell"
             : has_flag(line, "avx")                         ? "Sandybridge"
                                                             : "Prescott";
      break;
    }
  fclose(f);
  *zen = best && amd && (fam == 23 || fam == 25) && strcmp(best, "Sandybridge") && strcmp(best, "Prescott");
  return best;
}

int main(void) {
  setenv("GPA_DEVICE", "cpu", 1); /* the host backend's GEMMs, whatever the suite's device */
  const char *forced = getenv("GPA_BLAS_CORETYPE"), *path = getenv("GPA_BLAS");
  int zen = 0;
  const char *best = cpuinfo_best(&zen);
  printf("cpuinfo: %s%s, feature bits: %s, auto: %s\n", best ? best : "(unreadable)", zen ? " (AMD Zen 1-4)" : "",
         gpa__blas_best_kernels(), gpa__blas_auto_kernels());
  if (best) CHECK(!strcmp(best, gpa__blas_best_kernels()));
  if (best) CHECK(!strcmp(zen ? "Zen" : best, gpa__blas_auto_kernels())); /* Zen: OpenBLAS's AVX2 set, faster there */

  gpa_actor *a = NULL;
  CHECK_OK(gpa_actor_create(NULL, &a));
  const gpa__blas_lib *b = gpa__blas();
  printf("host BLAS: %s\n", b->note);
  if (path && !strcmp(path, "none")) {
    CHECK(b->sgemm == NULL && !strcmp(b->kernels, "none"));
  } else if (b->sgemm && !strstr(b->note, "already loaded") && !strstr(b->note, "from the environment")) {
    CHECK(!strcasecmp(b->wanted, forced ? forced : gpa__blas_auto_kernels()));
    CHECK(!strcasecmp(b->kernels, b->wanted)); /* OpenBLAS runs what was asked */
  }

  /* y = x W^T through the op, against a double reference */
  enum { N = 67, IN = 129, OUT = 45 };
  gpa_queue *q = gpa_actor_default_queue(a);
  float *x = malloc(sizeof(float) * N * IN), *w = malloc(sizeof(float) * OUT * IN), *y = NULL;
  for (int i = 0; i < N * IN; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
  for (int i = 0; i < OUT * IN; i++) w[i] = (float)((i * 53 % 97) - 48) / 48.0f;
  gpa_buffer_id bx, bw, by;
  CHECK_OK(gpa_buffer_acquire(a, NULL, sizeof(float) * N * IN, &bx));
  CHECK_OK(gpa_buffer_acquire(a, NULL, sizeof(float) * OUT * IN, &bw));
  CHECK_OK(gpa_buffer_acquire(a, NULL, sizeof(float) * N * OUT, &by));
  gpa_tensor tx = {bx, 0, GPA_F32, 2, {N, IN}}, tw = {bw, 0, GPA_F32, 2, {OUT, IN}}, ty = {by, 0, GPA_F32, 2, {N, OUT}};
  CHECK_OK(gpa_upload(q, &tx, x, sizeof(float) * N * IN, 0, NULL));
  CHECK_OK(gpa_upload(q, &tw, w, sizeof(float) * OUT * IN, 0, NULL));
  gpa_linear_fwd_args la = {.x = tx, .W = tw, .y = ty};
  CHECK_OK(gpa_linear_fwd(q, &la, NULL));
  gpa_handle *rb = NULL;
  CHECK_OK(gpa_readback(q, &ty, &rb));
  CHECK_OK(gpa_await(rb, -1));
  const void *data = NULL;
  uint64_t size = 0;
  CHECK_OK(gpa_handle_data(rb, &data, &size));
  y = (float *)data;
  double worst = 0;
  for (int i = 0; i < N; i++)
    for (int o = 0; o < OUT; o++) {
      double r = 0, mag = 0;
      for (int k = 0; k < IN; k++) {
        r += (double)x[i * IN + k] * w[o * IN + k];
        mag += fabs((double)x[i * IN + k] * w[o * IN + k]);
      }
      double e = fabs(y[i * OUT + o] - r) / (mag > 1e-30 ? mag : 1);
      if (e > worst) worst = e;
    }
  printf("linear_fwd [%d,%d]x[%d,%d]^T: worst error %.3g of the magnitude (kernels %s)\n", N, IN, OUT, IN, worst,
         b->kernels);
  CHECK(worst < 1e-5);
  gpa_handle_release(rb);
  CHECK_OK(gpa_actor_destroy(a));
  free(x);
  free(w);
  return 0;
}
