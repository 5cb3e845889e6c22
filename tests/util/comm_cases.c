/* The collective cases every transport runs, one call per rank (a thread
 * per rank for LOCAL, a process per rank for MPI): each collective and
 * dtype against a reference computed here, in place and not, odd sizes and
 * size 0, ordering with the queue's other ops, handles that complete once,
 * and errors at the call. */
#include "util/comm_cases.h"

#include <math.h>
#include <pthread.h>

#include "util/half.h"

static const int dtypes[] = {GPA_F32, GPA_F16, GPA_BF16, GPA_I32};

/* rank r's element i: small integers, so sums are exact in every dtype */
static float val(int r, int64_t i) { return (float)((i * 3 + r * 5) % 11 - 5); }

static void put_val(void *dst, int dtype, int64_t i, float v) {
  switch (dtype) {
    case GPA_F32: ((float *)dst)[i] = v; break;
    case GPA_F16: ((uint16_t *)dst)[i] = tu_to_f16(v); break;
    case GPA_BF16: ((uint16_t *)dst)[i] = tu_to_bf16(v); break;
    default: ((int32_t *)dst)[i] = (int32_t)v; break;
  }
}

static float get_val(const void *src, int dtype, int64_t i) {
  switch (dtype) {
    case GPA_F32: return ((const float *)src)[i];
    case GPA_F16: return tu_from_f16(((const uint16_t *)src)[i]);
    case GPA_BF16: return tu_from_bf16(((const uint16_t *)src)[i]);
    default: return (float)((const int32_t *)src)[i];
  }
}

/* the value as the dtype stores it */
static float rounded(int dtype, float v) {
  char b[4];
  put_val(b, dtype, 0, v);
  return get_val(b, dtype, 0);
}

static gpa_tensor tensor(gpa_actor *a, int dtype, int64_t n) {
  gpa_tensor t = {0};
  CHECK_OK(gpa_buffer_acquire(a, NULL, (uint64_t)(n ? n : 1) * gpa_dtype_size(dtype), &t.buffer));
  t.dtype = dtype;
  t.rank = 1;
  t.shape[0] = n;
  return t;
}

static gpa_tensor slice(gpa_tensor t, int64_t at, int64_t n) {
  t.offset += (uint64_t)at * gpa_dtype_size(t.dtype);
  t.shape[0] = n;
  return t;
}

static void upload(gpa_queue *q, const gpa_tensor *t, int r, int64_t base) {
  int64_t n = t->shape[0];
  size_t es = gpa_dtype_size(t->dtype);
  char *buf = malloc((size_t)(n ? n : 1) * es);
  for (int64_t i = 0; i < n; i++) put_val(buf, t->dtype, i, val(r, base + i));
  gpa_handle *h;
  CHECK_OK(gpa_upload(q, t, buf, (uint64_t)n * es, 0, &h));
  CHECK_OK(gpa_await(h, -1));
  gpa_handle_release(h);
  free(buf);
}

static float reduce_ref(int op, int dtype, int size, int64_t i) {
  float acc = val(0, i);
  for (int r = 1; r < size; r++) {
    float v = val(r, i);
    if (op == GPA_REDUCE_MAX) acc = v > acc ? v : acc;
    else if (op == GPA_REDUCE_MIN) acc = v < acc ? v : acc;
    else acc += v;
  }
  if (op == GPA_REDUCE_AVG) acc = acc * (1.0f / (float)size);
  return rounded(dtype, acc);
}

static void expect(const void *got, int dtype, int64_t i, float want, const char *what, int rank) {
  float g = get_val(got, dtype, i);
  if (g != want && !(isnan(g) && isnan(want))) {
    fprintf(stderr, "rank %d: %s %s: element %lld is %g, expected %g\n", rank, what, gpa_dtype_name(dtype),
            (long long)i, g, want);
    exit(1);
  }
}

static void run_await(gpa_handle *h) {
  CHECK_OK(gpa_await(h, -1));
  CHECK_OK(gpa_handle_status(h)); /* completed once, stays so */
  gpa_handle_release(h);
}

