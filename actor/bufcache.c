/* The buffer cache (design in bufcache.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/bufcache.h"
#include "backends/backend.h"

#define TOMB ((char *)1)
#define MAX_BUFFER_BYTES GPA_MAX_BUFFER_BYTES

uint64_t gpa__size_class(uint64_t size) {
  if (size <= 256) return 256;
  if (size > MAX_BUFFER_BYTES) return 0;
  /* Four classes per power of two: at most 25% slack. */
  unsigned lg = 63 - (unsigned)__builtin_clzll(size - 1);
  uint64_t step = 1ull << (lg - 2);
  return (size + step - 1) / step * step;
}

/* LRU of cached buffers: head.next is the oldest. */
static void lru_remove(gpa__slot *s) {
  s->lru_prev->lru_next = s->lru_next;
  s->lru_next->lru_prev = s->lru_prev;
  s->lru_prev = s->lru_next = NULL;
}
static void lru_append(gpa__bufcache *c, gpa__slot *s) {
  s->lru_prev = c->lru.lru_prev;
  s->lru_next = &c->lru;
  c->lru.lru_prev->lru_next = s;
  c->lru.lru_prev = s;
}

/* Label map: open addressing over slot indices, keys are the slots' labels. */
static uint32_t label_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}
static int64_t label_find(gpa__bufcache *c, const char *label) {
  if (!c->label_cap) return -1;
  uint32_t i = label_hash(label) & (c->label_cap - 1);
  for (uint32_t n = 0; n < c->label_cap; n++, i = (i + 1) & (c->label_cap - 1)) {
    char *k = c->label_keys[i];
    if (!k) return -1;
    if (k != TOMB && !strcmp(k, label)) return i;
  }
  return -1;
}
static bool label_grow(gpa__bufcache *c) {
  uint32_t cap = c->label_cap ? c->label_cap * 2 : 64;
  char **keys = calloc(cap, sizeof *keys);
  uint32_t *vals = calloc(cap, sizeof *vals);
  if (!keys || !vals) { free(keys); free(vals); return false; }
  for (uint32_t i = 0; i < c->label_cap; i++) {
    char *k = c->label_keys[i];
    if (!k || k == TOMB) continue;
    uint32_t j = label_hash(k) & (cap - 1);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = k;
    vals[j] = c->label_vals[i];
  }
  free(c->label_keys);
  free(c->label_vals);
  c->label_keys = keys;
  c->label_vals = vals;
  c->label_cap = cap;
  c->label_tombs = 0;
  return true;
}
static bool label_insert(gpa__bufcache *c, char *label, uint32_t index) {
  if ((c->label_count + c->label_tombs + 1) * 4 > c->label_cap * 3 && !label_grow(c)) return false;
  uint32_t i = label_hash(label) & (c->label_cap - 1);
  while (c->label_keys[i] && c->label_keys[i] != TOMB) i = (i + 1) & (c->label_cap - 1);
  if (c->label_keys[i] == TOMB) c->label_tombs--;
  c->label_keys[i] = label;
  c->label_vals[i] = index;
  c->label_count++;
  return true;
}
static void label_remove(gpa__bufcache *c, const char *label) {
  int64_t i = label_find(c, label);
  if (i < 0) return;
  c->label_keys[i] = TOMB;
  c->label_tombs++;
  c->label_count--;
}

static gpa__slot *slot_new(gpa__bufcache *c) {
  uint32_t index;
  if (c->n_free) {
    index = c->free_slots[--c->n_free];
  } else {
    if (c->n_slots >= (uint32_t)GPA__SLOT_CHUNKS * GPA__SLOT_CHUNK) return NULL;
    index = c->n_slots;
    if (index % GPA__SLOT_CHUNK == 0) {
      gpa__slot *chunk = aligned_alloc(_Alignof(gpa__slot), GPA__SLOT_CHUNK * sizeof *chunk);
      if (!chunk) return NULL;
      memset(chunk, 0, GPA__SLOT_CHUNK * sizeof *chunk);
      for (uint32_t i = 0; i < GPA__SLOT_CHUNK; i++) chunk[i].index = index + i;
      atomic_store_explicit(&c->chunks[index / GPA__SLOT_CHUNK], chunk, memory_order_release);
    }
    c->n_slots++;
  }
  return gpa__bufcache_slot_at(c, index);
}

static void slot_free(gpa__bufcache *c, gpa__slot *s) {
  if (c->n_free == c->cap_free) {
    uint32_t cap = c->cap_free ? c->cap_free * 2 : 64;
    uint32_t *v = realloc(c->free_slots, cap * sizeof *v);
    if (!v) return; /* the slot is lost to reuse, nothing worse */
    c->free_slots = v;
    c->cap_free = cap;
  }
  c->free_slots[c->n_free++] = s->index;
}

