/* Feed sessions: routing between concurrent sessions, a 10k-step
 * infeed -> compute -> outfeed loop, timeouts and the rule for the queue's
 * later work, closing under load, many tensors per item, a large item,
 * outfeed back-pressure, and a slow sink that must not stall others. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "util/testutil.h"

#if defined(GPA_ASAN) || defined(GPA_TSAN)
enum { STEPS = 2000, LARGE_MB = 64 }; /* sanitizers: 5-20x slower, 3x memory */
#else
enum { STEPS = 10000, LARGE_MB = 256 };
#endif

static gpa_host_tensor host_f32(const float *p, int64_t n) {
  return (gpa_host_tensor){p, (uint64_t)n * 4, GPA_F32, 1, {n}};
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- routing: two sessions, two queues, two pushing threads ------------- */
typedef struct route {
  gpa_actor *a;
  gpa_feed *s;
  gpa_queue *q;
  float tagval;
  int steps;
} route;

static void *pusher(void *arg) {
  route *r = arg;
  float v[8];
  for (int i = 0; i < r->steps; i++) {
    for (int k = 0; k < 8; k++) v[k] = r->tagval * 100000 + i;
    gpa_host_tensor t = host_f32(v, 8);
    gpa_status st;
    while ((st = gpa_infeed_push(r->s, &t, 1)) == GPA_EAGAIN) usleep(100);
    CHECK_OK(st);
  }
  return NULL;
}

static void *stepper(void *arg) {
  route *r = arg;
  gpa_tensor x = tu_f32(r->a, 8), y = tu_f32(r->a, 8);
  for (int i = 0; i < r->steps; i++) {
    CHECK_OK(gpa_infeed(r->q, r->s, &x, 1, 10ll * 1000000000, NULL));
    CHECK_OK(gpa_submit(r->q, &(gpa_op_call){.op = "copy", .inputs = &x, .n_inputs = 1, .outputs = &y, .n_outputs = 1},
                        NULL));
    CHECK_OK(gpa_outfeed(r->q, r->s, &y, 1, NULL));
    if (i % 64 == 63) CHECK_OK(gpa_sync_batch(r->q, NULL));
  }
  CHECK_OK(gpa_sync_batch(r->q, NULL));
  return NULL;
}

static void test_routing_and_loop(void) {
  gpa_actor *a = tu_actor(NULL);
  route r[2];
  pthread_t tp[2], ts[2];
  for (int i = 0; i < 2; i++) {
    char tag[16];
    snprintf(tag, sizeof tag, "session-%d", i);
    r[i] = (route){a, NULL, NULL, (float)(i + 1), STEPS / 2 * (i + 1)};
    CHECK_OK(gpa_feed_open(a, &(gpa_feed_options){.tag = tag, .tag_len = (uint32_t)strlen(tag) + 1,
                                                  .outfeed_capacity = 4096},
                           &r[i].s));
    CHECK_OK(gpa_queue_create(a, tag, &r[i].q));
  }
  CHECK(gpa_feed_id(r[0].s) != gpa_feed_id(r[1].s));
  for (int i = 0; i < 2; i++) {
    pthread_create(&tp[i], NULL, pusher, &r[i]);
    pthread_create(&ts[i], NULL, stepper, &r[i]);
  }
  /* Drain both sessions concurrently with the producers, checking order and
   * that no item crossed over. */
  int got[2] = {0, 0};
  double t0 = now_ms();
  while (got[0] < r[0].steps || got[1] < r[1].steps) {
    for (int i = 0; i < 2; i++) {
      gpa_handle *item;
      gpa_status st = gpa_outfeed_pop(r[i].s, 1000000, &item);
      if (st == GPA_ETIMEDOUT) continue;
      CHECK_OK(st);
      CHECK(gpa_outfeed_item_count(item) == 1);
      gpa_host_tensor t;
      CHECK_OK(gpa_outfeed_item_tensor(item, 0, &t));
      CHECK(t.dtype == GPA_F32 && t.rank == 1 && t.shape[0] == 8 && t.bytes == 32);
      const float *v = t.data;
      CHECK(v[0] == r[i].tagval * 100000 + got[i]); /* its own session, in order */
      CHECK(v[7] == v[0]);
      CHECK(gpa_handle_status(item) == GPA_OK);
      gpa_handle_release(item);
      got[i]++;
    }
    CHECK(now_ms() - t0 < 60000);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(tp[i], NULL);
    pthread_join(ts[i], NULL);
  }
  gpa_handle *item;
  CHECK_ST(gpa_outfeed_pop(r[0].s, 0, &item), GPA_ETIMEDOUT);
  for (int i = 0; i < 2; i++) CHECK_OK(gpa_feed_close(r[i].s));
  CHECK_OK(gpa_actor_destroy(a));
  printf("feed: routing + %d-step loop ok\n", r[0].steps + r[1].steps);
}

/* ---- timeouts ------------------------------------------------------------ */
static void test_timeout(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a), *other;
  CHECK_OK(gpa_queue_create(a, "other", &other));
  gpa_feed *s;
  CHECK_OK(gpa_feed_open(a, NULL, &s));
  gpa_tensor x = tu_f32(a, 4), z = tu_f32(a, 4);
  CHECK_OK(gpa_batch_begin(q, "starved"));
  gpa_handle *in, *after;
  double t0 = now_ms();
  CHECK_OK(gpa_infeed(q, s, &x, 1, 30 * 1000000, &in));
  CHECK_OK(tu_fill(q, &x, 5, &after));
  /* While q is parked, another queue runs. */
  gpa_handle *h;
  CHECK_OK(tu_fill(other, &z, 1, &h));
  CHECK_OK(gpa_await(h, 2000000000));
  gpa_handle_release(h);
  /* still waiting, unless the other queue's op took past the timeout (a
   * loaded machine under valgrind): then it timed out, not earlier */
  gpa_status st_in = gpa_handle_status(in);
  CHECK(st_in == GPA_EPENDING || (st_in == GPA_ETIMEDOUT && now_ms() - t0 >= 29));
  CHECK_ST(gpa_await(in, -1), GPA_ETIMEDOUT);
  CHECK(now_ms() - t0 >= 29);
  CHECK(strstr(gpa_handle_error_message(in), "within 30 ms"));
  gpa_handle_release(in);
  /* the rule: the batch's later work fails without running */
  CHECK_ST(gpa_await(after, -1), GPA_ETIMEDOUT);
  CHECK(strstr(gpa_handle_error_message(after), "skipped"));
  gpa_batch_stats st = {0};
  CHECK_ST(gpa_sync_batch(q, &st), GPA_ETIMEDOUT);
  CHECK(st.errors == 2);
  gpa_handle_release(after);
  /* after the sync the queue runs normally again */
  CHECK_OK(tu_fill(q, &x, 7, NULL));
  float v[4];
  tu_get(q, &x, v, 4);
  CHECK(v[0] == 7.0f);
  /* timeout 0 on an empty session fails at once; with data it succeeds */
  CHECK_OK(gpa_infeed(q, s, &x, 1, 0, &in));
  CHECK_ST(gpa_await(in, -1), GPA_ETIMEDOUT);
  gpa_handle_release(in);
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_ETIMEDOUT);
  float src[4] = {1, 2, 3, 4};
  gpa_host_tensor t = host_f32(src, 4);
  CHECK_OK(gpa_infeed_push(s, &t, 1));
  CHECK_OK(gpa_infeed(q, s, &x, 1, 0, &in)); /* the push is ordered before it */
  CHECK_OK(gpa_await(in, -1));
  tu_get(q, &x, v, 4);
  CHECK(v[3] == 4.0f);
  /* a mismatching item fails the op, naming the tensor */
  float big[5] = {0};
  t = host_f32(big, 5);
  CHECK_OK(gpa_infeed_push(s, &t, 1));
  gpa_handle *bad;
  CHECK_OK(gpa_infeed(q, s, &x, 1, -1, &bad));
  CHECK_ST(gpa_await(bad, -1), GPA_ESHAPE);
  CHECK(strstr(gpa_handle_error_message(bad), "outputs[0]"));
  gpa_handle_release(bad);
  t = (gpa_host_tensor){src, 16, GPA_I32, 1, {4}};
  CHECK_OK(gpa_infeed_push(s, &t, 1));
  CHECK_OK(gpa_infeed(q, s, &x, 1, -1, &bad));
  CHECK_ST(gpa_await(bad, -1), GPA_EDTYPE);
  gpa_handle_release(bad);
  gpa_sync_batch(q, NULL);
  gpa_handle_release(in);
  CHECK_OK(gpa_feed_close(s));
  CHECK_OK(gpa_actor_destroy(a));
  printf("feed: timeouts ok\n");
}

