/* gpa-bench-msgcost: the message path's instructions under callgrind
 * (bench/msg_callgrind.sh, issue 24). One case per run, on the actor
 * GPA_DEVICE selects:
 *
 *   stream N:    N adds of 1024 f32 submitted without handles, then a sync
 *   roundtrip N: N adds each submitted with a handle, awaited, released
 *
 * A warm-up of the same case first (module loads, pools, staging), then the
 * counts are zeroed, the case runs and callgrind dumps: what the script
 * reads is the measured messages alone. Natively the client requests are a
 * few no-op instructions, and the program prints the wall time per message
 * (a rough figure; gpa-bench cuda_actor is the timed one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpuactor.h"

#if defined(GPA_BENCH_CALLGRIND)
#include <valgrind/callgrind.h>
#define COUNT_START() CALLGRIND_ZERO_STATS
#define COUNT_DUMP() CALLGRIND_DUMP_STATS_AT("messages")
#else
#define COUNT_START() ((void)0)
#define COUNT_DUMP() ((void)0)
#endif

enum { TINY = 1024 };

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int die(const char *what) {
  fprintf(stderr, "gpa-bench-msgcost: %s: %s\n", what, gpa_last_error_message());
  return 1;
}

static int stream(gpa_queue *q, const gpa_op_call *add, int n) {
  for (int i = 0; i < n; i++)
    if (gpa_submit(q, add, NULL) != GPA_OK) return die("submit");
  return gpa_sync_batch(q, NULL) == GPA_OK ? 0 : die("sync");
}

static int roundtrip(gpa_queue *q, const gpa_op_call *add, int n) {
  for (int i = 0; i < n; i++) {
    gpa_handle *h = NULL;
    gpa_status st = gpa_submit(q, add, &h);
    if (st == GPA_OK) st = gpa_await(h, -1);
    gpa_handle_release(h);
    if (st != GPA_OK) return die("round trip");
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "stream";
  int n = argc > 2 ? atoi(argv[2]) : 2000;
  int rt = !strcmp(mode, "roundtrip");
  if ((!rt && strcmp(mode, "stream")) || n < 1) {
    fprintf(stderr, "usage: gpa-bench-msgcost stream|roundtrip [messages]\n");
    return 2;
  }
  gpa_actor *a;
  if (gpa_actor_create(NULL, &a) != GPA_OK) return die("actor");
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_tensor t[3];
  float ones[TINY];
  for (int i = 0; i < TINY; i++) ones[i] = 1.0f;
  for (int i = 0; i < 3; i++) {
    t[i] = (gpa_tensor){0, 0, GPA_F32, 1, {TINY}};
    if (gpa_buffer_acquire(a, NULL, sizeof ones, &t[i].buffer) != GPA_OK) return die("buffer");
    if (gpa_upload(q, &t[i], ones, sizeof ones, 0, NULL) != GPA_OK) return die("upload");
  }
  if (gpa_sync_batch(q, NULL) != GPA_OK) return die("sync");
  gpa_op_call add = {"add", t, 2, &t[2], 1, NULL, 0};
  int (*run)(gpa_queue *, const gpa_op_call *, int) = rt ? roundtrip : stream;
  if (run(q, &add, n)) return 1; /* warm-up: pools grow to what n messages in flight need */
  COUNT_START();
  double t0 = now_ns();
  int bad = run(q, &add, n);
  double ns = (now_ns() - t0) / n;
  COUNT_DUMP();
  if (bad) return 1;
  printf("{\"mode\":\"%s\",\"backend\":\"%s\",\"messages\":%d,\"ns_per_message\":%.0f}\n", mode,
         gpa_actor_backend(a), n, ns);
  for (int i = 0; i < 3; i++) gpa_buffer_release(a, t[i].buffer);
  gpa_actor_destroy(a);
  return 0;
}
