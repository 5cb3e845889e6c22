/* gpa-sim control API: fault injection and diagnostics of the simulated CUDA
 * device. Exported by libgpa_sim_cuda.so next to the driver entry points;
 * tests and benchmarks use it, the library never does (it only sees the
 * driver API). All calls are safe from any thread. See docs/sim.md. */
#ifndef GPA_SIM_H
#define GPA_SIM_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* The n-th device allocation from now (1 = the next one; cuMemAlloc,
 * cuMemAllocAsync, cuMemAllocHost/HostAlloc) fails with
 * CUDA_ERROR_OUT_OF_MEMORY. 0 disarms. */
void gpa_sim_fault_alloc(unsigned n);
/* Out of memory: the n-th device allocation from now and every one after it
 * fail with CUDA_ERROR_OUT_OF_MEMORY, until gpa_sim_fault_oom(0) or
 * gpa_sim_fault_clear(). */
void gpa_sim_fault_oom(unsigned n);
/* The n-th cuLaunchKernel from now is refused with
 * CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (not sticky). 0 disarms. */
void gpa_sim_fault_launch(unsigned n);
/* The n-th cuLaunchHostFunc from now is refused with
 * CUDA_ERROR_OUT_OF_MEMORY (not sticky); nothing is enqueued. 0 disarms. */
void gpa_sim_fault_host_fn(unsigned n);
/* The n-th launch from now faults on the device: the context gets the sticky
 * error CUDA_ERROR_ILLEGAL_ADDRESS, reported by the next synchronizing call
 * and by every call after it until the primary context is reset. 0 disarms. */
void gpa_sim_fault_sticky(unsigned n);
/* Every operation of `stream` (a CUstream; NULL = every stream) waits `us`
 * microseconds before it runs. 0 removes the delay. */
void gpa_sim_fault_stream_delay(void *stream, unsigned us);
/* Every host function (cuLaunchHostFunc) waits `us` microseconds before it
 * is called, on top of any stream delay (its stream waits with it, as on a
 * GPU). 0 removes the delay. */
void gpa_sim_fault_host_fn_delay(unsigned us);
/* run = 0: after a sticky error no host function is called any more, as on
 * a real GPU (cuLaunchHostFunc documents it); run = 1 (the default): they
 * still run, so that their waiters are woken. */
void gpa_sim_fault_host_fns_after_sticky(int run);
/* Graphs: the n-th cuStreamBeginCapture from now is refused
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); the n-th
 * cuGraphInstantiateWithFlags fails (CUDA_ERROR_OUT_OF_MEMORY); the n-th
 * cuGraphLaunch is refused (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, not sticky).
 * 0 disarms. GPA_SIM_FAULT keys: capture, instantiate, graph_launch. */
void gpa_sim_fault_capture(unsigned n);
void gpa_sim_fault_instantiate(unsigned n);
void gpa_sim_fault_graph_launch(unsigned n);
/* Disarms every fault, including those read from GPA_SIM_FAULT (host
 * functions run after a sticky error again). */
void gpa_sim_fault_clear(void);

/* Copies the text of the last failed check or injected fault into buf
 * (always NUL-terminated when n > 0); returns its full length, 0 if none. */
size_t gpa_sim_last_error_message(char *buf, size_t n);
/* Calls so far that synchronized the whole device (cuCtxSynchronize,
 * cuMemFree, cuMemFreeHost): every stream of every actor waited for them. */
size_t gpa_sim_device_syncs(void);
/* on = 0: the device has no memory pools (its attribute
 * CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0, cuMemAllocAsync,
 * cuMemFreeAsync and cuDeviceGetDefaultMemPool answer
 * CUDA_ERROR_NOT_SUPPORTED), as on drivers and GPUs without them; 1 (the
 * default) gives them back. Takes effect for actors created after it. */
void gpa_sim_mempools(int on);
/* Number of live device allocations (leak checks in tests). */
size_t gpa_sim_live_allocations(void);
/* Allocation calls so far (device and pinned, failed ones included): the
 * range of N for a loop that fails each allocation of a workload in turn. */
size_t gpa_sim_allocations(void);
/* cuDevicePrimaryCtxReset calls so far: an actor resets the context only
 * after a sticky error (tests check that a clean shutdown does not). */
size_t gpa_sim_primary_resets(void);
/* cuLaunchHostFunc calls so far (tests of how completions are batched). */
size_t gpa_sim_host_fns(void);
/* cuEventRecord calls on a live event so far, captured ones included (tests
 * of how many events timing costs). */
size_t gpa_sim_event_records(void);
/* Graph calls that succeeded so far: cuGraphLaunch, cuStreamEndCapture,
 * cuGraphExecChildGraphNodeSetParams (tests of replay). */
size_t gpa_sim_graph_launches(void);
size_t gpa_sim_graph_captures(void);
size_t gpa_sim_graph_updates(void);

#ifdef __cplusplus
}
#endif
#endif
