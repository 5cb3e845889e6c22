/* gpa-sim SIMT executor: the threads of one block as fibers on one OS thread.
 *
 * Overview. A block of n threads gets n fibers (stacks reused from block to
 * block of this OS worker). A fiber runs until it reaches a block barrier or
 * a warp collective, posts what it brings (predicate, shuffle value, mask)
 * and switches directly to the next runnable fiber in index order. The last
 * arrival of a barrier (all live threads of the block) or of a collective
 * (all lanes of its mask) computes every participant's result, marks them
 * runnable and continues without switching. When no fiber is runnable and
 * some have not exited, the block is deadlocked: the scheduler context
 * reports who waits where and the launch fails instead of hanging.
 *
 * Checks: __syncthreads reached from different source lines in the same
 * barrier phase (divergent barrier), a warp collective whose mask names an
 * exited lane or lanes that disagree on the collective, a deadlock, a trap,
 * and (plain builds) writes past the dynamic shared memory size.
 *
 * Exited threads count as arrived at block barriers (what Volta+ hardware
 * does for bar.sync), which is more lenient than the CUDA rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <new>
#include "fiber.h"
#include "simt.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GPA_SIM_SIMT_ASAN 1
#endif
/* valgrind follows a switch to another stack only onto stacks it was told
 * about; otherwise it takes the jump for a huge stack frame and reports the
 * fibers' frames as invalid accesses. The client requests are a few no-op
 * instructions when not running under valgrind. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define GPA_SIM_SIMT_VALGRIND 1
#endif
#endif

namespace {
enum { F_RUN, F_BAR, F_WARP, F_DONE };
enum { MAX_THREADS = 1024, DYN_GUARD = 64 };
const unsigned char DYN_PATTERN = 0xd5;
/* Dynamic shared memory holds this at each block's start: on a GPU it holds
 * whatever the SM's last block left, so a kernel that reads a word before
 * any thread wrote it computes garbage there. Zeros (or the previous
 * block's values: often the same numbers, in a kernel whose blocks agree)
 * would hide that here. 0x7fbadbad: a signalling NaN as f32, a NaN (0x7fba)
 * and -245.6 (0xdbad) as f16 halves, a NaN and -9.8e16 as bf16 halves, a
 * large positive int: wrong in any type a kernel reads it as. */
const uint32_t SHARED_POISON = 0x7fbadbadu;
void poison_shared(unsigned char *p, size_t bytes) {
  size_t i = 0;
  for (; i + 4 <= bytes; i += 4) memcpy(p + i, &SHARED_POISON, 4);
  for (; i < bytes; i++) p[i] = (unsigned char)(SHARED_POISON >> (8 * (i & 3)));
}

struct Fiber {
  gpa_sim_thread t;
  gpa_sim_ctx ctx;
  int state;
  /* barrier */
  int site; /* source line */
  int pred, bar_result;
  /* warp collective */
  int op, arg, width;
  unsigned mask;
  unsigned long long val, result;
};

struct Exec {
  gpa_sim_ctx sched;
  char *stacks = nullptr;
  size_t stack_bytes = 0; /* per fiber, plus one guard page below */
  unsigned nstacks = 0;
  Fiber fibers[MAX_THREADS];
  /* the running block */
  unsigned n = 0, live = 0, bar_arrived = 0;
  unsigned w_exists[MAX_THREADS / 32], w_exited[MAX_THREADS / 32], w_arrived[MAX_THREADS / 32];
  gpa_sim_launch *L = nullptr;
  std::string *error = nullptr;
  bool failed = false, dirty = false;
  unsigned char *dyn = nullptr;
  size_t dyn_cap = 0;
#ifdef GPA_SIM_SIMT_VALGRIND
  unsigned vg_stack[MAX_THREADS]; /* valgrind's stack ids, while stacks are mapped */
#endif
};

void stacks_unmap(Exec *e) {
  if (!e->stacks) return;
#ifdef GPA_SIM_SIMT_VALGRIND
  for (unsigned i = 0; i < e->nstacks; i++) VALGRIND_STACK_DEREGISTER(e->vg_stack[i]);
#endif
  munmap(e->stacks, (size_t)e->nstacks * e->stack_bytes);
  e->stacks = nullptr;
  e->nstacks = 0;
}

