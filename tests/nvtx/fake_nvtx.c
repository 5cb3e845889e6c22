/* A stand-in NVTX tool for test_nvtx: what Nsight Systems is to a real run.
 * The NVTX 3 headers compiled into the library load the library named by
 * NVTX_INJECTION64_PATH at the first NVTX call and hand it their function
 * table; this one takes RangePushA and RangePop and records what it sees,
 * for the test to read through fake_nvtx_stats (found with dlsym). Every
 * NVTX call of the library comes from the actor thread, and the test reads
 * after the actor is destroyed (joined), so plain variables do. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#define EXPORT __attribute__((visibility("default")))

enum { LOG_MAX = 256, NAME_LEN = 32 };

static int depth, max_depth, pushes, pops, underflows;
static char names[LOG_MAX][NAME_LEN];

static int NVTX_API push_a(const char *message) {
  if (pushes < LOG_MAX) snprintf(names[pushes], NAME_LEN, "%s", message ? message : "(null)");
  pushes++;
  if (++depth > max_depth) max_depth = depth;
  return depth - 1;
}

static int NVTX_API pop(void) {
  pops++;
  if (depth == 0) {
    underflows++;
    return -1;
  }
  return --depth;
}

EXPORT int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const NvtxExportTableCallbacks *cb = get_table(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) return 0;
  if (size <= NVTX_CBID_CORE_RangePop) return 0;
  *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
  *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
  return 1; /* success: the library keeps these */
}

/* What the test reads: counts, and the i-th pushed name ("" past the log). */
EXPORT void fake_nvtx_stats(int *n_push, int *n_pop, int *n_underflow, int *deepest, int *open) {
  *n_push = pushes, *n_pop = pops, *n_underflow = underflows, *deepest = max_depth, *open = depth;
}
EXPORT const char *fake_nvtx_name(int i) { return i >= 0 && i < pushes && i < LOG_MAX ? names[i] : ""; }
