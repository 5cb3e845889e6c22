/* The options table: every GPA_* variable the library reads is here (and in
 * docs/api.md, "Configuration"). Precedence: environment (GPA_*) over the
 * JSON file named by GPA_CONFIG over the program's explicit options over
 * built-in defaults: the environment wins so that an operator (or the test
 * suite, which runs every test on each device through GPA_DEVICE) can
 * redirect a program without rebuilding it. Environment and file are read
 * once, lazily, and never written; an unknown key or a malformed value is
 * ignored with a warning naming it. Two kinds of entries differ:
 *   - FRESH: the cuda backend's library paths are read from the environment
 *     at each actor creation (a program may point two actors at different
 *     libraries; the tests of the loaders do);
 *   - PROCESS: process-wide switches (streaming stores, asymmetric fences),
 *     read once and applied before the first actor runs; not settable by a
 *     program (gpa_actor_options has no field for them). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actor/internal.h"
#include "kernels/host/blas_lib.h"
#include "kernels/host/conv1d_direct.h"
#include "kernels/host/tgemm.h"
#include "kernels/host/nt_store.h"

void gpa__config_read(const char *path, gpa__opts *vals, bool *set);

typedef enum { OPT_DEVICE, OPT_U32, OPT_U64, OPT_I64_MS, OPT_ENUM, OPT_PATH, OPT_BOOL } opt_kind;

enum { FRESH = 1, PROCESS = 2 };
typedef struct opt_def {
  const char *env;
  const char *key; /* in the GPA_CONFIG JSON file */
  opt_kind kind;
  const char *const *names; /* OPT_ENUM: names, value = index (+ enum_base) */
  int enum_base;
  int flags; /* FRESH, PROCESS */
  size_t offset, size; /* the field in gpa__opts */
} opt_def;

static const char *const full_names[] = {"wait", "fail", NULL};
static const char *const shutdown_names[] = {"drain", "cancel", NULL};
static const char *const log_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const nt_names[] = {"0", "1", NULL}; /* stored as 1, 2: 0 is "auto" (also the AVX-512 switches) */
static const char *const nta_names[] = {"0", "1", "auto", NULL}; /* stored as 1, 2, 3: 0 is unset */
#define FIELD(f) offsetof(gpa__opts, f), sizeof(((gpa__opts *)0)->f)
#define OPT(env, key, kind, f, names, base, flags) {env, key, kind, names, base, flags, FIELD(f)}

