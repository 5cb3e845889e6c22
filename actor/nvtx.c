/* NVTX ranges around each op on the actor thread. NVTX 3 is header-only:
 * its calls do nothing unless a tool (Nsight Systems) injects itself, so
 * they are safe to leave in. Built only where the CUDA toolkit's headers
 * are; elsewhere these are empty. */
#include "actor/internal.h"

#if defined(GPA_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
void gpa__nvtx_push(const char *name) { nvtxRangePushA(name); }
void gpa__nvtx_pop(void) { nvtxRangePop(); }
#else
void gpa__nvtx_push(const char *name) { (void)name; }
void gpa__nvtx_pop(void) {}
#endif
