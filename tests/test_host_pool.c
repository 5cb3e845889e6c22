/* The host pool (kernels/host/pool.c): every index of a loop runs exactly
 * once and the loop returns only after all of them ran, also when a worker
 * holds its chunk past the caller's join spin (it sleeps in the chunk, as a
 * descheduled worker would), so the caller goes to sleep on the futex and
 * the last chunk's worker must wake it; loops back to back (a late
 * worker's claim on a finished loop), 2 and 3 threads, nested loops inline.
 * TSan checks the hand-offs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kernels/host/pool.h"
#include "util/testutil.h"

enum { N = 4096 };

typedef struct lctx {
  _Atomic int hits[N];
  pthread_t caller;
  long sleep_ns; /* chunks that a worker runs sleep this long */
  _Atomic int worker_in; /* a worker entered a chunk of this loop */
  gpa__pool *p;  /* for the nested loop */
  _Atomic int nested;
} lctx;

static void inner(int64_t b, int64_t e, void *vp) {
  atomic_fetch_add((_Atomic int *)vp, (int)(e - b));
}

static void body(int64_t b, int64_t e, void *vp) {
  lctx *c = vp;
  if (c->sleep_ns && !pthread_equal(pthread_self(), c->caller)) {
    atomic_store(&c->worker_in, 1);
    struct timespec t = {0, c->sleep_ns};
    nanosleep(&t, NULL);
  } else if (c->sleep_ns) { /* the caller: wait (up to 0.2 s) until a worker holds a chunk */
    for (int i = 0; i < 20000 && !atomic_load(&c->worker_in); i++) {
      struct timespec t = {0, 10000};
      nanosleep(&t, NULL);
    }
  }
  for (int64_t i = b; i < e; i++) atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
  if (c->p && b == 0) gpa__pool_for(c->p, 100, 1, inner, &c->nested); /* runs inline */
}

static void run(gpa__pool *p, lctx *c, int64_t n, int64_t grain, long sleep_ns, int round) {
  c->sleep_ns = sleep_ns;
  atomic_store(&c->worker_in, 0);
  gpa__pool_for(p, n, grain, body, c);
  /* every index once more than before this loop, none past n */
  for (int64_t i = 0; i < N; i++) CHECK(atomic_load(&c->hits[i]) == (i < n ? round : 0));
}

int main(void) {
  static lctx c;
  c.caller = pthread_self();
  alarm(30); /* a caller never woken hangs: fail in 30 s, not at ctest's timeout */
  for (uint32_t threads = 2; threads <= 3; threads++) {
    gpa__pool *p = gpa__pool_create(threads);
    CHECK(p && gpa__pool_threads(p) == threads);
    for (int64_t i = 0; i < N; i++) atomic_store(&c.hits[i], 0);
    int round = 0;
    for (int r = 0; r < 60; r++) { /* workers' chunks outlast the join's 100 us spin: the futex path */
      run(p, &c, N, 64, r % 3 ? 300000 : 0, ++round);
      run(p, &c, N, 1, 0, ++round); /* right after: small chunks, no sleep */
    }
    c.p = p;
    atomic_store(&c.nested, 0);
    run(p, &c, N, 64, 0, ++round);
    CHECK(atomic_load(&c.nested) == 100);
    c.p = NULL;
    gpa__pool_destroy(p);
  }
  return 0;
}