static const opt_def gpa__opt_table[] = {
    OPT("GPA_DEVICE", "device", OPT_DEVICE, device, NULL, 0, 0),
    OPT("GPA_MAILBOX_SIZE", "mailbox_size", OPT_U32, mailbox_size, NULL, 0, 0),
    OPT("GPA_FULL_POLICY", "full_policy", OPT_ENUM, full_policy, full_names, 0, 0),
    OPT("GPA_FULL_TIMEOUT_MS", "full_timeout_ms", OPT_I64_MS, full_timeout_ns, NULL, 0, 0),
    OPT("GPA_SHUTDOWN", "shutdown", OPT_ENUM, shutdown_policy, shutdown_names, 0, 0),
    OPT("GPA_MEM_BUDGET", "mem_budget", OPT_U64, mem_budget, NULL, 0, 0),
    OPT("GPA_THREADS", "threads", OPT_U32, threads, NULL, 0, 0),
    OPT("GPA_MAX_PENDING", "max_pending", OPT_U32, max_pending, NULL, 0, 0),
    OPT("GPA_LOG", "log", OPT_ENUM, log_level, log_names, GPA_LOG_ERROR, 0),
    OPT("GPA_TRACE", "trace", OPT_PATH, trace_path, NULL, 0, 0),
    OPT("GPA_PROFILE", "profile", OPT_BOOL, profile, NULL, 0, 0),
    OPT("GPA_GRAPHS", "graphs", OPT_U32, graphs, NULL, 0, 0),
    OPT("GPA_CUDA_DRIVER", "cuda_driver", OPT_PATH, cuda_driver, NULL, 0, FRESH),
    OPT("GPA_CUBLAS", "cublas", OPT_PATH, cublas, NULL, 0, FRESH),
    OPT("GPA_CUBLASLT", "cublaslt", OPT_PATH, cublaslt, NULL, 0, FRESH),
    OPT("GPA_CUDNN", "cudnn", OPT_PATH, cudnn, NULL, 0, FRESH),
    OPT("GPA_CUDNN_CONV", "cudnn_conv", OPT_ENUM, cudnn_conv, nt_names, 1, FRESH),
    OPT("GPA_CONV_TC", "conv_tc", OPT_ENUM, conv_tc, nt_names, 1, FRESH),
    OPT("GPA_CONV_IG_SMALL", "conv_ig_small", OPT_ENUM, conv_ig_small, nta_names, 1, FRESH),
    OPT("GPA_FA2_EXACT", "fa2_exact", OPT_ENUM, fa2_exact, nt_names, 1, FRESH),
    OPT("GPA_FA2_DKV128", "fa2_dkv128", OPT_ENUM, fa2_dkv128, nt_names, 1, FRESH),
    OPT("GPA_CUDA_SPLIT_SUMS", "cuda_split_sums", OPT_ENUM, cuda_split_sums, nt_names, 1, FRESH),
    OPT("GPA_EMB_BWD_ROWS", "emb_bwd_rows", OPT_ENUM, emb_bwd_rows, nta_names, 1, FRESH),
    OPT("GPA_NCCL", "nccl", OPT_PATH, nccl, NULL, 0, FRESH),
    OPT("GPA_HOST_NT", "host_nt", OPT_ENUM, host_nt, nt_names, 1, PROCESS),
    OPT("GPA_NO_MEMBARRIER", "no_membarrier", OPT_BOOL, no_membarrier, NULL, 0, PROCESS),
    OPT("GPA_CUDA_NO_POLL", "cuda_no_poll", OPT_BOOL, cuda_no_poll, NULL, 0, PROCESS),
    OPT("GPA_BLAS", "blas", OPT_PATH, blas, NULL, 0, PROCESS),
    OPT("GPA_BLAS_CORETYPE", "blas_coretype", OPT_PATH, blas_coretype, NULL, 0, PROCESS),
    OPT("GPA_TGEMM_AVX512", "tgemm_avx512", OPT_ENUM, tgemm_avx512, nt_names, 1, PROCESS),
    OPT("GPA_CONV1D_AVX512", "conv1d_avx512", OPT_ENUM, conv1d_avx512, nt_names, 1, PROCESS),
};
#define N_OPTS (sizeof gpa__opt_table / sizeof gpa__opt_table[0])

/* Snapshots of the environment and the config file: parsed values and
 * which options each one set. Written once under pthread_once. */
typedef struct opt_layer {
  gpa__opts vals;
  bool set[N_OPTS];
} opt_layer;
static struct {
  pthread_once_t once;
  opt_layer file, env;
} gpa__layers = {PTHREAD_ONCE_INIT};

static bool parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (!isdigit((unsigned char)*s)) return false;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return false;
  uint64_t mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1ull << 10; end++; break;
    case 'm': case 'M': mul = 1ull << 20; end++; break;
    case 'g': case 'G': mul = 1ull << 30; end++; break;
    default: break;
  }
  if (*end) return false;
  if (v > UINT64_MAX / mul) return false;
  *out = v * mul;
  return true;
}

bool gpa__device_valid(const char *s) {
  if (!strcmp(s, "auto") || !strcmp(s, "cpu") || !strcmp(s, "sim") || !strcmp(s, "cuda")) return true;
  size_t at = !strncmp(s, "cuda:", 5) ? 5 : !strncmp(s, "sim:", 4) ? 4 : 0; /* sim:N: simulated device N */
  if (!at) return false;
  const char *p = s + at;
  if (!*p) return false;
  for (; *p; p++)
    if (!isdigit((unsigned char)*p)) return false;
  return strlen(s) < 16;
}