/* ---- closing under load --------------------------------------------------- */
static void test_close_under_load(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_feed *s;
  CHECK_OK(gpa_feed_open(a, &(gpa_feed_options){.outfeed_capacity = 1000}, &s));
  gpa_queue *qi, *qo;
  CHECK_OK(gpa_queue_create(a, "in", &qi));
  CHECK_OK(gpa_queue_create(a, "out", &qo));
  /* One buffer per queue: queues may run at once on a device (streams). */
  gpa_tensor x = tu_f32(a, 16), xo = tu_f32(a, 16);
  enum { N = 50 };
  gpa_handle *parked[N], *outs[N];
  for (int i = 0; i < N; i++) CHECK_OK(gpa_infeed(qi, s, &x, 1, -1, &parked[i])); /* no data: parks */
  for (int i = 0; i < N; i++) CHECK_OK(gpa_outfeed(qo, s, &xo, 1, &outs[i]));     /* never popped */
  float src[16] = {0};
  gpa_host_tensor t = host_f32(src, 16);
  for (int i = 0; i < 10; i++) CHECK_OK(gpa_infeed_push(s, &t, 1)); /* 10 parked ops get data */
  CHECK_OK(gpa_sync_batch(qo, NULL));
  for (int i = 0; i < 10; i++) CHECK_OK(gpa_await(parked[i], -1));
  CHECK(gpa_handle_status(parked[10]) == GPA_EPENDING);
  CHECK(gpa_handle_status(outs[0]) == GPA_EPENDING); /* landed, not delivered */
  CHECK_OK(gpa_feed_close(s));
  for (int i = 10; i < N; i++) CHECK_ST(gpa_await(parked[i], 5000000000ll), GPA_ECANCELED);
  for (int i = 0; i < N; i++) {
    CHECK_ST(gpa_await(outs[i], 5000000000ll), GPA_ECANCELED);
    CHECK(strstr(gpa_handle_error_message(outs[i]), "closed"));
  }
  for (int i = 0; i < N; i++) {
    gpa_handle_release(parked[i]);
    gpa_handle_release(outs[i]);
  }
  CHECK_OK(gpa_sync_batch(qi, NULL) == GPA_ECANCELED ? GPA_OK : GPA_EINTERNAL);
  /* a session left open is closed by destroy, with work parked on it */
  CHECK_OK(gpa_feed_open(a, NULL, &s));
  gpa_handle *h;
  CHECK_OK(gpa_infeed(qi, s, &x, 1, -1, &h));
  CHECK_OK(gpa_actor_destroy(a));
  CHECK_ST(gpa_handle_status(h), GPA_ECANCELED);
  gpa_handle_release(h);
  printf("feed: close under load ok\n");
}

