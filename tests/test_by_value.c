/* Ops submitted without a handle travel by value in the ring (ctx.h,
 * gpa__rec): their tensors and parameters must arrive intact whether the
 * actor runs the record straight from the ring (host), makes a message of it
 * (sim; a queue fed by two threads), or the call is too big for a record (9
 * tensors; a ring of 4 cells) and goes as a pooled message. An op computes
 * out = scale * sum(inputs) + bias over all its tensors' data, so a tensor or
 * parameter that arrived wrong changes the numbers. */
#include <pthread.h>
#include <stdatomic.h>

#include "util/testutil.h"

enum { N = 257, MAXT = 12 };

typedef struct sum_params {
  double scale;
  double bias;
  int64_t tag;
} sum_params;
static const gpa_attr_spec sum_attrs[] = {
    {"scale", GPA_ATTR_FLOAT, 1, offsetof(sum_params, scale), 0, 0, -1e6, 1e6},
    {"bias", GPA_ATTR_FLOAT, 1, offsetof(sum_params, bias), 0, 0, -1e6, 1e6},
    {"tag", GPA_ATTR_INT, 0, offsetof(sum_params, tag), 0, 0, 0, 1e9},
};

static gpa_status sum_op(const gpa_op_exec *x) {
  const sum_params *p = x->params;
  float *y = x->out[0];
  int64_t n = gpa_tensor_numel(&x->outputs[0]);
  for (int64_t i = 0; i < n; i++) {
    double s = 0;
    for (uint32_t k = 0; k < x->n_inputs; k++) s += ((const float *)x->in[k])[i];
    y[i] = (float)(p->scale * s + p->bias);
  }
  return GPA_OK;
}

/* Host only: on cuda and sim it runs on the host fallback's staged copies.
 * As a .cuda implementation it would be handed device pointers, which only
 * the simulator lets the host dereference (a real GPU: SIGSEGV). */
static void register_sum(gpa_actor *a) {
  gpa_op_desc d = {.name = "bv_sum", .min_inputs = 1, .max_inputs = MAXT, .n_outputs = 1, .attrs = sum_attrs,
                   .n_attrs = 3, .params_size = sizeof(sum_params), .host = sum_op};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
}

/* k inputs (input j holds j + 1 + i / 8), one output: no handle, then a sync;
 * checks every element. */
static void run_sum(gpa_actor *a, gpa_queue *q, uint32_t k, double scale, double bias) {
  gpa_tensor in[MAXT], out = tu_f32(a, N);
  float host[N];
  for (uint32_t j = 0; j < k; j++) {
    in[j] = tu_f32(a, N);
    for (int i = 0; i < N; i++) host[i] = (float)(j + 1) + (float)(i / 8);
    tu_put(q, &in[j], host, N);
  }
  gpa_attr at[3] = {{"scale", GPA_ATTR_FLOAT, 0, scale}, {"bias", GPA_ATTR_FLOAT, 0, bias}, {"tag", GPA_ATTR_INT, 7, 0}};
  CHECK_OK(gpa_submit(q, &(gpa_op_call){"bv_sum", in, k, &out, 1, at, 3}, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  tu_get(q, &out, host, N);
  for (int i = 0; i < N; i++) {
    double want = scale * ((double)k * (k + 1) / 2 + (double)k * (i / 8)) + bias;
    if (host[i] != (float)want) {
      fprintf(stderr, "bv_sum k=%u: y[%d] = %g, expected %g\n", k, i, host[i], want);
      exit(1);
    }
  }
  for (uint32_t j = 0; j < k; j++) CHECK_OK(gpa_buffer_release(a, in[j].buffer));
  CHECK_OK(gpa_buffer_release(a, out.buffer));
}

/* Two threads on one queue: records wait for their turn as messages. */
typedef struct pass {
  gpa_queue *q;
  gpa_tensor *acc;
  int n;
} pass;
static void *add_ones(void *arg) {
  pass *p = arg;
  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, 1}, {"bias", GPA_ATTR_FLOAT, 0, 1}};
  for (int i = 0; i < p->n; i++) /* acc = acc + 1, in place */
    CHECK_OK(gpa_submit(p->q, &(gpa_op_call){"bv_sum", p->acc, 1, p->acc, 1, at, 2}, NULL));
  return NULL;
}

