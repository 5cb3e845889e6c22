/* Loading plugins: dlopen, an ABI check, then the plugin's init. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "actor/internal.h"

gpa_status gpa_plugin_load(gpa_registry *reg, const char *path) {
  if (!reg || !path) return gpa__fail(GPA_EINVAL, "gpa_plugin_load: NULL argument");
  /* RTLD_LOCAL: two plugins may use the same internal names. */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return gpa__fail(GPA_ENOTFOUND, "gpa_plugin_load: %s", dlerror());
  const uint32_t *abi = dlsym(h, "gpa_plugin_abi");
  gpa_plugin_init_fn init;
  void *sym = dlsym(h, "gpa_plugin_init");
  memcpy(&init, &sym, sizeof init);
  gpa_status st = GPA_OK;
  if (!abi) st = gpa__fail(GPA_ENOTFOUND, "gpa_plugin_load: %s exports no gpa_plugin_abi", path);
  else if (*abi != GPA_PLUGIN_ABI)
    st = gpa__fail(GPA_EUNSUPPORTED, "gpa_plugin_load: %s was built for plugin ABI %u, this library has %u", path, *abi,
                   GPA_PLUGIN_ABI);
  else if (!init) st = gpa__fail(GPA_ENOTFOUND, "gpa_plugin_load: %s exports no gpa_plugin_init", path);
  if (st == GPA_OK) {
    pthread_mutex_lock(&reg->lock);
    bool room = reg->n_plugins < GPA__MAX_PLUGINS;
    if (room) reg->plugins[reg->n_plugins++] = h;
    pthread_mutex_unlock(&reg->lock);
    if (!room) st = gpa__fail(GPA_ENOMEM, "gpa_plugin_load: %d plugins loaded already", GPA__MAX_PLUGINS);
  }
  if (st != GPA_OK) {
    dlclose(h);
    return st;
  }
  gpa__clear_error();
  st = init(reg);
  if (st != GPA_OK) {
    /* Ops it registered before failing stay usable: keep the library. */
    char why[160];
    snprintf(why, sizeof why, "%s", gpa_last_error_message()[0] ? gpa_last_error_message() : gpa_strerror(st));
    return gpa__fail(st, "gpa_plugin_load: %s: gpa_plugin_init failed: %s", path, why);
  }
  return GPA_OK;
}
