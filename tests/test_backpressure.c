/* A tiny mailbox: fail-fast answers EAGAIN and loses nothing accepted;
 * wait-mode blocks and loses nothing at all. Completions are counted. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "util/testutil.h"

static atomic_long ran;
static gpa_status slow(const gpa_op_exec *x) {
  (void)x;
  atomic_fetch_add(&ran, 1);
  usleep(20);
  return GPA_OK;
}

static gpa_actor *make(int policy) {
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mailbox_size = 4, .full_policy = policy,
                                               .full_timeout_ns = 30ll * 1000000000});
  gpa_op_desc d = {.name = "slow", .host = slow, .cuda = slow};
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  return a;
}

typedef struct { gpa_queue *q; int n; long accepted, refused; } job;
static void *submitter(void *arg) {
  job *j = arg;
  for (int i = 0; i < j->n; i++) {
    gpa_status st = gpa_submit(j->q, &(gpa_op_call){.op = "slow"}, NULL);
    if (st == GPA_OK) j->accepted++;
    else if (st == GPA_EAGAIN) j->refused++;
    else CHECK(!"unexpected status");
  }
  return NULL;
}

int main(void) {
  /* fail fast */
  gpa_actor *a = make(GPA_FULL_FAIL);
  gpa_queue *q = gpa_actor_default_queue(a);
  job j[3] = {{q, 3000, 0, 0}, {q, 3000, 0, 0}, {q, 3000, 0, 0}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, submitter, &j[i]);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  CHECK_OK(gpa_sync_batch(q, NULL));
  long acc = j[0].accepted + j[1].accepted + j[2].accepted, ref = j[0].refused + j[1].refused + j[2].refused;
  CHECK(acc + ref == 9000);
  CHECK(ref > 0);                      /* the mailbox did fill up */
  CHECK(atomic_load(&ran) == acc);     /* every accepted message ran, once */
  CHECK_OK(gpa_actor_destroy(a));

  /* wait: every message accepted and run */
  atomic_store(&ran, 0);
  a = make(GPA_FULL_WAIT);
  q = gpa_actor_default_queue(a);
  job w[3] = {{q, 2000, 0, 0}, {q, 2000, 0, 0}, {q, 2000, 0, 0}};
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, submitter, &w[i]);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK(w[0].accepted + w[1].accepted + w[2].accepted == 6000);
  CHECK(atomic_load(&ran) == 6000);
  /* handles too: each completes exactly once */
  gpa_handle *hs[64];
  for (int i = 0; i < 64; i++) CHECK_OK(gpa_submit(q, &(gpa_op_call){.op = "slow"}, &hs[i]));
  for (int i = 0; i < 64; i++) {
    CHECK_OK(gpa_await(hs[i], -1));
    gpa_handle_release(hs[i]);
  }
  CHECK(atomic_load(&ran) == 6064);
  CHECK_OK(gpa_actor_destroy(a));
  printf("backpressure: ok\n");
  return 0;
}
