/* gpa-sim NCCL subset: the collectives (design in nccl.c): argument
 * checks at the call, a step per call on the stream, the rendezvous of the
 * ranks in their group's slot, and the computation of every rank's result
 * by the last rank to come, in the LOCAL transport's order and rounding. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpa_sim_hooks.h"
#include "internal.h"
#include "kernels/host/bf16.h"
#include "kernels/host/f16.h"

/* ---- reductions (the LOCAL transport's order and rounding: comm/reduce.c) ---- */

size_t snc_dsize(int dt) { return dt == ncclFloat16 || dt == ncclBfloat16 ? 2 : 4; }

static float widen(int dt, const void *src, size_t i) {
  if (dt == ncclFloat32) return ((const float *)src)[i];
  if (dt == ncclFloat16) return gpa__f16_to_f32(((const uint16_t *)src)[i]);
  return gpa__bf16_to_f32(((const uint16_t *)src)[i]);
}

static float fop(int op, float a, float b) {
  if (op == ncclMax) return a != a ? a : b != b ? b : a > b ? a : b; /* NaN wins */
  if (op == ncclMin) return a != a ? a : b != b ? b : a < b ? a : b;
  return a + b;
}

static int32_t iop(int op, int32_t a, int32_t b) {
  if (op == ncclMax) return a > b ? a : b;
  if (op == ncclMin) return a < b ? a : b;
  return (int32_t)((uint32_t)a + (uint32_t)b);
}

/* acc (f32, or i32 for i32) = op over the ranks' src + off, in rank order */
void snc_reduce_block(const post *p, int n, size_t off, void *acc) {
  const post *o = &p[0];
  size_t cnt = o->count;
  int op = o->op == ncclAvg ? ncclSum : o->op;
  for (int r = 0; r < n; r++) {
    const char *src = (const char *)p[r].send + off;
    for (size_t i = 0; i < cnt; i++) {
      if (o->dtype == ncclInt32) {
        int32_t v = ((const int32_t *)src)[i];
        ((int32_t *)acc)[i] = r ? iop(op, ((int32_t *)acc)[i], v) : v;
      } else {
        float v = widen(o->dtype, src, i);
        ((float *)acc)[i] = r ? fop(op, ((float *)acc)[i], v) : v;
      }
    }
  }
}

void snc_store(int dt, void *dst, const void *acc, size_t cnt, float scale) {
  if (dt == ncclInt32 || (dt == ncclFloat32 && scale == 1.0f)) {
    memmove(dst, acc, cnt * 4);
    return;
  }
  const float *a = acc;
  for (size_t i = 0; i < cnt; i++) {
    float v = a[i] * scale;
    if (dt == ncclFloat32) ((float *)dst)[i] = v;
    else if (dt == ncclFloat16) ((uint16_t *)dst)[i] = gpa__f32_to_f16(v);
    else ((uint16_t *)dst)[i] = gpa__f32_to_bf16(v);
  }
}

static bool same(const post *x, const post *y) {
  if (x->kind != y->kind || x->dtype != y->dtype || x->count != y->count) return false;
  if (x->kind == K_ALLREDUCE || x->kind == K_REDUCE_SCATTER) return x->op == y->op;
  return x->kind != K_BROADCAST || x->root == y->root;
}

bool snc_mismatch(const post *p, int n, char *why, size_t cap) {
  for (int r = 1; r < n; r++)
    if (!same(&p[0], &p[r])) {
      snprintf(why, cap, "the ranks issued different collectives (rank 0: %s count %zu dtype %d; rank %d: %s count %zu dtype %d)",
               snc_kind_names[p[0].kind], p[0].count, p[0].dtype, r, snc_kind_names[p[r].kind], p[r].count, p[r].dtype);
      return true;
    }
  return false;
}

/* Every rank posted: compute every rank's result (under snc_mu). Inputs go
 * to temporaries first, so in-place forms need no care. */
