/* Stress: 8 producer threads x many messages mixing ops, awaits, releases,
 * buffer churn and batch syncs across 4 queues. Every message is counted
 * where it runs (a registered op) and every handle is awaited: nothing lost,
 * nothing run twice. Memory must stay flat once the pools are warm. Then a
 * shutdown while all 8 are still submitting. Scaled down under sanitizers
 * and valgrind (GPA_STRESS_PER overrides). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "util/testutil.h"

#if defined(GPA_ASAN) || defined(GPA_TSAN)
enum { PER_DEFAULT = 40000 };
#else
enum { PER_DEFAULT = 1000000 };
#endif
enum { PRODUCERS = 8, QUEUES = 4 };

static atomic_long ran;
static gpa_status count_op(const gpa_op_exec *x) {
  (void)x;
  atomic_fetch_add_explicit(&ran, 1, memory_order_relaxed);
  return GPA_OK;
}

typedef struct prod {
  gpa_actor *a;
  gpa_queue **qs;
  long per, accepted, accepted_counts, awaited, refused;
  int id;
  atomic_int *stop;
} prod;

static void *producer(void *arg) {
  prod *p = arg;
  /* A buffer per queue: on a device, queues are streams that run at once. */
  gpa_tensor tq[QUEUES] = {{0}};
  for (int k = 0; k < QUEUES; k++) {
    tq[k] = (gpa_tensor){0, 0, GPA_F32, 1, {64}};
    gpa_status st = gpa_buffer_acquire(p->a, NULL, 256, &tq[k].buffer);
    if (st == GPA_ESHUTDOWN && p->stop) return NULL; /* shut down before we started */
    CHECK_OK(st);
  }
  gpa_handle *pending[16];
  int np = 0;
  for (long i = 0; i < p->per; i++) {
    if (p->stop && atomic_load_explicit(p->stop, memory_order_relaxed)) break;
    int qk = (int)((i + p->id) % QUEUES);
    gpa_queue *q = p->qs[qk];
    gpa_handle **out = (i % 7 == 0) ? &pending[np] : NULL;
    gpa_status st;
    if (i % 5 == 0) st = tu_fill(q, &tq[qk], (double)i, out);
    else st = gpa_submit(q, &(gpa_op_call){.op = "count"}, out);
    if (st == GPA_OK) {
      p->accepted++;
      p->accepted_counts += i % 5 != 0;
      if (out) np++;
    } else {
      CHECK(st == GPA_ESHUTDOWN);
      p->refused++;
      break;
    }
    if (np == 16) { /* await and release a window of handles */
      for (int k = 0; k < np; k++) {
        gpa_status s = gpa_await(pending[k], -1);
        CHECK(s == GPA_OK || s == GPA_ECANCELED);
        gpa_handle_release(pending[k]);
        p->awaited++;
      }
      np = 0;
    }
    if (i % 4096 == 4095 && !p->stop) CHECK_OK(gpa_sync_batch(q, NULL));
    if (i % 8192 == 8191 && !p->stop) { /* buffer churn: release and re-acquire */
      CHECK_OK(gpa_buffer_release(p->a, tq[qk].buffer));
      tq[qk] = tu_f32(p->a, 64 + (i / 8192) % 7);
    }
  }
  for (int k = 0; k < np; k++) {
    gpa_status s = gpa_await(pending[k], -1);
    CHECK(s == GPA_OK || s == GPA_ECANCELED);
    gpa_handle_release(pending[k]);
    p->awaited++;
  }
  if (!p->stop)
    for (int k = 0; k < QUEUES; k++) CHECK_OK(gpa_buffer_release(p->a, tq[k].buffer));
  return NULL;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
  if (f) fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long run(gpa_actor *a, gpa_queue **qs, long per, atomic_int *stop, pthread_t *th, prod *p) {
  for (int i = 0; i < PRODUCERS; i++) {
    p[i] = (prod){a, qs, per, 0, 0, 0, 0, i, stop};
    CHECK(pthread_create(&th[i], NULL, producer, &p[i]) == 0);
  }
  if (stop) return 0;
  long total = 0;
  for (int i = 0; i < PRODUCERS; i++) {
    pthread_join(th[i], NULL);
    total += p[i].accepted;
  }
  for (int k = 0; k < QUEUES; k++) CHECK_OK(gpa_sync_batch(qs[k], NULL));
  return total;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  const char *e = getenv("GPA_STRESS_PER");
  long per = e ? atol(e) : PER_DEFAULT;
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mailbox_size = 256});
  /* The simulated device completes each message through a host function on
   * a stream thread: about 10x the host backend's cost per message. */
  if (!e && !strcmp(gpa_actor_backend(a), "sim")) per /= 10;
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &(gpa_op_desc){.name = "count", .host = count_op, .cuda = count_op}));
  gpa_queue *qs[QUEUES];
  qs[0] = gpa_actor_default_queue(a);
  for (int k = 1; k < QUEUES; k++) CHECK_OK(gpa_queue_create(a, NULL, &qs[k]));
  pthread_t th[PRODUCERS];
  prod p[PRODUCERS];

  /* warm-up round: pools, slabs and rings reach their size */
  long warm = run(a, qs, per / 10 + 1, NULL, th, p);
  long rss0 = rss_kb();
  atomic_store(&ran, 0);
  long total = run(a, qs, per, NULL, th, p);
  long rss1 = rss_kb();
  long counts = 0, awaited = 0;
  for (int i = 0; i < PRODUCERS; i++) {
    counts += p[i].accepted_counts;
    awaited += p[i].awaited;
  }
  CHECK(total == PRODUCERS * per);
  CHECK(atomic_load(&ran) == counts); /* every counted op ran exactly once */
  gpa_actor_stats st = {.size = sizeof st};
  CHECK_OK(gpa_actor_stats_get(a, &st));
  printf("stress: %ld messages from %d threads on %d queues (+%ld warm-up), %ld handles awaited, rss %ld -> %ld KiB, "
         "%llu producer contexts\n",
         total, PRODUCERS, QUEUES, warm, awaited, rss0, rss1, (unsigned long long)st.producers);
#if !defined(GPA_ASAN) && !defined(GPA_TSAN)
  /* steady: pools recycle, nothing grows per message. (ASan's quarantine
   * holds freed memory on purpose, and TSan's shadow and history count in
   * the RSS, four times what the program touches: it says nothing there.) */
  CHECK(rss1 - rss0 < 16 * 1024);
#endif

  /* shutdown while all 8 still submit: each accepted message completes */
  atomic_int stop = 0;
  atomic_store(&ran, 0);
  run(a, qs, per, &stop, th, p);
  usleep(20000);
  CHECK_OK(gpa_actor_shutdown(a));
  atomic_store(&stop, 1);
  long accepted = 0;
  counts = 0;
  for (int i = 0; i < PRODUCERS; i++) {
    pthread_join(th[i], NULL);
    accepted += p[i].accepted;
    counts += p[i].accepted_counts;
  }
  CHECK(atomic_load(&ran) == counts); /* drain policy: every accepted one ran, once */
  printf("stress: shutdown under load: %ld accepted, %ld counted ops ran\n", accepted, atomic_load(&ran));
  CHECK_OK(gpa_actor_destroy(a));
  return 0;
}