/* ---- many tensors, a large item ------------------------------------------ */
static void test_many_and_large(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_feed *s;
  CHECK_OK(gpa_feed_open(a, NULL, &s));
  enum { K = 32 };
  gpa_tensor d[K];
  gpa_host_tensor h[K];
  static float data[K][K + 1];
  for (int i = 0; i < K; i++) {
    d[i] = tu_f32(a, i + 1);
    for (int k = 0; k <= i; k++) data[i][k] = (float)(i * 1000 + k);
    h[i] = host_f32(data[i], i + 1);
  }
  CHECK_OK(gpa_infeed_push(s, h, K));
  CHECK_OK(gpa_infeed(q, s, d, K, -1, NULL));
  CHECK_OK(gpa_outfeed(q, s, d, K, NULL));
  gpa_handle *item;
  CHECK_OK(gpa_outfeed_pop(s, 5000000000ll, &item));
  CHECK(gpa_outfeed_item_count(item) == K);
  for (int i = 0; i < K; i++) {
    gpa_host_tensor t;
    CHECK_OK(gpa_outfeed_item_tensor(item, i, &t));
    CHECK(t.shape[0] == i + 1 && !memcmp(t.data, data[i], (size_t)(i + 1) * 4));
  }
  gpa_host_tensor t;
  CHECK_ST(gpa_outfeed_item_tensor(item, K, &t), GPA_ERANGE);
  gpa_handle_release(item);

  int64_t n = (int64_t)LARGE_MB << 18; /* floats */
  float *big = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i += 4096) big[i] = (float)(i >> 12);
  big[n - 1] = 42;
  gpa_tensor bt = {0, 0, GPA_F32, 1, {n}};
  CHECK_OK(gpa_buffer_acquire(a, "large", (uint64_t)n * 4, &bt.buffer));
  gpa_host_tensor bh = host_f32(big, n);
  CHECK_OK(gpa_infeed_push(s, &bh, 1));
  free(big); /* copied at push */
  gpa_handle *in;
  CHECK_OK(gpa_infeed(q, s, &bt, 1, -1, &in));
  CHECK_OK(gpa_await(in, -1));
  gpa_handle_release(in);
  gpa_tensor probe = bt;
  probe.offset = (uint64_t)(n - 4096) * 4;
  probe.shape[0] = 4096;
  float tail[4096];
  tu_get(q, &probe, tail, 4096);
  CHECK(tail[0] == (float)((n - 4096) >> 12) && tail[4095] == 42);
  CHECK_OK(gpa_feed_close(s));
  CHECK_OK(gpa_actor_destroy(a));
  printf("feed: %d tensors per item and a %d MiB item ok\n", K, LARGE_MB);
}

