/* The mailbox's SPSC ring (actor/ring.h) on its own: a producer and a
 * consumer thread pass a numbered stream through small rings whose
 * free-running indices start just below 2^32, so they wrap mid-stream. The
 * consumer must see every number once, in order; a full ring must refuse a
 * reservation and an empty one a pop. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "actor/ring.h"
#include "util/testutil.h"

#define N 2000000u

typedef struct pass {
  gpa__ring *r;
  uint32_t n;
} pass;

static void *produce(void *arg) {
  pass *p = arg;
  for (uintptr_t k = 1; k <= p->n; k++) {
    void **slot;
    while (!(slot = gpa__ring_reserve(p->r))) sched_yield();
    *slot = (void *)k;
    gpa__ring_commit(p->r);
  }
  return NULL;
}

/* Starts both indices at `start` (the ring is empty then). */
static void ring_at(gpa__ring *r, void **slots, uint32_t cap, uint32_t start) {
  gpa__ring_init(r, slots, cap);
  atomic_store(&r->tail, start);
  atomic_store(&r->head, start);
  r->head_seen = r->tail_seen = start;
}

static int stream(uint32_t cap, uint32_t start) {
  void **slots = calloc(cap, sizeof *slots);
  CHECK(slots != NULL);
  gpa__ring r;
  ring_at(&r, slots, cap, start);
  pass p = {&r, N};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, produce, &p) == 0);
  uintptr_t want = 1;
  while (want <= N) {
    void *v;
    if (!gpa__ring_pop(&r, &v)) {
      sched_yield();
      continue;
    }
    if ((uintptr_t)v != want) {
      fprintf(stderr, "ring cap %u start %u: got %zu, expected %zu\n", cap, start, (size_t)(uintptr_t)v,
              (size_t)want);
      return 1;
    }
    want++;
  }
  pthread_join(th, NULL);
  void *v;
  CHECK(!gpa__ring_pop(&r, &v));
  CHECK(gpa__ring_size(&r) == 0);
  free(slots);
  return 0;
}

int main(void) {
  /* full and empty, across the wrap, single-threaded */
  void *slots[8];
  gpa__ring r;
  ring_at(&r, slots, 8, UINT32_MAX - 3);
  void *v;
  CHECK(!gpa__ring_pop(&r, &v));
  for (uintptr_t k = 0; k < 8; k++) {
    void **s = gpa__ring_reserve(&r);
    CHECK(s != NULL);
    *s = (void *)(k + 100);
    gpa__ring_commit(&r);
  }
  CHECK(gpa__ring_size(&r) == 8);
  CHECK(gpa__ring_reserve(&r) == NULL); /* every slot in use */
  for (uintptr_t k = 0; k < 8; k++) {
    CHECK(gpa__ring_pop(&r, &v));
    CHECK((uintptr_t)v == k + 100);
  }
  CHECK(!gpa__ring_pop(&r, &v));
  CHECK(gpa__ring_reserve(&r) != NULL);

  /* two threads, tiny and larger rings, indices wrapping mid-stream */
  if (stream(4, UINT32_MAX - N / 2)) return 1;
  if (stream(1024, UINT32_MAX - 5)) return 1;
  if (stream(64, 0)) return 1;
  printf("ring: ok\n");
  return 0;
}
