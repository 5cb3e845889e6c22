/* Shared helpers of the host kernels (kernels/host/): the parallel-loop hook
 * and the ISA-cloning attribute.
 *
 * Kernels take a `const gpa__par *` instead of a runtime type, so the ops
 * (through gpa_exec_parallel_for), the benches (OpenMP or serial) and unit
 * tests (NULL = serial, inline) can all drive them. Every kernel that reduces
 * splits its work into blocks whose bounds depend on the sizes only, never on
 * the thread count, and combines the blocks in a fixed order: results are
 * bitwise identical for any number of threads and any scheduling. */
#ifndef GPA_KERNELS_HOST_PAR_H
#define GPA_KERNELS_HOST_PAR_H
#include <stdint.h>

typedef void (*gpa__range_fn)(int64_t begin, int64_t end, void *ctx);

typedef struct gpa__par {
  /* Calls fn(b, e, ctx) over sub-ranges covering [0, n), chunks >= grain. */
  void (*pfor)(void *self, int64_t n, int64_t grain, gpa__range_fn fn, void *ctx);
  void *self;
  /* Threads behind pfor (0 or 1: treat as one; gpa__sgemm splits by it). */
  int threads;
} gpa__par;

/* Runs fn over [0, n): through par, or inline when par is NULL. */
static inline void gpa__pfor(const gpa__par *par, int64_t n, int64_t grain, gpa__range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (par && par->pfor && n > grain)
    par->pfor(par->self, n, grain < 1 ? 1 : grain, fn, ctx);
  else
    fn(0, n, ctx);
}

/* Hot loops are written as plain C that the compiler vectorizes; this clones
 * them for AVX-512 and AVX2 with run-time dispatch (ifunc), as the build has
 * no -march. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GPA_NO_CLONES) && \
    !defined(GPA_TSAN) /* TSan instruments ifunc resolvers, which run before it is set up */
#define GPA__KCLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPA__KCLONES
#endif

#endif
