/* The transpose op: the last two dims swapped, leading dims as batches, for
 * every element size (u8, bf16, f32, i64), shapes off the 32 x 32 tile
 * (ragged edges, one row, one column) and a batch of 4,096 tiles; the
 * result bit for bit against a transpose done here. Bad input: rank 1, a
 * wrong output shape, another dtype, y overlapping x. On every device the
 * suite runs (GPA_DEVICE). */
#include "util/testutil.h"

static uint64_t seed = 0x2545f4914f6cdd1dull;

static gpa_tensor tensor(gpa_actor *a, int dt, uint32_t rank, const int64_t *shape) {
  gpa_tensor t = {.dtype = dt, .rank = rank};
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; i++) n *= (t.shape[i] = shape[i]);
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)(n ? n : 1) * gpa_dtype_size(dt), &t.buffer));
  return t;
}

static void run_case(gpa_actor *a, int dt, uint32_t rank, const int64_t *shape) {
  gpa_queue *q = gpa_actor_default_queue(a);
  int64_t n = 1, b = 1, m = shape[rank - 2], c = shape[rank - 1];
  for (uint32_t i = 0; i < rank; i++) n *= shape[i];
  for (uint32_t i = 0; i + 2 < rank; i++) b *= shape[i];
  size_t es = gpa_dtype_size(dt), bytes = (size_t)n * es;
  unsigned char *src = malloc(bytes + 1), *want = malloc(bytes + 1);
  for (size_t i = 0; i < bytes; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    src[i] = (unsigned char)(seed >> 56);
  }
  for (int64_t bi = 0; bi < b; bi++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < c; j++)
        memcpy(want + (size_t)((bi * c + j) * m + i) * es, src + (size_t)((bi * m + i) * c + j) * es, es);
  int64_t yshape[GPA_MAX_RANK];
  memcpy(yshape, shape, sizeof(int64_t) * rank);
  yshape[rank - 2] = c, yshape[rank - 1] = m;
  gpa_tensor x = tensor(a, dt, rank, shape), y = tensor(a, dt, rank, yshape);
  CHECK_OK(gpa_upload(q, &x, src, bytes, 0, NULL));
  gpa_handle *h;
  CHECK_OK(gpa_transpose(q, &(gpa_transpose_args){.x = x, .y = y}, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  CHECK_OK(gpa_readback(q, &y, &h));
  CHECK_OK(gpa_sync_batch(q, NULL));
  const void *got;
  uint64_t size;
  CHECK_OK(gpa_handle_data(h, &got, &size));
  CHECK(size == bytes);
  if (bytes && memcmp(got, want, bytes)) { /* an empty readback's data may be NULL */
    fprintf(stderr, "transpose %s rank %u [%lld x %lld x %lld]: wrong result\n", gpa_dtype_name(dt), rank,
            (long long)b, (long long)m, (long long)c);
    exit(1);
  }
  gpa_handle_release(h);
  gpa_buffer_release(a, x.buffer);
  gpa_buffer_release(a, y.buffer);
  free(src), free(want);
}

static void bad_input(gpa_actor *a) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tensor(a, GPA_F32, 2, (int64_t[]){6, 10}), v = tensor(a, GPA_F32, 1, (int64_t[]){60});
  gpa_tensor y = tensor(a, GPA_F32, 2, (int64_t[]){10, 6}), yb = tensor(a, GPA_BF16, 2, (int64_t[]){10, 6});
  gpa_tensor ys = tensor(a, GPA_F32, 2, (int64_t[]){6, 10});
  CHECK_ST(gpa_transpose(q, &(gpa_transpose_args){.x = v, .y = v}, NULL), GPA_ESHAPE);
  CHECK_MSG("rank");
  CHECK_ST(gpa_transpose(q, &(gpa_transpose_args){.x = x, .y = ys}, NULL), GPA_ESHAPE);
  CHECK_ST(gpa_transpose(q, &(gpa_transpose_args){.x = x, .y = yb}, NULL), GPA_EDTYPE);
  gpa_tensor alias = x;
  alias.shape[0] = 10, alias.shape[1] = 6;
  CHECK_ST(gpa_transpose(q, &(gpa_transpose_args){.x = x, .y = alias}, NULL), GPA_EINVAL);
  CHECK_MSG("overlaps");
  CHECK_OK(gpa_transpose(q, &(gpa_transpose_args){.x = x, .y = y}, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  static const struct {
    uint32_t rank;
    int64_t shape[4];
  } cases[] = {
      {2, {1, 1}},         {2, {1, 77}},     {2, {77, 1}},       {2, {32, 32}},   {2, {33, 65}},
      {3, {3, 5, 7}},      {3, {2, 96, 128}}, {3, {32, 128, 96}}, {4, {2, 3, 40, 9}}, {3, {4, 0, 5}},
      {3, {1024, 64, 64}}, /* 4,096 tiles */
  };
  static const int dts[] = {GPA_U8, GPA_BF16, GPA_F32, GPA_I64};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
      if (i + 1 < sizeof cases / sizeof cases[0] || dts[d] == GPA_F32) run_case(a, dts[d], cases[i].rank, cases[i].shape);
  bad_input(a);
  printf("transpose on %s: %zu shapes in u8, bf16, f32, i64 bit for bit, bad input refused\n", gpa_actor_backend(a),
         sizeof cases / sizeof cases[0]);
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
