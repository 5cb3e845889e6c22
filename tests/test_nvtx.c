/* NVTX ranges: resolved at run time, nothing without a tool.
 *
 * Run plainly (ctest "nvtx") or with NVTX_INJECTION64_PATH naming a file
 * that is not there ("nvtx_missing_tool"), no NVTX library is loaded and the
 * ops run as usual. Run with NVTX_INJECTION64_PATH naming the stand-in tool
 * built in tests/nvtx ("nvtx_injected"), the tool is loaded only at the
 * first op (not at link or load time) and sees one balanced range per
 * message, named as the profilers name it, whether or not a profiler is
 * attached (a tool asks for them by being there). */
#include <dlfcn.h>
#include <unistd.h>

#include "util/testutil.h"

enum { MAX_OPS = 64 };

typedef struct seen {
  int n;
  char names[MAX_OPS][32];
} seen;

static void on_op(const gpa_prof_op *op, void *ud) {
  seen *s = ud;
  if (s->n < MAX_OPS) snprintf(s->names[s->n], sizeof s->names[0], "%s", op->name);
  s->n++;
}

/* Whether a file whose path contains `needle` is mapped into this process. */
static int mapped(const char *needle) {
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f);
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

static void workload(gpa_queue *q, gpa_tensor *x, gpa_tensor *y) {
  float host[16] = {1, 2, 3};
  tu_put(q, x, host, 16);
  CHECK_OK(gpa_batch_begin(q, "nvtx"));
  CHECK_OK(tu_fill(q, x, 2, NULL));
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "copy", .inputs = x, .n_inputs = 1, .outputs = y, .n_outputs = 1},
                      NULL));
  gpa_handle *rb;
  CHECK_OK(gpa_readback(q, y, &rb));
  CHECK_OK(gpa_sync_batch(q, NULL));
  gpa_handle_release(rb);
}

int main(void) {
  const char *tool = getenv("NVTX_INJECTION64_PATH");
  int inject = tool && tool[0] && access(tool, R_OK) == 0;
#ifndef GPA_TEST_FAKE_NVTX
  if (inject) {
    fprintf(stderr, "skipped: NVTX is compiled out of this build (no CUDA toolkit headers)\n");
    return 77;
  }
#endif
  const char *base = inject ? strrchr(tool, '/') : NULL;
  base = base ? base + 1 : tool;
  /* no link-time dependency on any NVTX library */
  CHECK(!mapped("nvToolsExt") && !(inject && mapped(base)));

  gpa_actor *a = tu_actor(NULL);
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor x = tu_f32(a, 16), y = tu_f32(a, 16);
  workload(q, &x, &y); /* profiling off: ranges only if a tool is there */
  int first = 0;
  if (inject) {
    void *h = dlopen(tool, RTLD_NOW | RTLD_NOLOAD);
    CHECK(h); /* loaded by the first range, without a profiler */
    void (*stats)(int *, int *, int *, int *, int *) =
        (void (*)(int *, int *, int *, int *, int *))dlsym(h, "fake_nvtx_stats");
    CHECK(stats);
    int pops, underflows, deepest, open;
    stats(&first, &pops, &underflows, &deepest, &open); /* the sync waited for every range */
    CHECK(first == 4 && pops == first && open == 0);
    dlclose(h);
  }
  seen s = {0};
  CHECK_OK(gpa_actor_add_profiler(a, &(gpa_profiler){sizeof(gpa_profiler), on_op, NULL, NULL, NULL, &s}));
  for (int i = 0; i < 3; i++) workload(q, &x, &y);
  CHECK_OK(gpa_actor_destroy(a)); /* joins the actor thread: its NVTX calls are done */
  CHECK(s.n == 3 * 4 && s.n <= MAX_OPS);

  if (!inject) {
    CHECK(!mapped("nvToolsExt") && !mapped("fake_nvtx"));
    printf("nvtx: ok (no tool: %d profiled messages, nothing loaded)\n", s.n);
    return 0;
  }
  CHECK(mapped(base)); /* loaded at run time, by the first range */
  void *h = dlopen(tool, RTLD_NOW | RTLD_NOLOAD);
  CHECK(h);
  typedef void (*stats_fn)(int *, int *, int *, int *, int *);
  stats_fn stats = (stats_fn)dlsym(h, "fake_nvtx_stats");
  const char *(*name)(int) = (const char *(*)(int))dlsym(h, "fake_nvtx_name");
  CHECK(stats && name);
  int pushes, pops, underflows, deepest, open;
  stats(&pushes, &pops, &underflows, &deepest, &open);
  fprintf(stderr, "nvtx: %d pushes, %d pops, deepest %d, open %d\n", pushes, pops, deepest, open);
  CHECK(pushes == first + s.n && pops == pushes && underflows == 0 && open == 0 && deepest == 1);
  for (int i = 0; i < s.n; i++) {
    const char *r = name(first + i);
    if (strcmp(r, s.names[i])) fprintf(stderr, "range %d: '%s', profiler saw '%s'\n", first + i, r, s.names[i]);
    CHECK(!strcmp(r, s.names[i]));
  }
  dlclose(h);
  printf("nvtx: ok (tool loaded at run time, %d balanced ranges named like the profiled messages)\n", pushes);
  return 0;
}
