/* gpa-sim driver: device and pinned host memory, with the checks a GPU would
 * punish.
 *
 * Device memory is host memory, so kernels dereference device pointers
 * directly. Every allocation sits between two guard zones filled with a
 * pattern (poisoned instead under ASan); the zones are verified when the
 * allocation is freed and after every kernel that received a pointer into
 * it, so an out-of-bounds write is reported with the allocation and offset.
 * Freed allocations go to a bounded quarantine (filled with 0xDD, poisoned
 * under ASan) so a later use is reported as use-after-free instead of
 * silently hitting reused memory. Every pointer given to a copy or memset
 * must lie, with its size, inside one live allocation. */
#include <stdlib.h>
#include <string.h>
#include <map>
#include "internal.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GPA_SIM_MEM_ASAN 1
#endif

namespace {
const size_t GUARD = 256;
const unsigned char GUARD_BYTE = 0xab, FREED_BYTE = 0xdd, FRESH_BYTE = 0xcd;
const size_t QUARANTINE_BYTES = 256u << 20;

struct Alloc {
  uintptr_t user = 0;
  size_t size = 0;
  char *raw = nullptr;
  size_t raw_size = 0;
  const char *api = "";
};
std::mutex g_mu;
std::map<uintptr_t, Alloc> g_live, g_freed; /* by user address */
std::deque<uintptr_t> g_freed_order;
size_t g_freed_bytes = 0;
struct Pinned {
  size_t size;
  bool owned; /* allocated by cuMemHostAlloc (vs registered) */
};
std::map<uintptr_t, Pinned> g_pinned; /* host ranges by start */

/* The allocation (in m) whose [raw, raw+raw_size) contains p, or nullptr. */
const Alloc *find(std::map<uintptr_t, Alloc> &m, uintptr_t p) {
  auto it = m.upper_bound(p + GUARD);
  if (it == m.begin()) return nullptr;
  --it;
  const Alloc &a = it->second;
  return p >= (uintptr_t)a.raw && p < (uintptr_t)a.raw + a.raw_size ? &a : nullptr;
}

void guards_fill(const Alloc &a) {
  memset(a.raw, GUARD_BYTE, GUARD);
  memset((char *)a.user + a.size, GUARD_BYTE, (size_t)(a.raw + a.raw_size - ((char *)a.user + a.size)));
#ifdef GPA_SIM_MEM_ASAN
  ASAN_POISON_MEMORY_REGION(a.raw, GUARD);
  ASAN_POISON_MEMORY_REGION((char *)a.user + a.size, (size_t)(a.raw + a.raw_size - ((char *)a.user + a.size)));
#endif
}

/* Offset of the first damaged guard byte relative to the user start, or 0. */
bool guards_check(const Alloc &a, long long *where) {
#ifdef GPA_SIM_MEM_ASAN
  (void)a;
  (void)where;
  return true; /* ASan reports the faulting access itself */
#else
  for (size_t i = 0; i < GUARD; i++)
    if ((unsigned char)a.raw[i] != GUARD_BYTE) {
      *where = (long long)i - (long long)GUARD;
      return false;
    }
  const unsigned char *end = (const unsigned char *)a.user + a.size;
  size_t tail = (size_t)((const unsigned char *)a.raw + a.raw_size - end);
  for (size_t i = 0; i < tail; i++)
    if (end[i] != GUARD_BYTE) {
      *where = (long long)(a.size + i);
      return false;
    }
  return true;
#endif
}

std::string guard_msg(const Alloc &a, long long where) {
  char b[256];
  snprintf(b, sizeof b,
           "out-of-bounds write: guard zone of allocation 0x%llx (%zu bytes, %s) damaged at offset %lld (%s)",
           (unsigned long long)a.user, a.size, a.api, where,
           where < 0 ? "before the start" : "past the end");
  return b;
}

void release(Alloc &a) {
#ifdef GPA_SIM_MEM_ASAN
  ASAN_UNPOISON_MEMORY_REGION(a.raw, a.raw_size);
#endif
  free(a.raw);
}

std::string describe(uintptr_t p, size_t n) {
  char b[320];
  const Alloc *a = find(g_live, p);
  if (a && p >= a->user && p < a->user + (a->size ? a->size : 1)) {
    snprintf(b, sizeof b, "range [0x%llx, +%zu) overruns allocation 0x%llx of %zu bytes by %zu bytes",
             (unsigned long long)p, n, (unsigned long long)a->user, a->size, (size_t)(p + n - a->user - a->size));
  } else if (a) {
    long long off = (long long)(p - a->user);
    snprintf(b, sizeof b, "address 0x%llx is in the guard zone of allocation 0x%llx (%zu bytes), offset %lld",
             (unsigned long long)p, (unsigned long long)a->user, a->size, off);
  } else if ((a = find(g_freed, p))) {
    snprintf(b, sizeof b, "use after free: address 0x%llx is in allocation 0x%llx (%zu bytes), already freed",
             (unsigned long long)p, (unsigned long long)a->user, a->size);
  } else {
    snprintf(b, sizeof b, "address 0x%llx is not device memory (no live allocation contains it)",
             (unsigned long long)p);
  }
  return b;
}
} // namespace