static ncclResult_t compute(const post *p, int n, char *why, size_t cap) {
  if (snc_mismatch(p, n, why, cap)) return ncclInvalidUsage;
  const post *o = &p[0];
  size_t cnt = o->count, blk = cnt * snc_dsize(o->dtype);
  if (!cnt) return ncclSuccess;
  bool reduces = o->kind == K_ALLREDUCE || o->kind == K_REDUCE_SCATTER;
  size_t tmp_bytes = reduces ? (o->kind == K_REDUCE_SCATTER ? (size_t)n : 1) * cnt * 4
                             : (o->kind == K_ALLGATHER ? (size_t)n : 1) * blk;
  char *tmp = malloc(tmp_bytes);
  if (!tmp) {
    snprintf(why, cap, "out of host memory (%zu bytes)", tmp_bytes);
    return ncclSystemError;
  }
  float scale = o->op == ncclAvg ? 1.0f / (float)n : 1.0f;
  switch (o->kind) {
    case K_ALLREDUCE:
      snc_reduce_block(p, n, 0, tmp);
      for (int r = 0; r < n; r++) snc_store(o->dtype, p[r].recv, tmp, cnt, scale);
      break;
    case K_REDUCE_SCATTER:
      for (int b = 0; b < n; b++) snc_reduce_block(p, n, (size_t)b * blk, tmp + (size_t)b * cnt * 4);
      for (int b = 0; b < n; b++) snc_store(o->dtype, p[b].recv, tmp + (size_t)b * cnt * 4, cnt, scale);
      break;
    case K_ALLGATHER:
      for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * blk, p[r].send, blk);
      for (int r = 0; r < n; r++) memcpy(p[r].recv, tmp, (size_t)n * blk);
      break;
    default: /* broadcast */
      memcpy(tmp, p[o->root].send, blk);
      for (int r = 0; r < n; r++) memcpy(p[r].recv, tmp, blk);
      break;
  }
  free(tmp);
  return ncclSuccess;
}

/* ---- steps on the streams ---------------------------------------------------- */

static void step_free(void *arg) {
  step *s = arg;
  pthread_mutex_lock(&snc_mu);
  snc_unref_locked(s->c);
  pthread_mutex_unlock(&snc_mu);
  free(s);
}

void snc_set_async(ncclComm_t c, ncclResult_t r, const char *why) {
  if (!c->async) c->async = r;
  snprintf(c->last, sizeof c->last, "%s", why);
}

/* The group failed or c was aborted: give up (under snc_mu). */
bool snc_give_up(step *s) {
  ncclComm_t c = s->c;
  if (c->aborted) {
    snc_set_async(c, ncclSystemError, "the communicator was aborted");
    return true;
  }
  if (c->g->x) snc_x_sync_locked(c->g); /* a failure in another process */
  if (c->g->failed) {
    char why[256];
    snprintf(why, sizeof why, "%s: a peer failed: %s", snc_kind_names[s->p.kind], c->g->fail_why);
    snc_set_async(c, ncclRemoteError, why);
    return true;
  }
  return false;
}

/* The collective faults injected at the call (a hung rank, an
 * asynchronous failure), for groups in one process and across processes
 * alike. True: s was one of them and is done. */
static bool injected_fault(step *s) {
  ncclComm_t c = s->c;
  if (s->hang) { /* a hung rank: never posts, waits until aborted */
    while (!c->aborted) pthread_cond_wait(&snc_cv, &snc_mu);
    snc_give_up(s);
    return true;
  }
  if (s->async_fault) {
    char why[160];
    snprintf(why, sizeof why, "%s: injected asynchronous failure on rank %d", snc_kind_names[s->p.kind], c->rank);
    snc_set_async(c, ncclSystemError, why);
    snc_fail_group_locked(c->g, c->rank, why);
    return true;
  }
  return false;
}