/* ---- back-pressure and a slow sink ----------------------------------------- */
/* The slow sink blocks on its first item until the test lets it go: if it
 * could stall the actor, other queues or other sessions, the fast loop below
 * would never finish (bounded by a 60 s guard, then the test fails). */
static atomic_int slow_seen, slow_release;
static void slow_sink(gpa_feed *s, const void *tag, uint32_t tag_len, const gpa_host_tensor *t, uint32_t n,
                      void *user) {
  (void)s;
  (void)t;
  (void)n;
  CHECK(tag_len == 5 && !memcmp(tag, "slow", 5) && user == &slow_seen);
  for (int i = 0; i < 60000 && !atomic_load(&slow_release); i++) usleep(1000);
  atomic_fetch_add(&slow_seen, 1);
}

static void test_backpressure_and_slow_sink(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_tensor x = tu_f32(a, 4);
  /* FAIL policy: the third undelivered item is refused */
  gpa_feed *f;
  CHECK_OK(gpa_feed_open(a, &(gpa_feed_options){.outfeed_capacity = 2, .outfeed_policy = GPA_OUTFEED_FAIL}, &f));
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_handle *o[3];
  for (int i = 0; i < 3; i++) CHECK_OK(gpa_outfeed(q, f, &x, 1, &o[i]));
  CHECK_ST(gpa_await(o[2], -1), GPA_EAGAIN);
  CHECK(strstr(gpa_handle_error_message(o[2]), "outfeed full"));
  gpa_handle *item;
  CHECK_OK(gpa_outfeed_pop(f, -1, &item));
  CHECK_OK(gpa_await(o[0], -1)); /* delivered */
  gpa_handle_release(item);
  for (int i = 0; i < 3; i++) gpa_handle_release(o[i]);
  gpa_sync_batch(q, NULL);
  CHECK_OK(gpa_feed_close(f));

  /* PARK policy: the producing queue waits for room; other queues do not */
  CHECK_OK(gpa_feed_open(a, &(gpa_feed_options){.outfeed_capacity = 2}, &f));
  gpa_queue *qp, *qfree;
  CHECK_OK(gpa_queue_create(a, "producer", &qp));
  CHECK_OK(gpa_queue_create(a, "free", &qfree));
  gpa_handle *last;
  for (int i = 0; i < 5; i++) CHECK_OK(gpa_outfeed(qp, f, &x, 1, i == 4 ? &last : NULL));
  gpa_handle *marker;
  CHECK_OK(tu_fill(qp, &x, 3, &marker)); /* behind the parked outfeeds */
  gpa_handle *other;
  gpa_tensor xf = tu_f32(a, 4); /* its own buffer: queues may overlap on a device */
  CHECK_OK(tu_fill(qfree, &xf, 2, &other));
  CHECK_OK(gpa_await(other, 2000000000));
  usleep(20000);
  CHECK(gpa_handle_status(marker) == GPA_EPENDING); /* parked */
  for (int i = 0; i < 5; i++) {
    CHECK_OK(gpa_outfeed_pop(f, 5000000000ll, &item));
    gpa_handle_release(item);
  }
  CHECK_OK(gpa_await(marker, 5000000000ll));
  CHECK_OK(gpa_await(last, -1));
  gpa_handle_release(marker);
  gpa_handle_release(other);
  gpa_handle_release(last);
  CHECK_OK(gpa_feed_close(f));

  /* a slow sink: its queue waits, another session's loop does not */
  gpa_feed *slow, *fast;
  CHECK_OK(gpa_feed_open(a, &(gpa_feed_options){.tag = "slow", .tag_len = 5, .sink = slow_sink,
                                                .user_data = &slow_seen, .outfeed_capacity = 2},
                         &slow));
  CHECK_OK(gpa_feed_open(a, NULL, &fast));
  gpa_queue *qs, *qf;
  CHECK_OK(gpa_queue_create(a, "slowq", &qs));
  CHECK_OK(gpa_queue_create(a, "fastq", &qf));
  for (int i = 0; i < 10; i++) CHECK_OK(gpa_outfeed(qs, slow, &x, 1, NULL)); /* qs parks after 2 */
  double t0 = now_ms();
  float v[4] = {1, 2, 3, 4};
  gpa_host_tensor t = host_f32(v, 4);
  gpa_tensor y = tu_f32(a, 4);
  for (int i = 0; i < 200; i++) {
    CHECK_OK(gpa_infeed_push(fast, &t, 1));
    CHECK_OK(gpa_infeed(qf, fast, &y, 1, -1, NULL));
    CHECK_OK(gpa_outfeed(qf, fast, &y, 1, NULL));
    CHECK_OK(gpa_outfeed_pop(fast, 5000000000ll, &item));
    gpa_handle_release(item);
  }
  double fast_ms = now_ms() - t0;
  int seen = atomic_load(&slow_seen);
  CHECK_OK(gpa_sync_batch(qf, NULL));
  CHECK(seen == 0); /* the fast session finished while the slow sink was still blocked */
  atomic_store(&slow_release, 1);
  CHECK_OK(gpa_sync_batch(qs, NULL));
  CHECK_OK(gpa_feed_close(slow)); /* waits for the callback in progress; cancels the rest */
  CHECK_OK(gpa_feed_close(fast));
  CHECK_OK(gpa_actor_destroy(a));
  printf("feed: back-pressure ok; 200 fast steps in %.1f ms beside a blocked sink\n", fast_ms);
}

