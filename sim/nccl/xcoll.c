/* gpa-sim NCCL subset: the steps of a group whose ranks are in several
 * processes (xproc.c has the segment). Run on the rank's stream under
 * snc_mu, like coll.c's; every wait polls (snc_x_nap_locked) and gives up
 * when the communicator is aborted or the group failed, here or in another
 * process, or a peer it waits for has gone.
 *
 * A collective of sequence number s on rank r: (1) wait until every rank
 * finished reading collective s-1 (r's area is free again); (2) stage r's
 * input in its area, its description beside, and publish posted = s+1;
 * (3) wait until every rank posted s+1; (4) check that the descriptions
 * agree (else ncclInvalidUsage on every rank, as coll.c), and compute r's
 * own result from the staged inputs, in rank order and the LOCAL
 * transport's rounding (coll.c's helpers), so every rank's result is
 * bit-identical to the in-process one's; in-place forms are safe since the
 * inputs were copied; (5) publish read = s+1. A rank that is done with s
 * never needs its peers again for it, so one that leaves after its last
 * collective holds nobody up.
 *
 * A send stages its data in the sender's send area and returns once the
 * area is free (one send in flight per rank: a second waits until the
 * first is received); a recv waits until its peer's area holds a send to
 * it, copies it and frees the area. Sends from one rank to a peer arrive
 * in order. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "xseg.h"

/* rank q is gone from the group (its communicator freed) while s needs it:
 * the group fails for everyone, naming it */
static bool left(step *s, int q) {
  if (atomic_load(&s->c->g->x->r[q].state) != X_LEFT) return false;
  char why[160];
  snprintf(why, sizeof why, "its communicator was destroyed before it took part in %s", snc_kind_names[s->p.kind]);
  snc_fail_group_locked(s->c->g, q, why);
  snc_give_up(s);
  return true;
}

/* Waits until every rank's counter (read or posted) reaches v. */
static bool wait_all(step *s, bool posted, uint64_t v) {
  group *g = s->c->g;
  long nap = 5000;
  for (;;) {
    int behind = -1;
    for (int q = 0; q < g->nranks && behind < 0; q++) {
      xrank *xr = &g->x->r[q];
      if ((posted ? atomic_load(&xr->posted) : atomic_load(&xr->read)) < v) behind = q;
    }
    if (behind < 0) return true;
    if (snc_give_up(s) || left(s, behind)) return false;
    snc_x_nap_locked(&nap);
  }
}

/* Makes rank's area `which` real up to bytes (a full /dev/shm: an error
 * here rather than SIGBUS at the copy). */
static bool stage_room(step *s, int which, size_t bytes) {
  group *g = s->c->g;
  int me = s->c->rank;
  if (bytes <= g->xalloc[me][which]) return true;
  off_t off = (off_t)((size_t)(xarea(g, me, which) - g->xdata) + XDATA_OFF);
  int e = posix_fallocate(g->xfd, off, (off_t)bytes);
  if (e) {
    char why[200];
    snprintf(why, sizeof why, "%s: staging %zu bytes in /dev/shm: %s", snc_kind_names[s->p.kind], bytes, strerror(e));
    snc_set_async(s->c, ncclSystemError, why);
    snc_fail_group_locked(g, me, why);
    return false;
  }
  g->xalloc[me][which] = bytes;
  return true;
}

static size_t staged_bytes(const post *p, int me, int n) {
  size_t blk = p->count * snc_dsize(p->dtype);
  if (p->kind == K_REDUCE_SCATTER) return (size_t)n * blk;
  if (p->kind == K_BROADCAST) return me == p->root ? blk : 0;
  return blk;
}

