/* Destroy with work pending: drain runs it all, cancel completes the rest
 * with ECANCELED; either way every handle completes exactly once, and
 * producers still submitting get ESHUTDOWN, never a hang or a lost handle. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "util/testutil.h"

static atomic_long ran;
static gpa_status slowish(const gpa_op_exec *x) {
  (void)x;
  atomic_fetch_add(&ran, 1);
  for (volatile int i = 0; i < 2000; i++) {
  }
  return GPA_OK;
}

enum { THREADS = 3, PER = 3000 };
typedef struct { gpa_queue *q; gpa_handle **h; long submitted, refused; } job;
static atomic_int go;

static void *producer(void *arg) {
  job *j = arg;
  while (!atomic_load(&go)) sched_yield();
  for (int i = 0; i < PER; i++) {
    gpa_status st = gpa_submit(j->q, &(gpa_op_call){.op = "slowish"}, &j->h[i]);
    if (st == GPA_OK) j->submitted++;
    else {
      CHECK(st == GPA_ESHUTDOWN);
      CHECK(j->h[i] == NULL);
      j->refused++;
    }
  }
  return NULL;
}

static void run(int policy) {
  atomic_store(&ran, 0);
  atomic_store(&go, 0);
  gpa_actor *a = tu_actor(&(gpa_actor_options){.shutdown_policy = policy, .mailbox_size = 256});
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &(gpa_op_desc){.name = "slowish", .host = slowish, .cuda = slowish}));
  gpa_queue *q2;
  CHECK_OK(gpa_queue_create(a, "other", &q2));
  job j[THREADS];
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) {
    j[i] = (job){i % 2 ? q2 : gpa_actor_default_queue(a), calloc(PER, sizeof(gpa_handle *)), 0, 0};
    pthread_create(&th[i], NULL, producer, &j[i]);
  }
  atomic_store(&go, 1);
  usleep(2000);
  CHECK_OK(gpa_actor_shutdown(a)); /* while producers are still submitting */
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  CHECK_OK(gpa_actor_shutdown(a)); /* idempotent */
  CHECK_ST(gpa_submit(gpa_actor_default_queue(a), &(gpa_op_call){.op = "noop"}, NULL), GPA_ESHUTDOWN);
  CHECK_ST(gpa_buffer_acquire(a, NULL, 64, &(gpa_buffer_id){0}), GPA_ESHUTDOWN);
  CHECK_ST(gpa_sync_batch(q2, NULL), GPA_ESHUTDOWN);
  CHECK_OK(gpa_actor_destroy(a));
  long ok = 0, cancelled = 0, total = 0;
  for (int i = 0; i < THREADS; i++) {
    total += j[i].submitted;
    for (int k = 0; k < PER; k++) {
      gpa_handle *h = j[i].h[k];
      if (!h) continue;
      gpa_status st = gpa_handle_status(h); /* must be complete: no waiting */
      CHECK(st != GPA_EPENDING);
      if (st == GPA_OK) ok++;
      else {
        CHECK(st == GPA_ECANCELED);
        CHECK(strstr(gpa_handle_error_message(h), "cancel"));
        cancelled++;
      }
      gpa_handle_release(h); /* handles outlive their actor */
    }
    free(j[i].h);
  }
  CHECK(ok + cancelled == total);
  CHECK(ok == atomic_load(&ran)); /* ran exactly the ones that completed ok */
  if (policy == GPA_SHUTDOWN_DRAIN) CHECK(cancelled == 0);
  printf("policy %s: %ld submitted, %ld ran, %ld cancelled\n", policy ? "cancel" : "drain", total, ok, cancelled);
}

int main(void) {
  run(GPA_SHUTDOWN_DRAIN);
  run(GPA_SHUTDOWN_CANCEL);
  /* destroy with nothing pending, twice in a row, and many actors in sequence */
  for (int i = 0; i < 20; i++) {
    gpa_actor *a = tu_actor(NULL);
    CHECK_ST(tu_fill(gpa_actor_default_queue(a), &(gpa_tensor){0}, 0, NULL), GPA_EDTYPE);
    CHECK_OK(gpa_actor_destroy(a));
  }
  printf("destroy: ok\n");
  return 0;
}
