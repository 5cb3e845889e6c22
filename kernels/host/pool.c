#include "kernels/host/pool.h"
#include "actor/spin.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct gpa__pool {
  uint32_t n; /* threads including the caller */
  pthread_t *workers;
  _Atomic uint32_t gen; /* futex word: bumped per loop, wakes sleeping workers */
  /* The current loop's chunks: (chunks << 24) | next chunk, claimed by
   * fetch_add. A claim is valid while next < chunks; a late worker's claim
   * on a finished loop finds next >= chunks and does nothing, so the caller
   * waits for the chunks, never for a worker that has not woken yet. */
  _Atomic uint64_t claim;
  /* Chunks of the current loop finished; the caller's futex word once its
   * join has spun for GPA__SPIN_JOIN_NS (joining: it may sleep on it, and
   * the worker that finishes the last chunk wakes it). */
  _Atomic uint32_t done;
  _Atomic uint32_t joining;
  _Atomic int stop;
  _Atomic uint32_t sleepers;
  /* the current loop, written before claim is published; read only after a
   * valid claim (so never while the caller rewrites it: it waits for every
   * valid claim to finish first) */
  gpa_range_fn fn;
  void *ctx;
  int64_t total, chunk;
};

#define CHUNKS_PER_THREAD 16
#define CLAIM_IDX_BITS 24
#define CLAIM_MAX_CHUNKS 0xffff

static _Thread_local bool in_loop;

static void run_chunks(gpa__pool *p) {
  for (;;) {
    uint64_t w = atomic_fetch_add_explicit(&p->claim, 1, memory_order_acq_rel);
    int64_t c = (int64_t)(w & ((1u << CLAIM_IDX_BITS) - 1)), chunks = (int64_t)(w >> CLAIM_IDX_BITS);
    if (c >= chunks) return;
    int64_t b = c * p->chunk, e = b + p->chunk < p->total ? b + p->chunk : p->total;
    p->fn(b, e, p->ctx);
    /* seq_cst pairs with the caller's store of joining and load of done
     * (join): either it sees this chunk done, or this sees it joining */
    uint32_t d = atomic_fetch_add_explicit(&p->done, 1, memory_order_seq_cst) + 1;
    if (d == (uint32_t)chunks && atomic_load_explicit(&p->joining, memory_order_seq_cst))
      syscall(SYS_futex, &p->done, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

/* The caller waits for the chunks that workers claimed: spins for
 * GPA__SPIN_JOIN_NS (a loop's chunks usually end within microseconds of
 * each other), then sleeps on done until the last one ends. Sleeping, not
 * spinning or yielding, is what lets a late worker run when its core was
 * taken: with 2 cores and another busy thread, a worker descheduled while
 * it holds a chunk waits on its core's run queue; a caller that keeps its
 * own core busy (spinning, or sched_yield, which finds nothing else to run
 * there) keeps the scheduler from pulling the worker over, and the loop
 * lasts as long as the other thread's time slice. A core that goes idle
 * takes the waiting worker at once (docs/benchmarks.md, "The pool's join"). */
static void join(gpa__pool *p, uint32_t chunks) {
  gpa__spin s = gpa__spin_begin(GPA__SPIN_JOIN_NS);
  while (atomic_load_explicit(&p->done, memory_order_acquire) < chunks)
    if (!gpa__spin_on(&s)) break;
  uint32_t d;
  if ((d = atomic_load_explicit(&p->done, memory_order_acquire)) >= chunks) return;
  atomic_store_explicit(&p->joining, 1, memory_order_seq_cst);
  while ((d = atomic_load_explicit(&p->done, memory_order_seq_cst)) < chunks)
    syscall(SYS_futex, &p->done, FUTEX_WAIT_PRIVATE, d, NULL, NULL, 0);
  atomic_store_explicit(&p->joining, 0, memory_order_relaxed);
}

static void *worker_main(void *arg) {
  gpa__pool *p = arg;
  in_loop = true;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    gpa__spin s = gpa__spin_begin(GPA__SPIN_IDLE_NS); /* longer spins fight OpenBLAS's threads */
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
      if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
      if (gpa__spin_on(&s)) continue;
      atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == seen && !atomic_load(&p->stop))
        syscall(SYS_futex, &p->gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
    }
    seen = g;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
    run_chunks(p);
  }
}

gpa__pool *gpa__pool_create(uint32_t threads) {
  if (threads <= 1) return NULL;
  gpa__pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->workers = calloc(threads - 1, sizeof *p->workers);
  if (!p->workers) {
    free(p);
    return NULL;
  }
  p->n = 1;
  for (uint32_t i = 0; i + 1 < threads; i++) {
    if (pthread_create(&p->workers[i], NULL, worker_main, p)) break;
    p->n++;
  }
  return p;
}

void gpa__pool_destroy(gpa__pool *p) {
  if (!p) return;
  atomic_store(&p->stop, 1);
  atomic_fetch_add(&p->gen, 1);
  syscall(SYS_futex, &p->gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  for (uint32_t i = 0; i + 1 < p->n; i++) pthread_join(p->workers[i], NULL);
  free(p->workers);
  free(p);
}

uint32_t gpa__pool_threads(const gpa__pool *p) { return p ? p->n : 1; }

void gpa__pool_for(gpa__pool *p, int64_t n, int64_t grain, gpa_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (!p || p->n == 1 || in_loop || n <= grain) {
    fn(0, n, ctx);
    return;
  }
  /* About CHUNKS_PER_THREAD chunks per thread (at least grain each): a
   * thread that falls behind (preempted, or slowed by the other's memory
   * traffic) leaves the others at most one small chunk to wait for at the
   * end; a claim costs one atomic on a shared line, tens of ns. */
  int64_t chunk = (n + (int64_t)p->n * CHUNKS_PER_THREAD - 1) / ((int64_t)p->n * CHUNKS_PER_THREAD);
  if (chunk < grain) chunk = grain;
  if ((n + chunk - 1) / chunk > CLAIM_MAX_CHUNKS) chunk = (n + CLAIM_MAX_CHUNKS - 1) / CLAIM_MAX_CHUNKS;
  int64_t chunks = (n + chunk - 1) / chunk;
  p->fn = fn;
  p->ctx = ctx;
  p->total = n;
  p->chunk = chunk;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  atomic_store_explicit(&p->joining, 0, memory_order_relaxed);
  atomic_store_explicit(&p->claim, (uint64_t)chunks << CLAIM_IDX_BITS, memory_order_release);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst))
    syscall(SYS_futex, &p->gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  in_loop = true;
  run_chunks(p);
  in_loop = false;
  /* Only chunks that workers have claimed are left: they are running. */
  join(p, (uint32_t)chunks);
}

static void pool_pfor(void *self, int64_t n, int64_t grain, gpa__range_fn fn, void *ctx) {
  gpa__pool_for(self, n, grain, fn, ctx);
}

gpa__par gpa__pool_par(gpa__pool *p) { return (gpa__par){pool_pfor, p, (int)gpa__pool_threads(p)}; }
