/* Messages (= handles): pooled allocation, completion and waiting. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "actor/ctx.h"
#include "actor/fence.h"
#include "actor/spin.h"

#define GPA__SLAB_MSGS 32

static void futex_wake_all(_Atomic uint32_t *addr) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t expected, const struct timespec *rel) {
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, rel, NULL, 0);
}

bool gpa__ctx_refill(gpa__ctx *c) {
  gpa__msg *r = atomic_exchange_explicit(&c->returned, NULL, memory_order_acquire);
  if (r) {
    c->free_list = r;
    return true;
  }
  if (c->n_slabs == c->cap_slabs) {
    uint32_t cap = c->cap_slabs ? c->cap_slabs * 2 : 8;
    void **s = realloc(c->slabs, cap * sizeof *s);
    if (!s) return false;
    c->slabs = s;
    c->cap_slabs = cap;
  }
  gpa__msg *slab = aligned_alloc(64, GPA__SLAB_MSGS * sizeof(gpa__msg));
  if (!slab) return false;
  c->slabs[c->n_slabs++] = slab;
  for (int i = 0; i < GPA__SLAB_MSGS; i++) {
    slab[i].owner = c;
    slab[i].err[0] = 0;
    slab[i].next = i + 1 < GPA__SLAB_MSGS ? &slab[i + 1] : NULL;
  }
  c->free_list = slab;
  return true;
}

gpa__msg *gpa__msg_take_slow(gpa__ctx *c, int kind) {
  if (!gpa__ctx_refill(c)) {
    gpa__fail(GPA_ENOMEM, "out of memory allocating a message");
    return NULL;
  }
  return gpa__msg_take(c, kind);
}

gpa__msg *gpa__msg_new(gpa_actor *a, int kind) {
  gpa__ctx *c = gpa__ctx_get(a);
  return c ? gpa__msg_take(c, kind) : NULL;
}

void gpa__msg_ref(gpa__msg *m) { atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed); }

/* Gives a chain of messages (first..last, n of them) back to their owner. */
static void give_back(gpa__ctx *c, gpa__msg *first, gpa__msg *last, uint64_t n) {
  gpa__msg *head = atomic_load_explicit(&c->returned, memory_order_relaxed);
  do {
    last->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&c->returned, &head, first, memory_order_release,
                                                  memory_order_relaxed));
  if (atomic_fetch_sub_explicit(&c->refs, n, memory_order_acq_rel) == n) gpa__ctx_free(c);
}

void gpa__msg_unref(gpa__msg *m) {
  if (gpa__msg_drop_ref(m)) give_back(m->owner, m, m, 1);
}

void gpa__msg_return_flush(gpa_actor *a) {
  for (uint32_t i = 0; i < GPA__RET_SLOTS && a->ret[i].n; i++) {
    give_back(a->ret[i].c, a->ret[i].first, a->ret[i].last, a->ret[i].n);
    a->ret[i].n = 0;
  }
}

gpa_status gpa__msg_set_tensors(gpa__msg *m, const gpa_tensor *in, uint32_t n_in, const gpa_tensor *out,
                                uint32_t n_out) {
  uint32_t n = n_in + n_out;
  if (n > GPA__MSG_TENSORS) {
    m->t = malloc(n * sizeof *m->t);
    if (!m->t) {
      m->t = m->t_inline;
      return gpa__fail(GPA_ENOMEM, "out of memory copying %u tensors", n);
    }
  }
  if (n_in) memcpy(m->t, in, n_in * sizeof *in);
  if (n_out) memcpy(m->t + n_in, out, n_out * sizeof *out);
  m->n_in = n_in;
  m->n_out = n_out;
  return GPA_OK;
}

void gpa__msg_complete(gpa__msg *m, gpa_status st, const char *msg) {
  GPA__ASSERT(1, !atomic_load_explicit(&m->state, memory_order_relaxed)); /* exactly once */
  m->status = st;
  if (st != GPA_OK) {
    if (msg && msg != m->err) snprintf(m->err, sizeof m->err, "%s", msg);
    else if (!msg || !msg[0]) snprintf(m->err, sizeof m->err, "%s", gpa_strerror(st));
  }
  /* A Dekker pair with a waiter about to sleep: either it sees state 1 or we
   * see its waiters count. The sleeper, the rare side, has the full fence. */
  atomic_store_explicit(&m->state, 1, memory_order_release);
  gpa__fence_light();
  if (atomic_load_explicit(&m->waiters, memory_order_relaxed)) futex_wake_all(&m->state);
}

