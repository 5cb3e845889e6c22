/* The LOCAL engine: every rank an actor of this process, so every rank's
 * buffers are addressable here. Each rank's collectives wait in its FIFO;
 * when every rank has one at its head, the rank that came last computes
 * the whole collective (all ranks' results, in rank order: bit-identical
 * everywhere) on its own actor thread and finishes them all. Sends and
 * receives match per (source, destination) pair in order. One process-wide
 * lock covers every group: its hold times are the copies and reductions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_id.h"
#include "comm/comm_internal.h"

typedef struct fifo {
  gpa__coll *head, *tail;
} fifo;

typedef struct group {
  struct group *next;
  unsigned char token[GPA__COMM_TOKEN_BYTES];
  int32_t size, refs;
  gpa_comm **comm; /* by rank; NULL until it joins */
  fifo *coll;      /* by rank */
  fifo *sends;     /* [src * size + dst] */
  fifo *recvs;     /* [src * size + dst], posted by dst */
} group;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static group *groups;

/* actors to wake once the lock is dropped, each with the holds its ops'
 * completions took: arrays of the group's size (each rank one actor) */
typedef struct wakes {
  gpa_actor **a;
  uint32_t *holds;
  int n;
} wakes;

static void wake_add(wakes *w, gpa_actor *a) {
  for (int i = 0; i < w->n; i++)
    if (w->a[i] == a) {
      w->holds[i]++;
      return;
    }
  w->a[w->n] = a;
  w->holds[w->n++] = 1;
}

static void wake_all(wakes *w) {
  for (int i = 0; i < w->n; i++) gpa__coll_wake(w->a[i], w->holds[i]);
}

static void push(fifo *f, gpa__coll *op) {
  op->next = NULL;
  if (f->tail) f->tail->next = op;
  else f->head = op;
  f->tail = op;
}

static gpa__coll *pop(fifo *f) {
  gpa__coll *op = f->head;
  f->head = op->next;
  if (!f->head) f->tail = NULL;
  op->next = NULL;
  return op;
}

static bool unlink_op(fifo *f, gpa__coll *op) {
  gpa__coll *prev = NULL;
  for (gpa__coll *x = f->head; x; prev = x, x = x->next)
    if (x == op) {
      if (prev) prev->next = x->next;
      else f->head = x->next;
      if (f->tail == x) f->tail = prev;
      x->next = NULL;
      return true;
    }
  return false;
}

static void finish(wakes *w, gpa__coll *op, gpa_status st, const char *why) {
  wake_add(w, gpa__coll_done_held(op, st, why));
}

static const char *const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "send", "recv"};

static int describe(char *buf, size_t cap, const gpa__coll *op) {
  return snprintf(buf, cap, "rank %d: %s %s x %llu op %d root %d", op->c->rank, names[op->kind],
                  gpa_dtype_name(op->dtype), (unsigned long long)op->count, op->op, op->peer);
}

static bool same(const gpa__coll *x, const gpa__coll *y) {
  if (x->kind != y->kind || x->dtype != y->dtype || x->count != y->count) return false;
  if (x->kind == GPA__COLL_ALLREDUCE || x->kind == GPA__COLL_REDUCE_SCATTER) return x->op == y->op;
  if (x->kind == GPA__COLL_BROADCAST) return x->peer == y->peer;
  return true;
}

