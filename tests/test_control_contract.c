/* The error contract of control calls and the named limits (issue 30,
 * docs/api.md "Control calls"):
 * - a full mailbox: control calls never answer EAGAIN; they wait up to
 *   full_timeout_ns and then fail with ETIMEDOUT having done nothing (the
 *   message says how long, sub-millisecond limits included);
 * - a GPA_SHUTDOWN_CANCEL shutdown: a control call the actor had accepted but
 *   not run answers ECANCELED and did nothing (no buffer, no queue; a
 *   cancelled release released nothing and the shutdown frees the buffer);
 *   with GPA_SHUTDOWN_DRAIN they run;
 * - the registry holds exactly GPA_MAX_OP_NAMES names, an op name is shorter
 *   than GPA_OP_NAME_MAX, a label shorter than GPA_LABEL_MAX.
 * An op that blocks the actor thread until told holds the control calls in
 * the mailbox meanwhile. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "actor/internal.h"
#include "util/testutil.h"

static atomic_int entered, go;

static gpa_status block_op(const gpa_op_exec *x) {
  (void)x;
  atomic_store(&entered, 1);
  while (!atomic_load(&go)) usleep(200);
  return GPA_OK;
}

static void block_actor(gpa_actor *a) {
  atomic_store(&entered, 0);
  atomic_store(&go, 0);
  CHECK_OK(gpa_op_register(gpa_actor_registry(a), &(gpa_op_desc){.name = "block", .host = block_op, .cuda = block_op}));
  CHECK_OK(gpa_submit(gpa_actor_default_queue(a), &(gpa_op_call){.op = "block"}, NULL));
  while (!atomic_load(&entered)) usleep(100);
}

/* A full ring: GPA_FULL_FAIL makes a submit answer EAGAIN at once; control
 * calls from the same thread (same ring) wait 0.5 ms and time out. */
static void full_mailbox(void) {
  gpa_actor *a = tu_actor(&(gpa_actor_options){.mailbox_size = 4, .full_policy = GPA_FULL_FAIL,
                                                .full_timeout_ns = 500000});
  block_actor(a);
  gpa_queue *q = gpa_actor_default_queue(a);
  int n = 0;
  gpa_status st;
  while ((st = gpa_submit(q, &(gpa_op_call){.op = "noop"}, NULL)) == GPA_OK) CHECK(++n < 64);
  CHECK_ST(st, GPA_EAGAIN);
  gpa_buffer_id id = 7;
  CHECK_ST(gpa_buffer_acquire(a, "x", 64, &id), GPA_ETIMEDOUT);
  CHECK_MSG("0.500 ms");
  CHECK(id == 0);
  gpa_queue *q2 = (gpa_queue *)&id;
  CHECK_ST(gpa_queue_create(a, NULL, &q2), GPA_ETIMEDOUT);
  CHECK(q2 == NULL);
  CHECK_ST(gpa_sync_batch(q, NULL), GPA_ETIMEDOUT);
  gpa_actor_stats s = {0};
  CHECK_ST(gpa_actor_stats_get(a, &s), GPA_ETIMEDOUT);
  atomic_store(&go, 1);
  /* nothing was half done: the calls work once the actor drains */
  CHECK_OK(gpa_sync_batch(q, NULL));
  CHECK_OK(gpa_buffer_acquire(a, "x", 64, &id));
  CHECK_OK(gpa_buffer_query(a, id, &(gpa_buffer_info){0}));
  CHECK_OK(gpa_actor_stats_get(a, &s));
  CHECK(s.live_buffers == 1);
  CHECK_OK(gpa_buffer_release(a, id));
  CHECK_OK(gpa_actor_destroy(a));
}

typedef struct call {
  gpa_actor *a;
  int what; /* 0 release, 1 acquire, 2 queue create */
  gpa_buffer_id id;
  gpa_queue *q;
  gpa_status st;
} call;

static void *do_call(void *arg) {
  call *c = arg;
  if (c->what == 0) c->st = gpa_buffer_release(c->a, c->id);
  else if (c->what == 1) c->st = gpa_buffer_acquire(c->a, "later", 256, &c->id);
  else c->st = gpa_queue_create(c->a, "later", &c->q);
  return NULL;
}

static void *do_shutdown(void *arg) {
  CHECK_OK(gpa_actor_shutdown(arg));
  return NULL;
}