/* Step (4): this rank's result from every rank's staged input. */
static ncclResult_t compute_mine(step *s, char *why, size_t cap) {
  group *g = s->c->g;
  int n = g->nranks, me = s->c->rank;
  post px[MAXR];
  for (int q = 0; q < n; q++) {
    xrank *xr = &g->x->r[q];
    px[q] = (post){xr->desc.kind, xr->desc.dtype, xr->desc.op, xr->desc.root, (size_t)xr->desc.count,
                   xarea(g, q, 0), NULL};
  }
  if (snc_mismatch(px, n, why, cap)) return ncclInvalidUsage;
  const post *o = &s->p;
  size_t cnt = o->count, blk = cnt * snc_dsize(o->dtype);
  if (!cnt) return ncclSuccess;
  char *recv = o->recv;
  if (o->kind == K_ALLGATHER) {
    for (int q = 0; q < n; q++) memcpy(recv + (size_t)q * blk, xarea(g, q, 0), blk);
    return ncclSuccess;
  }
  if (o->kind == K_BROADCAST) {
    memcpy(recv, xarea(g, o->root, 0), blk);
    return ncclSuccess;
  }
  void *acc = malloc(cnt * 4);
  if (!acc) {
    snprintf(why, cap, "out of host memory (%zu bytes)", cnt * 4);
    return ncclSystemError;
  }
  snc_reduce_block(px, n, o->kind == K_REDUCE_SCATTER ? (size_t)me * blk : 0, acc);
  snc_store(o->dtype, recv, acc, cnt, o->op == ncclAvg ? 1.0f / (float)n : 1.0f);
  free(acc);
  return ncclSuccess;
}

void snc_x_run_collective(step *s) {
  ncclComm_t c = s->c;
  group *g = c->g;
  int me = c->rank;
  if (!wait_all(s, false, s->seq)) return; /* (1) */
  size_t bytes = staged_bytes(&s->p, me, g->nranks);
  if (!stage_room(s, 0, bytes)) return; /* (2) */
  if (bytes) memcpy(xarea(g, me, 0), s->p.send, bytes);
  xrank *mine = &g->x->r[me];
  mine->desc.kind = s->p.kind;
  mine->desc.dtype = s->p.dtype;
  mine->desc.op = s->p.op;
  mine->desc.root = s->p.root;
  mine->desc.count = s->p.count;
  atomic_store(&mine->posted, s->seq + 1);
  if (!wait_all(s, true, s->seq + 1)) return; /* (3) */
  char why[200];
  ncclResult_t r = compute_mine(s, why, sizeof why); /* (4) */
  if (r != ncclSuccess) snc_set_async(c, r, why);
  atomic_store(&mine->read, s->seq + 1); /* (5) */
}

void snc_x_run_p2p(step *s) {
  ncclComm_t c = s->c;
  group *g = c->g;
  int me = c->rank, peer = s->peer;
  size_t bytes = s->p.count * snc_dsize(s->p.dtype);
  long nap = 5000;
  if (s->p.kind == K_SEND) {
    xrank *mine = &g->x->r[me];
    /* the area holds an earlier send until its receiver took it */
    while (atomic_load(&mine->taken) != atomic_load(&mine->sent)) {
      if (snc_give_up(s) || left(s, mine->to)) return;
      snc_x_nap_locked(&nap);
    }
    if (!stage_room(s, 1, bytes)) return;
    if (bytes) memcpy(xarea(g, me, 1), s->p.send, bytes);
    mine->to = peer;
    mine->dtype = s->p.dtype;
    mine->bytes = bytes;
    atomic_fetch_add(&mine->sent, 1);
    return;
  }
  xrank *from = &g->x->r[peer];
  while (!(atomic_load(&from->sent) > atomic_load(&from->taken) && from->to == me)) {
    if (snc_give_up(s) || left(s, peer)) return;
    snc_x_nap_locked(&nap);
  }
  if (from->bytes != bytes || from->dtype != s->p.dtype)
    snc_set_async(c, ncclInvalidUsage, "ncclRecv: the matching ncclSend has another count or dtype");
  else if (bytes) memcpy(s->p.recv, xarea(g, peer, 1), bytes);
  atomic_fetch_add(&from->taken, 1);
}
