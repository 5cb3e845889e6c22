/* CUDA backend: the cuBLAS handle's stream and workspace are set when the
 * GEMM's queue changes, not before every GEMM (backends/cuda/blas.c; issue
 * 24: an actor with one queue paid cublasSetStream + cublasSetWorkspace per
 * GEMM). The backend counts the times it set them; a user op reads the
 * count on the actor thread. Checked: repeated GEMMs of one queue set
 * nothing more; a second queue sets them, and so does the first again
 * after it; a queue created after another was destroyed (its stream may be
 * the pooled one, its workspace new) sets them; every product is right, on
 * every queue. Any cuda device (sim or a GPU). */
#ifndef GPA_HAVE_CUDA_BACKEND
#include <stdio.h>
int main(void) {
  fprintf(stderr, "skipped: built without the CUDA backend\n");
  return 77;
}
#else
#include <math.h>

#include "backends/cuda/cuda_internal.h"
#include "test_cuda_util.h"

enum { N = 8, IN = 16, OUT = 12 };

static uint64_t sets;
static gpa_status stats_cuda(const gpa_op_exec *x) {
  sets = gpa__cu_blas_sets(gpa__cu_of(x));
  return GPA_OK;
}

/* The backend's count now, after everything queued on q before. */
static uint64_t blas_sets(gpa_queue *q) {
  gpa_handle *h;
  CHECK_OK(tcu_run(q, &(gpa_op_call){.op = "blas_sets"}, &h));
  gpa_handle_release(h);
  return sets;
}

static float xv[N * IN], wv[OUT * IN], ref[N * OUT];

/* y = x W^T on q, checked against the host's product. */
static void gemm(gpa_actor *a, gpa_queue *q) {
  gpa_tensor x = tcu_f32(a, 2, N, IN, 0), w = tcu_f32(a, 2, OUT, IN, 0), y = tcu_f32(a, 2, N, OUT, 0);
  tu_put(q, &x, xv, N * IN);
  tu_put(q, &w, wv, OUT * IN);
  gpa_tensor in[2] = {x, w};
  gpa_handle *h;
  CHECK_OK(tcu_run(q, &(gpa_op_call){.op = "linear_fwd", .inputs = in, .n_inputs = 2, .outputs = &y, .n_outputs = 1},
                   &h));
  gpa_handle_release(h);
  float got[N * OUT];
  tu_get(q, &y, got, N * OUT);
  for (int i = 0; i < N * OUT; i++) CHECK(fabsf(got[i] - ref[i]) <= 1e-4f * (1 + fabsf(ref[i])));
  gpa_buffer_release(a, x.buffer);
  gpa_buffer_release(a, w.buffer);
  gpa_buffer_release(a, y.buffer);
}

int main(void) {
  tcu_device_or_skip();
  gpa_actor *a = tu_actor(NULL);
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &(gpa_op_desc){.name = "blas_sets", .cuda = stats_cuda}));
  for (int i = 0; i < N * IN; i++) xv[i] = (float)((i * 7) % 13) / 8 - 0.7f;
  for (int i = 0; i < OUT * IN; i++) wv[i] = (float)((i * 5) % 11) / 8 - 0.6f;
  for (int r = 0; r < N; r++)
    for (int o = 0; o < OUT; o++) {
      double s = 0;
      for (int k = 0; k < IN; k++) s += (double)xv[r * IN + k] * wv[o * IN + k];
      ref[r * OUT + o] = (float)s;
    }
  gpa_queue *q = gpa_actor_default_queue(a), *q2, *q3;
  gemm(a, q);
  uint64_t s0 = blas_sets(q);
  CHECK(s0 == 1);
  for (int i = 0; i < 9; i++) gemm(a, q);
  uint64_t s1 = blas_sets(q);
  printf("blas_stream: 10 GEMMs on one queue set the handle %llu time(s)\n", (unsigned long long)s1);
  CHECK(s1 == s0);
  CHECK_OK(gpa_queue_create(a, "second", &q2));
  gemm(a, q2);
  CHECK(blas_sets(q2) == s1 + 1);
  gemm(a, q2);
  CHECK(blas_sets(q2) == s1 + 1);
  gemm(a, q);
  CHECK(blas_sets(q) == s1 + 2);
  /* q2's stream goes back to the pool, its workspace is freed: the next
   * queue's GEMM sets both again (it may get that stream back) */
  gemm(a, q2);
  CHECK(blas_sets(q2) == s1 + 3);
  CHECK_OK(gpa_queue_destroy(q2));
  CHECK_OK(gpa_queue_create(a, "third", &q3));
  gemm(a, q3);
  CHECK(blas_sets(q3) == s1 + 4);
  gemm(a, q3);
  CHECK(blas_sets(q3) == s1 + 4);
  CHECK_OK(gpa_queue_destroy(q3));
  gpa_actor_destroy(a);
  printf("ok\n");
  return 0;
}
#endif
