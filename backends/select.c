/* The one place that maps a device string to a backend. */
#include <string.h>

#include "backends/backend.h"

gpa_status gpa__backend_select(const char *device, const gpa__backend **out) {
  *out = NULL;
  if (!strcmp(device, "cpu") || !strcmp(device, "auto")) {
    /* auto = CUDA when a driver and a device are present: until the cuda
     * backend lands, no driver is ever present to this library. */
    *out = &gpa__backend_host;
    return GPA_OK;
  }
  if (!strcmp(device, "sim") || !strncmp(device, "cuda", 4))
    return gpa__fail(GPA_EUNSUPPORTED, "device '%s': the cuda backend is not built yet; use cpu or auto", device);
  return gpa__fail(GPA_EINVAL, "device '%s': expected auto, cpu, sim, cuda or cuda:N", device);
}