static void test_misuse(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_feed *s;
  CHECK_ST(gpa_feed_open(a, &(gpa_feed_options){.tag_len = 65, .tag = "x"}, &s), GPA_EINVAL);
  CHECK_ST(gpa_feed_open(a, &(gpa_feed_options){.tag_len = 3}, &s), GPA_EINVAL);
  CHECK_ST(gpa_feed_open(NULL, NULL, &s), GPA_EINVAL);
  CHECK_OK(gpa_feed_open(a, NULL, &s));
  float v[2];
  gpa_host_tensor t = {v, 12, GPA_F32, 1, {2}};
  CHECK_ST(gpa_infeed_push(s, &t, 1), GPA_ESHAPE);
  t = (gpa_host_tensor){NULL, 8, GPA_F32, 1, {2}};
  CHECK_ST(gpa_infeed_push(s, &t, 1), GPA_EINVAL);
  t = (gpa_host_tensor){v, 8, 0, 1, {2}};
  CHECK_ST(gpa_infeed_push(s, &t, 1), GPA_EDTYPE);
  CHECK_ST(gpa_infeed_push(s, NULL, 1), GPA_EINVAL);
  gpa_tensor bad = {12345, 0, GPA_F32, 1, {2}};
  CHECK_ST(gpa_infeed(gpa_actor_default_queue(a), s, &bad, 1, -1, NULL), GPA_ESTALE);
  CHECK_ST(gpa_outfeed(gpa_actor_default_queue(a), s, &bad, 1, NULL), GPA_ESTALE);
  gpa_handle *h;
  CHECK_ST(gpa_outfeed_pop(s, 0, &h), GPA_ETIMEDOUT);
  CHECK_OK(gpa_feed_close(s));
  CHECK_OK(gpa_feed_open(a, &(gpa_feed_options){.infeed_capacity = 2}, &s));
  t = (gpa_host_tensor){v, 8, GPA_F32, 1, {2}};
  CHECK_OK(gpa_infeed_push(s, &t, 1));
  CHECK_OK(gpa_infeed_push(s, &t, 1));
  CHECK_ST(gpa_infeed_push(s, &t, 1), GPA_EAGAIN);
  CHECK_OK(gpa_feed_close(s)); /* frees the two items nobody took */
  CHECK_OK(gpa_actor_destroy(a));
  printf("feed: misuse ok\n");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  test_misuse();
  test_timeout();
  test_backpressure_and_slow_sink();
  test_close_under_load();
  test_many_and_large();
  test_routing_and_loop();
  return 0;
}
