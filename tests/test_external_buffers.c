/* External buffers (include/gpuactor/external.h) on the host side: ops read
 * and write the caller's memory in place, the release callback runs exactly
 * once after the last use, the cache never evicts or frees the memory, and
 * bad input is refused with nothing taken. Runs on every device; host
 * memory is refused on cuda/sim, which test_external_sim covers instead. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/testutil.h"

typedef struct owner {
  _Atomic int released;
  void *seen_ptr;
} owner;

static void on_release(void *ptr, void *user_data) {
  owner *o = user_data;
  o->seen_ptr = ptr;
  atomic_fetch_add(&o->released, 1);
}

static gpa_external_desc host_desc(void *p, uint64_t bytes, owner *o) {
  return (gpa_external_desc){.kind = GPA_MEM_HOST, .ptr = p, .bytes = bytes, .release = on_release, .user_data = o};
}

static void fill(gpa_queue *q, const gpa_tensor *t, double v) {
  gpa_attr a = {"value", GPA_ATTR_FLOAT, 0, v};
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "fill", .outputs = t, .n_outputs = 1, .attrs = &a, .n_attrs = 1}, NULL));
}

static void zero_copy(gpa_actor *a) {
  gpa_queue *q = gpa_actor_default_queue(a);
  enum { N = 1000 };
  float *mem = aligned_alloc(64, 4096);
  for (int i = 0; i < N; i++) mem[i] = (float)i;
  owner o = {0};
  gpa_external_desc d = host_desc(mem, N * sizeof(float), &o);
  gpa_buffer_id id;
  CHECK_OK(gpa_buffer_wrap(a, &d, &id));
  /* An op's input is the caller's data, its output lands in the caller's array. */
  gpa_tensor x = {id, 0, GPA_F32, 1, {N / 2}};
  gpa_tensor y = {id, N / 2 * sizeof(float), GPA_F32, 1, {N / 2}};
  gpa_attr alpha = {"alpha", GPA_ATTR_FLOAT, 0, 3.0};
  gpa_batch_begin(q, "external");
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "scale", .inputs = &x, .n_inputs = 1, .outputs = &y, .n_outputs = 1,
                                         .attrs = &alpha, .n_attrs = 1}, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  for (int i = 0; i < N / 2; i++) CHECK(mem[N / 2 + i] == 3.0f * (float)i && mem[i] == (float)i);
  /* The caller's writes are what the next op reads: no stale copy. */
  for (int i = 0; i < N / 2; i++) mem[i] = 1.0f;
  float back[N / 2];
  tu_get(q, &x, back, N / 2);
  CHECK(back[0] == 1.0f && back[N / 2 - 1] == 1.0f);
  gpa_buffer_info info = {.size_of = sizeof info};
  CHECK_OK(gpa_buffer_query(a, id, &info));
  CHECK(info.size == N * sizeof(float) && info.capacity == N * sizeof(float));

  /* Work in flight holds the memory: the callback waits for the last message. */
  gpa_handle *h;
  fill(q, &y, 7.0);
  CHECK_OK(gpa_readback(q, &y, &h));
  CHECK_OK(gpa_buffer_release(a, id));
  CHECK_OK(gpa_await(h, -1));
  const void *data;
  uint64_t n;
  CHECK_OK(gpa_handle_data(h, &data, &n));
  CHECK(n == N / 2 * sizeof(float) && ((const float *)data)[0] == 7.0f);
  gpa_handle_release(h);
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK(atomic_load(&o.released) == 1 && o.seen_ptr == mem);
  CHECK(mem[N - 1] == 7.0f); /* written in place, and still the caller's */
  /* The id is dead: using or releasing it again is refused, no second callback. */
  CHECK_ST(gpa_buffer_release(a, id), GPA_ESTALE);
  CHECK_ST(tu_fill(q, &x, 1.0, NULL), GPA_ESTALE);
  CHECK(atomic_load(&o.released) == 1);
  free(mem);
}

/* The cache's memory budget, trimming and reuse never touch wrapped memory. */
static void never_evicted(void) {
  gpa_actor *a = tu_actor(&(gpa_actor_options){.size = sizeof(gpa_actor_options), .mem_budget = 1 << 16});
  gpa_queue *q = gpa_actor_default_queue(a);
  float *mem = aligned_alloc(64, 1 << 17); /* twice the budget: outside it */
  owner o = {0};
  gpa_external_desc d = host_desc(mem, 1 << 17, &o);
  gpa_buffer_id id;
  CHECK_OK(gpa_buffer_wrap(a, &d, &id));
  gpa_tensor t = {id, 0, GPA_F32, 1, {1 << 15}};
  CHECK_OK(tu_fill(q, &t, 5.0, NULL));
  /* Churn the cache: allocations up to the budget, released, evicted. */
  for (int i = 0; i < 8; i++) {
    gpa_buffer_id b;
    CHECK_OK(gpa_buffer_acquire(a, NULL, (1 << 15) + i * 4096, &b));
    CHECK_OK(gpa_buffer_release(a, b));
  }
  gpa_actor_stats st = {.size = sizeof st};
  CHECK_OK(gpa_actor_stats_get(a, &st));
  CHECK(st.evictions > 0 && st.bytes_allocated <= 1 << 16);
  float back[4];
  tu_get(q, &(gpa_tensor){id, (1 << 17) - 16, GPA_F32, 1, {4}}, back, 4);
  CHECK(back[3] == 5.0f && mem[0] == 5.0f);
  CHECK(atomic_load(&o.released) == 0);
  /* Never released by the caller: the actor's destruction hands it back, once. */
  CHECK_OK(gpa_actor_destroy(a));
  CHECK(atomic_load(&o.released) == 1 && o.seen_ptr == mem);
  free(mem);
}