static void allreduce_cases(const comm_case_env *e, int dtype, int64_t n) {
  for (int op = GPA_REDUCE_SUM; op <= GPA_REDUCE_MIN; op++) {
    if (op == GPA_REDUCE_AVG && dtype == GPA_I32) continue;
    for (int inplace = 0; inplace < 2; inplace++) {
      gpa_tensor s = tensor(e->a, dtype, n), r = inplace ? s : tensor(e->a, dtype, n);
      upload(e->q, &s, e->rank, 0);
      gpa_handle *h;
      CHECK_OK(gpa_allreduce(e->q, e->comm, &s, &r, op, &h));
      run_await(h);
      void *got = tu_download(e->q, &r, NULL);
      for (int64_t i = 0; i < n; i++) expect(got, dtype, i, reduce_ref(op, dtype, e->size, i), "allreduce", e->rank);
      free(got);
      gpa_buffer_release(e->a, s.buffer);
      if (!inplace) gpa_buffer_release(e->a, r.buffer);
    }
  }
}

static void reduce_scatter_cases(const comm_case_env *e, int dtype, int64_t n) {
  int ops[] = {GPA_REDUCE_SUM, GPA_REDUCE_MAX};
  for (int k = 0; k < 2; k++)
    for (int inplace = 0; inplace < 2; inplace++) {
      gpa_tensor s = tensor(e->a, dtype, n * e->size);
      gpa_tensor r = inplace ? slice(s, n * e->rank, n) : tensor(e->a, dtype, n);
      upload(e->q, &s, e->rank, 0);
      gpa_handle *h;
      CHECK_OK(gpa_reduce_scatter(e->q, e->comm, &s, &r, ops[k], &h));
      run_await(h);
      void *got = tu_download(e->q, &r, NULL);
      for (int64_t i = 0; i < n; i++)
        expect(got, dtype, i, reduce_ref(ops[k], dtype, e->size, n * e->rank + i), "reduce_scatter", e->rank);
      free(got);
      gpa_buffer_release(e->a, s.buffer);
      if (!inplace) gpa_buffer_release(e->a, r.buffer);
    }
}

static void allgather_cases(const comm_case_env *e, int dtype, int64_t n) {
  for (int inplace = 0; inplace < 2; inplace++) {
    gpa_tensor r = tensor(e->a, dtype, n * e->size);
    gpa_tensor s = inplace ? slice(r, n * e->rank, n) : tensor(e->a, dtype, n);
    upload(e->q, &s, e->rank, 0);
    gpa_handle *h;
    CHECK_OK(gpa_allgather(e->q, e->comm, &s, &r, &h));
    run_await(h);
    void *got = tu_download(e->q, &r, NULL);
    for (int rr = 0; rr < e->size; rr++)
      for (int64_t i = 0; i < n; i++) expect(got, dtype, rr * n + i, rounded(dtype, val(rr, i)), "allgather", e->rank);
    free(got);
    gpa_buffer_release(e->a, r.buffer);
    if (!inplace) gpa_buffer_release(e->a, s.buffer);
  }
}

static void broadcast_cases(const comm_case_env *e, int dtype, int64_t n) {
  int root = e->size - 1;
  for (int inplace = 0; inplace < 2; inplace++) {
    gpa_tensor r = tensor(e->a, dtype, n), s = inplace ? r : tensor(e->a, dtype, n);
    upload(e->q, &s, e->rank, 0);
    gpa_handle *h;
    CHECK_OK(gpa_broadcast(e->q, e->comm, inplace ? NULL : &s, &r, root, &h));
    run_await(h);
    void *got = tu_download(e->q, &r, NULL);
    for (int64_t i = 0; i < n; i++) expect(got, dtype, i, rounded(dtype, val(root, i)), "broadcast", e->rank);
    free(got);
    gpa_buffer_release(e->a, r.buffer);
    if (!inplace) gpa_buffer_release(e->a, s.buffer);
  }
}

/* ranks 0 and 1 swap: 0 sends first, 1 receives first (a send completes
 * once matched, so opposite orders on one queue each would wait forever) */