static void publish(gpa__slot *s, uint64_t size) {
  atomic_store_explicit(&s->size, size, memory_order_relaxed);
  atomic_store_explicit(&s->id, ((uint64_t)s->gen << 32) | (s->index + 1), memory_order_release);
}

static void unpublish(gpa__slot *s) {
  atomic_store_explicit(&s->id, 0, memory_order_release);
  if (++s->gen == 0) s->gen = 1;
}

static void evict(gpa_actor *a, gpa__slot *s) {
  gpa__bufcache *c = a->cache;
  lru_remove(s);
  c->bytes_cached -= s->capacity;
  c->bytes_allocated -= s->capacity;
  a->be->mem_free(a->bctx, s->ptr);
  s->ptr = NULL;
  if (s->label) {
    label_remove(c, s->label);
    free(s->label);
    s->label = NULL;
  }
  s->state = GPA__SLOT_FREE;
  c->evictions++;
  slot_free(c, s);
}

static void to_cache(gpa__bufcache *c, gpa__slot *s) {
  s->state = GPA__SLOT_CACHED;
  lru_append(c, s);
  c->bytes_cached += s->capacity;
}

/* The memory goes back to its owner; the slot is free for reuse (its id's
 * generation moved on when it was unpublished). */
static void retire_external(gpa__bufcache *c, gpa__slot *s) {
  gpa_external_release_fn fn = s->release;
  void *ptr = s->ptr, *data = s->release_data;
  c->external_bytes -= s->capacity;
  s->ptr = NULL;
  s->external = false;
  s->release = NULL;
  s->release_data = NULL;
  s->state = GPA__SLOT_FREE;
  slot_free(c, s);
  if (fn) fn(ptr, data);
}

/* Where a released buffer goes once no message names it. */
static void retire(gpa__bufcache *c, gpa__slot *s) {
  if (s->external) retire_external(c, s);
  else to_cache(c, s);
}

uint64_t gpa__bufcache_trim(gpa_actor *a) {
  gpa__bufcache *c = a->cache;
  uint64_t freed = c->bytes_cached;
  while (c->lru.lru_next != &c->lru) evict(a, c->lru.lru_next);
  return freed;
}

static gpa_status alloc_mem(gpa_actor *a, uint64_t cap, void **ptr, char *msg, size_t msz) {
  gpa__bufcache *c = a->cache;
  while (c->budget && c->bytes_allocated + cap > c->budget && c->lru.lru_next != &c->lru) evict(a, c->lru.lru_next);
  if (c->budget && c->bytes_allocated + cap > c->budget) {
    snprintf(msg, msz, "buffer of %" PRIu64 " bytes exceeds the memory budget (%" PRIu64 " of %" PRIu64 " in live buffers)",
             cap, c->bytes_allocated, c->budget);
    return GPA_ENOMEM;
  }
  if (a->be->mem_alloc(a->bctx, cap, ptr) == GPA_OK) return GPA_OK;
  /* Out of memory: free every unused cached buffer and retry once. */
  gpa__bufcache_trim(a);
  if (a->be->mem_alloc(a->bctx, cap, ptr) == GPA_OK) return GPA_OK;
  snprintf(msg, msz, "out of device memory allocating %" PRIu64 " bytes", cap);
  return GPA_ENOMEM;
}

static void make_live(gpa__bufcache *c, gpa__slot *s, uint64_t size) {
  s->state = GPA__SLOT_LIVE;
  s->refs = 1;
  c->live++;
  publish(s, size);
}

