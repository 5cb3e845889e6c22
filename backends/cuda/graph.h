/* Repeated batches replayed as CUDA graphs (graph.c; docs/graphs.md).
 *
 * A queue whose batch runs with graphs holds its messages instead of
 * launching them (the actor sees them deferred): the first time, each is
 * captured into a child graph of its own as it arrives, and at the batch's
 * end the children are chained into one graph, instantiated and launched;
 * later batches of the same label only compare each message with the
 * recorded one and launch the graph once the whole sequence has matched.
 * A message whose params changed (AdamW's step) is captured again and its
 * child node updated in the executable graph. Whatever does not match, or
 * fails, runs the held messages eagerly, in order, then itself: nothing is
 * lost or reordered, and the label records again later. */
#ifndef GPA_BACKENDS_CUDA_GRAPH_H
#define GPA_BACKENDS_CUDA_GRAPH_H
#include "backends/cuda/cuda_internal.h"

/* Returned by the hooks below when the message is not theirs: the caller
 * runs it eagerly. */
#define GPA__CU_EAGER 100

/* backend.c: the eager path, for graph.c */
gpa__cu_rec *gpa__cu_rec_get(gpa__cu_ctx *C, const gpa__work *w, char *msg, size_t cap);
void gpa__cu_rec_put(gpa__cu_ctx *C, gpa__cu_rec *r);
CUresult gpa__cu_start_event(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r);
gpa_status gpa__cu_enqueue_done(gpa__cu_ctx *C, gpa__cu_queue *q, gpa__cu_rec *r, char *msg, size_t cap);
/* Sets the running op's context (cur_q, cur_w, scratch) and x->stream. */
void gpa__cu_enter_op(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, const gpa_op_desc *d,
                      gpa_op_impl_fn impl, gpa_op_exec *x);
gpa_status gpa__cu_run_eager(gpa__cu_ctx *C, const gpa__work *w, const gpa_op_desc *d, gpa_op_impl_fn impl,
                             gpa_op_exec *x);
/* A copy on q (upload: up) through pooled staging; w NULL: no completion. */
gpa_status gpa__cu_copy(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, bool up, void *host, CUdeviceptr dev,
                        uint64_t n);

/* The backend methods (backend.h). */
void gpa__cu_batch_begin(void *bctx, void *bq, const char *label, int32_t graph);
void gpa__cu_release(void *bctx, void *bq, int why);
uint32_t gpa__cu_batch_graph(void *bctx, void *bq);

/* Hooks of the eager path: GPA__CU_EAGER, or the message's status
 * (GPA__HELD when held). */
gpa_status gpa__cu_graph_op(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, const gpa_op_desc *d,
                            gpa_op_impl_fn impl, gpa_op_exec *x);
gpa_status gpa__cu_graph_copy(gpa__cu_ctx *C, gpa__cu_queue *q, const gpa__work *w, bool up, void *host,
                              CUdeviceptr dev, uint64_t n);
/* The queue's graphs, at queue fini (nothing in flight). */
void gpa__cu_graph_free(gpa__cu_ctx *C, gpa__cu_queue *q);

#endif
