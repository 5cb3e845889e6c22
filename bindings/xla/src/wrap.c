/* XLA's buffers as external buffers, with a small cache of wraps.
 *
 * A wrap and its release are each a round trip to the actor; an XLA
 * executable passes the same addresses call after call (its buffer
 * assignment is fixed, and the allocator hands parameters the same blocks
 * again), so the wraps of recent (address, size) pairs are kept. Keeping a
 * wrap of memory XLA has since freed is harmless: the actor touches external
 * memory only in the ops that name it, and an id is used again only when a
 * call passes that exact range, which XLA then owns for the call. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gpuactor/external.h"
#include "xla_internal.h"

#define SLOTS 64

typedef struct slot {
  gpa_actor *actor; /* the host actor, or one device's (cuda.c): ids are per actor */
  uintptr_t base;
  uint64_t bytes;
  gpa_buffer_id id;
  uint32_t uses;  /* calls in flight naming it: not evictable */
  uint64_t stamp; /* last use, for LRU */
} slot;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static slot slots[SLOTS];
static uint64_t clock_;
static _Atomic uint64_t n_wraps, n_hits;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int cache_off;

/* GPA_XLA_WRAP_CACHE=0 wraps and releases every buffer on every call: what
 * the cache saves is measured with it (docs/xla.md). */
static void read_env(void) {
  const char *v = getenv("GPA_XLA_WRAP_CACHE");
  cache_off = v && !strcmp(v, "0");
}

void gpa_xla_wrap_counts(uint64_t *wraps, uint64_t *hits) {
  *wraps = atomic_load(&n_wraps);
  *hits = atomic_load(&n_hits);
}

static gpa_status wrap(gpa_actor *a, uintptr_t base, uint64_t bytes, gpa_buffer_id *id) {
  /* The host actor takes XLA's host memory; a device actor (cuda or sim)
   * XLA's device memory. */
  int kind = strcmp(gpa_actor_backend(a), "cpu") ? GPA_MEM_DEVICE : GPA_MEM_HOST;
  gpa_external_desc d = {.size_of = sizeof d, .kind = kind, .ptr = (void *)base, .bytes = bytes};
  atomic_fetch_add_explicit(&n_wraps, 1, memory_order_relaxed);
  return gpa_buffer_wrap(a, &d, id);
}

gpa_status gpa_xla_wrap_get(gpa_actor *a, void *ptr, uint64_t bytes, gpa_xla_wrap *out) {
  /* The actor wants GPA_EXTERNAL_ALIGN-aligned memory: an unaligned array
   * is addressed through the tensor's offset from the aligned base. */
  uintptr_t base = (uintptr_t)ptr & ~(uintptr_t)(GPA_EXTERNAL_ALIGN - 1);
  out->offset = (uintptr_t)ptr - base;
  bytes += out->offset;
  pthread_once(&once, read_env);
  if (cache_off) {
    out->slot = -1;
    return wrap(a, base, bytes, &out->id);
  }
  pthread_mutex_lock(&mu);
  int victim = -1;
  for (int i = 0; i < SLOTS; i++) {
    slot *s = &slots[i];
    if (s->id && s->actor == a && s->base == base && s->bytes == bytes) {
      s->uses++;
      s->stamp = ++clock_;
      out->id = s->id;
      out->slot = i;
      pthread_mutex_unlock(&mu);
      atomic_fetch_add_explicit(&n_hits, 1, memory_order_relaxed);
      return GPA_OK;
    }
    if (s->uses == 0 && (victim < 0 || !s->id || (slots[victim].id && s->stamp < slots[victim].stamp))) victim = i;
  }
  gpa_buffer_id old = 0;
  gpa_actor *old_actor = NULL;
  if (victim >= 0) {
    old = slots[victim].id, old_actor = slots[victim].actor;
    memset(&slots[victim], 0, sizeof slots[victim]);
  }
  /* The wrap happens under the lock so that two threads missing on the same
   * range do not both wrap it; misses are rare once an executable runs. */
  if (old) gpa_buffer_release(old_actor, old);
  gpa_status st = wrap(a, base, bytes, &out->id);
  if (st == GPA_OK && victim >= 0) {
    slots[victim] = (slot){a, base, bytes, out->id, 1, ++clock_};
    out->slot = victim;
  } else {
    out->slot = -1; /* every slot in use by calls in flight: this call's own wrap */
  }
  pthread_mutex_unlock(&mu);
  return st;
}

void gpa_xla_wrap_put(gpa_actor *a, const gpa_xla_wrap *w) {
  if (w->slot < 0) {
    if (w->id) gpa_buffer_release(a, w->id);
    return;
  }
  pthread_mutex_lock(&mu);
  slots[w->slot].uses--;
  pthread_mutex_unlock(&mu);
}