CUresult gpa_sim__mem_alloc(CUdeviceptr *out, size_t n, const char *api) {
  if (!out || n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (gpa_sim__fault_take_alloc())
    return gpa_sim__failf(CUDA_ERROR_OUT_OF_MEMORY, "%s(%zu): injected allocation failure", api, n);
  if (n > (64ull << 30)) return gpa_sim__failf(CUDA_ERROR_OUT_OF_MEMORY, "%s(%zu): larger than the sim allows", api, n);
  Alloc a;
  a.size = n;
  a.raw_size = GUARD + ((n + 255) & ~(size_t)255) + GUARD;
  a.raw = (char *)aligned_alloc(256, a.raw_size);
  if (!a.raw) return gpa_sim__failf(CUDA_ERROR_OUT_OF_MEMORY, "%s(%zu): host memory exhausted", api, n);
  a.user = (uintptr_t)a.raw + GUARD;
  a.api = api;
  memset((void *)a.user, FRESH_BYTE, n); /* device memory starts undefined: never zero by accident */
  guards_fill(a);
  std::lock_guard<std::mutex> lk(g_mu);
  g_live[a.user] = a;
  *out = (CUdeviceptr)a.user;
  return CUDA_SUCCESS;
}

CUresult gpa_sim__mem_free(CUdeviceptr p, const char *api) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_live.find((uintptr_t)p);
  if (it == g_live.end()) {
    if (g_freed.count((uintptr_t)p))
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "%s(0x%llx): double free", api, (unsigned long long)p);
    return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "%s(0x%llx): not the start of a live allocation (%s)", api,
                          (unsigned long long)p, describe((uintptr_t)p, 1).c_str());
  }
  Alloc a = it->second;
  g_live.erase(it);
  long long where = 0;
  CUresult r = CUDA_SUCCESS;
  if (!guards_check(a, &where)) r = gpa_sim__fail(CUDA_ERROR_ILLEGAL_ADDRESS, guard_msg(a, where));
  memset((void *)a.user, FREED_BYTE, a.size);
#ifdef GPA_SIM_MEM_ASAN
  ASAN_POISON_MEMORY_REGION(a.raw, a.raw_size);
#endif
  g_freed[a.user] = a;
  g_freed_order.push_back(a.user);
  g_freed_bytes += a.raw_size;
  while (g_freed_bytes > QUARANTINE_BYTES || g_freed_order.size() > 4096) {
    auto old = g_freed.find(g_freed_order.front());
    g_freed_order.pop_front();
    g_freed_bytes -= old->second.raw_size;
    release(old->second);
    g_freed.erase(old);
  }
  return r;
}

