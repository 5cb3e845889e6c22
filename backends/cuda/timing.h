/* Device time of the CUDA backend's records from events (timing.c). Actor
 * thread only. */
#ifndef GPA_BACKENDS_CUDA_TIMING_H
#define GPA_BACKENDS_CUDA_TIMING_H
#include "backends/cuda/cuda_internal.h"

/* Before r's work on q: its start event (its own, or the previous timed
 * record's or group's end while the stream is still busy before it; of
 * untimed work only the first record of q's open group has one). */
CUresult gpa__cu_start_event(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r);
/* After r's work on q: a timed record's end event (it may start the next). */
CUresult gpa__cu_end_event(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r);
/* At flush, q's group first..last: an untimed last records the group's end
 * event and takes the group's start event, so it carries the group's time. */
CUresult gpa__cu_group_timing(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *first, gpa__cu_rec *last);
/* A record taken from the pool: no shared event yet. */
void gpa__cu_timing_reset(gpa__cu_rec *r);
/* A record about to be recycled (or abandoned): its shared event goes to
 * the record that still needs it; q's chain forgets it. */
void gpa__cu_timing_release(gpa__cu_rec *r);
/* r's device time in ns, when it carries one (timed, or a group's end) and
 * the events answer; else false, and the driver's error in *err if any. */
bool gpa__cu_device_ns(gpa__cu_ctx *C, const gpa__cu_rec *r, int64_t *ns, CUresult *err);
#endif
