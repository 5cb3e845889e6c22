/* Deliberately broken plugins for the failure-path tests: a wrong ABI
 * number, a missing gpa_plugin_init, an init that fails. */
#include <gpuactor.h>

#ifdef BROKEN_ABI
const uint32_t gpa_plugin_abi = GPA_PLUGIN_ABI + 41;
gpa_status gpa_plugin_init(gpa_registry *reg) {
  (void)reg;
  return GPA_OK;
}
#elif defined(BROKEN_NOINIT)
const uint32_t gpa_plugin_abi = GPA_PLUGIN_ABI;
#elif defined(BROKEN_FAILINIT)
const uint32_t gpa_plugin_abi = GPA_PLUGIN_ABI;
gpa_status gpa_plugin_init(gpa_registry *reg) {
  /* An invalid registration: its error message must reach the loader. */
  gpa_op_desc d = {.name = ""};
  return gpa_op_register(reg, &d);
}
#endif
