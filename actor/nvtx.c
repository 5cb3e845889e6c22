/* NVTX ranges around each message on the actor thread, while profiling is
 * on (a profiler attached, GPA_TRACE or GPA_PROFILE) or a tool is injected
 * (so Nsight shows them with no option set), named as profilers name it. NVTX 3 is header-only and links nothing: the first call looks for
 * a tool (NVTX_INJECTION64_PATH, which Nsight Systems sets) and loads it at
 * run time; without one every call is an empty function. tests/test_nvtx.c
 * checks both, with a stand-in tool. Built only where the CUDA toolkit's
 * headers are; elsewhere these are empty. */
#include "actor/internal.h"

#include <stdlib.h>

#if defined(GPA_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
bool gpa__nvtx_tool(void) {
  const char *p = getenv("NVTX_INJECTION64_PATH");
  return p && p[0];
}
void gpa__nvtx_push(const char *name) { nvtxRangePushA(name); }
void gpa__nvtx_pop(void) { nvtxRangePop(); }
#else
bool gpa__nvtx_tool(void) { return false; }
void gpa__nvtx_push(const char *name) { (void)name; }
void gpa__nvtx_pop(void) {}
#endif
