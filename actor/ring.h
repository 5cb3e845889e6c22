/* A single-producer single-consumer ring of pointers, one per producer
 * thread (mailbox.c).
 *
 * Why not ck_ring's SPSC ring: its enqueue loads the consumer's index and its
 * dequeue loads the producer's, on every call. While the actor keeps up, each
 * of those loads misses (the other side wrote the line since), so every
 * message pays two cache-line transfers for the indices alone; perf put
 * 40-60% of the send and drain samples on them. Here each side keeps its own
 * copy of the other's index and reloads it only when that copy says full
 * (producer) or empty (consumer): a producer that runs ahead of the actor
 * pays one transfer per ring's worth of messages, an actor that drains a
 * burst pays one per burst. docs/benchmarks.md has the measurements.
 *
 * Indices are free-running 32-bit counters; the capacity is a power of two,
 * so `tail - head` is the occupancy across wrap-around. Every slot is usable.
 */
#ifndef GPA_ACTOR_RING_H
#define GPA_ACTOR_RING_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct gpa__ring {
  /* the producer's line: tail is read by the consumer once per burst */
  _Alignas(64) _Atomic uint32_t tail;
  uint32_t head_seen; /* producer only: the consumer's head as last loaded */
  /* the consumer's line */
  _Alignas(64) _Atomic uint32_t head;
  uint32_t tail_seen; /* consumer only */
  /* fixed after init */
  _Alignas(64) uint32_t mask;
  void **slots;
} gpa__ring;

/* slots: capacity pointers; capacity a power of two. */
static inline void gpa__ring_init(gpa__ring *r, void **slots, uint32_t capacity) {
  atomic_init(&r->tail, 0);
  atomic_init(&r->head, 0);
  r->head_seen = r->tail_seen = 0;
  r->mask = capacity - 1;
  r->slots = slots;
}

static inline uint32_t gpa__ring_capacity(const gpa__ring *r) { return r->mask + 1; }

/* Producer: a free slot to write, or NULL when full. Publish it with
 * gpa__ring_commit. */
static inline void **gpa__ring_reserve(gpa__ring *r) {
  uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  if (__builtin_expect(t - r->head_seen > r->mask, 0)) {
    r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire); /* the slot's last read is done */
    if (t - r->head_seen > r->mask) return NULL;
  }
  return &r->slots[t & r->mask];
}

static inline void gpa__ring_commit(gpa__ring *r) {
  uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  atomic_store_explicit(&r->tail, t + 1, memory_order_release); /* the slot's write before the index */
}

/* Consumer: the next pointer, or false when empty. */
static inline bool gpa__ring_pop(gpa__ring *r, void **out) {
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (h == r->tail_seen) {
    r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (h == r->tail_seen) return false;
  }
  *out = r->slots[h & r->mask];
  atomic_store_explicit(&r->head, h + 1, memory_order_release); /* the read before the slot's reuse */
  return true;
}

/* Occupancy as seen from any thread: exact for the owner of either side
 * about its own index, a snapshot otherwise. */
static inline uint32_t gpa__ring_size(const gpa__ring *r) {
  uint32_t h = atomic_load_explicit(&((gpa__ring *)r)->head, memory_order_acquire);
  uint32_t t = atomic_load_explicit(&((gpa__ring *)r)->tail, memory_order_acquire);
  return t - h;
}

#endif
