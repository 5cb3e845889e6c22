/* gpa-sim options, fault injection and diagnostics.
 *
 * Every environment variable of the sim is read here, once, on first use
 * (the table below); bad values are reported and ignored. Faults come from
 * GPA_SIM_FAULT ("alloc=N,oom=N,launch=N,sticky=N,capture=N,instantiate=N,graph_launch=N,delay_us=N,host_fn_delay_us=N,
 * host_fns_after_sticky=0|1", each optional) and
 * from the gpa_sim_fault_* API, which overrides the environment. A fault
 * counter n means "the n-th event from now": it is decremented by each
 * event and fires when it reaches zero (then stays disarmed). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <new>
#include <system_error>
#include "internal.h"

namespace {
gpa_sim_options g_opts;
std::once_flag g_opts_once;
std::atomic<unsigned> g_fault_alloc{0}, g_fault_launch{0}, g_fault_host_fn{0}, g_fault_sticky{0}, g_delay_all{0}, g_host_fn_delay{0};
std::atomic<unsigned> g_fault_oom{0};
std::atomic<bool> g_oom{false}, g_skip_host_fns{false};
std::atomic<size_t> g_allocs{0}; /* allocation calls seen (attempts), for fault loops */
std::mutex g_msg_mu;
std::string g_msg;

bool parse_uint(const char *name, const char *s, unsigned long max, unsigned long *out) {
  char *end = nullptr;
  unsigned long v = strtoul(s, &end, 10);
  if (!*s || *end || v > max) {
    fprintf(stderr, "gpa-sim: ignoring %s=%s (expected an integer <= %lu)\n", name, s, max);
    return false;
  }
  *out = v;
  return true;
}

void parse_faults(const char *spec) {
  std::string s(spec);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(pos, end - pos);
    pos = end + 1;
    size_t eq = item.find('=');
    unsigned long v = 0;
    if (eq == std::string::npos || !parse_uint("GPA_SIM_FAULT", item.c_str() + eq + 1, 1u << 30, &v)) {
      fprintf(stderr, "gpa-sim: ignoring GPA_SIM_FAULT item '%s' (want key=N)\n", item.c_str());
      continue;
    }
    std::string key = item.substr(0, eq);
    if (key == "alloc") g_fault_alloc = (unsigned)v;
    else if (key == "oom") g_fault_oom = (unsigned)v;
    else if (key == "launch") g_fault_launch = (unsigned)v;
    else if (key == "host_fn") g_fault_host_fn = (unsigned)v;
    else if (key == "sticky") g_fault_sticky = (unsigned)v;
    else if (key == "delay_us") g_delay_all = (unsigned)v;
    else if (key == "host_fn_delay_us") g_host_fn_delay = (unsigned)v;
    else if (key == "host_fns_after_sticky") g_skip_host_fns = v == 0;
    else if (key == "capture") gpa_sim__graph_fault_set(0, (unsigned)v);
    else if (key == "instantiate") gpa_sim__graph_fault_set(1, (unsigned)v);
    else if (key == "graph_launch") gpa_sim__graph_fault_set(2, (unsigned)v);
    else fprintf(stderr, "gpa-sim: ignoring unknown GPA_SIM_FAULT key '%s'\n", key.c_str());
  }
}

void load_options(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  g_opts.workers = cpus > 1 ? (unsigned)cpus - 1 : 0;
#if defined(__SANITIZE_ADDRESS__)
  g_opts.stack_bytes = 256 * 1024;
#else
  g_opts.stack_bytes = 64 * 1024;
#endif
  g_opts.verbose = true;
  g_opts.pageable_async_ok = false;
  unsigned long v;
  const char *e;
  if ((e = getenv("GPA_SIM_WORKERS")) && parse_uint("GPA_SIM_WORKERS", e, 256, &v)) g_opts.workers = (unsigned)v;
  if ((e = getenv("GPA_SIM_STACK_KB")) && parse_uint("GPA_SIM_STACK_KB", e, 65536, &v)) {
    if (v >= 16) g_opts.stack_bytes = v * 1024;
    else fprintf(stderr, "gpa-sim: ignoring GPA_SIM_STACK_KB=%s (minimum 16)\n", e);
  }
  if ((e = getenv("GPA_SIM_VERBOSE")) && parse_uint("GPA_SIM_VERBOSE", e, 1, &v)) g_opts.verbose = v != 0;
  if ((e = getenv("GPA_SIM_ALLOW_PAGEABLE_ASYNC")) && parse_uint("GPA_SIM_ALLOW_PAGEABLE_ASYNC", e, 1, &v))
    g_opts.pageable_async_ok = v != 0;
  g_opts.devices = 1;
  if ((e = getenv("GPA_SIM_DEVICES")) && parse_uint("GPA_SIM_DEVICES", e, 8, &v)) {
    if (v >= 1) g_opts.devices = (int)v;
    else fprintf(stderr, "gpa-sim: ignoring GPA_SIM_DEVICES=%s (1 to 8)\n", e);
  }
  if ((e = getenv("GPA_SIM_LAUNCH_LOG")) && *e && !(g_opts.launch_log = fopen(e, "w")))
    fprintf(stderr, "gpa-sim: cannot open GPA_SIM_LAUNCH_LOG=%s\n", e);
  if ((e = getenv("GPA_SIM_MODULE_PATH"))) g_opts.module_path = e;
  else g_opts.module_path = GPA_SIM_DEFAULT_MODULE_DIR;
  if ((e = getenv("GPA_SIM_FAULT"))) parse_faults(e);
}

