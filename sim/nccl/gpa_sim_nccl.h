/* gpa-sim NCCL subset: fault injection and diagnostics, exported by
 * libgpa_sim_nccl.so next to the NCCL entry points (tests resolve them with
 * dlsym). Also from the environment, read at the first call:
 *   GPA_SIM_NCCL_FAULT=init=N,call=N,async=N,hang=N,destroy=N   (each optional)
 * Counters are one-shot: "the N-th from now" fires once, then is disarmed;
 * 0 disarms; the API overrides the environment. Safe from any thread. */
#ifndef GPA_SIM_NCCL_H
#define GPA_SIM_NCCL_H
#ifdef __cplusplus
extern "C" {
#endif

/* The n-th ncclCommInitRank from now fails with ncclSystemError. */
void gpa_sim_nccl_fault_init(unsigned n);
/* The n-th collective call from now fails at the call (ncclSystemError). */
void gpa_sim_nccl_fault_call(unsigned n);
/* The n-th collective from now fails on its stream: ncclSystemError as its
 * rank's asynchronous error, ncclRemoteError on the peers. */
void gpa_sim_nccl_fault_async(unsigned n);
/* The n-th collective from now hangs on its stream (a hung peer): it and
 * its peers wait until their communicators are aborted. */
void gpa_sim_nccl_fault_hang(unsigned n);
/* The n-th ncclCommDestroy from now finds its communicator in an
 * asynchronous error (ncclRemoteError: a peer failed while it was idle) and
 * refuses it, as NCCL's destroy refuses a communicator that is not ready;
 * the communicator stays alive until ncclCommAbort. */
void gpa_sim_nccl_fault_destroy(unsigned n);
void gpa_sim_nccl_fault_clear(void);
/* The version code ncclGetVersion reports (0: the default, 2.28.0): an
 * older one makes comm/nccl.c take its fallbacks (below 2.14: blocking
 * init). */
void gpa_sim_nccl_set_version(int code);
/* Ranks whose communicator memory is still held (leak checks). A
 * non-blocking communicator's is freed about a millisecond after its
 * ncclCommDestroy/Abort (NCCL reclaims it in the background), by the
 * first call into the subset after that, this one included: poll. */
int gpa_sim_nccl_live_comms(void);

#ifdef __cplusplus
}
#endif
#endif
