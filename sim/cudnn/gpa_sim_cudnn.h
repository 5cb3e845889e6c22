/* gpa-sim cuDNN subset: fault injection and diagnostics, exported by
 * libgpa_sim_cudnn.so next to the cuDNN entry points (tests resolve them
 * with dlsym). Also through the environment, read at the first call:
 *   GPA_SIM_CUDNN_FAULT=create=N,graph=N,heur=N,plan=N,exec=N   (each optional)
 *   GPA_SIM_CUDNN_VERSION=N     what cudnnGetVersion reports (default 91400)
 *   GPA_SIM_CUDNN_WORKSPACE=N   bytes each plan asks for (default 1 MiB)
 * The API overrides the environment. Counters are one-shot: "the N-th from
 * now" fires once, then is disarmed; 0 disarms. Safe from any thread. */
#ifndef GPA_SIM_CUDNN_H
#define GPA_SIM_CUDNN_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* The n-th cudnnCreate from now fails (CUDNN_STATUS_NOT_INITIALIZED). */
void gpa_sim_cudnn_fault_create(unsigned n);
/* The n-th finalize of an operation graph fails (NOT_SUPPORTED_GRAPH_PATTERN). */
void gpa_sim_cudnn_fault_graph(unsigned n);
/* The n-th query of the heuristics' results finds no engine (count 0), nor
 * does any later query for the same operation graph (any mode). */
void gpa_sim_cudnn_fault_heur(unsigned n);
/* The n-th finalize of an execution plan fails (NOT_SUPPORTED). */
void gpa_sim_cudnn_fault_plan(unsigned n);
/* The n-th cudnnBackendExecute fails (EXECUTION_FAILED); nothing is queued. */
void gpa_sim_cudnn_fault_exec(unsigned n);
/* Bytes each plan finalized from now on asks for as workspace. */
void gpa_sim_cudnn_set_workspace(long long bytes);
/* What cudnnGetVersion reports from now on. */
void gpa_sim_cudnn_set_version(size_t version);
void gpa_sim_cudnn_fault_clear(void);

/* Counts since load: operation graphs finalized, plans finalized,
 * executions queued; and the engine of the last execution (0: the fast
 * non-deterministic backward engine, which a graph with dQ through an fp32
 * accumulator gets, 1: the deterministic one; forward
 * SDPA graphs have engine 1 only; 2: a convolution's TF32 engine for f32).
 * Any pointer may be NULL. */
void gpa_sim_cudnn_counts(long long *graphs, long long *plans, long long *execs, int *last_engine);
/* Descriptors alive now (created and not destroyed): leak checks. */
long long gpa_sim_cudnn_live_descriptors(void);

/* Calls into the subset since load, by entry point (failed calls too):
 * what one call of the backend's cuDNN path costs in library calls, for the
 * tests that hold its steady state to an execute (docs/cuda.md, "Host time
 * per call"). */
typedef struct gpa_sim_cudnn_calls {
  long long create, set, get, finalize, destroy, execute, set_stream;
} gpa_sim_cudnn_calls;
void gpa_sim_cudnn_api_calls(gpa_sim_cudnn_calls *c);

#ifdef __cplusplus
}
#endif
#endif