struct ExecHolder {
  Exec *e = nullptr;
  ~ExecHolder() {
    if (!e) return;
    for (unsigned i = 0; i < MAX_THREADS; i++) gpa_sim__ctx_destroy(&e->fibers[i].ctx);
    stacks_unmap(e);
    free(e->dyn);
    delete e;
  }
};
/* initial-exec: this library is the only place with static TLS (see docs/sim.md) */
thread_local ExecHolder tl_holder __attribute__((tls_model("initial-exec")));
thread_local Fiber *tl_cur __attribute__((tls_model("initial-exec")));
const gpa_sim_thread g_no_thread = {};

Exec *exec_get(void) {
  if (!tl_holder.e) {
    tl_holder.e = new Exec();
    gpa_sim__ctx_thread(&tl_holder.e->sched);
  }
  return tl_holder.e;
}

/* Fiber stacks: one mapping per OS worker, grown on demand, a PROT_NONE page
 * under each stack so an overflow faults instead of corrupting a neighbour. */
bool stacks_reserve(Exec *e, unsigned n) {
  if (e->nstacks >= n) return true;
  stacks_unmap(e);
  e->stack_bytes = gpa_sim__opt_stack_bytes() + 4096;
  size_t total = (size_t)MAX_THREADS * e->stack_bytes;
  void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    e->stacks = nullptr;
    e->nstacks = 0;
    return false;
  }
  e->stacks = (char *)p;
  e->nstacks = MAX_THREADS;
  for (unsigned i = 0; i < MAX_THREADS; i++) {
    char *lo = e->stacks + (size_t)i * e->stack_bytes;
    mprotect(lo, 4096, PROT_NONE);
#ifdef GPA_SIM_SIMT_VALGRIND
    e->vg_stack[i] = VALGRIND_STACK_REGISTER(lo + 4096, lo + e->stack_bytes);
#endif
  }
  return true;
}

struct Name {
  char s[48];
};
Name thread_name(const Fiber *f) {
  Name n;
  snprintf(n.s, sizeof n.s, "thread (%u,%u,%u)", f->t.thread_idx.x, f->t.thread_idx.y, f->t.thread_idx.z);
  return n;
}

std::string block_prefix(Exec *e) {
  char b[160];
  const uint3 bi = e->fibers[0].t.block_idx;
  snprintf(b, sizeof b, "kernel '%s' block (%u,%u,%u): ", e->L->kernel->name, bi.x, bi.y, bi.z);
  return b;
}

void switch_to(Exec *e, Fiber *me, Fiber *to, bool exits) {
  tl_cur = to;
  gpa_sim__ctx_switch(&me->ctx, to ? &to->ctx : &e->sched, exits);
}

/* Gives up the CPU after `me` blocked or exited: next runnable fiber in
 * index order, or the scheduler when none is left. */
void yield(Exec *e, Fiber *me, bool exits) {
  unsigned i = (unsigned)(me - e->fibers);
  for (unsigned k = 1; k <= e->n; k++) {
    unsigned j = i + k;
    if (j >= e->n) j -= e->n;
    Fiber *f = &e->fibers[j];
    if (f->state == F_RUN) {
      if (f != me) switch_to(e, me, f, exits);
      return;
    }
  }
  switch_to(e, me, nullptr, exits);
}

/* Fails the block; the calling fiber never resumes, so its frames are never
 * unwound: callers pass a plain char buffer, never a std::string temporary
 * (it would leak). */
[[noreturn]] void fail(Exec *e, Fiber *me, const char *msg) {
  if (!e->failed) {
    e->failed = true;
    *e->error = block_prefix(e) + msg;
  }
  e->dirty = true;
  switch_to(e, me, nullptr, true);
  __builtin_unreachable();
}

void release_barrier(Exec *e, Fiber *me) {
  const Fiber *first = nullptr;
  int count = 0, all = 1, any = 0;
  for (unsigned i = 0; i < e->n; i++) {
    Fiber *f = &e->fibers[i];
    if (f->state != F_BAR) continue;
    if (!first) first = f;
    else if (f->site != first->site) {
      char b[256];
      snprintf(b, sizeof b, "divergent __syncthreads: %s and %s wait at different barriers (lines %d and %d)",
               thread_name(first).s, thread_name(f).s, first->site, f->site);
      fail(e, me, b);
    }
    count += f->pred;
    all &= f->pred;
    any |= f->pred;
  }
  for (unsigned i = 0; i < e->n; i++) {
    Fiber *f = &e->fibers[i];
    if (f->state != F_BAR) continue;
    f->bar_result = f->op == GPA_SIM_BAR_COUNT ? count : f->op == GPA_SIM_BAR_AND ? all : f->op == GPA_SIM_BAR_OR ? any : 0;
    f->state = F_RUN;
  }
  e->bar_arrived = 0;
}

