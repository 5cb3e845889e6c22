/* Queue churn (issue 30): create a queue, run one op on it, sync, destroy
 * it; 10,000 times. A destroyed queue's device stream must be reused or
 * destroyed once its work is done, so threads (the simulator runs each
 * stream on a thread) and memory mappings (each such thread maps its fiber
 * stacks) stay flat; they used to grow until cuStreamCreate failed at the
 * 31st cycle. The heap may grow only by the queue objects themselves, which
 * stay valid (answering ECLOSED) until the actor is destroyed (docs/api.md):
 * 128 bytes each (the rest of a queue, ~700 bytes, is freed by the destroy).
 * A destroyed queue can still be synced: its unsynced batch (stats,
 * readbacks) survives the destroy until then.
 * GPA_QUEUE_CHURN_CYCLES sets the cycles (default 10,000; 1,000 under
 * ASan/TSan). */
#include <malloc.h>
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

/* A queue destroyed with a batch not yet synced: the sync after the destroy
 * still returns its stats and makes its readback readable, once. */
static void sync_after_destroy(gpa_actor *a, const gpa_tensor *t) {
  gpa_queue *q;
  CHECK_OK(gpa_queue_create(a, "late", &q));
  CHECK_OK(gpa_batch_begin(q, "last"));
  CHECK_OK(tu_fill(q, t, 3.0, NULL));
  gpa_handle *h;
  CHECK_OK(gpa_readback(q, t, &h));
  CHECK_OK(gpa_queue_destroy(q));
  gpa_batch_stats st = {.size = sizeof st};
  CHECK_OK(gpa_sync_batch(q, &st));
  CHECK(st.ops == 2 && !strcmp(st.label, "last"));
  const void *data;
  uint64_t size;
  CHECK_OK(gpa_handle_data(h, &data, &size)); /* readable: its batch was synced */
  CHECK(size == N * sizeof(float) && ((const float *)data)[N - 1] == 3.0f);
  gpa_handle_release(h);
  CHECK_OK(gpa_sync_batch(q, &st)); /* nothing left */
  CHECK(st.ops == 0 && !st.label[0]);
  CHECK_ST(gpa_batch_begin(q, "again"), GPA_ECLOSED);
}

int main(void) {
  const char *e = getenv("GPA_QUEUE_CHURN_CYCLES");
  long cycles = e ? atol(e) : CYCLES_DEFAULT;
  CHECK(cycles > 0);
  gpa_actor *a = tu_actor(NULL);
  gpa_tensor t = tu_f32(a, N), u = tu_f32(a, N);
  /* warm-up: pools, the block workers' stacks and the allocator settle */
  for (long i = 0; i < WARM; i++) cycle(a, &t, &u, i);
  sync_after_destroy(a, &t);
  long th0 = proc_status("Threads"), rss0 = proc_status("VmRSS"), maps0 = mappings();
  size_t heap0 = mallinfo2().uordblks;
  for (long i = 0; i < cycles; i++) cycle(a, &t, &u, i);
  size_t heap1 = mallinfo2().uordblks;
  long th1 = proc_status("Threads"), rss1 = proc_status("VmRSS"), maps1 = mappings();
  /* the last fill's value is there: the queues really ran */
  float got[N];
  tu_get(gpa_actor_default_queue(a), &u, got, N);
  for (int i = 0; i < N; i++) CHECK(got[i] == 2.0f * (float)((cycles - 1) % 1000));
  double per_queue = ((double)heap1 - (double)heap0) / (double)cycles;
  printf("queue_churn on %s: %ld cycles; threads %ld -> %ld, mappings %ld -> %ld, RSS %ld -> %ld KiB, "
         "heap +%.0f bytes a destroyed queue\n",
         gpa_actor_backend(a), cycles, th0, th1, maps0, maps1, rss0, rss1, per_queue);
  CHECK(th0 > 0 && maps0 > 0 && rss0 > 0);
  /* A real driver starts threads of its own lazily (on an H100, 19 -> 20 over
   * 10,000 cycles): a few are its business; a thread per queue would be
   * thousands. Elsewhere every thread is ours: none may appear. */
  CHECK(strcmp(gpa_actor_backend(a), "cuda") ? th1 == th0 : th1 <= th0 + 2);
  /* the allocator may map an arena or two more; one stream thread alone maps
   * its fiber stacks as ~2,000 mappings */
  CHECK(maps1 <= maps0 + 16);
  /* A destroyed queue keeps its 128-byte object (malloc adds a header and
   * the 64-byte alignment's slack); the whole queue (~830 bytes with its
   * state) would fail this. The resident set follows. Under the sanitizers
   * the heap is theirs (mallinfo2 does not see it) and the resident set is
   * mostly shadow memory and quarantine: threads and mappings say it. */
#if !defined(GPA_ASAN) && !defined(GPA_TSAN)
  CHECK(per_queue <= 192.0);
  CHECK(rss1 - rss0 <= cycles / 4 + 4096);
#endif
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
