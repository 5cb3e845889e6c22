/* Messaging overhead: the actor's mailbox against a bare ck_ring + ck_ec
 * channel built the same way (one SPSC ring per producer, a consumer that
 * spins briefly and then sleeps on an event count), measured in one run.
 *
 *  mailbox_async_pN: N threads submit no-ops without handles, then one sync;
 *                    ns = wall time per message. ref: bare rings, same N.
 *  mailbox_roundtrip: submit + await of one no-op, p50 (p99 in extra);
 *                    ref: a bare ping-pong over two rings with ck_ec wake-ups.
 *  mailbox_memory:   RSS growth over 10M messages (GPA_BENCH_MSGS to change).
 *
 * The reference's wake-ups are a Dekker pair like the mailbox's and use the
 * same asymmetric fences (actor/fence.h): a sender's store to the ring can
 * otherwise pass its load of `idle` (x86 store-load reordering) and the
 * sleeper never wakes; the roundtrip, whose sides sleep between blocks, hung
 * on exactly that. */
#include <ck_ec.h>
#include <ck_ring.h>
#include <gpuactor.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "actor/fence.h"
#include "actor/spin.h"
#include "bench.h"

extern const struct ck_ec_mode gpa__ec_mp; /* the library's futex ops */

static long env_long(const char *name, long dflt) {
  const char *s = getenv(name);
  long v = s ? atol(s) : 0;
  return v > 0 ? v : dflt;
}

/* ---- the bare reference channel ---------------------------------------- */
enum { RING = 1024, MAXP = 8 };
typedef struct bare {
  ck_ring_t ring[MAXP];
  ck_ring_buffer_t *buf[MAXP];
  int nprod;
  ck_ec32_t ec;
  _Atomic int idle, stop;
  _Atomic long consumed;
} bare;

static bool bare_empty(bare *b) {
  for (int i = 0; i < b->nprod; i++)
    if (ck_ring_size(&b->ring[i])) return false;
  return true;
}

static void *bare_consumer(void *arg) {
  bare *b = arg;
  for (;;) {
    long got = 0;
    void *p;
    for (int i = 0; i < b->nprod; i++)
      while (ck_ring_dequeue_spsc(&b->ring[i], b->buf[i], &p)) got++;
    if (got) {
      atomic_fetch_add_explicit(&b->consumed, got, memory_order_release);
      continue;
    }
    if (atomic_load(&b->stop)) return NULL;
    bool work = false;
    for (int i = 0; i < 2000 && !work; i++) {
      gpa__cpu_relax();
      work = !bare_empty(b) || atomic_load_explicit(&b->stop, memory_order_relaxed);
    }
    if (work) continue;
    uint32_t snap = ck_ec32_value(&b->ec);
    atomic_store(&b->idle, 1);
    gpa__fence_heavy(); /* the sleeper's side of the idle/ring pair, as in the mailbox */
    if (bare_empty(b) && !atomic_load(&b->stop)) ck_ec32_wait(&b->ec, &gpa__ec_mp, snap, NULL);
    atomic_store(&b->idle, 0);
  }
}

static void bare_send(bare *b, int i, void *p) {
  while (!ck_ring_enqueue_spsc(&b->ring[i], b->buf[i], p)) gpa__cpu_relax();
  gpa__fence_light();
  if (atomic_load_explicit(&b->idle, memory_order_relaxed)) ck_ec32_inc(&b->ec, &gpa__ec_mp);
}

typedef struct bare_prod { bare *b; int i; long n; } bare_prod;
static void *bare_producer(void *arg) {
  bare_prod *p = arg;
  for (long k = 0; k < p->n; k++) bare_send(p->b, p->i, (void *)(k + 1));
  return NULL;
}