/* Control calls waiting in the mailbox while the actor shuts down. */
static void shutdown_with_calls(int policy) {
  gpa_actor *a = tu_actor(&(gpa_actor_options){.shutdown_policy = policy});
  gpa_buffer_id id;
  CHECK_OK(gpa_buffer_acquire(a, "kept", 1024, &id));
  block_actor(a);
  call c[3] = {{a, 0, id, NULL, GPA_OK}, {a, 1, 0, NULL, GPA_OK}, {a, 2, 0, NULL, GPA_OK}};
  pthread_t th[3], sd;
  uint32_t h0 = atomic_load(&a->hurry);
  for (int i = 0; i < 3; i++) CHECK(pthread_create(&th[i], NULL, do_call, &c[i]) == 0);
  /* a round trip counts `hurry` once its message is in the mailbox: then the
   * actor has accepted all three */
  while (atomic_load(&a->hurry) - h0 < 3) usleep(100);
  CHECK(pthread_create(&sd, NULL, do_shutdown, a) == 0);
  while (!atomic_load(&a->stopping)) usleep(100);
  atomic_store(&go, 1);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  pthread_join(sd, NULL);
  int cancelled = 0;
  for (int i = 0; i < 3; i++) {
    if (policy == GPA_SHUTDOWN_DRAIN) {
      CHECK_OK(c[i].st);
      continue;
    }
    CHECK_ST(c[i].st, GPA_ECANCELED);
    cancelled++;
  }
  if (policy == GPA_SHUTDOWN_CANCEL) {
    CHECK(c[1].id == 0); /* the acquire took no buffer */
    CHECK(c[2].q == NULL); /* no queue */
    /* the release released nothing: the id is the shutdown's to free, and
     * every call on it now answers ESHUTDOWN, not ESTALE */
    CHECK_ST(gpa_buffer_release(a, id), GPA_ESHUTDOWN);
    CHECK(cancelled == 3);
  } else {
    CHECK(c[1].id != 0 && c[2].q != NULL);
  }
  CHECK_OK(gpa_actor_destroy(a)); /* frees the buffer: no leak under ASan and valgrind */
}

static gpa_status nop(const gpa_op_exec *x) {
  (void)x;
  return GPA_OK;
}

static void limits(void) {
  gpa_actor *a = tu_actor(NULL);
  gpa_registry *reg = gpa_actor_registry(a);
  char name[GPA_OP_NAME_MAX + 1];
  memset(name, 'n', GPA_OP_NAME_MAX);
  name[GPA_OP_NAME_MAX] = 0;
  CHECK_ST(gpa_op_register(reg, &(gpa_op_desc){.name = name, .host = nop}), GPA_EINVAL);
  CHECK_MSG("GPA_OP_NAME_MAX");
  name[GPA_OP_NAME_MAX - 1] = 0;
  CHECK_OK(gpa_op_register(reg, &(gpa_op_desc){.name = name, .host = nop}));
  uint32_t have = a->registry.count, added = 0;
  for (;;) {
    char n[32];
    snprintf(n, sizeof n, "user_%u", added);
    gpa_status st = gpa_op_register(reg, &(gpa_op_desc){.name = n, .host = nop});
    if (st != GPA_OK) {
      CHECK_ST(st, GPA_ENOMEM);
      CHECK_MSG("GPA_MAX_OP_NAMES");
      break;
    }
    CHECK(++added <= GPA_MAX_OP_NAMES);
  }
  CHECK(have + added == GPA_MAX_OP_NAMES);
  /* a full registry still takes overrides of names it holds */
  CHECK_OK(gpa_op_register(reg, &(gpa_op_desc){.name = "user_0", .host = nop}));
  char label[GPA_LABEL_MAX + 1];
  memset(label, 'l', GPA_LABEL_MAX);
  label[GPA_LABEL_MAX] = 0;
  gpa_buffer_id id;
  CHECK_ST(gpa_buffer_acquire(a, label, 64, &id), GPA_EINVAL);
  CHECK_MSG("GPA_LABEL_MAX");
  label[GPA_LABEL_MAX - 1] = 0;
  CHECK_OK(gpa_buffer_acquire(a, label, 64, &id));
  CHECK_ST(gpa_buffer_acquire(a, NULL, GPA_MAX_BUFFER_BYTES + 1, &id), GPA_EOVERFLOW);
  CHECK_OK(gpa_actor_destroy(a));
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  full_mailbox();
  shutdown_with_calls(GPA_SHUTDOWN_DRAIN);
  shutdown_with_calls(GPA_SHUTDOWN_CANCEL);
  limits();
  printf("control_contract: ok\n");
  return 0;
}
