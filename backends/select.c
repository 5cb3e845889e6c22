/* The one place that maps a device string to a backend. */
#include <string.h>

#include "backends/backend.h"

gpa_status gpa__backend_select(const char *device, const char *driver, const gpa__backend **out) {
  *out = NULL;
  /* The cuda backend is linked only in builds with the CUDA toolkit. */
  bool have_cuda = &gpa__backend_cuda && &gpa__backend_sim && gpa__cuda_probe;
  if (!strcmp(device, "cpu")) {
    *out = &gpa__backend_host;
    return GPA_OK;
  }
  if (!strcmp(device, "auto")) {
    /* auto = CUDA when a driver and a device are present (opening the driver
     * costs little; cuBLAS is loaded lazily). */
    *out = have_cuda && gpa__cuda_probe(driver) ? &gpa__backend_cuda : &gpa__backend_host;
    return GPA_OK;
  }
  bool sim = !strcmp(device, "sim") || !strncmp(device, "sim:", 4);
  if (sim || !strcmp(device, "cuda") || !strncmp(device, "cuda:", 5)) {
    if (!have_cuda)
      return gpa__fail(GPA_EUNSUPPORTED, "device '%s': this build has no cuda backend (no CUDA toolkit at build time)",
                       device);
    *out = sim ? &gpa__backend_sim : &gpa__backend_cuda;
    return GPA_OK;
  }
  return gpa__fail(GPA_EINVAL, "device '%s': expected auto, cpu, sim, sim:N, cuda or cuda:N", device);
}