/* Decrements an armed counter; true when this event is the chosen one. */
bool take(std::atomic<unsigned> &c) {
  unsigned v = c.load();
  while (v != 0) {
    if (c.compare_exchange_weak(v, v - 1)) return v == 1;
  }
  return false;
}
} // namespace

const gpa_sim_options &gpa_sim__opts(void) {
  std::call_once(g_opts_once, load_options);
  return g_opts;
}
unsigned gpa_sim__opt_workers(void) { return gpa_sim__opts().workers; }
size_t gpa_sim__opt_stack_bytes(void) { return gpa_sim__opts().stack_bytes; }

bool gpa_sim__fault_take_alloc(void) {
  gpa_sim__opts();
  g_allocs++;
  bool fire = take(g_fault_alloc);
  if (take(g_fault_oom)) g_oom = true;
  return fire || g_oom.load();
}
bool gpa_sim__fault_take_launch(void) { return gpa_sim__opts(), take(g_fault_launch); }
bool gpa_sim__fault_take_host_fn(void) { return gpa_sim__opts(), take(g_fault_host_fn); }
bool gpa_sim__fault_take_sticky(void) { return gpa_sim__opts(), take(g_fault_sticky); }
unsigned gpa_sim__fault_delay_all(void) { return gpa_sim__opts(), g_delay_all.load(); }
unsigned gpa_sim__fault_host_fn_delay(void) { return gpa_sim__opts(), g_host_fn_delay.load(); }
bool gpa_sim__fault_skip_host_fns(void) { return gpa_sim__opts(), g_skip_host_fns.load(); }

CUresult gpa_sim__fail(CUresult r, const std::string &msg) {
  {
    std::lock_guard<std::mutex> lk(g_msg_mu);
    g_msg = msg;
  }
  if (gpa_sim__opts().verbose) fprintf(stderr, "gpa-sim: %s\n", msg.c_str());
  return r;
}

CUresult gpa_sim__failf(CUresult r, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return gpa_sim__fail(r, buf);
}

/* Rethrows the exception being handled to classify it. The message goes
 * into a fixed buffer first: recording it may itself run out of memory, and
 * then only the code is returned. */
CUresult gpa_sim__caught(const char *api) noexcept {
  char b[256];
  CUresult r = CUDA_ERROR_UNKNOWN;
  try {
    throw;
  } catch (const std::bad_alloc &) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(b, sizeof b, "%s: out of host memory", api);
  } catch (const std::system_error &e) {
    int c = e.code().value();
    bool res = e.code().category() == std::generic_category() || e.code().category() == std::system_category();
    r = res && (c == EAGAIN || c == ENOMEM) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
    snprintf(b, sizeof b, "%s: %s%s", api, e.what(),
             r == CUDA_ERROR_OUT_OF_MEMORY ? " (the process is out of threads, memory or memory mappings)" : "");
  } catch (const std::exception &e) {
    snprintf(b, sizeof b, "%s: internal error: %s", api, e.what());
  } catch (...) {
    snprintf(b, sizeof b, "%s: internal error (unknown exception)", api);
  }
  try {
    return gpa_sim__fail(r, b);
  } catch (...) {
    return r;
  }
}

GPA_SIM_API void gpa_sim_fault_alloc(unsigned n) { gpa_sim__opts(), g_fault_alloc = n; }
GPA_SIM_API void gpa_sim_fault_launch(unsigned n) { gpa_sim__opts(), g_fault_launch = n; }
GPA_SIM_API void gpa_sim_fault_host_fn(unsigned n) { gpa_sim__opts(), g_fault_host_fn = n; }
GPA_SIM_API void gpa_sim_fault_sticky(unsigned n) { gpa_sim__opts(), g_fault_sticky = n; }
GPA_SIM_API void gpa_sim_fault_stream_delay(void *stream, unsigned us) {
  gpa_sim__opts();
  if (!stream) {
    g_delay_all = us;
    return;
  }
  CUctx_st *ctx;
  CUstream_st *s;
  if (gpa_sim__ctx_enter(&ctx) == CUDA_SUCCESS && gpa_sim__stream_get(ctx, (CUstream)stream, &s) == CUDA_SUCCESS)
    s->delay_us = us;
}
GPA_SIM_API void gpa_sim_fault_oom(unsigned n) {
  gpa_sim__opts();
  g_oom = false;
  g_fault_oom = n;
}
GPA_SIM_API void gpa_sim_fault_host_fn_delay(unsigned us) { gpa_sim__opts(), g_host_fn_delay = us; }
GPA_SIM_API void gpa_sim_fault_host_fns_after_sticky(int run) { gpa_sim__opts(), g_skip_host_fns = !run; }
GPA_SIM_API size_t gpa_sim_allocations(void) { return g_allocs.load(); }
GPA_SIM_API void gpa_sim_fault_clear(void) {
  gpa_sim__opts();
  g_fault_alloc = g_fault_launch = g_fault_host_fn = g_fault_sticky = g_delay_all = g_host_fn_delay = g_fault_oom = 0;
  g_oom = g_skip_host_fns = false;
  for (int i = 0; i < 3; i++) gpa_sim__graph_fault_set(i, 0);
}
GPA_SIM_API size_t gpa_sim_last_error_message(char *buf, size_t n) {
  std::lock_guard<std::mutex> lk(g_msg_mu);
  if (n) snprintf(buf, n, "%s", g_msg.c_str());
  return g_msg.size();
}
