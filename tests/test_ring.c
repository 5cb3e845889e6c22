/* The mailbox's SPSC cell ring (actor/ring.h) on its own: a producer and a
 * consumer thread pass a numbered stream of records of 1 to 5 cells through
 * small rings whose free-running indices start just below 2^32, so they wrap
 * mid-stream, and records meet the ring's end (padding). The consumer must
 * see every number once, in order, with its length and contents intact; a
 * full ring must refuse a reservation and an empty one a peek. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "actor/ring.h"
#include "actor/spin.h"
#include "util/testutil.h"

#define N 2000000u

/* A test record: the ring's head, its number, and its number again in every
 * later cell, so a torn or misplaced record shows. */
typedef struct rec {
  gpa__rec_head h;
  uint32_t seq;
} rec;

static uint32_t cells_of(uint32_t seq, uint32_t cap) {
  uint32_t n = 1 + seq % 5;
  return n <= cap / 2 ? n : 1;
}

static void fill(gpa__ring *r, rec *x, uint32_t seq, uint32_t n) {
  x->h.type = 1;
  x->seq = seq;
  for (uint32_t i = 1; i < n; i++) *(uint32_t *)((gpa__cell *)x + i) = seq;
  (void)r;
}

static int check(const gpa__rec_head *h, uint32_t want, uint32_t cap, const char *what) {
  const rec *x = (const rec *)h;
  uint32_t n = cells_of(want, cap);
  if (x->seq != want || h->cells != n || h->type != 1) {
    fprintf(stderr, "%s: got seq %u (%u cells), expected %u (%u cells)\n", what, x->seq, h->cells, want, n);
    return 1;
  }
  for (uint32_t i = 1; i < n; i++)
    if (*(const uint32_t *)((const gpa__cell *)x + i) != want) {
      fprintf(stderr, "%s: record %u cell %u torn\n", what, want, i);
      return 1;
    }
  return 0;
}

/* A full or empty ring: look again at once for a while, then yield. Yield
 * alone handed the core to whatever else ran on it at every wait (four
 * records at most, in the 4-cell ring): beside two busy processes the test
 * took 38 s instead of 1.2, and 120 s (ctest's limit) in a -j4 sim suite.
 * A count of pauses, not spin.h's time budget: with gpa__spin (its clock
 * read once a wait begins) the test took 2.8-6.5 s at 20 us and 3.2-15 s
 * at GPA__SPIN_IDLE_NS beside two busy processes, this 2.2-2.5 s. */
static void backoff(unsigned *waits) {
  if (++*waits < 1000) gpa__cpu_relax();
  else sched_yield();
}

typedef struct pass {
  gpa__ring *r;
  uint32_t n, cap;
} pass;

static void *produce(void *arg) {
  pass *p = arg;
  for (uint32_t k = 1; k <= p->n; k++) {
    uint32_t n = cells_of(k, p->cap);
    rec *x;
    unsigned waits = 0;
    while (!(x = gpa__ring_reserve(p->r, n))) backoff(&waits);
    fill(p->r, x, k, n);
    gpa__ring_commit(p->r);
  }
  return NULL;
}

/* Starts both indices at `start` (the ring is empty then). */
static void ring_at(gpa__ring *r, gpa__cell *cells, uint32_t cap, uint32_t start) {
  gpa__ring_init(r, cells, cap);
  atomic_store(&r->tail, start);
  atomic_store(&r->head, start);
  r->head_seen = r->tail_seen = start;
}

static int stream(uint32_t cap, uint32_t start) {
  gpa__cell *cells = aligned_alloc(64, cap * sizeof *cells);
  CHECK(cells != NULL);
  gpa__ring r;
  ring_at(&r, cells, cap, start);
  pass p = {&r, N, cap};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, produce, &p) == 0);
  unsigned waits = 0;
  for (uint32_t want = 1; want <= N;) {
    const gpa__rec_head *h = gpa__ring_peek(&r);
    if (!h) {
      backoff(&waits);
      continue;
    }
    waits = 0;
    char what[64];
    snprintf(what, sizeof what, "ring cap %u start %u", cap, start);
    if (check(h, want, cap, what)) return 1;
    gpa__ring_release(&r, h);
    want++;
  }
  pthread_join(th, NULL);
  CHECK(gpa__ring_peek(&r) == NULL);
  CHECK(gpa__ring_size(&r) == 0);
  free(cells);
  return 0;
}

int main(void) {
  /* single-threaded: full, empty, padding at the end, across the wrap */
  gpa__cell cells[8];
  gpa__ring r;
  ring_at(&r, cells, 8, UINT32_MAX - 3);
  CHECK(gpa__ring_peek(&r) == NULL);
  for (uint32_t k = 0; k < 8; k++) { /* eight one-cell records fill it */
    rec *x = gpa__ring_reserve(&r, 1);
    CHECK(x != NULL);
    x->h.type = 1;
    x->seq = k;
    gpa__ring_commit(&r);
  }
  CHECK(gpa__ring_size(&r) == 8);
  CHECK(gpa__ring_reserve(&r, 1) == NULL); /* every cell in use */
  CHECK(!gpa__ring_fits(&r, 1));
  for (uint32_t k = 0; k < 8; k++) {
    const gpa__rec_head *h = gpa__ring_peek(&r);
    CHECK(h != NULL && ((const rec *)h)->seq == k);
    gpa__ring_release(&r, h);
  }
  CHECK(gpa__ring_peek(&r) == NULL);
  /* At cell 5 of 8, a 4-cell record needs 3 cells of padding: 7 in all,
   * which fit in the empty ring. */
  for (uint32_t k = 0; (atomic_load(&r.tail) & 7) != 5; k++) {
    rec *x = gpa__ring_reserve(&r, 1);
    CHECK(x != NULL);
    x->h.type = 1;
    x->seq = 100 + k;
    gpa__ring_commit(&r);
    gpa__ring_release(&r, gpa__ring_peek(&r));
  }
  CHECK(gpa__ring_fits(&r, 4));
  rec *big = gpa__ring_reserve(&r, 4);
  CHECK(big != NULL);
  CHECK((gpa__cell *)big == &cells[0]); /* it starts over at the ring's start */
  big->h.type = 1;
  big->seq = 7;
  gpa__ring_commit(&r);
  CHECK(gpa__ring_size(&r) == 7);
  CHECK(!gpa__ring_fits(&r, 2)); /* 1 cell left */
  CHECK(gpa__ring_fits(&r, 1));
  const gpa__rec_head *h = gpa__ring_peek(&r); /* the padding is skipped */
  CHECK(h != NULL && h->cells == 4 && ((const rec *)h)->seq == 7);
  gpa__ring_release(&r, h);
  CHECK(gpa__ring_size(&r) == 0);
  CHECK(gpa__ring_peek(&r) == NULL);

  /* two threads, tiny and larger rings, indices wrapping mid-stream */
  if (stream(4, UINT32_MAX - N / 2)) return 1;
  if (stream(16, UINT32_MAX - N)) return 1;
  if (stream(1024, UINT32_MAX - 5)) return 1;
  if (stream(64, 0)) return 1;
  printf("ring: ok\n");
  return 0;
}