unsigned long long lane_value(Exec *e, unsigned base, unsigned src, const Fiber *self) {
  const Fiber *s = &e->fibers[base + src];
  if (base + src < e->n && s->state == F_WARP && s->op == self->op) return s->val;
  return self->val; /* undefined on the device: the caller's own value */
}

void release_warp(Exec *e, Fiber *me, unsigned warp, unsigned mask) {
  unsigned base = warp * 32;
  unsigned long long red_add = 0, ballot = 0, red_and = ~0ull, red_or = 0, red_xor = 0;
  long long smin = 0, smax = 0;
  unsigned long long umin = ~0ull, umax = 0;
  bool firstv = true;
  for (unsigned m = mask; m; m &= m - 1) {
    Fiber *f = &e->fibers[base + __builtin_ctz(m)];
    if (f->op != me->op) {
      char b[160];
      snprintf(b, sizeof b, "%s and %s are in different warp collectives of one mask", thread_name(me).s,
               thread_name(f).s);
      fail(e, me, b);
    }
    unsigned long long v = f->val;
    long long sv = (int)(unsigned)v;
    red_add += v;
    red_and &= v;
    red_or |= v;
    red_xor ^= v;
    if (v) ballot |= 1ull << __builtin_ctz(m);
    if (firstv || sv < smin) smin = sv;
    if (firstv || sv > smax) smax = sv;
    if (v < umin) umin = v;
    if (v > umax) umax = v;
    firstv = false;
  }
  for (unsigned m = mask; m; m &= m - 1) {
    unsigned l = __builtin_ctz(m);
    Fiber *f = &e->fibers[base + l];
    unsigned w = (unsigned)f->width, seg = l & ~(w - 1), in = l & (w - 1), a = (unsigned)f->arg;
    unsigned long long r = 0;
    switch (f->op) {
      case GPA_SIM_W_SYNC: r = 0; break;
      case GPA_SIM_W_IDX: r = lane_value(e, base, seg + (a & (w - 1)), f); break;
      case GPA_SIM_W_UP: r = in >= a ? lane_value(e, base, l - a, f) : f->val; break;
      case GPA_SIM_W_DOWN: r = in + a < w ? lane_value(e, base, l + a, f) : f->val; break;
      case GPA_SIM_W_XOR: {
        unsigned s = l ^ a;
        r = (s & ~(w - 1)) == seg && s < 32 ? lane_value(e, base, s, f) : f->val;
        break;
      }
      case GPA_SIM_W_BALLOT: r = ballot; break;
      case GPA_SIM_W_ANY: r = ballot != 0; break;
      case GPA_SIM_W_ALL: r = ballot == mask; break;
      case GPA_SIM_W_RADD: r = (unsigned)red_add; break;
      case GPA_SIM_W_RMIN: r = (unsigned)(int)smin; break;
      case GPA_SIM_W_RMAX: r = (unsigned)(int)smax; break;
      case GPA_SIM_W_RMINU: r = umin; break;
      case GPA_SIM_W_RMAXU: r = umax; break;
      case GPA_SIM_W_RAND: r = red_and; break;
      case GPA_SIM_W_ROR: r = red_or; break;
      case GPA_SIM_W_RXOR: r = red_xor; break;
    }
    f->result = r;
  }
  for (unsigned m = mask; m; m &= m - 1) e->fibers[base + __builtin_ctz(m)].state = F_RUN;
  e->w_arrived[warp] &= ~mask;
}

void fiber_exit(Exec *e, Fiber *me) {
  unsigned warp = me->t.warp, bit = 1u << me->t.lane;
  me->state = F_DONE;
  e->live--;
  e->w_exited[warp] |= bit;
  for (unsigned m = e->w_arrived[warp]; m; m &= m - 1) {
    const Fiber *f = &e->fibers[warp * 32 + __builtin_ctz(m)];
    if (f->mask & bit) {
      char b[200];
      snprintf(b, sizeof b, "%s exited while %s waits for it in a warp collective (mask 0x%08x)",
               thread_name(me).s, thread_name(f).s, f->mask);
      fail(e, me, b);
    }
  }
  if (e->bar_arrived && e->bar_arrived == e->live) release_barrier(e, me);
  yield(e, me, true);
}