static void p2p_cases(const comm_case_env *e, int dtype, int64_t n) {
  if (e->rank > 1 || e->size < 2) return;
  int peer = 1 - e->rank;
  gpa_tensor s = tensor(e->a, dtype, n), r = tensor(e->a, dtype, n);
  upload(e->q, &s, e->rank, 7);
  gpa_handle *h1, *h2;
  if (e->rank == 0) {
    CHECK_OK(gpa_send(e->q, e->comm, &s, peer, &h1));
    CHECK_OK(gpa_recv(e->q, e->comm, &r, peer, &h2));
  } else {
    CHECK_OK(gpa_recv(e->q, e->comm, &r, peer, &h1));
    CHECK_OK(gpa_send(e->q, e->comm, &s, peer, &h2));
  }
  run_await(h1);
  run_await(h2);
  void *got = tu_download(e->q, &r, NULL);
  for (int64_t i = 0; i < n; i++) expect(got, dtype, i, rounded(dtype, val(peer, 7 + i)), "send/recv", e->rank);
  free(got);
  gpa_buffer_release(e->a, s.buffer);
  gpa_buffer_release(e->a, r.buffer);
}

/* An allreduce between a fill and a copy in one batch, no waits between:
 * the copy sees the sum, and a fill of the send buffer after the allreduce
 * does not change what it read. */
static void ordering_case(const comm_case_env *e) {
  int64_t n = 4099;
  gpa_tensor x = tensor(e->a, GPA_F32, n), y = tensor(e->a, GPA_F32, n), z = tensor(e->a, GPA_F32, n);
  CHECK_OK(gpa_sync_batch(e->q, NULL)); /* the cases before count in the last batch */
  CHECK_OK(gpa_batch_begin(e->q, "ordering"));
  gpa_attr v = {"value", GPA_ATTR_FLOAT, 0, (double)(e->rank + 1)};
  CHECK_OK(gpa_submit(e->q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = &v, .n_attrs = 1},
                      NULL));
  CHECK_OK(gpa_allreduce(e->q, e->comm, &x, &y, GPA_REDUCE_SUM, NULL));
  gpa_attr zero = {"value", GPA_ATTR_FLOAT, 0, -100.0};
  CHECK_OK(gpa_submit(e->q, &(gpa_op_call){.op = "fill", .outputs = &x, .n_outputs = 1, .attrs = &zero, .n_attrs = 1},
                      NULL));
  CHECK_OK(gpa_submit(e->q, &(gpa_op_call){.op = "copy", .inputs = &y, .n_inputs = 1, .outputs = &z, .n_outputs = 1},
                      NULL));
  gpa_handle *rb;
  CHECK_OK(gpa_readback(e->q, &z, &rb));
  gpa_batch_stats bs = {.size = sizeof bs};
  CHECK_OK(gpa_sync_batch(e->q, &bs));
  if (bs.ops != 5 || bs.errors) fprintf(stderr, "ops %llu errors %llu %s\n", (unsigned long long)bs.ops, (unsigned long long)bs.errors, bs.first_error_message);
  CHECK(bs.ops == 5 && bs.errors == 0);
  const void *d;
  uint64_t sz;
  CHECK_OK(gpa_handle_data(rb, &d, &sz));
  float want = (float)(e->size * (e->size + 1) / 2);
  for (int64_t i = 0; i < n; i++) expect(d, GPA_F32, i, want, "ordering", e->rank);
  gpa_handle_release(rb);
  gpa_buffer_release(e->a, x.buffer);
  gpa_buffer_release(e->a, y.buffer);
  gpa_buffer_release(e->a, z.buffer);
}