/* All ranks' parts of one collective: compute every result. */
static gpa_status compute(gpa__coll **ops, int32_t n, char *err, size_t cap) {
  gpa__coll *o = ops[0];
  uint64_t es = gpa_dtype_size(o->dtype), cnt = o->count, blk = cnt * es;
  if (!cnt) return GPA_OK; /* nothing moves (and memcpy may not see NULL) */
  switch (o->kind) {
    case GPA__COLL_ALLREDUCE:
    case GPA__COLL_REDUCE_SCATTER: {
      bool rs = o->kind == GPA__COLL_REDUCE_SCATTER;
      float scale = o->op == GPA_REDUCE_AVG ? 1.0f / (float)n : 1.0f;
      int op = o->op == GPA_REDUCE_AVG ? GPA_REDUCE_SUM : o->op;
      void *acc = cnt ? malloc(cnt * 4) : NULL;
      if (cnt && !acc) {
        snprintf(err, cap, "%s: out of host memory for %llu elements", names[o->kind], (unsigned long long)cnt);
        return GPA_ENOMEM;
      }
      /* allreduce: one block, every rank gets it; reduce_scatter: block r to rank r */
      for (int32_t b = 0; b < (rs ? n : 1); b++) {
        uint64_t off = rs ? (uint64_t)b * blk : 0;
        gpa__comm_acc_load(o->dtype, acc, (const char *)ops[0]->send + off, cnt);
        for (int32_t r = 1; r < n; r++) gpa__comm_acc_combine(op, o->dtype, acc, (const char *)ops[r]->send + off, cnt);
        if (rs) gpa__comm_acc_store(o->dtype, ops[b]->recv, acc, cnt, scale);
        else
          for (int32_t r = 0; r < n; r++) gpa__comm_acc_store(o->dtype, ops[r]->recv, acc, cnt, scale);
      }
      free(acc);
      return GPA_OK;
    }
    case GPA__COLL_ALLGATHER:
      for (int32_t d = 0; d < n; d++)
        for (int32_t r = 0; r < n; r++) {
          char *dst = (char *)ops[d]->recv + (uint64_t)r * blk;
          if (dst != ops[r]->send) memmove(dst, ops[r]->send, blk);
        }
      return GPA_OK;
    case GPA__COLL_BROADCAST: {
      const void *src = ops[o->peer]->send;
      for (int32_t r = 0; r < n; r++)
        if (r != o->peer) memcpy(ops[r]->recv, src, blk);
      if (ops[o->peer]->recv != src) memcpy(ops[o->peer]->recv, src, blk);
      return GPA_OK;
    }
    default: return GPA_EINTERNAL;
  }
}

static void match_colls(group *g, wakes *w) {
  gpa__coll *ops[g->size];
  for (;;) {
    for (int32_t r = 0; r < g->size; r++)
      if (!g->coll[r].head) return;
    for (int32_t r = 0; r < g->size; r++) ops[r] = pop(&g->coll[r]);
    char err[GPA__ERR_MAX] = "";
    gpa_status st = GPA_OK;
    for (int32_t r = 1; r < g->size && st == GPA_OK; r++)
      if (!same(ops[0], ops[r])) {
        int k = snprintf(err, sizeof err, "the ranks issued different collectives: ");
        k += describe(err + k, sizeof err - (size_t)k, ops[0]);
        k += snprintf(err + k, sizeof err - (size_t)k, "; ");
        describe(err + k, sizeof err - (size_t)k, ops[r]);
        st = GPA_EINVAL;
      }
    if (st == GPA_OK) st = compute(ops, g->size, err, sizeof err);
    for (int32_t r = 0; r < g->size; r++) finish(w, ops[r], st, err);
  }
}

static void match_p2p(group *g, int32_t src, int32_t dst, wakes *w) {
  fifo *s = &g->sends[src * g->size + dst], *r = &g->recvs[src * g->size + dst];
  while (s->head && r->head) {
    gpa__coll *x = pop(s), *y = pop(r);
    gpa_status st = GPA_OK;
    char err[GPA__ERR_MAX] = "";
    if (x->dtype != y->dtype || x->count != y->count) {
      snprintf(err, sizeof err, "send from rank %d has %s x %llu, the recv on rank %d expects %s x %llu", src,
               gpa_dtype_name(x->dtype), (unsigned long long)x->count, dst, gpa_dtype_name(y->dtype),
               (unsigned long long)y->count);
      st = GPA_EINVAL;
    } else {
      memcpy(y->recv, x->send, x->count * gpa_dtype_size(x->dtype));
    }
    finish(w, x, st, err);
    finish(w, y, st, err);
  }
}

static gpa_status start(gpa_comm *c, gpa__coll *op, char *err, size_t cap) {
  group *g = c->es;
  gpa_actor *wa[g->size];
  uint32_t wh[g->size];
  wakes w = {wa, wh, 0};
  pthread_mutex_lock(&lock);
  if (op->kind == GPA__COLL_SEND || op->kind == GPA__COLL_RECV) {
    int32_t src = op->kind == GPA__COLL_SEND ? c->rank : op->peer, dst = op->kind == GPA__COLL_SEND ? op->peer : c->rank;
    push(op->kind == GPA__COLL_SEND ? &g->sends[src * g->size + dst] : &g->recvs[src * g->size + dst], op);
    match_p2p(g, src, dst, &w);
  } else {
    push(&g->coll[c->rank], op);
    match_colls(g, &w);
  }
  pthread_mutex_unlock(&lock);
  wake_all(&w);
  (void)err;
  (void)cap;
  return GPA_OK;
}