/* m is held by the backend until its batch ends (a graph replay): ask the
 * actor to start it, once. Without memory for the request the next look
 * asks again (the sleep below is then bounded). */
static void kick(gpa__msg *m) {
  uint8_t one = 1;
  if (!atomic_compare_exchange_strong_explicit(&m->held, &one, 2, memory_order_relaxed, memory_order_relaxed)) return;
  gpa_actor *a = m->q->actor;
  gpa__msg *k = gpa__msg_new(a, GPA__MSG_CALL);
  if (k) {
    gpa__msg_ref(m);
    memcpy(k->params, &m, sizeof m);
    k->fn = gpa__held_release;
    if (gpa__send_owned(a, k) == GPA_OK) return;
    gpa__msg_unref(m);
    gpa__msg_unref(k);
  }
  /* shutting down: the actor releases everything it holds then */
  if (!atomic_load_explicit(&a->closing, memory_order_acquire)) atomic_store_explicit(&m->held, 1, memory_order_relaxed);
}

/* How long this thread's recent waits took (an average over about the
 * last four, ns). */
static _Thread_local int64_t wait_avg_ns;

static bool wait_sleep(gpa__msg *m, int64_t timeout_ns, int64_t start, bool spin);

/* Spin briefly first (spin.h): waking a sleeper costs more than a short op.
 * But not when this thread's recent waits outlasted the spin: then the
 * spin (and the yields after it) only take a core from the pool that runs
 * the op — on the project's 2-core VM, 7-8% of a 1.2 ms conv1d awaited in
 * a loop (issue 26). A wait that ends within the budget again brings the
 * average down and the spin back, so round trips keep it. */
static bool wait_done(gpa__msg *m, int64_t timeout_ns) {
  if (atomic_load_explicit(&m->state, memory_order_acquire)) return true;
  if (atomic_load_explicit(&m->held, memory_order_relaxed) == 1) kick(m);
  if (timeout_ns == 0) return false;
  int64_t budget = timeout_ns > 0 && timeout_ns < GPA__SPIN_AWAIT_NS ? timeout_ns : GPA__SPIN_AWAIT_NS;
  gpa__spin s = gpa__spin_begin(budget); /* the wait's one clock read when it ends soon */
  int64_t start = s.end - budget;
  bool spin = wait_avg_ns < GPA__SPIN_AWAIT_NS;
  while (spin && gpa__spin_on(&s))
    if (atomic_load_explicit(&m->state, memory_order_acquire)) {
      /* Under 64 pauses (a few us) counts as 0: a clock read more per
       * round trip was 30-50 of its ~300 ns on the project's VM. */
      wait_avg_ns += ((s.n < 64 ? 0 : gpa__spin_clock() - start) - wait_avg_ns) / 4;
      return true;
    }
  bool done = wait_sleep(m, timeout_ns, start, spin);
  wait_avg_ns += (gpa__now_ns() - start - wait_avg_ns) / 4;
  return done;
}

/* After the spin: yields (when spinning is on), then sleeps. */
static bool wait_sleep(gpa__msg *m, int64_t timeout_ns, int64_t start, bool spin) {
  /* A few yields before sleeping, bounded by the timeout: on a loaded
   * machine each one may give a whole time slice away. */
  for (int i = 0; spin && i < 20; i++) {
    if (atomic_load_explicit(&m->state, memory_order_acquire)) return true;
    if (timeout_ns > 0 && gpa__now_ns() - start >= timeout_ns) return false;
    sched_yield();
  }
  for (;;) {
    struct timespec rel, *relp = NULL;
    if (timeout_ns > 0) {
      int64_t left = timeout_ns - (gpa__now_ns() - start);
      if (left <= 0) return atomic_load_explicit(&m->state, memory_order_acquire) != 0;
      rel.tv_sec = left / 1000000000;
      rel.tv_nsec = left % 1000000000;
      relp = &rel;
    }
    atomic_fetch_add_explicit(&m->waiters, 1, memory_order_seq_cst);
    gpa__fence_heavy();
    if (atomic_load_explicit(&m->held, memory_order_relaxed) == 1) { /* the other side of dispatch.c's held() */
      kick(m);
      if (atomic_load_explicit(&m->held, memory_order_relaxed) == 1 && (!relp || rel.tv_sec || rel.tv_nsec > 1000000)) {
        rel = (struct timespec){0, 1000000}; /* the request could not be sent: look again soon */
        relp = &rel;
      }
    }
    if (!atomic_load_explicit(&m->state, memory_order_acquire)) futex_wait(&m->state, 0, relp);
    atomic_fetch_sub_explicit(&m->waiters, 1, memory_order_relaxed);
    if (atomic_load_explicit(&m->state, memory_order_acquire)) return true;
  }
}