/* Errors at the call, on every rank alike (nothing is sent). */
static void error_cases(const comm_case_env *e) {
  gpa_tensor f = tensor(e->a, GPA_F32, 8), g = tensor(e->a, GPA_F32, 9), h16 = tensor(e->a, GPA_F16, 8);
  gpa_tensor u8 = f;
  u8.dtype = GPA_U8;
  CHECK_ST(gpa_allreduce(e->q, e->comm, &u8, &u8, GPA_REDUCE_SUM, NULL), GPA_EDTYPE);
  CHECK_MSG("u8");
  CHECK_ST(gpa_allreduce(e->q, e->comm, &f, &h16, GPA_REDUCE_SUM, NULL), GPA_EDTYPE);
  gpa_tensor i32 = f;
  i32.dtype = GPA_I32;
  CHECK_ST(gpa_allreduce(e->q, e->comm, &i32, &i32, GPA_REDUCE_AVG, NULL), GPA_EDTYPE);
  CHECK_ST(gpa_allreduce(e->q, e->comm, &f, &g, GPA_REDUCE_SUM, NULL), GPA_ESHAPE);
  CHECK_ST(gpa_allreduce(e->q, e->comm, &f, &f, 7, NULL), GPA_EINVAL);
  CHECK_ST(gpa_reduce_scatter(e->q, e->comm, &f, &f, GPA_REDUCE_SUM, NULL), e->size == 1 ? GPA_OK : GPA_ESHAPE);
  CHECK_ST(gpa_allgather(e->q, e->comm, &g, &f, NULL), GPA_ESHAPE);
  CHECK_ST(gpa_broadcast(e->q, e->comm, NULL, &f, e->size, NULL), GPA_EINVAL);
  CHECK_MSG("root");
  CHECK_ST(gpa_broadcast(e->q, e->comm, NULL, &f, -1, NULL), GPA_EINVAL);
  CHECK_ST(gpa_send(e->q, e->comm, &f, e->rank, NULL), GPA_EINVAL);
  CHECK_MSG("this rank");
  CHECK_ST(gpa_recv(e->q, e->comm, &f, e->size + 3, NULL), GPA_EINVAL);
  gpa_tensor part = slice(g, 1, 8), head = slice(g, 0, 8);
  CHECK_ST(gpa_allreduce(e->q, e->comm, &part, &head, GPA_REDUCE_SUM, NULL), GPA_EINVAL);
  CHECK_MSG("overlap");
  CHECK_ST(gpa_allreduce(e->q, NULL, &f, &f, GPA_REDUCE_SUM, NULL), GPA_EINVAL);
  CHECK_ST(gpa_allreduce(NULL, e->comm, &f, &f, GPA_REDUCE_SUM, NULL), GPA_EINVAL);
  gpa_tensor stale = f;
  stale.buffer = 12345;
  CHECK_ST(gpa_allreduce(e->q, e->comm, &stale, &stale, GPA_REDUCE_SUM, NULL), GPA_ESTALE);
  CHECK_ST(gpa_comm_destroy(NULL), GPA_EINVAL);
  CHECK(gpa_comm_rank(NULL) == -1 && gpa_comm_size(NULL) == -1);
  CHECK_OK(gpa_sync_batch(e->q, NULL)); /* size 1: the reduce_scatter ran */
  gpa_buffer_release(e->a, f.buffer);
  gpa_buffer_release(e->a, g.buffer);
  gpa_buffer_release(e->a, h16.buffer);
}

void comm_cases_run(const comm_case_env *e) {
  CHECK(gpa_comm_rank(e->comm) == e->rank && gpa_comm_size(e->comm) == e->size);
  error_cases(e);
  int64_t sizes[] = {1001, 0, 1};
  for (int s = 0; s < 3; s++)
    for (int d = 0; d < 4; d++) {
      int64_t n = sizes[s];
      allreduce_cases(e, dtypes[d], n);
      reduce_scatter_cases(e, dtypes[d], n ? 37 : 0);
      allgather_cases(e, dtypes[d], n ? 53 : 0);
      broadcast_cases(e, dtypes[d], n);
      p2p_cases(e, dtypes[d], n);
      if (s) break; /* the odd sizes once, in f32 */
    }
  ordering_case(e);
}

static void *rank_main(void *e) {
  comm_cases_run(e);
  return NULL;
}

void comm_cases_threads(gpa_actor **a, gpa_comm **c, int n) {
  comm_case_env e[4];
  pthread_t t[4];
  CHECK(n >= 1 && n <= 4);
  for (int i = 0; i < n; i++) {
    e[i] = (comm_case_env){a[i], gpa_actor_default_queue(a[i]), c[i], i, n};
    CHECK(pthread_create(&t[i], NULL, rank_main, &e[i]) == 0);
  }
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < n; i++) {
    CHECK_OK(gpa_comm_destroy(c[i]));
    CHECK_OK(gpa_actor_destroy(a[i]));
  }
}