static void cancel(gpa_comm *c, gpa__coll *op) {
  group *g = c->es;
  pthread_mutex_lock(&lock);
  if (!unlink_op(&g->coll[c->rank], op))
    for (int32_t p = 0; p < g->size; p++)
      if (unlink_op(&g->sends[c->rank * g->size + p], op) || unlink_op(&g->recvs[p * g->size + c->rank], op)) break;
  pthread_mutex_unlock(&lock);
}

static void fail_fifo(fifo *f, gpa_status st, const char *why, wakes *w) {
  while (f->head) finish(w, pop(f), st, why);
}

/* Every rank waits on the others: the whole group fails. */
static void abort_group(gpa_comm *c, gpa_status st, const char *why) {
  group *g = c->es;
  gpa_actor *wa[g->size];
  uint32_t wh[g->size];
  wakes w = {wa, wh, 0};
  pthread_mutex_lock(&lock);
  for (int32_t r = 0; r < g->size; r++) {
    if (g->comm[r]) gpa__comm_fail(g->comm[r], st, why);
    fail_fifo(&g->coll[r], st, why, &w);
  }
  for (int32_t i = 0; i < g->size * g->size; i++) {
    fail_fifo(&g->sends[i], st, why, &w);
    fail_fifo(&g->recvs[i], st, why, &w);
  }
  pthread_mutex_unlock(&lock);
  wake_all(&w);
}

static void group_free(group *g) {
  free(g->comm);
  free(g->coll);
  free(g->sends);
  free(g->recvs);
  free(g);
}

gpa_status gpa__comm_local_join(gpa_comm *c, const gpa_comm_id *id) {
  const unsigned char *token = id->bytes + GPA__COMM_TOKEN_OFF;
  pthread_mutex_lock(&lock);
  group *g = groups;
  while (g && memcmp(g->token, token, GPA__COMM_TOKEN_BYTES)) g = g->next;
  gpa_status st = GPA_OK;
  if (!g) {
    g = calloc(1, sizeof *g);
    size_t n = (size_t)c->size;
    if (g) {
      g->comm = calloc(n, sizeof *g->comm);
      g->coll = calloc(n, sizeof *g->coll);
      g->sends = calloc(n * n, sizeof *g->sends);
      g->recvs = calloc(n * n, sizeof *g->recvs);
    }
    if (!g || !g->comm || !g->coll || !g->sends || !g->recvs) {
      if (g) group_free(g);
      pthread_mutex_unlock(&lock);
      return gpa__fail(GPA_ENOMEM, "gpa_comm_init: out of memory for %d ranks", c->size);
    }
    memcpy(g->token, token, GPA__COMM_TOKEN_BYTES);
    g->size = c->size;
    g->next = groups;
    groups = g;
  } else if (g->size != c->size) {
    st = gpa__fail(GPA_EINVAL, "gpa_comm_init: size %d, but the ranks that joined this id before said %d", c->size,
                   g->size);
  } else if (g->comm[c->rank]) {
    st = gpa__fail(GPA_EINVAL, "gpa_comm_init: rank %d of this id is already taken", c->rank);
  }
  if (st == GPA_OK) {
    g->comm[c->rank] = c;
    g->refs++;
    c->es = g;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

static void destroy(gpa_comm *c) {
  group *g = c->es;
  pthread_mutex_lock(&lock);
  g->comm[c->rank] = NULL;
  if (--g->refs == 0) {
    for (group **pp = &groups; *pp; pp = &(*pp)->next)
      if (*pp == g) {
        *pp = g->next;
        break;
      }
    group_free(g);
  }
  pthread_mutex_unlock(&lock);
}

const gpa__comm_engine gpa__comm_local = {
    .name = "local", .start = start, .cancel = cancel, .abort = abort_group, .destroy = destroy};