static void run_collective(step *s) {
  ncclComm_t c = s->c;
  group *g = c->g;
  slot *sl = &g->s[s->seq % SLOTS];
  /* the slot is free once every rank left its previous collective */
  while (sl->posted && sl->seq != s->seq && !snc_give_up(s)) pthread_cond_wait(&snc_cv, &snc_mu);
  if (c->aborted || g->failed) {
    snc_give_up(s);
    return;
  }
  if (!sl->posted) {
    memset(sl, 0, sizeof *sl);
    sl->seq = s->seq;
  }
  sl->p[c->rank] = s->p;
  sl->has[c->rank] = true;
  if (++sl->posted == c->nranks) {
    sl->result = compute(sl->p, c->nranks, sl->why, sizeof sl->why);
    sl->done = true;
    pthread_cond_broadcast(&snc_cv);
  }
  while (!sl->done && !snc_give_up(s)) pthread_cond_wait(&snc_cv, &snc_mu);
  if (sl->done && sl->result != ncclSuccess) snc_set_async(c, sl->result, sl->why);
  if (sl->done || !sl->has[c->rank]) {
    sl->has[c->rank] = false;
    if (--sl->posted == 0) pthread_cond_broadcast(&snc_cv);
  }
}

static void run_p2p(step *s) {
  ncclComm_t c = s->c;
  group *g = c->g;
  size_t bytes = s->p.count * snc_dsize(s->p.dtype);
  if (s->p.kind == K_SEND) {
    msg *m = malloc(sizeof *m + bytes);
    if (!m) {
      snc_set_async(c, ncclSystemError, "ncclSend: out of host memory");
      return;
    }
    m->next = NULL;
    m->bytes = bytes;
    m->dtype = s->p.dtype;
    if (bytes) memcpy(m->data, s->p.send, bytes);
    msg **tail = &g->box_tail[c->rank][s->peer];
    if (*tail) (*tail)->next = m;
    else g->box[c->rank][s->peer] = m;
    *tail = m;
    pthread_cond_broadcast(&snc_cv);
    return;
  }
  msg **head = &g->box[s->peer][c->rank];
  while (!*head && !snc_give_up(s)) pthread_cond_wait(&snc_cv, &snc_mu);
  msg *m = *head;
  if (!m) return;
  if (!(*head = m->next)) g->box_tail[s->peer][c->rank] = NULL;
  if (m->bytes != bytes || m->dtype != s->p.dtype)
    snc_set_async(c, ncclInvalidUsage, "ncclRecv: the matching ncclSend has another count or dtype");
  else if (bytes) memcpy(s->p.recv, m->data, bytes);
  free(m);
}

static int step_run(void *arg, char *why, size_t n) {
  (void)why;
  (void)n;
  step *s = arg;
  pthread_mutex_lock(&snc_mu);
  if (!snc_give_up(s)) {
    bool p2p = s->p.kind == K_SEND || s->p.kind == K_RECV;
    if (p2p) s->c->g->cross ? snc_x_run_p2p(s) : run_p2p(s);
    else if (!injected_fault(s)) s->c->g->cross ? snc_x_run_collective(s) : run_collective(s);
  }
  pthread_mutex_unlock(&snc_mu);
  return 0; /* NCCL's failures are the communicator's, never the context's */
}

static ncclResult_t check_buf(ncclComm_t c, const char *api, const char *what, const void *p, size_t bytes) {
  if (!bytes) return ncclSuccess;
  char why[160];
  if (!p) return snc_fail(c, ncclInvalidArgument, "%s: NULL buffer", api);
  if (!gpa_sim__device_range_ok((CUdeviceptr)(uintptr_t)p, bytes, why, sizeof why)) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %s buffer: %s", api, what, why);
    return snc_fail(c, ncclInvalidArgument, "%s", msg);
  }
  return ncclSuccess;
}

