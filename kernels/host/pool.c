#include "kernels/host/pool.h"
#include "actor/spin.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

struct gpa__pool {
  uint32_t n; /* threads including the caller */
  pthread_t *workers;
  _Atomic uint32_t gen;    /* futex word: bumped per loop */
  _Atomic uint32_t busy;   /* workers still inside the current loop */
  _Atomic int64_t next;    /* next chunk */
  _Atomic int stop;
  _Atomic uint32_t sleepers;
  /* the current loop, written before gen is bumped */
  gpa_range_fn fn;
  void *ctx;
  int64_t total, chunk, chunks;
};

static _Thread_local bool in_loop;

static void run_chunks(gpa__pool *p) {
  int64_t c;
  while ((c = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->chunks) {
    int64_t b = c * p->chunk, e = b + p->chunk < p->total ? b + p->chunk : p->total;
    p->fn(b, e, p->ctx);
  }
}

static void *worker_main(void *arg) {
  gpa__pool *p = arg;
  in_loop = true;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
      if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
      if (++spins < 2000) { /* ~30 us: long spins fight OpenBLAS's threads */
        gpa__cpu_relax();
        continue;
      }
      atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == seen && !atomic_load(&p->stop))
        syscall(SYS_futex, &p->gen, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
      atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
    }
    seen = g;
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
    run_chunks(p);
    atomic_fetch_sub_explicit(&p->busy, 1, memory_order_release);
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
  /* About 4 chunks per thread balances load without much hand-out traffic. */
  int64_t chunk = (n + (int64_t)p->n * 4 - 1) / ((int64_t)p->n * 4);
  if (chunk < grain) chunk = grain;
  p->fn = fn;
  p->ctx = ctx;
  p->total = n;
  p->chunk = chunk;
  p->chunks = (n + chunk - 1) / chunk;
  atomic_store_explicit(&p->next, 0, memory_order_relaxed);
  atomic_store_explicit(&p->busy, p->n - 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst))
    syscall(SYS_futex, &p->gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
  in_loop = true;
  run_chunks(p);
  in_loop = false;
  /* Workers that wake late find no chunk and leave at once. */
  for (int spins = 0; atomic_load_explicit(&p->busy, memory_order_acquire); spins++) {
    if (spins < 4000) gpa__cpu_relax();
    else sched_yield(); /* a worker may be preempted: give it the core */
  }
}