static double bare_async_ns(int nprod, long per) {
  bare *b = calloc(1, sizeof *b);
  b->nprod = nprod;
  for (int i = 0; i < nprod; i++) {
    b->buf[i] = calloc(RING, sizeof(ck_ring_buffer_t));
    ck_ring_init(&b->ring[i], RING);
  }
  pthread_t cons, prod[MAXP];
  bare_prod pp[MAXP];
  pthread_create(&cons, NULL, bare_consumer, b);
  double t0 = gpa_bench_now_ns();
  for (int i = 0; i < nprod; i++) {
    pp[i] = (bare_prod){b, i, per};
    pthread_create(&prod[i], NULL, bare_producer, &pp[i]);
  }
  for (int i = 0; i < nprod; i++) pthread_join(prod[i], NULL);
  while (atomic_load_explicit(&b->consumed, memory_order_acquire) < per * nprod) gpa__cpu_relax();
  double ns = (gpa_bench_now_ns() - t0) / (double)(per * nprod);
  atomic_store(&b->stop, 1);
  ck_ec32_inc(&b->ec, &gpa__ec_mp);
  pthread_join(cons, NULL);
  for (int i = 0; i < nprod; i++) free(b->buf[i]);
  free(b);
  return ns;
}

/* ---- ours ----------------------------------------------------------------- */
typedef struct our_prod { gpa_queue *q; long n; } our_prod;
static void *our_producer(void *arg) {
  our_prod *p = arg;
  gpa_op_call c = {.op = "noop"};
  for (long k = 0; k < p->n; k++)
    if (gpa_submit(p->q, &c, NULL) != GPA_OK) {
      fprintf(stderr, "bench: submit failed: %s\n", gpa_last_error_message());
      exit(1);
    }
  return NULL;
}

static double our_async_ns(gpa_actor *a, int nprod, long per) {
  gpa_queue *q = gpa_actor_default_queue(a);
  pthread_t th[MAXP];
  our_prod pp[MAXP];
  double t0 = gpa_bench_now_ns();
  for (int i = 0; i < nprod; i++) {
    pp[i] = (our_prod){q, per};
    pthread_create(&th[i], NULL, our_producer, &pp[i]);
  }
  for (int i = 0; i < nprod; i++) pthread_join(th[i], NULL);
  gpa_sync_batch(q, NULL);
  return (gpa_bench_now_ns() - t0) / (double)(per * nprod);
}

static gpa_actor *bench_actor(void) {
  gpa_actor *a;
  if (gpa_actor_create(NULL, &a) != GPA_OK) {
    fprintf(stderr, "bench: actor: %s\n", gpa_last_error_message());
    exit(1);
  }
  return a;
}

void gpa_bench_mailbox_async(void) {
  long total = env_long("GPA_BENCH_MSGS", 2000000) / 4;
  gpa_actor *a = bench_actor();
  int reps = gpa_bench_reps(3);
  for (int np = 1; np <= 4; np *= 2) {
    long per = total / np;
    double ours = 1e300, ref = 1e300;
    for (int r = 0; r < reps; r++) {
      double o = our_async_ns(a, np, per), b = bare_async_ns(np, per);
      if (o < ours) ours = o;
      if (b < ref) ref = b;
    }
    char name[64], shape[64];
    snprintf(name, sizeof name, "mailbox_async_p%d", np);
    snprintf(shape, sizeof shape, "%dx%ld", np, per);
    gpa_bench_emit(&(gpa_bench_result){.name = name, .backend = gpa_actor_backend(a), .shape = shape,
                                       .ref = "bare_ck_ring_ck_ec", .ns = ours, .ref_ns = ref});
  }
  gpa_actor_destroy(a);
}

/* bare ping-pong: two rings, each side sleeps on its own event count */
typedef struct pp_side { ck_ring_t ring; ck_ring_buffer_t buf[RING]; ck_ec32_t ec; _Atomic int idle; } pp_side;
typedef struct pingpong { pp_side to_srv, to_cli; long n; } pingpong;

static void *pp_recv(pp_side *s) {
  void *p;
  for (;;) {
    for (int i = 0; i < 4000; i++) {
      if (ck_ring_dequeue_spsc(&s->ring, s->buf, &p)) return p;
      gpa__cpu_relax();
    }
    uint32_t snap = ck_ec32_value(&s->ec);
    atomic_store(&s->idle, 1);
    gpa__fence_heavy();
    if (ck_ring_dequeue_spsc(&s->ring, s->buf, &p)) {
      atomic_store(&s->idle, 0);
      return p;
    }
    ck_ec32_wait(&s->ec, &gpa__ec_mp, snap, NULL);
    atomic_store(&s->idle, 0);
  }
}
static void pp_send(pp_side *s, void *p) {
  while (!ck_ring_enqueue_spsc(&s->ring, s->buf, p)) gpa__cpu_relax();
  gpa__fence_light();
  if (atomic_load_explicit(&s->idle, memory_order_relaxed)) ck_ec32_inc(&s->ec, &gpa__ec_mp);
}
static void *pp_server(void *arg) {
  pingpong *pp = arg;
  for (long i = 0; i < pp->n; i++) pp_send(&pp->to_cli, pp_recv(&pp->to_srv));
  return NULL;
}