/* Parses text for option d into dst. Returns false if malformed. */
static bool parse_opt(const opt_def *d, const char *text, gpa__opts *dst) {
  char *field = (char *)dst + d->offset;
  uint64_t v;
  switch (d->kind) {
    case OPT_DEVICE:
      if (!gpa__device_valid(text)) return false;
      snprintf(field, d->size, "%s", text);
      return true;
    case OPT_PATH:
      if (strlen(text) >= d->size) return false;
      snprintf(field, d->size, "%s", text);
      return true;
    case OPT_BOOL:
      if (!strcmp(text, "1") || !strcmp(text, "true") || !strcmp(text, "yes")) *(int32_t *)field = 1;
      else if (!strcmp(text, "0") || !strcmp(text, "false") || !strcmp(text, "no")) *(int32_t *)field = 0;
      else return false;
      return true;
    case OPT_U32:
      if (!parse_u64(text, &v) || v > UINT32_MAX) return false;
      *(uint32_t *)field = (uint32_t)v;
      return true;
    case OPT_U64:
      if (!parse_u64(text, &v)) return false;
      *(uint64_t *)field = v;
      return true;
    case OPT_I64_MS:
      if (!strcmp(text, "-1")) { *(int64_t *)field = -1; return true; }
      if (!parse_u64(text, &v) || v > INT64_MAX / 1000000) return false;
      *(int64_t *)field = (int64_t)v * 1000000;
      return true;
    case OPT_ENUM:
      for (int i = 0; d->names[i]; i++)
        if (!strcmp(text, d->names[i])) { *(int32_t *)field = i + d->enum_base; return true; }
      return false;
  }
  return false;
}

static void read_env(opt_layer *l, int flags) {
  for (size_t i = 0; i < N_OPTS; i++) {
    if ((gpa__opt_table[i].flags & FRESH) != (flags & FRESH)) continue;
    const char *s = getenv(gpa__opt_table[i].env);
    if (!s || !*s) continue;
    if (parse_opt(&gpa__opt_table[i], s, &l->vals)) l->set[i] = true;
    else gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "ignoring malformed %s='%s'", gpa__opt_table[i].env, s);
  }
}

static void apply_layer(gpa__opts *o, const opt_layer *l);

static gpa__opts gpa__process; /* the snapshot layers alone (PROCESS entries) */

static void read_layers(void) {
  const char *cfg = getenv("GPA_CONFIG");
  if (cfg && *cfg) gpa__config_read(cfg, &gpa__layers.file.vals, gpa__layers.file.set);
  read_env(&gpa__layers.env, 0);
  apply_layer(&gpa__process, &gpa__layers.file);
  apply_layer(&gpa__process, &gpa__layers.env);
  /* The process-wide switches take effect here, before any kernel runs. */
  if (gpa__process.host_nt) gpa__nt_force(gpa__process.host_nt == 2);
  if (gpa__process.tgemm_avx512 == 1) gpa__tgemm_isa(1); /* "0": AVX2 at most */
  if (gpa__process.conv1d_avx512 == 1) gpa__conv1d_direct_avx2_only(1);
  gpa__blas_configure(gpa__process.blas, gpa__process.blas_coretype);
}

const gpa__opts *gpa__options_process(void) {
  pthread_once(&gpa__layers.once, read_layers);
  return &gpa__process;
}

/* The config file (config.c) hands each key's value here as text. */
bool gpa__config_apply(const char *file, const char *key, const char *text, gpa__opts *vals, bool *set) {
  for (size_t i = 0; i < N_OPTS; i++) {
    if (strcmp(gpa__opt_table[i].key, key)) continue;
    if (parse_opt(&gpa__opt_table[i], text, vals)) {
      set[i] = true;
      return true;
    }
    gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "%s: ignoring malformed value '%s' of \"%s\"", file, text, key);
    return false;
  }
  gpa__log(GPA_LOG_WARN, GPA_LOG_WARN, "%s: ignoring unknown key \"%s\"", file, key);
  return false;
}

static void apply_layer(gpa__opts *o, const opt_layer *l) {
  for (size_t i = 0; i < N_OPTS; i++)
    if (l->set[i]) {
      size_t off = gpa__opt_table[i].offset;
      memcpy((char *)o + off, (const char *)&l->vals + off, gpa__opt_table[i].size);
    }
}