CUresult gpa_sim__mem_check(CUdeviceptr dp, size_t n, std::string *why) {
  uintptr_t p = (uintptr_t)dp;
  std::lock_guard<std::mutex> lk(g_mu);
  const Alloc *a = find(g_live, p);
  if (a && p >= a->user && p + n <= a->user + a->size && p + n >= p) return CUDA_SUCCESS;
  *why = describe(p, n);
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult gpa_sim__mem_check_param(CUdeviceptr dp, std::string *why) {
  uintptr_t p = (uintptr_t)dp;
  if (!p) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(g_mu);
  const Alloc *a = find(g_live, p);
  if (a && p >= a->user && p <= a->user + a->size) return CUDA_SUCCESS;
  auto it = g_pinned.upper_bound(p);
  if (it != g_pinned.begin() && p < (--it)->first + it->second.size) return CUDA_SUCCESS;
  *why = describe(p, 0);
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

CUresult gpa_sim__mem_guards(CUdeviceptr dp, std::string *why) {
  std::lock_guard<std::mutex> lk(g_mu);
  const Alloc *a = find(g_live, (uintptr_t)dp);
  long long where = 0;
  if (!a || guards_check(*a, &where)) return CUDA_SUCCESS;
  *why = guard_msg(*a, where);
  guards_fill(*a); /* report each overrun once */
  return CUDA_ERROR_ILLEGAL_ADDRESS;
}

bool gpa_sim__host_is_pinned(const void *hp, size_t n) {
  uintptr_t p = (uintptr_t)hp;
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_pinned.upper_bound(p);
  if (it == g_pinned.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second.size;
}

void gpa_sim__mem_release_all(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto &kv : g_live) release(kv.second);
  for (auto &kv : g_freed) release(kv.second);
  for (auto &kv : g_pinned)
    if (kv.second.owned) free((void *)kv.first);
  g_pinned.clear();
  g_live.clear();
  g_freed.clear();
  g_freed_order.clear();
  g_freed_bytes = 0;
}

GPA_SIM_API size_t gpa_sim_live_allocations(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_live.size();
}

/* ---- pinned host memory: plain host memory remembered as pinned */
namespace {
CUresult pin(void *p, size_t n, bool owned) {
  std::lock_guard<std::mutex> lk(g_mu);
  uintptr_t u = (uintptr_t)p;
  auto it = g_pinned.upper_bound(u + n - 1);
  if (it != g_pinned.begin() && (--it)->first + it->second.size > u) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  g_pinned[u] = Pinned{n, owned};
  return CUDA_SUCCESS;
}
CUresult unpin(void *p, bool owned) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_pinned.find((uintptr_t)p);
  if (it == g_pinned.end() || it->second.owned != owned) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g_pinned.erase(it);
  return CUDA_SUCCESS;
}
} // namespace

GPA_SIM_API CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
  return gpa_sim__guard("cuMemHostAlloc", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    (void)flags;
    if (!pp || n == 0) return CUDA_ERROR_INVALID_VALUE;
    if (gpa_sim__fault_take_alloc())
      return gpa_sim__failf(CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc(%zu): injected allocation failure", n);
    void *p = malloc(n);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    pin(p, n, true);
    *pp = p;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuMemAllocHost(void **pp, size_t n) { return cuMemHostAlloc(pp, n, 0); }

GPA_SIM_API CUresult cuMemFreeHost(void *p) {
  return gpa_sim__guard("cuMemFreeHost", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    gpa_sim__device_sync(ctx); /* as on a GPU: the device's work may still read it */
    if (unpin(p, true) != CUDA_SUCCESS)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost(%p): not allocated by cuMemAllocHost/HostAlloc", p);
    free(p);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuMemHostRegister(void *p, size_t n, unsigned int flags) {
  return gpa_sim__guard("cuMemHostRegister", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    (void)flags;
    if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
    return pin(p, n, false);
  });
}

GPA_SIM_API CUresult cuMemHostUnregister(void *p) {
  return gpa_sim__guard("cuMemHostUnregister", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    return unpin(p, false);
  });
}
