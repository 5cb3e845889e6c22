/* gpa-sim internal hooks for the cuBLAS subset (libgpa_sim_cublas.so), which
 * runs its GEMMs as host work on the driver's streams. Not for other users. */
#ifndef GPA_SIM_HOOKS_H
#define GPA_SIM_HOOKS_H
#include <cuda.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* Queues fn(arg) on stream s (NULL = the NULL stream) of the current
 * context; free_arg(arg) runs once the operation is gone: after it ran, or,
 * captured into a graph, when the graph and its launches are (fn may then
 * run several times). fn returns 0, or nonzero with a
 * message in why[0..n): the context then gets the sticky
 * CUDA_ERROR_ILLEGAL_ADDRESS, as a faulting kernel would give it. Returns the
 * context's status (no context, sticky error, bad stream). */
CUresult gpa_sim__enqueue(CUstream s, int (*fn)(void *arg, char *why, size_t n), void *arg,
                          void (*free_arg)(void *arg));
/* cuBLAS 12.2+ without a workspace set takes one from cudaMallocAsync on
 * the call's stream: when s captures, an allocation and a free node join
 * the capture (1), else nothing happens (0). */
int gpa_sim__capture_mem_nodes(CUstream s);
/* [p, p+bytes) inside one live device allocation; else 0 with the reason. */
int gpa_sim__device_range_ok(CUdeviceptr p, size_t bytes, char *why, size_t n);
#ifdef __cplusplus
}
#endif
#endif
