/* CUDA backend on a real GPU (skipped, exit 77, without one): the same ops
 * on cuda and on cpu agree, through uploads, kernels, cuBLAS and readbacks.
 * Picks its devices explicitly (GPA_DEVICE is cleared before the first
 * actor: the environment would override the program's options). */
#include <math.h>

#include "util/testutil.h"

static void run(gpa_actor *a, float *out, const float *xv, const float *wv, int n, int in, int outd) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, (int64_t)n * in), w = tu_f32(a, (int64_t)outd * in), y = tu_f32(a, (int64_t)n * outd);
  tu_put(q, &x, xv, (int64_t)n * in);
  tu_put(q, &w, wv, (int64_t)outd * in);
  x.rank = w.rank = y.rank = 2;
  x.shape[0] = n, x.shape[1] = in;
  w.shape[0] = outd, w.shape[1] = in;
  y.shape[0] = n, y.shape[1] = outd;
  gpa_tensor ins[2] = {x, w};
  gpa_attr g = {"gelu", GPA_ATTR_INT, 1, 0};
  gpa_op_call c = {"linear_fwd", ins, 2, &y, 1, &g, 1};
  CHECK_OK(gpa_submit(q, &c, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  y.rank = 1;
  y.shape[0] = (int64_t)n * outd;
  tu_get(q, &y, out, (int64_t)n * outd);
}

int main(void) {
  unsetenv("GPA_DEVICE");
  unsetenv("GPA_CUDA_DRIVER");
  gpa_actor_options o = {.device = "cuda"};
  gpa_actor *g = tu_actor(&o); /* exit 77 without a GPU */
  o.device = "cpu";
  gpa_actor *h = tu_actor(&o);
  enum { N = 64, IN = 96, OUT = 80 };
  static float xv[N * IN], wv[OUT * IN], yg[N * OUT], yh[N * OUT];
  for (int i = 0; i < N * IN; i++) xv[i] = sinf((float)i);
  for (int i = 0; i < OUT * IN; i++) wv[i] = cosf((float)i) * 0.1f;
  run(g, yg, xv, wv, N, IN, OUT);
  run(h, yh, xv, wv, N, IN, OUT);
  for (int i = 0; i < N * OUT; i++) CHECK(fabsf(yg[i] - yh[i]) <= 1e-4f * (1.0f + fabsf(yh[i])));
  CHECK_OK(gpa_actor_destroy(g));
  CHECK_OK(gpa_actor_destroy(h));
  printf("ok: linear+gelu on cuda matches cpu\n");
  return 0;
}