static void bad_input(gpa_actor *a) {
  char *mem = aligned_alloc(64, 256);
  owner o = {0};
  gpa_buffer_id id = 99;
  gpa_external_desc d = host_desc(mem, 256, &o);
  CHECK_ST(gpa_buffer_wrap(NULL, &d, &id), GPA_EINVAL);
  CHECK_ST(gpa_buffer_wrap(a, NULL, &id), GPA_EINVAL);
  CHECK_ST(gpa_buffer_wrap(a, &d, NULL), GPA_EINVAL);
  d.ptr = NULL;
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EINVAL);
  CHECK(id == 0);
  d = host_desc(mem, 0, &o);
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EINVAL);
  d = host_desc(mem + 4, 128, &o);
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EINVAL);
  CHECK_MSG("aligned");
  d = host_desc(mem, 1ull << 50, &o);
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EOVERFLOW);
  d = host_desc((void *)(UINTPTR_MAX - 63), 128, &o);
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EOVERFLOW);
  d = host_desc(mem, 256, &o);
  d.kind = 7;
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EINVAL);
  d = host_desc(mem, 256, &o);
  d.size_of = 8;
  CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EINVAL);
  bool host = !strcmp(gpa_actor_backend(a), "cpu");
  if (host) {
    /* A device pointer for the host backend. */
    d = host_desc(mem, 256, &o);
    d.kind = GPA_MEM_DEVICE;
    CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EUNSUPPORTED);
    CHECK_MSG("device memory");
    /* No streams to order with. */
    d = host_desc(mem, 256, &o);
    d.ready_event = mem;
    CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EUNSUPPORTED);
    gpa_queue *q = gpa_actor_default_queue(a);
    CHECK_ST(gpa_queue_wait_event(q, mem), GPA_EUNSUPPORTED);
    CHECK_ST(gpa_queue_record_event(q, mem), GPA_EUNSUPPORTED);
    CHECK_ST(gpa_queue_wait_event(q, NULL), GPA_EINVAL);
    CHECK_ST(gpa_queue_wait_event_async(q, NULL), GPA_EINVAL);
    /* Posted: the refusal comes back through the queue's batch. */
    CHECK_OK(gpa_batch_begin(q, "posted"));
    CHECK_OK(gpa_queue_wait_event_async(q, mem));
    gpa_batch_stats bs = {.size = sizeof bs};
    CHECK_ST(gpa_sync_batch(q, &bs), GPA_EUNSUPPORTED);
    CHECK(bs.errors == 1 && bs.first_error == GPA_EUNSUPPORTED);
    CHECK_MSG("no streams");
    CHECK_ST(gpa_queue_record_event(NULL, mem), GPA_EINVAL);
    /* Pinned host memory is host memory here. */
    d = host_desc(mem, 256, &o);
    d.kind = GPA_MEM_HOST_PINNED;
    CHECK_OK(gpa_buffer_wrap(a, &d, &id));
    CHECK_OK(gpa_buffer_release(a, id));
    CHECK(atomic_load(&o.released) == 1);
    atomic_store(&o.released, 0);
  } else {
    /* The device's kernels cannot read pageable host memory. */
    d = host_desc(mem, 256, &o);
    CHECK_ST(gpa_buffer_wrap(a, &d, &id), GPA_EUNSUPPORTED);
    CHECK_MSG("pageable host memory");
  }
  /* Nothing was taken by a refused wrap. */
  CHECK(atomic_load(&o.released) == 0);
  free(mem);
}

/* A loan keeps a cache buffer allocated after its owner released it. */
static void lend(gpa_actor *a) {
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor t = tu_f32(a, 64);
  CHECK_OK(tu_fill(q, &t, 4.0, NULL));
  gpa_buffer_loan loan = {.size_of = sizeof loan};
  CHECK_OK(gpa_buffer_lend(a, t.buffer, &loan));
  CHECK(loan.ptr && loan.bytes == 64 * sizeof(float));
  CHECK(loan.kind == (!strcmp(gpa_actor_backend(a), "cpu") ? GPA_MEM_HOST : GPA_MEM_DEVICE));
  CHECK_OK(gpa_buffer_release(a, t.buffer));
  float back[64];
  tu_get(q, &t, back, 64); /* still live: the loan's reference */
  CHECK(back[63] == 4.0f);
  if (loan.kind == GPA_MEM_HOST) CHECK(((const float *)loan.ptr)[0] == 4.0f);
  CHECK_OK(gpa_buffer_release(a, t.buffer));
  CHECK_ST(gpa_buffer_lend(a, t.buffer, &loan), GPA_ESTALE);
  CHECK_ST(gpa_buffer_lend(a, t.buffer, NULL), GPA_EINVAL);
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  bool host = !strcmp(gpa_actor_backend(a), "cpu");
  bad_input(a);
  lend(a);
  if (host) zero_copy(a);
  CHECK_OK(gpa_actor_destroy(a));
  if (host) never_evicted();
  printf("external buffers: ok\n");
  return 0;
}
