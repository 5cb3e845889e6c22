/* Queue churn (issue 30): create a queue, run one op on it, sync, destroy
 * it; 10,000 times. A destroyed queue's device stream must be reused or
 * destroyed once its work is done, so threads (the simulator runs each
 * stream on a thread) and memory mappings (each such thread maps its fiber
 * stacks) stay flat; they used to grow until cuStreamCreate failed at the
 * 31st cycle. Resident memory may grow only by the queue objects themselves,
 * which stay valid (answering ECLOSED) until the actor is destroyed
 * (docs/api.md): a small record per cycle, not a stream.
 * GPA_QUEUE_CHURN_CYCLES sets the cycles (default 10,000; 1,000 under
 * ASan/TSan). */
#include <unistd.h>

#include "util/testutil.h"

#if defined(GPA_ASAN) || defined(GPA_TSAN)
enum { CYCLES_DEFAULT = 1000 };
#else
enum { CYCLES_DEFAULT = 10000 };
#endif
enum { WARM = 64, N = 64 };

static long proc_status(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t k = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, k) && line[k] == ':') v = atol(line + k + 1);
  fclose(f);
  return v;
}

static long mappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  long n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

/* fill (a memset on a device) and add (a kernel: on the simulator it runs
 * on the stream's thread, which maps its fiber stacks) */
static void cycle(gpa_actor *a, const gpa_tensor *t, const gpa_tensor *u, long i) {
  gpa_queue *q;
  CHECK_OK(gpa_queue_create(a, "churn", &q));
  CHECK_OK(tu_fill(q, t, (double)(i % 1000), NULL));
  gpa_tensor in[2] = {*t, *t};
  CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "add", .inputs = in, .n_inputs = 2, .outputs = u, .n_outputs = 1}, NULL));
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_queue_destroy(q));
  /* the destroyed queue answers ECLOSED, its stream gone or back in a pool */
  CHECK_ST(tu_fill(q, t, 0.0, NULL), GPA_ECLOSED);
}

int main(void) {
  const char *e = getenv("GPA_QUEUE_CHURN_CYCLES");
  long cycles = e ? atol(e) : CYCLES_DEFAULT;
  CHECK(cycles > 0);
  gpa_actor *a = tu_actor(NULL);
  gpa_tensor t = tu_f32(a, N), u = tu_f32(a, N);
  /* warm-up: pools, the block workers' stacks and the allocator settle */
  for (long i = 0; i < WARM; i++) cycle(a, &t, &u, i);
  long th0 = proc_status("Threads"), rss0 = proc_status("VmRSS"), maps0 = mappings();
  for (long i = 0; i < cycles; i++) cycle(a, &t, &u, i);
  long th1 = proc_status("Threads"), rss1 = proc_status("VmRSS"), maps1 = mappings();
  /* the last fill's value is there: the queues really ran */
  float got[N];
  tu_get(gpa_actor_default_queue(a), &u, got, N);
  for (int i = 0; i < N; i++) CHECK(got[i] == 2.0f * (float)((cycles - 1) % 1000));
  printf("queue_churn on %s: %ld cycles; threads %ld -> %ld, mappings %ld -> %ld, RSS %ld -> %ld KiB\n",
         gpa_actor_backend(a), cycles, th0, th1, maps0, maps1, rss0, rss1);
  CHECK(th0 > 0 && maps0 > 0 && rss0 > 0);
  /* A real driver starts threads of its own lazily (on an H100, 19 -> 20 over
   * 10,000 cycles): a few are its business; a thread per queue would be
   * thousands. Elsewhere every thread is ours: none may appear. */
  CHECK(strcmp(gpa_actor_backend(a), "cuda") ? th1 == th0 : th1 <= th0 + 2);
  /* the allocator may map an arena or two more; one stream thread alone maps
   * its fiber stacks as ~2,000 mappings */
  CHECK(maps1 <= maps0 + 16);
  /* a destroyed queue keeps its object (under 1 KiB): 10,000 of them, with
   * the allocator's slack, stay far below one stream per cycle. Under the
   * sanitizers the resident set is mostly their shadow memory and
   * quarantine (ASan holds freed blocks back): threads and mappings say it. */
#if !defined(GPA_ASAN) && !defined(GPA_TSAN)
  CHECK(rss1 - rss0 <= cycles * 2 + 4096);
#endif
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
