/* Device memory of the CUDA backend: stream ordered where the device has
 * memory pools (design in alloc.c). Actor thread only. */
#ifndef GPA_BACKENDS_CUDA_ALLOC_H
#define GPA_BACKENDS_CUDA_ALLOC_H
#include "backends/cuda/cuda_internal.h"

/* After the context is current (cu_init). Without pools, or when setting
 * them up fails, the calls below use cuMemAlloc/cuMemFree. */
void gpa__cu_mem_init(gpa__cu_ctx *C);
/* At fini, after every buffer and scratch block was freed; reset: the
 * primary context was reset (its streams are gone already). */
void gpa__cu_mem_fini(gpa__cu_ctx *C, bool reset);
/* size bytes for work of stream s (NULL: any stream; the memory is ready
 * for all of them when this returns). Out of memory: the pool's unused
 * memory goes back to the driver first, so that the caller's evict-and-retry
 * finds it; returns the driver's status (gpa__cu_check's to judge). */
CUresult gpa__cu_mem_alloc(gpa__cu_ctx *C, CUstream s, uint64_t size, CUdeviceptr *p);
/* Frees p after the work already enqueued on s (NULL: p's users have all
 * completed). */
void gpa__cu_mem_free(gpa__cu_ctx *C, CUstream s, CUdeviceptr p);
/* Whether s is being captured into a graph: a stream-ordered allocation or
 * free on it would become a node of the graph, run at each replay. */
bool gpa__cu_mem_capturing(gpa__cu_ctx *C, CUstream s);
/* Gives the pool's unused memory back to the driver (out of memory). */
void gpa__cu_mem_trim(gpa__cu_ctx *C);

#endif