/* A debug build checks that the caller still holds h (actor/debug.h). */
static gpa_status handle_check(const gpa_handle *h, const char *fn) {
#if GPA_DEBUG
  if (h->dbg_magic != GPA__MSG_LIVE || !atomic_load_explicit(&h->dbg_user, memory_order_relaxed)) {
    gpa__log(GPA_LOG_ERROR, GPA_LOG_ERROR, "%s: handle %p was already released (use after release)", fn, (void *)h);
    return gpa__fail(GPA_EINVAL, "%s: handle %p was already released (use after release)", fn, (void *)h);
  }
#else
  (void)h;
  (void)fn;
#endif
  return GPA_OK;
}

gpa_status gpa_await(gpa_handle *h, int64_t timeout_ns) {
  if (!h) return gpa__fail(GPA_EINVAL, "gpa_await: handle is NULL");
  if (GPA_DEBUG && handle_check(h, "gpa_await") != GPA_OK) return GPA_EINVAL;
  if (!wait_done(h, timeout_ns)) return gpa__fail(GPA_ETIMEDOUT, "gpa_await: handle still pending");
  if (h->status != GPA_OK) return gpa__fail(h->status, "%s", h->err);
  atomic_store_explicit(&h->synced, 1, memory_order_release);
  return GPA_OK;
}

gpa_status gpa_handle_status(const gpa_handle *h) {
  if (!h) return gpa__fail(GPA_EINVAL, "gpa_handle_status: handle is NULL");
  if (GPA_DEBUG && handle_check(h, "gpa_handle_status") != GPA_OK) return GPA_EINVAL;
  if (!atomic_load_explicit(&h->state, memory_order_acquire)) return GPA_EPENDING;
  return h->status;
}

const char *gpa_handle_error_message(const gpa_handle *h) {
  if (!h || !atomic_load_explicit(&h->state, memory_order_acquire)) return "";
  return h->status == GPA_OK ? "" : h->err;
}

void gpa_handle_retain(gpa_handle *h) {
  if (!h || (GPA_DEBUG && handle_check(h, "gpa_handle_retain") != GPA_OK)) return;
#if GPA_DEBUG
  atomic_fetch_add_explicit(&h->dbg_user, 1, memory_order_relaxed);
#endif
  gpa__msg_ref(h);
}

void gpa_handle_release(gpa_handle *h) {
  if (!h) return;
#if GPA_DEBUG
  /* The caller's count, not the message's: the actor may still hold it. A
   * message already back in its pool fails the first test, one released by
   * the caller but still held by the actor the second. */
  uint32_t u = atomic_load_explicit(&h->dbg_user, memory_order_relaxed);
  do {
    if (h->dbg_magic != GPA__MSG_LIVE || !u) {
      handle_check(h, "gpa_handle_release");
      return;
    }
  } while (!atomic_compare_exchange_weak_explicit(&h->dbg_user, &u, u - 1, memory_order_relaxed,
                                                  memory_order_relaxed));
#endif
  gpa__msg_unref(h);
}

gpa_status gpa_handle_data(gpa_handle *h, const void **data, uint64_t *size) {
  if (!h || !data || !size) return gpa__fail(GPA_EINVAL, "gpa_handle_data: NULL argument");
  if (GPA_DEBUG && handle_check(h, "gpa_handle_data") != GPA_OK) return GPA_EINVAL;
  *data = NULL;
  *size = 0;
  if (h->kind != GPA__MSG_READBACK) return gpa__fail(GPA_EINVAL, "gpa_handle_data: not a readback handle");
  if (!atomic_load_explicit(&h->synced, memory_order_acquire))
    return gpa__fail(GPA_ENOTSYNCED, "readback not synced: await the handle or sync its batch first");
  if (h->status != GPA_OK) return gpa__fail(h->status, "%s", h->err);
  *data = h->payload;
  *size = h->payload_size;
  return GPA_OK;
}

gpa_status gpa__call(gpa_actor *a, gpa__msg *m) {
  gpa_status st = gpa__send(a, m);
  if (st != GPA_OK) return st;
  atomic_fetch_add_explicit(&a->hurry, 1, memory_order_relaxed); /* no coalescing wait for this one */
  wait_done(m, -1);
  st = m->status;
  if (st != GPA_OK) gpa__fail(st, "%s", m->err);
  return st;
}