void fiber_main(void *p) {
  Fiber *f = (Fiber *)p;
  gpa_sim__ctx_started(&f->ctx);
  Exec *e = exec_get();
  e->L->kernel->run(e->L->args);
  fiber_exit(e, f);
}

std::string ranges(Exec *e, int state) {
  std::string s;
  unsigned i = 0, count = 0;
  while (i < e->n) {
    if (e->fibers[i].state != state) { i++; continue; }
    unsigned j = i;
    while (j + 1 < e->n && e->fibers[j + 1].state == state) j++;
    char b[48];
    if (count++ < 8) {
      snprintf(b, sizeof b, i == j ? "%s%u" : "%s%u-%u", s.empty() ? "" : ",", i, j);
      s += b;
    }
    i = j + 1;
  }
  return s;
}

std::string deadlock_report(Exec *e) {
  std::string s = "deadlock: no thread can proceed (linear thread ids)";
  std::string bar = ranges(e, F_BAR), warp = ranges(e, F_WARP), done = ranges(e, F_DONE);
  if (!bar.empty()) s += "; threads " + bar + " wait at __syncthreads";
  if (!warp.empty()) {
    char b[64];
    unsigned first = 0;
    while (e->fibers[first].state != F_WARP) first++;
    snprintf(b, sizeof b, " (e.g. thread %u with mask 0x%08x)", first, e->fibers[first].mask);
    s += "; threads " + warp + " wait at a warp collective" + b;
  }
  if (!done.empty()) s += "; threads " + done + " exited";
  return s;
}
} // namespace

extern "C" GPA_SIM_EXPORT const gpa_sim_thread *gpa_sim_self(void) {
  Fiber *f = tl_cur;
  return f ? &f->t : &g_no_thread;
}

extern "C" GPA_SIM_EXPORT int gpa_sim_barrier(int op, int pred, int line) {
  Fiber *me = tl_cur;
  if (!me) return 0;
  Exec *e = exec_get();
  me->state = F_BAR;
  me->site = line;
  me->pred = pred;
  me->op = op;
  if (++e->bar_arrived == e->live) release_barrier(e, me);
  else yield(e, me, false);
  return me->bar_result;
}

extern "C" GPA_SIM_EXPORT unsigned long long gpa_sim_warp(int op, unsigned mask, unsigned long long value, int arg,
                                                          int width) {
  Fiber *me = tl_cur;
  if (!me) return value;
  Exec *e = exec_get();
  unsigned warp = me->t.warp, bit = 1u << me->t.lane;
  char b[200];
  if (width <= 0 || width > 32 || (width & (width - 1))) {
    snprintf(b, sizeof b, "%s: warp collective width %d is not a power of two <= 32", thread_name(me).s, width);
    fail(e, me, b);
  }
  mask &= e->w_exists[warp]; /* lanes past the end of the block do not exist */
  if (!(mask & bit)) {
    snprintf(b, sizeof b, "%s calls a warp collective with mask 0x%08x that excludes itself", thread_name(me).s, mask);
    fail(e, me, b);
  }
  if (mask & e->w_exited[warp]) {
    snprintf(b, sizeof b, "%s: warp collective mask 0x%08x names exited lanes 0x%08x", thread_name(me).s, mask,
             mask & e->w_exited[warp]);
    fail(e, me, b);
  }
  me->state = F_WARP;
  me->op = op;
  me->mask = mask;
  me->val = value;
  me->arg = arg;
  me->width = width;
  e->w_arrived[warp] |= bit;
  if ((e->w_arrived[warp] & mask) == mask) release_warp(e, me, warp, mask);
  else yield(e, me, false);
  return me->result;
}

extern "C" GPA_SIM_EXPORT void gpa_sim_trap(const char *what) {
  Fiber *me = tl_cur;
  if (!me) abort();
  char b[256];
  snprintf(b, sizeof b, "%s: %s", thread_name(me).s, what);
  fail(exec_get(), me, b);
}