static bool pow2(uint32_t v) { return v && !(v & (v - 1)); }

/* The first published layout ended at log_level; fields added since read as
 * zero (their defaults) for a program that passes that size. */
#define GPA__OPTIONS_V1_SIZE (offsetof(gpa_actor_options, log_level) + sizeof(int32_t))

gpa_status gpa__options_resolve(const gpa_actor_options *user, gpa__opts *o) {
  gpa_actor_options local = {0};
  if (user) {
    size_t n = user->size ? user->size : sizeof local;
    if (n < GPA__OPTIONS_V1_SIZE)
      return gpa__fail(GPA_EINVAL, "gpa_actor_options.size %u is smaller than any known version", user->size);
    memcpy(&local, user, n < sizeof local ? n : sizeof local);
  }
  const gpa_actor_options *u = &local;
  memset(o, 0, sizeof *o);
  /* Program options, checked: a bad explicit value is the program's bug. */
  snprintf(o->device, sizeof o->device, "%s", u->device ? u->device : "auto");
  if (u->device && !gpa__device_valid(u->device))
    return gpa__fail(GPA_EINVAL, "options.device '%s': expected auto, cpu, sim, sim:N, cuda or cuda:N", u->device);
  o->mailbox_size = u->mailbox_size;
  o->full_policy = u->full_policy;
  if (o->full_policy != GPA_FULL_WAIT && o->full_policy != GPA_FULL_FAIL)
    return gpa__fail(GPA_EINVAL, "options.full_policy %d: expected GPA_FULL_WAIT or GPA_FULL_FAIL", u->full_policy);
  o->full_timeout_ns = u->full_timeout_ns;
  o->shutdown_policy = u->shutdown_policy;
  if (o->shutdown_policy != GPA_SHUTDOWN_DRAIN && o->shutdown_policy != GPA_SHUTDOWN_CANCEL)
    return gpa__fail(GPA_EINVAL, "options.shutdown_policy %d: expected DRAIN or CANCEL", u->shutdown_policy);
  o->mem_budget = u->mem_budget;
  o->threads = u->threads;
  o->max_pending = u->max_pending;
  o->log_level = u->log_level;
  if (o->log_level < 0 || o->log_level > GPA_LOG_DEBUG)
    return gpa__fail(GPA_EINVAL, "options.log_level %d out of range [0, 4]", u->log_level);
  if (u->trace_path) {
    if (strlen(u->trace_path) >= sizeof o->trace_path)
      return gpa__fail(GPA_EINVAL, "options.trace_path is longer than %zu bytes (GPA_TRACE_PATH_MAX)",
                       sizeof o->trace_path - 1);
    snprintf(o->trace_path, sizeof o->trace_path, "%s", u->trace_path);
  }
  o->profile = u->profile != 0;

  gpa__options_process();
  apply_layer(o, &gpa__layers.file);
  apply_layer(o, &gpa__layers.env);
  opt_layer fresh = {0};
  read_env(&fresh, FRESH);
  apply_layer(o, &fresh);

  /* Defaults for what is still zero. */
  if (!o->mailbox_size) o->mailbox_size = 1024;
  if (!pow2(o->mailbox_size) || o->mailbox_size < GPA_MAILBOX_MIN || o->mailbox_size > GPA_MAILBOX_MAX)
    return gpa__fail(GPA_EINVAL, "mailbox_size %u: expected a power of two in [4, 2^24]", o->mailbox_size);
  if (!o->full_timeout_ns) o->full_timeout_ns = 10ll * 1000000000;
  if (!o->threads) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = n > 0 ? (uint32_t)n : 1;
  }
  _Static_assert(sizeof o->trace_path == GPA_TRACE_PATH_MAX, "limits.h names the trace path's room");
  if (o->threads > GPA_MAX_THREADS)
    return gpa__fail(GPA_EINVAL, "threads %u: at most %d (GPA_MAX_THREADS)", o->threads, GPA_MAX_THREADS);
  if (!o->max_pending) o->max_pending = 65536;
  if (!o->log_level) o->log_level = GPA_LOG_WARN;
  return GPA_OK;
}
