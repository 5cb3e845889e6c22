/* See nn_test.h. */
#include "nn_test.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char gpa_nt_msg[512];

int gpa_nt_open(gpa_nt *t) {
  memset(t, 0, sizeof *t);
#if defined(GPA_ASAN) || defined(GPA_TSAN)
  t->quick = 1;
#endif
  if (getenv("GPA_PARITY_QUICK")) t->quick = 1;
  gpa_status st = gpa_actor_create(NULL, &t->a);
  if (st != GPA_OK) {
    fprintf(stderr, "skip: no actor: %s (%s)\n", gpa_status_name(st), gpa_last_error_message());
    return 77;
  }
  t->q = gpa_actor_default_queue(t->a);
  return 0;
}

int gpa_nt_close(gpa_nt *t) {
  for (uint32_t i = 0; i < t->n_bufs; i++) gpa_buffer_release(t->a, t->bufs[i]);
  gpa_actor_destroy(t->a);
  if (t->failures) fprintf(stderr, "%d check(s) failed\n", t->failures);
  return t->failures ? 1 : 0;
}

void gpa_nt_fail(gpa_nt *t, const char *what) {
  fprintf(stderr, "FAIL: %s\n", what);
  t->failures++;
}

gpa_tensor gpa_nt_tensor(gpa_nt *t, int dtype, uint32_t rank, const int64_t *shape, const void *data) {
  gpa_tensor x;
  memset(&x, 0, sizeof x);
  x.dtype = dtype;
  x.rank = rank;
  for (uint32_t i = 0; i < rank; i++) x.shape[i] = shape[i];
  uint64_t bytes = (uint64_t)gpa_tensor_numel(&x) * gpa_dtype_size(dtype);
  gpa_status st = gpa_buffer_acquire(t->a, NULL, bytes ? bytes : 4, &x.buffer);
  if (st != GPA_OK || t->n_bufs == 4096) {
    gpa_nt_fail(t, "gpa_buffer_acquire");
    return x;
  }
  t->bufs[t->n_bufs++] = x.buffer;
  if (data && bytes) {
    gpa_handle *h = NULL;
    st = gpa_upload(t->q, &x, data, bytes, 0, &h);
    if (st == GPA_OK) st = gpa_await(h, -1);
    gpa_handle_release(h);
    if (st != GPA_OK) gpa_nt_fail(t, "gpa_upload");
  }
  return x;
}

gpa_tensor gpa_nt_out(gpa_nt *t, uint32_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; i++) n *= shape[i];
  float *nan = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) nan[i] = NAN;
  gpa_tensor x = gpa_nt_tensor(t, GPA_F32, rank, shape, nan);
  free(nan);
  return x;
}

gpa_status gpa_nt_run(gpa_nt *t, const char *op, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                      uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs) {
  gpa_op_call c = {op, in, n_in, out, n_out, attrs, n_attrs};
  gpa_handle *h = NULL;
  gpa_nt_msg[0] = 0;
  gpa_status st = gpa_submit(t->q, &c, &h);
  if (st != GPA_OK) {
    snprintf(gpa_nt_msg, sizeof gpa_nt_msg, "%s", gpa_last_error_message());
    return st;
  }
  st = gpa_await(h, -1);
  if (st != GPA_OK) snprintf(gpa_nt_msg, sizeof gpa_nt_msg, "%s", gpa_handle_error_message(h));
  gpa_handle_release(h);
  return st;
}

void gpa_nt_read(gpa_nt *t, const gpa_tensor *src, void *dst) {
  uint64_t bytes = (uint64_t)gpa_tensor_numel(src) * gpa_dtype_size(src->dtype);
  if (!bytes) return;
  gpa_handle *h = NULL;
  const void *data = NULL;
  uint64_t size = 0;
  gpa_status st = gpa_readback(t->q, src, &h);
  if (st == GPA_OK) st = gpa_await(h, -1);
  if (st == GPA_OK) st = gpa_handle_data(h, &data, &size);
  if (st == GPA_OK && size == bytes)
    memcpy(dst, data, bytes);
  else
    gpa_nt_fail(t, "gpa_readback");
  gpa_handle_release(h);
}

double *gpa_nt_to_double(const float *f, int64_t n) {
  double *d = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; i++) d[i] = f[i];
  return d;
}

void gpa_nt_fill(float *p, int64_t n, double lo, double hi, uint64_t *seed) {
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*seed >> 11) / 9007199254740992.0;
    p[i] = (float)(lo + (hi - lo) * u);
  }
}

void gpa_nt_relayout(float *dst, const float *src, int64_t B, int64_t C, int64_t L, int to_nlc) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t l = 0; l < L; l++) {
        int64_t ncl = (b * C + c) * L + l, nlc = (b * L + l) * C + c;
        if (to_nlc)
          dst[nlc] = src[ncl];
        else
          dst[ncl] = src[nlc];
      }
}

int64_t gpa_nt_worst(const float *got, const double *ref, const double *mag, int64_t n, double rtol, double *mx_out) {
  double mx = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(ref[i]) && fabs(ref[i]) > mx) mx = fabs(ref[i]);
  int64_t worst = -1;
  double wexc = 0;
  for (int64_t i = 0; i < n; i++) {
    double r = ref[i], g = got[i];
    if (!isfinite(r)) {
      if (!(g == r)) { worst = i; wexc = INFINITY; break; }
      continue;
    }
    double exc = fabs(g - r) - (rtol * fabs(r) + rtol * 1e-2 * mx + (mag ? FLT_EPSILON * mag[i] : 0.0));
    if (!(exc <= 0) && (worst < 0 || !(exc <= wexc))) { worst = i; wexc = exc; }
  }
  if (mx_out) *mx_out = mx;
  return worst;
}

int gpa_nt_close_to(gpa_nt *t, const char *what, const float *got, const double *ref, const double *mag, int64_t n,
                    double rtol) {
  double mx;
  int64_t worst = gpa_nt_worst(got, ref, mag, n, rtol, &mx);
  if (worst < 0) return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s: element %lld is %.9g, expected %.9g (max|ref| %.3g)", what, (long long)worst,
           (double)got[worst], ref[worst], mx);
  gpa_nt_fail(t, buf);
  return 0;
}

int gpa_nt_same_bits(gpa_nt *t, const char *what, const float *a, const float *b, int64_t n) {
  if (!memcmp(a, b, (size_t)n * sizeof(float))) return 1;
  char buf[160];
  snprintf(buf, sizeof buf, "%s: two runs differ bitwise", what);
  gpa_nt_fail(t, buf);
  return 0;
}

double gpa_nt_fd(double (*loss)(void *ctx), void *ctx, double *x, int64_t i, double h) {
  double x0 = x[i];
  x[i] = x0 + h;
  double lp = loss(ctx);
  x[i] = x0 - h;
  double lm = loss(ctx);
  x[i] = x0;
  return (lp - lm) / (2 * h);
}

void gpa_nt_expect_error(gpa_nt *t, const char *op, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                         uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs, int status, const char *sub) {
  gpa_status st = gpa_nt_run(t, op, in, n_in, out, n_out, attrs, n_attrs);
  char buf[768];
  if (st == GPA_OK || (status && st != status) || (sub && !strstr(gpa_nt_msg, sub))) {
    snprintf(buf, sizeof buf, "%s: expected %s with '%s', got %s: '%s'", op, gpa_status_name(status), sub ? sub : "",
             gpa_status_name(st), gpa_nt_msg);
    gpa_nt_fail(t, buf);
  }
}