void gpa_bench_mailbox_roundtrip(void) {
  long n = env_long("GPA_BENCH_RT", 100000);
  double *ours = malloc(n * sizeof *ours), *ref = malloc(n * sizeof *ref);
  gpa_actor *a = bench_actor();
  gpa_queue *q = gpa_actor_default_queue(a);
  gpa_op_call c = {.op = "noop"};
  pingpong *pp = calloc(1, sizeof *pp);
  ck_ring_init(&pp->to_srv.ring, RING);
  ck_ring_init(&pp->to_cli.ring, RING);
  pp->n = n;
  pthread_t srv;
  pthread_create(&srv, NULL, pp_server, pp);
  /* Ours and the reference alternate in 20 blocks: this VM switches between
   * fast and slow modes (wake-up paths, vCPU placement) for seconds at a
   * time, and two long phases could each land in a different one. */
  enum { BLOCKS = 20 };
  for (long b = 0, i = 0, j = 0; b < BLOCKS; b++) {
    for (long end = n * (b + 1) / BLOCKS; i < end; i++) {
      gpa_handle *h;
      double t0 = gpa_bench_now_ns();
      gpa_submit(q, &c, &h);
      gpa_await(h, -1);
      ours[i] = gpa_bench_now_ns() - t0;
      gpa_handle_release(h);
    }
    for (long end = n * (b + 1) / BLOCKS; j < end; j++) {
      double t0 = gpa_bench_now_ns();
      pp_send(&pp->to_srv, (void *)(j + 1));
      pp_recv(&pp->to_cli);
      ref[j] = gpa_bench_now_ns() - t0;
    }
  }
  pthread_join(srv, NULL);
  free(pp);
  gpa_actor_destroy(a);
  gpa_bench_sort(ours, (size_t)n);
  gpa_bench_sort(ref, (size_t)n);
  char extra[160], shape[32];
  snprintf(extra, sizeof extra, "\"p99_ns\":%.1f,\"ref_p99_ns\":%.1f,\"stat\":\"p50\"", ours[n * 99 / 100],
           ref[n * 99 / 100]);
  snprintf(shape, sizeof shape, "%ld", n);
  gpa_bench_emit(&(gpa_bench_result){.name = "mailbox_roundtrip", .backend = "cpu", .shape = shape,
                                     .ref = "bare_ck_ring_pingpong", .ns = ours[n / 2], .ref_ns = ref[n / 2],
                                     .extra = extra});
  free(ours);
  free(ref);
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * 4;
}

void gpa_bench_mailbox_memory(void) {
  long n = env_long("GPA_BENCH_MEM_MSGS", 10000000);
  gpa_actor *a = bench_actor();
  gpa_queue *q = gpa_actor_default_queue(a);
  our_prod p = {q, n / 10};
  double t0 = gpa_bench_now_ns();
  our_producer(&p); /* warm: pools reach their steady size */
  gpa_sync_batch(q, NULL);
  long before = rss_kb();
  p.n = n;
  our_producer(&p);
  gpa_sync_batch(q, NULL);
  long after = rss_kb();
  double ns = (gpa_bench_now_ns() - t0) / (n + n / 10);
  char extra[128], shape[32];
  snprintf(extra, sizeof extra, "\"rss_before_kb\":%ld,\"rss_after_kb\":%ld,\"rss_growth_kb\":%ld", before, after,
           after - before);
  snprintf(shape, sizeof shape, "%ld", n);
  gpa_bench_emit(&(gpa_bench_result){.name = "mailbox_memory", .backend = gpa_actor_backend(a), .shape = shape,
                                     .ref = "none", .ns = ns, .extra = extra});
  gpa_actor_destroy(a);
}
