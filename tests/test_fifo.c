/* FIFO per queue under 4 producer threads, and causal order across threads:
 * a message submitted after another thread's submit (that we saw happen)
 * runs after it. A registered op logs what runs, in order.
 *
 * The causal rounds and the hand-over rounds run on fresh queues: each
 * round has a second thread start submitting to a queue that one thread used
 * alone, the hand-over ones while the first is still submitting. A lost or
 * doubled ticket hangs the sync (the test's time limit) or breaks the counts. */
#include <pthread.h>
#include <stdatomic.h>

#include "util/testutil.h"

enum { PRODUCERS = 4, PER = 20000, QUEUES = 2 };

typedef struct { int64_t producer, seq; } rec_params;
static const gpa_attr_spec rec_attrs[] = {
    {"producer", GPA_ATTR_INT, 1, 0, 0, 0, 0, 1000},
    {"seq", GPA_ATTR_INT, 1, 8, 0, 0, 0, 1e9},
};

typedef struct log {
  int32_t *producer, *seq; /* written by the actor thread only */
  int64_t n;
} rec_log;
static rec_log logs[QUEUES]; /* one per queue, indexed by user_data */

static gpa_status record(const gpa_op_exec *x) {
  const rec_params *p = x->params;
  rec_log *l = &logs[(intptr_t)x->user_data];
  l->producer[l->n] = (int32_t)p->producer;
  l->seq[l->n] = (int32_t)p->seq;
  l->n++;
  return GPA_OK;
}

typedef struct prod {
  gpa_queue *q[QUEUES];
  int id;
} prod;

static void *producer(void *arg) {
  prod *p = arg;
  for (int i = 0; i < PER; i++) {
    int qi = i % QUEUES;
    gpa_attr at[2] = {{"producer", GPA_ATTR_INT, p->id, 0}, {"seq", GPA_ATTR_INT, i, 0}};
    gpa_op_call c = {.op = qi ? "rec1" : "rec0", .attrs = at, .n_attrs = 2};
    CHECK_OK(gpa_submit(p->q[qi], &c, NULL));
  }
  return NULL;
}

/* Causality: T1 submits A then publishes a flag; T2 waits for the flag and
 * submits B on the same queue. B must run after A. */
static atomic_int flag;
static gpa_queue *cq;
typedef struct handover {
  gpa_queue *q;
  int id, n;
} handover;
static void *handover_submit(void *arg) {
  handover *h = arg;
  for (int i = 0; i < h->n; i++) {
    gpa_attr at[2] = {{"producer", GPA_ATTR_INT, h->id, 0}, {"seq", GPA_ATTR_INT, i, 0}};
    CHECK_OK(gpa_submit(h->q, &(gpa_op_call){.op = "rec0", .attrs = at, .n_attrs = 2}, NULL));
  }
  return NULL;
}

static void *causal_second(void *arg) {
  (void)arg;
  while (!atomic_load(&flag)) sched_yield();
  gpa_attr at[2] = {{"producer", GPA_ATTR_INT, 101, 0}, {"seq", GPA_ATTR_INT, 0, 0}};
  CHECK_OK(gpa_submit(cq, &(gpa_op_call){.op = "rec0", .attrs = at, .n_attrs = 2}, NULL));
  return NULL;
}

