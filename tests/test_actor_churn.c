/* Several actors on one device at once (issue 30): 4 threads, each looping
 * over actor lifetimes (create, 3 queues, 4 buffers, an upload and a
 * readback on each queue, awaits, a batch sync, releases, destroy), so
 * actors start and shut down while others on the same device are busy. On
 * the simulated device they share its primary context, as actors of one GPU
 * share the driver's: one actor's shutdown must not wait on, free or touch
 * another's streams (it used to hang, or free a stream another actor's
 * shutdown was waiting on). Every readback must hold what its upload wrote.
 * GPA_CHURN_PER sets the lifetimes per thread (default 300; valgrind runs
 * use a few). */
#include <pthread.h>
#include <stdatomic.h>

#include "util/testutil.h"

/* The same count under ASan and TSan: 3-10 s there (2 s in a normal build). */
enum { PER_DEFAULT = 300 };
enum { THREADS = 4, QUEUES = 3, BUFFERS = 4, N = 256 };

static atomic_long lifetimes, checked;

typedef struct worker {
  int id;
  long per;
} worker;

static void lifetime(int id, long k) {
  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q[QUEUES];
  q[0] = gpa_actor_default_queue(a);
  for (int i = 1; i < QUEUES; i++) CHECK_OK(gpa_queue_create(a, NULL, &q[i]));
  gpa_tensor t[BUFFERS];
  for (int b = 0; b < BUFFERS; b++) t[b] = tu_f32(a, N);
  float src[BUFFERS][N];
  for (int b = 0; b < BUFFERS; b++)
    for (int i = 0; i < N; i++) src[b][i] = (float)(id * 1000003 + k * 131 + b * 17 + i);
  /* Every queue writes and reads back its own buffers: queues are streams
   * that run at once, so two queues must not share a buffer unsynchronized. */
  gpa_handle *rb[BUFFERS];
  for (int b = 0; b < BUFFERS; b++) {
    gpa_queue *qb = q[b % QUEUES];
    gpa_handle *up;
    CHECK_OK(gpa_upload(qb, &t[b], src[b], sizeof src[b], 0, &up));
    CHECK_OK(gpa_readback(qb, &t[b], &rb[b]));
    /* awaiting the upload after its readback was queued keeps both in flight */
    CHECK_OK(gpa_await(up, -1));
    gpa_handle_release(up);
  }
  for (int b = 0; b < BUFFERS; b++) {
    CHECK_OK(gpa_await(rb[b], -1));
    const void *d;
    uint64_t n;
    CHECK_OK(gpa_handle_data(rb[b], &d, &n));
    CHECK(n == sizeof src[b]);
    CHECK(!memcmp(d, src[b], n));
    gpa_handle_release(rb[b]);
    atomic_fetch_add(&checked, 1);
  }
  CHECK_OK(gpa_sync_batch(q[1], NULL));
  for (int b = 0; b < BUFFERS; b++) CHECK_OK(gpa_buffer_release(a, t[b].buffer));
  /* Half the lifetimes leave work in flight for the shutdown to drain. */
  if (k & 1) {
    CHECK(tu_fill(q[2], &(gpa_tensor){0}, 0.0, NULL) == GPA_EDTYPE); /* bad input beside the churn */
    gpa_tensor x = tu_f32(a, N);
    CHECK_OK(tu_fill(q[2], &x, 1.0, NULL));
  }
  if (k % 3 == 0) CHECK_OK(gpa_queue_destroy(q[1]));
  CHECK_OK(gpa_actor_destroy(a));
  atomic_fetch_add(&lifetimes, 1);
}

static void *run(void *arg) {
  worker *w = arg;
  for (long k = 0; k < w->per; k++) lifetime(w->id, k);
  return NULL;
}

int main(void) {
  const char *e = getenv("GPA_CHURN_PER");
  long per = e ? atol(e) : PER_DEFAULT;
  CHECK(per > 0);
  /* One lifetime first on this thread: skips (77) where the device is missing. */
  gpa_actor_destroy(tu_actor(NULL));
  pthread_t th[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){i, per};
    CHECK(pthread_create(&th[i], NULL, run, &w[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  CHECK(atomic_load(&lifetimes) == THREADS * per);
  CHECK(atomic_load(&checked) == THREADS * per * BUFFERS);
  printf("actor_churn: %d threads x %ld actor lifetimes, %ld readbacks checked\n", THREADS, per,
         (long)atomic_load(&checked));
  return 0;
}
