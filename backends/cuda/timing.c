/* Device time of the CUDA backend's messages, from events (docs/cuda.md,
 * "Device time").
 *
 * Untimed work (no profiler) is timed per group: the group's first record
 * records its start event, the last one its end event at flush, and carries
 * the group's time (a batch's total stays right). A group is what the actor
 * enqueued on a stream in one pass of its loop: when messages come one at a
 * time (a trainer's eager step), a group per message.
 *
 * Timed work (a profiler on: gpa__work.timed) wants each op's own time. An
 * event before and after every op cost two cuEventRecord calls per op (on an
 * H100 5.25 against 2.66 us per launch of a bare loop; the main job ran
 * 11-21% slower profiled). Consecutive timed ops of a stream share their
 * boundary: op i's end event is op i+1's start event, N+1 records for N ops.
 * Groups share theirs the same way (a group's end starts the next group),
 * so N groups of untimed work record N+1 events, not 2N.
 *
 * A boundary is shared only while the stream is still busy before it (the
 * end event not yet reached, one cuEventQuery): had the stream gone idle,
 * op i+1's time would include the host's time between the two ops. An own
 * start event is not exact either on an idle stream (it includes the host's
 * time from the record to the op's launch): the shared one includes at most
 * the host's time from that query to the launch, the same kind of error.
 * Anything else enqueued on the stream (an untimed record, a copy without a
 * message, an external event, an op that failed after enqueuing part of its
 * work) ends the chain: the next timed op records its own start.
 *
 * Ownership: each record owns its two events, from creation to destruction;
 * a borrower only names its lender's end event (start). When either of the
 * two is recycled first the link is undone there: a lender recycled first
 * swaps its end event for the borrower's unused ev0 (so the borrower owns
 * its start from then on); a borrower recycled first only unlinks. Records
 * of a stream complete in order, except after a sticky error (the poll and
 * a late host function may race): either order is safe, and every event is
 * owned by exactly one record at all times. Actor thread only. */
#include "backends/cuda/timing.h"

CUresult gpa__cu_start_event(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r) {
  gpa__cu_rec *p = q->share;
  q->share = NULL; /* whatever r enqueues comes after p's end */
  if (!r->w.timed && q->open) return CUDA_SUCCESS; /* the group's first one has the start */
  if (p && C->cu.cuEventQuery(p->ev1) == CUDA_ERROR_NOT_READY) {
    r->start = p->ev1;
    r->lender = p;
    p->borrower = r;
    return CUDA_SUCCESS;
  }
  r->start = r->ev0;
  return C->cu.cuEventRecord(r->ev0, q->s);
}

CUresult gpa__cu_end_event(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r) {
  q->share = NULL;
  if (!r->w.timed) return CUDA_SUCCESS;
  CUresult e = C->cu.cuEventRecord(r->ev1, q->s);
  if (e == CUDA_SUCCESS) q->share = r;
  return e;
}

CUresult gpa__cu_group_timing(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *first, gpa__cu_rec *last) {
  if (last->w.timed) return CUDA_SUCCESS; /* its own events */
  q->share = NULL; /* the record below follows any timed record's end */
  CUresult e = C->cu.cuEventRecord(last->ev1, q->s);
  if (e != CUDA_SUCCESS) return e;
  last->has_end = true;                    /* what reap queries */
  q->share = last;                         /* the next group may start at this end */
  if (first->w.timed) return CUDA_SUCCESS; /* a mixed group: its timed records carry the times */
  if (first != last) { /* the group's start goes to its last record, which carries the time */
    gpa__cu_rec *p = first->lender;
    if (p) {
      last->start = first->start;
      last->lender = p;
      p->borrower = last;
      first->lender = NULL;
    } else {
      CUevent t = first->ev0;
      first->ev0 = last->ev0;
      last->ev0 = t;
      last->start = last->ev0;
    }
    first->start = first->ev0;
  }
  last->group_end = true;
  return CUDA_SUCCESS;
}

void gpa__cu_timing_reset(gpa__cu_rec *r) {
  r->start = r->ev0; /* a held record of a graph launch gets no start_event */
  r->lender = r->borrower = NULL;
}

void gpa__cu_timing_release(gpa__cu_rec *r) {
  if (r->lender) {
    r->lender->borrower = NULL;
    r->lender = NULL;
  }
  gpa__cu_rec *b = r->borrower;
  if (b) { /* r's end event is b's start: it goes with b, b's unused ev0 comes here */
    CUevent t = b->ev0;
    b->ev0 = r->ev1;
    r->ev1 = t;
    b->start = b->ev0;
    b->lender = NULL;
    r->borrower = NULL;
  }
  gpa__cu_queue *q = r->w.bq;
  if (q && q->share == r) q->share = NULL;
}

bool gpa__cu_device_ns(gpa__cu_ctx *C, const gpa__cu_rec *r, int64_t *ns, CUresult *err) {
  *err = CUDA_SUCCESS;
  if (!r->w.timed && !r->group_end) return false;
  float ms = 0;
  CUresult e = C->cu.cuEventElapsedTime(&ms, r->start, r->ev1);
  if (e != CUDA_SUCCESS) {
    *err = e;
    return false;
  }
  *ns = (int64_t)((double)ms * 1e6);
  return true;
}