int main(void) {
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mailbox_size = 64}); /* small rings: many full/drain cycles */
  for (int qi = 0; qi < QUEUES; qi++) {
    logs[qi].producer = malloc(sizeof(int32_t) * (PRODUCERS * PER + 20000));
    logs[qi].seq = malloc(sizeof(int32_t) * (PRODUCERS * PER + 20000));
    gpa_op_desc d = {.name = qi ? "rec1" : "rec0", .n_outputs = 0, .attrs = rec_attrs, .n_attrs = 2,
                     .params_size = sizeof(rec_params), .host = record, .cuda = record,
                     .user_data = (void *)(intptr_t)qi};
    CHECK_OK(gpa_op_register(gpa_actor_registry(a), &d));
  }
  prod p[PRODUCERS];
  pthread_t th[PRODUCERS];
  gpa_queue *qs[QUEUES];
  qs[0] = gpa_actor_default_queue(a);
  CHECK_OK(gpa_queue_create(a, "second", &qs[1]));
  for (int i = 0; i < PRODUCERS; i++) {
    p[i].id = i;
    memcpy(p[i].q, qs, sizeof qs);
    CHECK(pthread_create(&th[i], NULL, producer, &p[i]) == 0);
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(th[i], NULL);
  for (int qi = 0; qi < QUEUES; qi++) CHECK_OK(gpa_sync_batch(qs[qi], NULL));

  for (int qi = 0; qi < QUEUES; qi++) {
    int last[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) last[i] = -1;
    CHECK(logs[qi].n == PRODUCERS * PER / QUEUES);
    for (int64_t k = 0; k < logs[qi].n; k++) {
      int pr = logs[qi].producer[k], s = logs[qi].seq[k];
      CHECK(pr >= 0 && pr < PRODUCERS);
      CHECK(s > last[pr]);  /* each producer's messages in its order */
      CHECK(s % QUEUES == qi);
      last[pr] = s;
    }
  }

  /* causal order, repeated to give a reordering a chance to show */
  for (int round = 0; round < 200; round++) {
    CHECK_OK(gpa_queue_create(a, "causal", &cq));
    int64_t base = logs[0].n;
    atomic_store(&flag, 0);
    pthread_t t2;
    CHECK(pthread_create(&t2, NULL, causal_second, NULL) == 0);
    gpa_attr at[2] = {{"producer", GPA_ATTR_INT, 100, 0}, {"seq", GPA_ATTR_INT, 0, 0}};
    CHECK_OK(gpa_submit(cq, &(gpa_op_call){.op = "rec0", .attrs = at, .n_attrs = 2}, NULL));
    atomic_store(&flag, 1);
    pthread_join(t2, NULL);
    CHECK_OK(gpa_sync_batch(cq, NULL));
    CHECK(logs[0].n == base + 2);
    CHECK(logs[0].producer[base] == 100 && logs[0].producer[base + 1] == 101);
    CHECK_OK(gpa_queue_destroy(cq));
  }

  /* hand-over: this thread submits alone, then two more join mid-stream */
  enum { ROUNDS = 30, EACH = 400, JOINERS = 2 };
  for (int round = 0; round < ROUNDS; round++) {
    gpa_queue *hq;
    CHECK_OK(gpa_queue_create(a, "handover", &hq));
    int64_t base = logs[0].n;
    handover me = {hq, 0, EACH}, others[JOINERS];
    handover_submit(&(handover){hq, 0, EACH / 4}); /* seqs 0.. of producer 0 */
    pthread_t th2[JOINERS];
    for (int j = 0; j < JOINERS; j++) {
      others[j] = (handover){hq, j + 1, EACH};
      CHECK(pthread_create(&th2[j], NULL, handover_submit, &others[j]) == 0);
    }
    me.id = JOINERS + 1; /* this thread again, as a producer of its own */
    handover_submit(&me);
    for (int j = 0; j < JOINERS; j++) pthread_join(th2[j], NULL);
    CHECK_OK(gpa_sync_batch(hq, NULL));
    CHECK(logs[0].n == base + EACH / 4 + (JOINERS + 1) * EACH);
    int last[JOINERS + 2];
    for (int j = 0; j < JOINERS + 2; j++) last[j] = -1;
    for (int64_t k = base; k < logs[0].n; k++) {
      int pr = logs[0].producer[k], s = logs[0].seq[k];
      CHECK(pr >= 0 && pr < JOINERS + 2);
      CHECK(s == last[pr] + 1); /* each producer's messages all there, in order */
      last[pr] = s;
      if (pr != 0) CHECK(last[0] == EACH / 4 - 1); /* the first ones ran first */
    }
    CHECK_OK(gpa_queue_destroy(hq));
  }
  CHECK_OK(gpa_actor_destroy(a));
  for (int qi = 0; qi < QUEUES; qi++) {
    free(logs[qi].producer);
    free(logs[qi].seq);
  }
  printf("fifo: ok\n");
  return 0;
}
