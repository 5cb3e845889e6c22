/* A single-producer single-consumer ring of 32-byte cells, one per producer
 * thread (mailbox.c). A record takes one or more consecutive cells: a
 * pointer to a pooled message takes one, an op sent by value (ctx.h) its
 * header, tensors and parameters.
 *
 * Why records by value: a pooled message's lines cross between the cores
 * twice per message (the submitter fills them, the actor reads and then
 * frees them, the submitter reuses them), and the submitter's reuse waits on
 * lines the actor wrote last. Ring cells are written in order, so the
 * producer can prefetch them far ahead, and the actor runs a record from the
 * ring or copies it into a message of its own pool, whose lines never leave
 * its core.
 *
 * Why not ck_ring's SPSC ring: its enqueue loads the consumer's index and its
 * dequeue loads the producer's, on every call. While the actor keeps up, each
 * of those loads misses (the other side wrote the line since), so every
 * message pays two cache-line transfers for the indices alone; perf put
 * 40-60% of the send and drain samples on them. Here each side keeps its own
 * copy of the other's index and reloads it only when that copy says full
 * (producer) or empty (consumer): a producer that runs ahead of the actor
 * pays one transfer per ring's worth of cells, an actor that drains a burst
 * pays one per burst. docs/benchmarks.md has the measurements.
 *
 * Indices are free-running 32-bit cell counters; the capacity is a power of
 * two, so `tail - head` is the occupancy across wrap-around. A record never
 * wraps: one that would is preceded by a padding record up to the end.
 * Records of more than half the capacity are refused (they might never fit
 * after padding); callers send those by pointer instead.
 */
#ifndef GPA_ACTOR_RING_H
#define GPA_ACTOR_RING_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define GPA__CELL 32
typedef struct gpa__cell {
  _Alignas(GPA__CELL) unsigned char b[GPA__CELL];
} gpa__cell;

/* Every record starts with this: its length in cells and its type, which
 * the ring does not interpret beyond padding (0), which runs to the ring's
 * end. `spare` is the record's. */
typedef struct gpa__rec_head {
  uint16_t cells;
  uint8_t type;
  uint8_t spare;
} gpa__rec_head;
#define GPA__REC_PAD 0u

typedef struct gpa__ring {
  /* the producer's line: tail is read by the consumer once per burst */
  _Alignas(64) _Atomic uint32_t tail;
  uint32_t head_seen; /* producer only: the consumer's head as last loaded */
  uint32_t pending;   /* producer only: cells reserved, padding included */
  /* the consumer's line */
  _Alignas(64) _Atomic uint32_t head;
  uint32_t tail_seen; /* consumer only */
  /* fixed after init */
  _Alignas(64) uint32_t mask;
  gpa__cell *cells;
} gpa__ring;

/* cells: capacity cells; capacity a power of two. */
static inline void gpa__ring_init(gpa__ring *r, gpa__cell *cells, uint32_t capacity) {
  atomic_init(&r->tail, 0);
  atomic_init(&r->head, 0);
  r->head_seen = r->tail_seen = r->pending = 0;
  r->mask = capacity - 1;
  r->cells = cells;
}

static inline uint32_t gpa__ring_capacity(const gpa__ring *r) { return r->mask + 1; }

/* Cells a record of n cells needs at tail t: its own and the padding before
 * it when it would run past the end. */
static inline uint32_t gpa__ring_need(const gpa__ring *r, uint32_t t, uint32_t n) {
  uint32_t room = gpa__ring_capacity(r) - (t & r->mask);
  return n > room ? room + n : n;
}

/* Whether need cells from tail t fit with the consumer at head h. */
static inline bool gpa__ring_room(const gpa__ring *r, uint32_t t, uint32_t h, uint32_t need) {
  return t + need - h <= r->mask + 1;
}

/* Producer: n free consecutive cells to write a record into (its head's
 * `cells` is set here), or NULL when the ring has no room now. n must be at
 * most half the capacity (and fit the head's 16-bit count). Publish with
 * gpa__ring_commit. */
static inline void *gpa__ring_reserve(gpa__ring *r, uint32_t n) {
  uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint32_t need = gpa__ring_need(r, t, n);
  if (__builtin_expect(!gpa__ring_room(r, t, r->head_seen, need), 0)) {
    r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire); /* the cells' last reads are done */
    if (!gpa__ring_room(r, t, r->head_seen, need)) return NULL;
  }
  /* The cells a few records on, which the actor read last: their lines
   * start coming back now rather than when the stores reach them. */
  __builtin_prefetch(&r->cells[(t + 16) & r->mask], 1);
  if (need != n) { /* pad to the end, start at 0 */
    ((gpa__rec_head *)&r->cells[t & r->mask])->type = GPA__REC_PAD;
    t += need - n;
  }
  r->pending = need;
  gpa__rec_head *h = (gpa__rec_head *)&r->cells[t & r->mask];
  h->cells = (uint16_t)n;
  return h;
}

static inline void gpa__ring_commit(gpa__ring *r) {
  uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  atomic_store_explicit(&r->tail, t + r->pending, memory_order_release); /* the cells' writes before the index */
}

/* Whether a record of n cells fits now, from any thread (a snapshot). */
static inline bool gpa__ring_fits(const gpa__ring *r, uint32_t n) {
  uint32_t t = atomic_load_explicit(&((gpa__ring *)r)->tail, memory_order_acquire);
  uint32_t h = atomic_load_explicit(&((gpa__ring *)r)->head, memory_order_acquire);
  return gpa__ring_room(r, t, h, gpa__ring_need(r, t, n));
}

/* Consumer: the next record (padding skipped), or NULL when empty. Free it
 * with gpa__ring_release once read. */
static inline const gpa__rec_head *gpa__ring_peek(gpa__ring *r) {
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  for (;;) {
    if (h == r->tail_seen) {
      r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
      if (h == r->tail_seen) return NULL;
    }
    const gpa__rec_head *rec = (const gpa__rec_head *)&r->cells[h & r->mask];
    if (rec->type != GPA__REC_PAD) return rec;
    h += gpa__ring_capacity(r) - (h & r->mask); /* padding runs to the end */
    atomic_store_explicit(&r->head, h, memory_order_release);
  }
}

static inline void gpa__ring_release(gpa__ring *r, const gpa__rec_head *rec) {
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  atomic_store_explicit(&r->head, h + rec->cells, memory_order_release); /* the reads before the cells' reuse */
}

/* Occupancy in cells as seen from any thread: exact for the owner of either
 * side about its own index, a snapshot otherwise. */
static inline uint32_t gpa__ring_size(const gpa__ring *r) {
  uint32_t h = atomic_load_explicit(&((gpa__ring *)r)->head, memory_order_acquire);
  uint32_t t = atomic_load_explicit(&((gpa__ring *)r)->tail, memory_order_acquire);
  return t - h;
}

#endif
