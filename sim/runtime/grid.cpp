/* gpa-sim grid execution: the blocks of a launch spread over a worker pool.
 *
 * The stream thread that executes a launch publishes the grid, runs blocks
 * itself and waits for the pool workers that joined it. A block is claimed
 * with one atomic increment and runs to completion on the claiming OS thread
 * (its fibers never migrate, which is what makes thread_local static
 * __shared__ storage per-block storage). The first failing block stops the
 * grid: later blocks are claimed but skipped. Workers start on the first
 * multi-block launch and are joined when the library is unloaded. */
#include <atomic>
#include <condition_variable>
#include <list>
#include <thread>
#include <vector>
#include "simt.h"

namespace {
struct Grid {
  gpa_sim_launch *L;
  uint64_t total;
  std::atomic<uint64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  int refs = 0; /* pool workers inside run_blocks, under Pool::mu */
};

struct Pool {
  std::mutex mu;
  std::condition_variable cv;      /* work for workers / stop */
  std::condition_variable done_cv; /* a grid finished or a worker left it */
  std::list<Grid *> active;
  std::vector<std::thread> threads;
  bool stop = false;
};
Pool *g_pool;
std::once_flag g_pool_once;

void run_blocks(Grid *g) {
  const gpa_sim_launch *L = g->L;
  for (;;) {
    uint64_t b = g->next.fetch_add(1);
    if (b >= g->total) return;
    if (!g->failed.load(std::memory_order_relaxed)) {
      uint3 bi = make_uint3((unsigned)(b % L->grid.x), (unsigned)(b / L->grid.x % L->grid.y),
                            (unsigned)(b / ((uint64_t)L->grid.x * L->grid.y)));
      std::string err;
      int rc;
      try {
        rc = gpa_sim__block_run(g->L, bi, &err);
      } catch (...) { /* a pool worker has no caller to throw to: the launch fails */
        rc = -1;
        err = "out of host memory while starting a block";
      }
      if (rc != 0) {
        std::lock_guard<std::mutex> lk(g->err_mu);
        if (!g->failed.exchange(true)) g->L->error = err;
      }
    }
    g->done.fetch_add(1);
  }
}

void worker(Pool *p) {
  std::unique_lock<std::mutex> lk(p->mu);
  for (;;) {
    Grid *g = nullptr;
    for (Grid *c : p->active)
      if (c->next.load() < c->total) {
        g = c;
        break;
      }
    if (!g) {
      if (p->stop) return;
      p->cv.wait(lk);
      continue;
    }
    g->refs++;
    lk.unlock();
    run_blocks(g);
    lk.lock();
    g->refs--;
    p->done_cv.notify_all();
  }
}

/* Workers that cannot start are done without: the launching thread runs
 * every block a worker does not claim. */
void pool_start(void) {
  Pool *p = new Pool();
  unsigned n = gpa_sim__opt_workers();
  try {
    for (unsigned i = 0; i < n; i++) p->threads.emplace_back(worker, p);
  } catch (...) {
  }
  g_pool = p;
}

__attribute__((destructor)) void pool_stop(void) {
  Pool *p = g_pool;
  if (!p) return;
  {
    std::lock_guard<std::mutex> lk(p->mu);
    p->stop = true;
  }
  p->cv.notify_all();
  for (auto &t : p->threads) t.join();
  delete p;
  g_pool = nullptr;
}
} // namespace

int gpa_sim__grid_run(gpa_sim_launch *L) {
  Grid g;
  g.L = L;
  g.total = (uint64_t)L->grid.x * L->grid.y * L->grid.z;
  std::unique_lock<std::mutex> serial;
  if (L->serial) serial = std::unique_lock<std::mutex>(*L->serial);
  if (g.total == 1 || L->serial || gpa_sim__opt_workers() == 0) {
    run_blocks(&g);
    return g.failed ? -1 : 0;
  }
  std::call_once(g_pool_once, pool_start);
  Pool *p = g_pool;
  {
    std::lock_guard<std::mutex> lk(p->mu);
    p->active.push_back(&g);
  }
  p->cv.notify_all();
  run_blocks(&g);
  std::unique_lock<std::mutex> lk(p->mu);
  p->active.remove(&g);
  p->done_cv.wait(lk, [&] { return g.refs == 0 && g.done.load() == g.total; });
  return g.failed ? -1 : 0;
}
