/* The buffer cache: device memory owned by the actor.
 *
 * Ids are (generation << 32 | slot + 1). The actor thread owns everything;
 * submitting threads only read each slot's published id and size (atomics) to
 * reject stale or short buffers early. The authoritative check happens when
 * the actor takes a message in (gpa__bufcache_pin): a message pins the
 * buffers it names, so a release waits for them before the memory is reused.
 *
 * External buffers (gpa_buffer_wrap, include/gpuactor/external.h) sit in
 * slots like any other, but their memory is the caller's: they never enter
 * the LRU, so nothing evicts or reuses them, and where a cached buffer
 * would go to the LRU (the last release, or the last unpin after it) an
 * external one is retired instead: its release callback runs and its slot
 * is freed. Shutdown hands what is left to the callbacks, never to the
 * backend's mem_free.
 */
#ifndef GPA_ACTOR_BUFCACHE_H
#define GPA_ACTOR_BUFCACHE_H
#include <stdatomic.h>
#include <stdint.h>

#include "actor/internal.h"

#define GPA__SLOT_CHUNK 256
#define GPA__SLOT_CHUNKS 4096 /* 1M buffers at most */

typedef enum gpa__slot_state { GPA__SLOT_FREE = 0, GPA__SLOT_LIVE, GPA__SLOT_RELEASING, GPA__SLOT_CACHED } gpa__slot_state;

typedef struct gpa__slot {
  _Atomic uint64_t id;   /* published live id; 0 when not live */
  _Atomic uint64_t size; /* requested bytes of the live buffer */
  /* actor thread only, on its own line: pins change with every message that
   * names the buffer, while producers read id and size at every submit. */
  _Alignas(64) uint32_t gen;
  uint8_t state;
  uint32_t refs; /* acquisitions */
  uint32_t pins; /* messages in flight that name it */
  void *ptr;
  uint64_t capacity;
  uint64_t version;
  uint64_t lru_tick;
  char *label; /* NULL: anonymous */
  /* external memory: its owner's callback, called once when retired */
  bool external;
  gpa_external_release_fn release;
  void *release_data;
  struct gpa__slot *lru_prev, *lru_next;
  uint32_t index;
} gpa__slot;

struct gpa__bufcache {
  _Atomic(gpa__slot *) chunks[GPA__SLOT_CHUNKS];
  /* actor thread only */
  uint32_t n_slots;
  uint32_t *free_slots; /* indices of FREE slots */
  uint32_t n_free, cap_free;
  gpa__slot lru;        /* sentinel: CACHED buffers, least recently released first */
  char **label_keys;    /* open addressing: label -> slot index */
  uint32_t *label_vals;
  uint32_t label_cap, label_count, label_tombs;
  uint64_t budget;
  uint64_t bytes_allocated, bytes_cached, live;
  uint64_t hits, misses, evictions;
  uint64_t external_bytes; /* wrapped, not allocated: outside the budget */
};

gpa_status gpa__bufcache_init(gpa_actor *a);
/* Shutdown frees the memory; destroy frees the tables. */
void gpa__bufcache_release_memory(gpa_actor *a);
void gpa__bufcache_fini(gpa_actor *a);
/* The lookups below are inline: every message makes several (each of its
 * tensors at submit, at intake, to run and to finish it), and a call into
 * bufcache.c each cost more than the lookup (callgrind, issue 24). */
static inline gpa__slot *gpa__bufcache_slot_at(gpa__bufcache *c, uint32_t index) {
  gpa__slot *chunk = atomic_load_explicit(&c->chunks[index / GPA__SLOT_CHUNK], memory_order_acquire);
  return chunk ? &chunk[index % GPA__SLOT_CHUNK] : NULL;
}
/* Any thread: the slot of a published live id, or NULL. */
static inline gpa__slot *gpa__bufcache_peek(gpa__bufcache *c, gpa_buffer_id id) {
  uint64_t index = (id & 0xffffffffu) - 1;
  if (!id || index >= (uint64_t)GPA__SLOT_CHUNKS * GPA__SLOT_CHUNK) return NULL;
  gpa__slot *s = gpa__bufcache_slot_at(c, (uint32_t)index);
  return s && atomic_load_explicit(&s->id, memory_order_acquire) == id ? s : NULL;
}
/* Actor thread. */
gpa_status gpa__bufcache_acquire(gpa_actor *a, const char *label, uint64_t size, gpa_buffer_id *out,
                                 char *msg, size_t cap);
gpa_status gpa__bufcache_release(gpa_actor *a, gpa_buffer_id id, char *msg, size_t cap);
/* A live anonymous buffer over the caller's memory (checked by the caller). */
gpa_status gpa__bufcache_wrap(gpa_actor *a, void *ptr, uint64_t bytes, gpa_external_release_fn release,
                              void *release_data, gpa_buffer_id *out, char *msg, size_t cap);
static inline gpa__slot *gpa__bufcache_live(gpa__bufcache *c, gpa_buffer_id id) {
  gpa__slot *s = gpa__bufcache_peek(c, id);
  return s && s->state == GPA__SLOT_LIVE ? s : NULL;
}
/* The slot an id names, whatever its generation: for pinned messages. */
static inline gpa__slot *gpa__bufcache_slot(gpa__bufcache *c, gpa_buffer_id id) {
  return gpa__bufcache_slot_at(c, (uint32_t)((id & 0xffffffffu) - 1));
}
static inline void gpa__bufcache_pin(gpa__slot *s) { s->pins++; }
/* The last unpin of a released buffer retires it (bufcache.c). */
void gpa__bufcache_retire_unpinned(gpa_actor *a, gpa__slot *s);
static inline void gpa__bufcache_unpin(gpa_actor *a, gpa__slot *s) {
  if (--s->pins == 0 && s->state == GPA__SLOT_RELEASING) gpa__bufcache_retire_unpinned(a, s);
}
uint64_t gpa__size_class(uint64_t size);
/* Frees every unused cached buffer (a backend out of memory for something
 * else, e.g. op scratch, before it retries once). Returns the bytes freed. */
uint64_t gpa__bufcache_trim(gpa_actor *a);

#endif
