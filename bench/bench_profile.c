/* profile_overhead: the profile step (profile_step.c) with profiling off,
 * with a trace being written, and in gpa-bench-noprof (profiling compiled
 * out, run as a child process when it sits beside this executable).
 *
 * The machine is shared, so one comparison is worth little: the variants
 * run in rounds, alternating (each round starts with a different one, so a
 * drift in load hits them alike), each in a fresh actor, best of 3 runs of
 * `steps` steps. Each round gives a ratio; the reported one is the median
 * round's (ns and ref_ns are that round's times), with the spread in
 * extra fields. bench/profile_callgrind.sh gives the load-independent
 * measure: instructions per step. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "profile_step.h"

enum { MAX_ROUNDS = 64 };

static double run(const char *trace, int steps) {
  gpa_actor *a;
  if (gpa_actor_create(&(gpa_actor_options){.trace_path = trace}, &a) != GPA_OK) {
    fprintf(stderr, "profile_overhead: %s\n", gpa_last_error_message());
    exit(1);
  }
  gpa_pstep *p = gpa_pstep_new(a);
  double ns = gpa_pstep_best_ns(p, steps, 3);
  gpa_pstep_free(p);
  gpa_actor_destroy(a);
  return ns;
}

/* gpa-bench-noprof's path beside this executable, or 0. */
static int noprof_path(char *exe, size_t cap) {
  ssize_t n = readlink("/proc/self/exe", exe, cap - 1);
  if (n <= 0) return 0;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return 0;
  snprintf(slash + 1, cap - (size_t)(slash + 1 - exe), "gpa-bench-noprof");
  return access(exe, X_OK) == 0;
}

static double noprof(const char *exe, int steps) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "%s %d 3", exe, steps);
  FILE *f = popen(cmd, "r");
  double ns = 0;
  if (f) {
    if (fscanf(f, "%lf", &ns) != 1) ns = 0;
    pclose(f);
  }
  return ns;
}

/* Emits the round whose ratio ref/ours is the median, and the spread. */
static void emit_median(const char *name, const char *ref, const double *ours, const double *refs, int n) {
  double r[MAX_ROUNDS], sorted[MAX_ROUNDS];
  int valid = 0;
  for (int i = 0; i < n; i++) {
    r[i] = ours[i] > 0 && refs[i] > 0 ? refs[i] / ours[i] : 0;
    if (r[i] > 0) sorted[valid++] = r[i];
  }
  if (!valid) return;
  gpa_bench_sort(sorted, (size_t)valid);
  double med = sorted[valid / 2];
  int k = 0;
  while (r[k] != med) k++;
  char extra[160];
  snprintf(extra, sizeof extra,
           "\"rounds\":%d,\"ratio_min\":%.4f,\"ratio_max\":%.4f,\"note\":\"median round of alternating runs\"", valid,
           sorted[0], sorted[valid - 1]);
  gpa_bench_emit(&(gpa_bench_result){.name = name, .backend = "cpu", .shape = "mlp_256x512", .ref = ref,
                                     .ns = ours[k], .ref_ns = refs[k], .extra = extra});
}

void gpa_bench_profile_overhead(void) {
  int steps = gpa_bench_reps(20), rounds = 7;
  const char *s = getenv("GPA_BENCH_ROUNDS");
  if (s && atoi(s) > 0) rounds = atoi(s) < MAX_ROUNDS ? atoi(s) : MAX_ROUNDS;
  char trace[] = "/tmp/gpa_bench_trace_XXXXXX";
  int fd = mkstemp(trace);
  if (fd >= 0) close(fd);
  char exe[PATH_MAX];
  int have_noprof = noprof_path(exe, sizeof exe);
  double off[MAX_ROUNDS], on[MAX_ROUNDS], out[MAX_ROUNDS];
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < 3; i++) switch ((r + i) % 3) { /* round r starts with variant r % 3 */
        case 0: off[r] = run(NULL, steps); break;
        case 1: on[r] = run(trace, steps); break;
        default: out[r] = have_noprof ? noprof(exe, steps) : 0; break;
      }
  unlink(trace);
  emit_median("profile_overhead_on", "profiling_off", on, off, rounds);
  emit_median("profile_overhead_off", "profiling_compiled_out", off, out, rounds);
}