/* Streams acc += 1 onto a queue until told to stop. */
typedef struct streamer {
  gpa_queue *q;
  gpa_tensor *acc;
  _Atomic int stop;
} streamer;
static void *stream_until(void *arg) {
  streamer *p = arg;
  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, 1}, {"bias", GPA_ATTR_FLOAT, 0, 1}};
  while (!atomic_load(&p->stop))
    CHECK_OK(gpa_submit(p->q, &(gpa_op_call){"bv_sum", p->acc, 1, p->acc, 1, at, 2}, NULL));
  CHECK_OK(gpa_sync_batch(p->q, NULL));
  return NULL;
}

int main(void) {
  gpa_actor *a = tu_actor(NULL);
  register_sum(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  for (uint32_t k = 1; k <= 7; k++) run_sum(a, q, k, 0.5 * k, -3.25); /* 2..8 tensors: records */
  run_sum(a, q, 8, 2, 1);   /* 9 tensors: a pooled message */
  run_sum(a, q, 11, -1, 0); /* 12 */

  /* many records in flight at once, through the wrap of the ring */
  gpa_tensor acc = tu_f32(a, N);
  float host[N] = {0};
  tu_put(q, &acc, host, N);
  pass p = {q, &acc, 3000};
  add_ones(&p);
  CHECK_OK(gpa_sync_batch(q, NULL));
  tu_get(q, &acc, host, N);
  for (int i = 0; i < N; i++) CHECK(host[i] == 3000);
  CHECK_OK(gpa_sync_batch(q, NULL)); /* the readback's batch */

  /* two producers on one queue */
  pthread_t th[2];
  for (int t = 0; t < 2; t++) CHECK(pthread_create(&th[t], NULL, add_ones, &p) == 0);
  for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
  gpa_batch_stats st = {.size = sizeof st};
  CHECK_OK(gpa_sync_batch(q, &st));
  CHECK(st.ops == 6000 && st.errors == 0);
  tu_get(q, &acc, host, N);
  for (int i = 0; i < N; i++) CHECK(host[i] == 9000);

  /* A record that waits long for its turn (behind a parked infeed) must not
   * hold up the records behind it in its ring, for other queues, while
   * another thread keeps the actor busy. */
  gpa_queue *parked, *other, *busy;
  CHECK_OK(gpa_queue_create(a, "parked", &parked));
  CHECK_OK(gpa_queue_create(a, "other", &other));
  CHECK_OK(gpa_queue_create(a, "busy", &busy));
  gpa_feed *s;
  CHECK_OK(gpa_feed_open(a, NULL, &s));
  gpa_tensor x = tu_f32(a, N), y = tu_f32(a, N);
  gpa_handle *in;
  CHECK_OK(gpa_infeed(parked, s, &x, 1, 60ll * 1000000000, &in)); /* no data: parks */
  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, 1}, {"bias", GPA_ATTR_FLOAT, 0, 1}};
  CHECK_OK(gpa_submit(parked, &(gpa_op_call){"bv_sum", &x, 1, &x, 1, at, 2}, NULL));
  gpa_tensor side = tu_f32(a, N);
  tu_put(busy, &side, host, N);
  streamer st2 = {busy, &side, 0};
  pthread_t sth;
  CHECK(pthread_create(&sth, NULL, stream_until, &st2) == 0);
  CHECK_OK(gpa_submit(other, &(gpa_op_call){"bv_sum", &acc, 1, &y, 1, at, 2}, NULL));
  CHECK_OK(gpa_sync_batch(other, NULL)); /* hangs (test timeout) if starved */
  atomic_store(&st2.stop, 1);
  pthread_join(sth, NULL);
  tu_get(other, &y, host, N);
  for (int i = 0; i < N; i++) CHECK(host[i] == 9001);
  CHECK(gpa_handle_status(in) == GPA_EPENDING);
  CHECK_OK(gpa_feed_close(s)); /* the parked infeed and the op behind it end */
  gpa_await(in, -1);
  gpa_handle_release(in);
  CHECK_OK(gpa_actor_destroy(a));

  /* A ring of 4 cells takes no record of more than one cell: pooled. */
  a = tu_actor(&(gpa_actor_options){.mailbox_size = 4});
  register_sum(a);
  q = gpa_actor_default_queue(a);
  for (uint32_t k = 1; k <= 3; k++) run_sum(a, q, k, 3, 0.5);
  CHECK_OK(gpa_actor_destroy(a));
  printf("by_value: ok\n");
  return 0;
}