int gpa_sim__block_run(gpa_sim_launch *L, uint3 bidx, std::string *error) {
  Exec *e = exec_get();
  unsigned n = L->block.x * L->block.y * L->block.z;
  if (!stacks_reserve(e, n)) {
    *error = "cannot map fiber stacks";
    return -1;
  }
#ifdef GPA_SIM_SIMT_ASAN
  if (e->dirty) {
    ASAN_UNPOISON_MEMORY_REGION(e->stacks, (size_t)e->nstacks * e->stack_bytes);
  } else {
    /* Frames that never return (fiber_main, fiber_exit, yield, near the
     * top of each stack) leave their redzones poisoned where the next
     * block's kernel frames go; a kernel with stack arrays would then trip
     * over them (a false stack-buffer-overflow). Frames that return clean
     * up after themselves, and a failed block sets dirty. */
    size_t top = e->stack_bytes - 4096 < 16384 ? e->stack_bytes - 4096 : 16384;
    for (unsigned i = 0; i < n; i++) ASAN_UNPOISON_MEMORY_REGION(e->stacks + (size_t)(i + 1) * e->stack_bytes - top, top);
  }
#endif
  e->dirty = false;
  /* dynamic shared memory: exact-size malloc under ASan (redzones catch
   * overruns), else a reused buffer with a guard pattern checked below */
  unsigned char *dyn;
#ifdef GPA_SIM_SIMT_ASAN
  dyn = (unsigned char *)malloc(L->dyn_shared ? L->dyn_shared : 1);
  if (!dyn) {
    *error = "out of host memory for dynamic shared memory";
    return -1;
  }
#else
  if (e->dyn_cap < L->dyn_shared + DYN_GUARD) {
    free(e->dyn);
    e->dyn_cap = L->dyn_shared + DYN_GUARD;
    e->dyn = (unsigned char *)aligned_alloc(64, (e->dyn_cap + 63) & ~(size_t)63);
    if (!e->dyn) {
      e->dyn_cap = 0;
      *error = "out of host memory for dynamic shared memory";
      return -1;
    }
  }
  dyn = e->dyn;
  memset(dyn + L->dyn_shared, DYN_PATTERN, DYN_GUARD);
#endif
  poison_shared(dyn, L->dyn_shared);
  e->L = L;
  e->error = error;
  e->failed = false;
  e->n = e->live = n;
  e->bar_arrived = 0;
  for (unsigned w = 0; w < (n + 31) / 32; w++) {
    unsigned lanes = n - w * 32 >= 32 ? 32 : n - w * 32;
    e->w_exists[w] = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    e->w_exited[w] = e->w_arrived[w] = 0;
  }
  for (unsigned i = 0; i < n; i++) {
    Fiber *f = &e->fibers[i];
    f->t.thread_idx = make_uint3(i % L->block.x, (i / L->block.x) % L->block.y, i / (L->block.x * L->block.y));
    f->t.block_idx = bidx;
    f->t.block_dim = L->block;
    f->t.grid_dim = L->grid;
    f->t.lane = i % 32;
    f->t.warp = i / 32;
    f->t.linear = i;
    f->t.dyn_shared = dyn;
    f->state = F_RUN;
    f->mask = 0;
    gpa_sim__ctx_make(&f->ctx, e->stacks + (size_t)i * e->stack_bytes + 4096, e->stack_bytes - 4096, fiber_main, f);
  }
  tl_cur = &e->fibers[0];
  gpa_sim__ctx_switch(&e->sched, &e->fibers[0].ctx, false);
  tl_cur = nullptr;
  if (!e->failed && e->live > 0) {
    e->failed = true;
    e->dirty = true;
    *error = block_prefix(e) + deadlock_report(e);
  }
#ifdef GPA_SIM_SIMT_ASAN
  free(dyn);
#else
  if (!e->failed) {
    for (unsigned i = 0; i < DYN_GUARD; i++) {
      if (dyn[L->dyn_shared + i] != DYN_PATTERN) {
        char b[160];
        snprintf(b, sizeof b, "write past the end of dynamic shared memory (%zu bytes) at byte offset %zu",
                 L->dyn_shared, L->dyn_shared + i);
        e->failed = true;
        *error = block_prefix(e) + b;
        break;
      }
    }
  }
#endif
  e->L = nullptr;
  return e->failed ? -1 : 0;
}
