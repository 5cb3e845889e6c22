/* Helpers of the linear/conv1d/attention tests: an actor, tensors uploaded
 * from host arrays, ops run to completion, results read back, central finite
 * differences, and a tolerance check. Main thread of a test only. */
#ifndef GPA_TESTS_NN_TEST_H
#define GPA_TESTS_NN_TEST_H
#include <stdint.h>

#include "gpuactor.h"

typedef struct gpa_nt {
  gpa_actor *a;
  gpa_queue *q;
  gpa_buffer_id bufs[4096];
  uint32_t n_bufs;
  int failures;
  int quick; /* sanitizer build: smaller shapes */
} gpa_nt;

/* Creates the actor (NULL options: GPA_DEVICE and the environment decide).
 * Returns 0, or 77 when no actor can be created. */
int gpa_nt_open(gpa_nt *t);
/* Releases buffers and destroys the actor; the exit code (0 or 1). */
int gpa_nt_close(gpa_nt *t);

/* A tensor in a fresh buffer; data (nullable) uploaded. */
gpa_tensor gpa_nt_tensor(gpa_nt *t, int dtype, uint32_t rank, const int64_t *shape, const void *data);
/* An f32 tensor filled with NaN (catches outputs the op does not write). */
gpa_tensor gpa_nt_out(gpa_nt *t, uint32_t rank, const int64_t *shape);
/* Submits and awaits one op. Returns its status; the error text goes to
 * t->msg. */
gpa_status gpa_nt_run(gpa_nt *t, const char *op, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                      uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs);
/* Reads a tensor back into dst (numel * dtype size bytes). */
void gpa_nt_read(gpa_nt *t, const gpa_tensor *src, void *dst);
extern char gpa_nt_msg[512];

/* Deterministic uniform values in [lo, hi). */
void gpa_nt_fill(float *p, int64_t n, double lo, double hi, uint64_t *seed);
/* [B][C][L] <-> [B][L][C]: to_nlc 1 writes dst [B][L][C] from src [B][C][L],
 * 0 the other way (conv1d's two layouts). dst and src must not overlap. */
void gpa_nt_relayout(float *dst, const float *src, int64_t B, int64_t C, int64_t L, int to_nlc);
/* A double copy of n floats (n + 1 allocated: n may be 0); free() it. */
double *gpa_nt_to_double(const float *f, int64_t n);
/* Compares got (f32) with ref (double): |g - r| <= rtol*|r| + rtol*1e-2*max|r|
 * elementwise (the harness's rule), plus FLT_EPSILON*mag[i] when mag is not
 * NULL: mag[i] = sum of |terms| of a dot product, the scale of an fp32
 * summation error (a GEMM over K = 500 carries it even where the result is
 * small). Reports the worst element and counts a failure; 1 when it passed. */
int gpa_nt_close_to(gpa_nt *t, const char *what, const float *got, const double *ref, const double *mag, int64_t n,
                    double rtol);
/* The check of gpa_nt_close_to without reporting: the index of the element
 * furthest outside the tolerance, or -1 when all are within; max|ref| into
 * *mx_out (nullable). */
int64_t gpa_nt_worst(const float *got, const double *ref, const double *mag, int64_t n, double rtol, double *mx_out);
/* Bitwise equality of two f32 arrays. */
int gpa_nt_same_bits(gpa_nt *t, const char *what, const float *a, const float *b, int64_t n);
/* Central difference of loss(ctx) in x[i] (double), step h. */
double gpa_nt_fd(double (*loss)(void *ctx), void *ctx, double *x, int64_t i, double h);
/* Records a failure with a message. */
void gpa_nt_fail(gpa_nt *t, const char *what);
/* Checks that an op call fails with `status` and a message containing sub. */
void gpa_nt_expect_error(gpa_nt *t, const char *op, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                         uint32_t n_out, const gpa_attr *attrs, uint32_t n_attrs, int status, const char *sub);

#endif
