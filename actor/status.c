/* Status strings, the per-thread last error, version and time. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "actor/internal.h"
#include "actor/spin.h"

const char *gpa_strerror(int status) {
  switch (status) {
#define GPA__STR_CASE(name, num, text) \
  case num: return text;
    GPA_STATUS_MAP(GPA__STR_CASE)
#undef GPA__STR_CASE
  }
  return "unknown status";
}

const char *gpa_status_name(int status) {
  switch (status) {
#define GPA__NAME_CASE(name, num, text) \
  case num: return "GPA_" #name;
    GPA_STATUS_MAP(GPA__NAME_CASE)
#undef GPA__NAME_CASE
  }
  return "GPA_UNKNOWN";
}

static _Thread_local char gpa__last_error[256];

const char *gpa_last_error_message(void) { return gpa__last_error; }

void gpa__clear_error(void) { gpa__last_error[0] = 0; }

gpa_status gpa__fail(gpa_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(gpa__last_error, sizeof gpa__last_error, fmt, ap);
  va_end(ap);
  return st;
}

unsigned gpa_version(void) { return GPA_VERSION_HEX; }
const char *gpa_version_string(void) { return GPA_VERSION_STRING; }

/* the spin budgets' clock (spin.h, header-only for the bench tools) */
int64_t gpa__now_ns(void) { return gpa__spin_clock(); }

/* The duration clock. Timing every message with clock_gettime cost ~17% of
 * the actor's time per no-op, so where the TSC is invariant (CPUID
 * 0x80000007 EDX bit 8) it is read directly, scaled by a factor measured
 * once against CLOCK_MONOTONIC over 2 ms. Deadlines handed to the kernel use
 * gpa__now_ns, which NTP keeps honest over hours. */
static struct {
  pthread_once_t once;
  bool tsc;
  uint64_t tsc0;
  int64_t ns0;
  double ns_per_tick;
} gpa__clk = {PTHREAD_ONCE_INIT};

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
static void clock_calibrate(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) return;
  int64_t t0 = gpa__now_ns(), t1;
  uint64_t c0 = __rdtsc(), c1;
  do {
    t1 = gpa__now_ns();
    c1 = __rdtsc();
  } while (t1 - t0 < 2000000);
  if (c1 <= c0) return;
  gpa__clk.ns_per_tick = (double)(t1 - t0) / (double)(c1 - c0);
  gpa__clk.tsc0 = c0;
  gpa__clk.ns0 = t0;
  gpa__clk.tsc = true;
}
#else
static void clock_calibrate(void) {}
#endif

void gpa__clock_init(void) { pthread_once(&gpa__clk.once, clock_calibrate); }

int64_t gpa__clock_ns(void) {
#if defined(__x86_64__)
  if (gpa__clk.tsc) return gpa__clk.ns0 + (int64_t)((double)(__rdtsc() - gpa__clk.tsc0) * gpa__clk.ns_per_tick);
#endif
  return gpa__now_ns();
}

void gpa__assert_fail(const char *what, const char *file, int line) {
  fprintf(stderr, "gpuactor: internal assertion failed: %s (%s:%d)\n", what, file, line);
  abort();
}
