/* Loading the BLAS with the kernel set the CPU can run (design in blas_lib.h). */
#include "kernels/host/blas_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static char cfg_path[256], cfg_core[32];
static gpa__blas_lib lib;
static pthread_once_t once = PTHREAD_ONCE_INIT;

void gpa__blas_configure(const char *path, const char *coretype) {
  snprintf(cfg_path, sizeof cfg_path, "%s", path ? path : "");
  snprintf(cfg_core, sizeof cfg_core, "%s", coretype ? coretype : "");
}

/* Kernel sets in descending order, each with what it needs. */
enum { NEED_SSE3 = 1, NEED_AVX = 2, NEED_AVX2_FMA = 4, NEED_AVX512 = 8, NEED_BF16 = 16 };
static const struct {
  const char *name;
  int need;
  int vendor; /* 1: chosen only by vendor_pick() (never by the feature bits alone) */
} sets[] = {{"Cooperlake", NEED_BF16 | NEED_AVX512 | NEED_AVX2_FMA | NEED_AVX | NEED_SSE3, 0},
            {"SkylakeX", NEED_AVX512 | NEED_AVX2_FMA | NEED_AVX | NEED_SSE3, 0},
            {"Haswell", NEED_AVX2_FMA | NEED_AVX | NEED_SSE3, 0},
            {"Sandybridge", NEED_AVX | NEED_SSE3, 0},
            {"Prescott", NEED_SSE3, 0},
            {"Zen", NEED_AVX2_FMA | NEED_AVX | NEED_SSE3, 1}};

/* What the CPU has and the OS saves the registers of. */
static int cpu_can(void) {
  int can = 0;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (c & 1u) can |= NEED_SSE3;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = ((unsigned long long)hi << 32) | lo;
  }
  int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6;
  if (avx && ymm) can |= NEED_AVX;
  if (__get_cpuid_max(0, NULL) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if ((can & NEED_AVX) && avx2 && fma) can |= NEED_AVX2_FMA;
    if ((can & NEED_AVX2_FMA) && zmm && f && dq && bw && vl) can |= NEED_AVX512;
    if (can & NEED_AVX512) {
      __cpuid_count(7, 1, a, b, c, d);
      if ((a >> 5) & 1) can |= NEED_BF16; /* AVX512_BF16 */
    }
  }
#endif
  return can;
}

const char *gpa__blas_best_kernels(void) {
  int can = cpu_can();
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if (!sets[i].vendor && (sets[i].need & can) == sets[i].need) return sets[i].name;
  return "Prescott";
}

/* AMD Zen 1-4 (families 0x17 and 0x19) with AVX2+FMA: OpenBLAS's Zen set
 * (its AVX2 kernels with Zen's block sizes). Zen 4's AVX-512 runs on its
 * two 256-bit FMA pipes, so the AVX-512 sets do the same work per cycle
 * in more instructions; measured on a Zen 4 VM the Zen set ran 1024^3
 * 1.07x and conv1d's backward 1.07x the Cooperlake set the feature bits
 * pick (docs/benchmarks.md, "OpenBLAS's kernel set on AMD"). Zen 5
 * (0x1A) has 512-bit FMA pipes: the feature bits decide there. */
static const char *vendor_pick(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!(cpu_can() & NEED_AVX2_FMA) || !__get_cpuid(0, &a, &b, &c, &d)) return NULL;
  if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return NULL; /* "AuthenticAMD" */
  __get_cpuid(1, &a, &b, &c, &d);
  unsigned fam = (a >> 8) & 0xf;
  if (fam == 0xf) fam += (a >> 20) & 0xff;
  if (fam == 0x17 || fam == 0x19) return "Zen";
#endif
  return NULL;
}

const char *gpa__blas_auto_kernels(void) {
  const char *v = vendor_pick();
  return v ? v : gpa__blas_best_kernels();
}

/* The kernel set to ask for: the override if the CPU can run it. */
static const char *choose(void) {
  const char *best = gpa__blas_auto_kernels();
  if (!cfg_core[0] || !strcasecmp(cfg_core, "auto")) return best;
  int can = cpu_can();
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if (!strcasecmp(cfg_core, sets[i].name)) {
      if ((sets[i].need & can) == sets[i].need) return sets[i].name;
      fprintf(stderr, "gpuactor: warning: GPA_BLAS_CORETYPE=%s: this CPU cannot run it; using %s\n", cfg_core, best);
      return best;
    }
  fprintf(stderr,
          "gpuactor: warning: GPA_BLAS_CORETYPE=%s: expected auto, Cooperlake, SkylakeX, Haswell, Zen, Sandybridge "
          "or Prescott; using %s\n",
          cfg_core, best);
  return best;
}

static void *open_lib(const char *path, int *already) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  *already = h != NULL;
  return h ? h : dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void load(void) {
  if (!strcmp(cfg_path, "none")) { /* GPA_BLAS=none: our own kernel (tests of that path) */
    snprintf(lib.kernels, sizeof lib.kernels, "none");
    snprintf(lib.note, sizeof lib.note, "GPA_BLAS=none: GEMMs run on gpuactor's own kernel");
    return;
  }
  const char *want = choose();
  snprintf(lib.wanted, sizeof lib.wanted, "%s", want);
  const char *env = getenv("OPENBLAS_CORETYPE");
  int set_env = !env || !env[0];
  /* OpenBLAS reads the variable in its constructor, during dlopen. */
  if (set_env) setenv("OPENBLAS_CORETYPE", want, 1);
  const char *cands[] = {cfg_path[0] ? cfg_path : NULL, "libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  void *h = NULL;
  int already = 0;
  const char *used = NULL;
  for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !h; i++)
    if (cands[i] && (h = open_lib(cands[i], &already))) used = cands[i];
  if (set_env) unsetenv("OPENBLAS_CORETYPE");
  if (h) lib.sgemm = (gpa__cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
  if (!lib.sgemm) {
    snprintf(lib.kernels, sizeof lib.kernels, "none");
    snprintf(lib.note, sizeof lib.note, "no CBLAS library found (%s): GEMMs run on gpuactor's own kernel",
             cfg_path[0] ? cfg_path : "libopenblas.so.0");
    return;
  }
  lib.set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  lib.get_threads = (int (*)(void))dlsym(h, "openblas_get_num_threads");
  /* One thread budget: the host pool splits GEMMs across the cores
   * (blas.h), so OpenBLAS runs each call on the calling thread from the
   * start. Its own threads, next to the pool's, fought them for the cores;
   * and their hand-off (spinning on plain variables) is invisible to
   * ThreadSanitizer, which then reported races on every output. */
  if (lib.set_threads) lib.set_threads(1);
  char *(*core)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
  snprintf(lib.kernels, sizeof lib.kernels, "%s", core ? core() : "unknown");
  if (already)
    snprintf(lib.note, sizeof lib.note, "%s was already loaded in this process: its %s kernels run (%s wanted)", used,
             lib.kernels, want);
  else if (!set_env)
    snprintf(lib.note, sizeof lib.note, "%s with OPENBLAS_CORETYPE=%s from the environment: %s kernels", used, env,
             lib.kernels);
  else
    snprintf(lib.note, sizeof lib.note, "%s: %s kernels (asked for %s; the feature bits allow up to %s)", used,
             lib.kernels, want, gpa__blas_best_kernels());
}

const gpa__blas_lib *gpa__blas(void) {
  pthread_once(&once, load);
  return &lib;
}