gpa_status gpa__bufcache_acquire(gpa_actor *a, const char *label, uint64_t size, gpa_buffer_id *out, char *msg,
                                 size_t msz) {
  gpa__bufcache *c = a->cache;
  uint64_t cap = gpa__size_class(size);
  if (label) {
    int64_t li = label_find(c, label);
    if (li >= 0) {
      gpa__slot *s = gpa__bufcache_slot_at(c, c->label_vals[li]);
      uint64_t have = atomic_load_explicit(&s->size, memory_order_relaxed);
      if (s->state == GPA__SLOT_LIVE) {
        if (have != size) {
          snprintf(msg, msz, "label '%s' is live with %" PRIu64 " bytes, asked for %" PRIu64, label, have, size);
          return GPA_EMISMATCH;
        }
        s->refs++;
        c->hits++;
        *out = atomic_load_explicit(&s->id, memory_order_relaxed);
        return GPA_OK;
      }
      if (s->state == GPA__SLOT_CACHED && have == size) {
        lru_remove(s);
        c->bytes_cached -= s->capacity;
        make_live(c, s, size);
        c->hits++;
        *out = atomic_load_explicit(&s->id, memory_order_relaxed);
        return GPA_OK;
      }
      if (s->state == GPA__SLOT_RELEASING) {
        snprintf(msg, msz, "label '%s' was released and is still in use by queued work; sync first", label);
        return GPA_EBUSY;
      }
      evict(a, s); /* cached with another size: the label starts over */
    }
  } else {
    /* Reuse the most recently released anonymous buffer of this class. */
    for (gpa__slot *s = c->lru.lru_prev; s != &c->lru; s = s->lru_prev) {
      if (s->label || s->capacity != cap) continue;
      lru_remove(s);
      c->bytes_cached -= s->capacity;
      s->version = 0;
      make_live(c, s, size);
      c->hits++;
      *out = atomic_load_explicit(&s->id, memory_order_relaxed);
      return GPA_OK;
    }
  }
  char *lab = NULL;
  if (label && !(lab = strdup(label))) return GPA_ENOMEM;
  void *ptr;
  gpa_status st = alloc_mem(a, cap, &ptr, msg, msz);
  gpa__slot *s = st == GPA_OK ? slot_new(c) : NULL;
  if (s && lab && !label_insert(c, lab, s->index)) {
    slot_free(c, s);
    s = NULL;
  }
  if (!s) {
    if (st == GPA_OK) {
      a->be->mem_free(a->bctx, ptr);
      snprintf(msg, msz, "out of buffer slots or host memory");
      st = GPA_ENOMEM;
    }
    free(lab);
    return st;
  }
  if (!s->gen) s->gen = 1;
  s->ptr = ptr;
  s->capacity = cap;
  s->version = 0;
  s->pins = 0;
  s->label = lab;
  c->bytes_allocated += cap;
  c->misses++;
  make_live(c, s, size);
  *out = atomic_load_explicit(&s->id, memory_order_relaxed);
  return GPA_OK;
}

gpa_status gpa__bufcache_release(gpa_actor *a, gpa_buffer_id id, char *msg, size_t msz) {
  gpa__bufcache *c = a->cache;
  gpa__slot *s = gpa__bufcache_live(c, id);
  if (!s) {
    snprintf(msg, msz, "gpa_buffer_release: buffer 0x%" PRIx64 " is stale or was never acquired", id);
    return GPA_ESTALE;
  }
  if (--s->refs) return GPA_OK;
  unpublish(s);
  c->live--;
  if (s->pins) s->state = GPA__SLOT_RELEASING;
  else retire(c, s);
  return GPA_OK;
}

gpa_status gpa__bufcache_wrap(gpa_actor *a, void *ptr, uint64_t bytes, gpa_external_release_fn release,
                              void *release_data, gpa_buffer_id *out, char *msg, size_t msz) {
  gpa__bufcache *c = a->cache;
  gpa__slot *s = slot_new(c);
  if (!s) {
    snprintf(msg, msz, "gpa_buffer_wrap: out of buffer slots or host memory");
    return GPA_ENOMEM;
  }
  if (!s->gen) s->gen = 1;
  s->ptr = ptr;
  s->capacity = bytes;
  s->version = 0;
  s->pins = 0;
  s->label = NULL;
  s->external = true;
  s->release = release;
  s->release_data = release_data;
  c->external_bytes += bytes;
  make_live(c, s, bytes);
  *out = atomic_load_explicit(&s->id, memory_order_relaxed);
  return GPA_OK;
}

void gpa__bufcache_retire_unpinned(gpa_actor *a, gpa__slot *s) { retire(a->cache, s); }

gpa_status gpa__bufcache_init(gpa_actor *a) {
  gpa__bufcache *c = aligned_alloc(_Alignof(gpa__bufcache), sizeof *c); /* it holds a slot */
  if (c) memset(c, 0, sizeof *c);
  if (!c) return gpa__fail(GPA_ENOMEM, "out of memory creating the buffer cache");
  c->lru.lru_prev = c->lru.lru_next = &c->lru;
  c->budget = a->opts.mem_budget;
  a->cache = c;
  return GPA_OK;
}

void gpa__bufcache_release_memory(gpa_actor *a) {
  gpa__bufcache *c = a->cache;
  if (!c) return;
  for (uint32_t i = 0; i < c->n_slots; i++) {
    gpa__slot *s = gpa__bufcache_slot_at(c, i);
    atomic_store_explicit(&s->id, 0, memory_order_release);
    if (s->external) {
      /* The streams are gone (queues first): no work uses it any more. */
      if (s->release) s->release(s->ptr, s->release_data);
      s->external = false;
      s->release = NULL;
    } else if (s->ptr) {
      a->be->mem_free(a->bctx, s->ptr);
    }
    s->ptr = NULL;
  }
}

void gpa__bufcache_fini(gpa_actor *a) {
  gpa__bufcache *c = a->cache;
  if (!c) return;
  for (uint32_t i = 0; i < c->n_slots; i++) free(gpa__bufcache_slot_at(c, i)->label);
  for (uint32_t i = 0; i < GPA__SLOT_CHUNKS; i++) free(atomic_load(&c->chunks[i]));
  free(c->free_slots);
  free(c->label_keys);
  free(c->label_vals);
  free(c);
  a->cache = NULL;
}