static ncclResult_t enqueue(ncclComm_t c, post p, int peer, cudaStream_t stream) {
  const char *api = snc_kind_names[p.kind];
  if (!c) return snc_fail(NULL, ncclInvalidArgument, "%s: NULL communicator", api);
  if (p.dtype != ncclFloat32 && p.dtype != ncclFloat16 && p.dtype != ncclBfloat16 && p.dtype != ncclInt32)
    return snc_fail(c, ncclInvalidArgument, "%s: datatype %d (the simulator has f32, f16, bf16, i32)", api, p.dtype);
  bool reduces = p.kind == K_ALLREDUCE || p.kind == K_REDUCE_SCATTER;
  if (reduces && (p.op < ncclSum || p.op > ncclAvg || p.op == ncclProd))
    return snc_fail(c, ncclInvalidArgument, "%s: reduction op %d (the simulator has sum, max, min, avg)", api, p.op);
  if (reduces && p.op == ncclAvg && p.dtype == ncclInt32)
    return snc_fail(c, ncclInvalidArgument, "%s: avg of int32", api);
  if ((p.kind == K_BROADCAST && (p.root < 0 || p.root >= c->nranks)) ||
      ((p.kind == K_SEND || p.kind == K_RECV) && (peer < 0 || peer >= c->nranks || peer == c->rank)))
    return snc_fail(c, ncclInvalidArgument, "%s: root or peer %d out of range", api, p.kind == K_BROADCAST ? p.root : peer);
  size_t blk = p.count * snc_dsize(p.dtype), n = (size_t)c->nranks;
  size_t sb = p.kind == K_RECV ? 0 : p.kind == K_REDUCE_SCATTER ? n * blk : blk;
  size_t rb = p.kind == K_SEND ? 0 : p.kind == K_ALLGATHER ? n * blk : blk;
  if (p.kind == K_BROADCAST && c->rank != p.root) sb = 0; /* read on the root only */
  ncclResult_t r;
  if ((r = check_buf(c, api, "send", p.send, sb)) || (r = check_buf(c, api, "recv", p.recv, rb))) return r;
  if (snc_take(&snc_f_call)) return snc_fail(c, ncclSystemError, "%s: injected failure at the call", api);
  step *s = calloc(1, sizeof *s);
  if (!s) return snc_fail(c, ncclSystemError, "%s: out of host memory", api);
  s->p = p;
  s->peer = peer;
  s->async_fault = p.kind != K_SEND && p.kind != K_RECV && snc_take(&snc_f_async);
  s->hang = !s->async_fault && p.kind != K_SEND && p.kind != K_RECV && snc_take(&snc_f_hang);
  pthread_mutex_lock(&snc_mu);
  if (c->user_gone) {
    pthread_mutex_unlock(&snc_mu);
    free(s);
    return snc_fail(NULL, ncclInvalidUsage, "%s: the communicator was destroyed", api);
  }
  if (c->nonblocking && snc_init_state_locked(c) == ncclInProgress) {
    pthread_mutex_unlock(&snc_mu);
    free(s);
    return snc_fail(c, ncclInvalidUsage, "%s: the communicator's init is still in progress", api);
  }
  /* g->cross is settled once the init is done (it is, here) */
  if (c->g->cross && (r = snc_x_check_size(c, api, p.kind == K_RECV ? rb : sb, p.kind == K_SEND || p.kind == K_RECV))) {
    pthread_mutex_unlock(&snc_mu);
    free(s);
    return r;
  }
  s->c = c;
  c->refs++;
  if (p.kind != K_SEND && p.kind != K_RECV) s->seq = c->seq++;
  pthread_mutex_unlock(&snc_mu);
  CUresult cr = gpa_sim__enqueue((CUstream)stream, step_run, s, step_free);
  if (cr != CUDA_SUCCESS) {
    /* gpa_sim__enqueue frees nothing on failure: undo the reference */
    step_free(s);
    return snc_fail(c, ncclUnhandledCudaError, "%s: the stream refused the work (CUresult %d)", api, (int)cr);
  }
  if (!c->nonblocking) return ncclSuccess;
  /* as NCCL's non-blocking calls may: "still enqueuing", for one look */
  pthread_mutex_lock(&snc_mu);
  c->busy_polls = 1;
  pthread_mutex_unlock(&snc_mu);
  return ncclInProgress;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                                  ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_ALLREDUCE, dt, op, 0, count, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt,
                                      ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_REDUCE_SCATTER, dt, op, 0, recvcount, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t dt, ncclComm_t c,
                                  cudaStream_t st) {
  return enqueue(c, (post){K_ALLGATHER, dt, 0, 0, sendcount, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                                  ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_BROADCAST, dt, 0, root, count, send, recv}, 0, st);
}

EXPORT ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t c,
                             cudaStream_t st) {
  return enqueue(c, (post){K_SEND, dt, 0, 0, count, send, NULL}, peer, st);
}

EXPORT ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t st) {
  return enqueue(c, (post){K_RECV, dt, 0, 0, count, NULL, recv}, peer, st);
}
