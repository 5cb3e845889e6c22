/* gpa-sim driver: modules, libraries and kernel lookup.
 *
 * A fatbin image cannot run on the CPU; the sim maps it to the emulated
 * module built from the same .cu sources by gpa_cuda_kernels()
 * (cmake/cuda.cmake). Each module records the FNV-1a id of its fatbin;
 * cuModuleLoadData computes the id of the image it is given and picks the
 * module with that id from the module directories (GPA_SIM_MODULE_PATH, else
 * the build tree's directory compiled in). Modules are dlopened once and
 * stay loaded for the life of the process (they are small, and unloading
 * code that static TLS or fibers may still reference is not worth it). */
#include <dirent.h>
#include <dlfcn.h>
#include <string.h>
#include <map>
#include "../include/gpa_sim_fatbin.h"
#include "internal.h"

struct gpa_sim_mod {
  const gpa_sim_module *m;
  std::string path;
  std::mutex serial_mu;
};

struct CUfunc_st {
  const gpa_sim_kernel *k;
  gpa_sim_mod *mod;
  std::vector<size_t> offset;
  size_t args_size;
  std::atomic<int> max_dyn{48 * 1024};
};

struct CUmod_st {
  gpa_sim_mod *mod;
  std::vector<CUfunc_st *> funcs;
};

/* A CUlibrary is its module (one device, one context): (CUmod_st *)lib. */

namespace {
std::mutex g_mods_mu;
/* process-lifetime registry: never destroyed (modules stay loaded) */
std::vector<gpa_sim_mod *> &g_mods = *new std::vector<gpa_sim_mod *>();
std::set<std::string> &g_seen = *new std::set<std::string>();
std::set<CUmod_st *> g_loaded; /* belong to the primary context */

void scan_dir(const std::string &dir) {
  DIR *d = opendir(dir.c_str());
  if (!d) return;
  while (struct dirent *e = readdir(d)) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    if (strncmp(n, "libgpa_sim_mod_", 15) != 0 || len < 4 || strcmp(n + len - 3, ".so") != 0) continue;
    std::string path = dir + "/" + n;
    if (!g_seen.insert(path).second) continue;
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      gpa_sim__failf(CUDA_ERROR_INVALID_IMAGE, "cannot load emulated module %s: %s", path.c_str(), dlerror());
      continue;
    }
    gpa_sim_module_fn fn = (gpa_sim_module_fn)dlsym(h, "gpa_sim_module_v1");
    const gpa_sim_module *m = fn ? fn() : nullptr;
    if (!m || m->abi != GPA_SIM_ABI_VERSION) {
      gpa_sim__failf(CUDA_ERROR_INVALID_IMAGE, "%s is not a gpa-sim module of ABI %u", path.c_str(), GPA_SIM_ABI_VERSION);
      dlclose(h);
      continue;
    }
    gpa_sim_mod *mod = new gpa_sim_mod();
    mod->m = m;
    mod->path = path;
    g_mods.push_back(mod);
  }
  closedir(d);
}

gpa_sim_mod *find_module(uint64_t id) {
  for (int pass = 0; pass < 2; pass++) {
    for (gpa_sim_mod *m : g_mods)
      if (m->m->fatbin_id == id) return m;
    /* not found: (re)scan the directories, new modules may have been built */
    const std::string &p = gpa_sim__opts().module_path;
    size_t pos = 0;
    while (pos <= p.size()) {
      size_t end = p.find(':', pos);
      if (end == std::string::npos) end = p.size();
      if (end > pos) scan_dir(p.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  return nullptr;
}

CUfunc_st *make_func(gpa_sim_mod *mod, const gpa_sim_kernel *k) {
  CUfunc_st *f = new CUfunc_st();
  f->k = k;
  f->mod = mod;
  size_t off = 0, maxal = 1;
  for (unsigned i = 0; i < k->n_params; i++) {
    size_t al = k->param_align[i];
    off = (off + al - 1) / al * al;
    f->offset.push_back(off);
    off += k->param_size[i];
    if (al > maxal) maxal = al;
  }
  f->args_size = (off + maxal - 1) / maxal * maxal;
  return f;
}

CUresult load(CUmod_st **out, const void *image) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  size_t n = gpa_sim_fatbin_size(image);
  if (n == 0) {
    const char *t = (const char *)image;
    if (strstr(t, ".version") || strstr(t, ".target"))
      return gpa_sim__fail(CUDA_ERROR_NOT_SUPPORTED, "cuModuleLoadData: PTX images cannot be emulated; load a fatbin "
                                                      "built by gpa_cuda_kernels()");
    return gpa_sim__fail(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: image is not a fatbin");
  }
  uint64_t id = gpa_sim_fatbin_id(image, n);
  std::lock_guard<std::mutex> lk(g_mods_mu);
  gpa_sim_mod *mod = find_module(id);
  if (!mod)
    return gpa_sim__failf(CUDA_ERROR_NO_BINARY_FOR_GPU,
                          "cuModuleLoadData: no emulated module for fatbin id 0x%016llx in '%s' "
                          "(set GPA_SIM_MODULE_PATH to the directory of libgpa_sim_mod_*.so)",
                          (unsigned long long)id, gpa_sim__opts().module_path.c_str());
  CUmod_st *m = new CUmod_st();
  m->mod = mod;
  for (unsigned i = 0; i < mod->m->n_kernels; i++) m->funcs.push_back(make_func(mod, mod->m->kernels[i]));
  g_loaded.insert(m);
  *out = m;
  return CUDA_SUCCESS;
}

void destroy(CUmod_st *m) {
  for (CUfunc_st *f : m->funcs) delete f;
  delete m;
}

CUresult unload(CUmod_st *m) {
  std::lock_guard<std::mutex> lk(g_mods_mu);
  if (!g_loaded.erase(m)) return CUDA_ERROR_INVALID_HANDLE;
  destroy(m);
  return CUDA_SUCCESS;
}

CUresult get_function(CUfunc_st **out, CUmod_st *m, const char *name) {
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(g_mods_mu);
  if (!g_loaded.count(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (CUfunc_st *f : m->funcs)
    if (strcmp(f->k->name, name) == 0) {
      *out = f;
      return CUDA_SUCCESS;
    }
  return gpa_sim__failf(CUDA_ERROR_NOT_FOUND, "kernel '%s' not found in emulated module %s", name,
                        m->mod->m->name);
}
} // namespace

/* The context is going away: its modules (and libraries' modules) with it. */
void gpa_sim__modules_release_all(void) {
  std::lock_guard<std::mutex> lk(g_mods_mu);
  for (CUmod_st *m : g_loaded) destroy(m);
  g_loaded.clear();
}

/* For launch.cpp */
const gpa_sim_kernel *gpa_sim__func_kernel(CUfunc_st *f) { return f->k; }
const std::vector<size_t> &gpa_sim__func_offsets(CUfunc_st *f) { return f->offset; }
size_t gpa_sim__func_args_size(CUfunc_st *f) { return f->args_size; }
int gpa_sim__func_max_dyn(CUfunc_st *f) { return f->max_dyn.load(); }
std::mutex *gpa_sim__func_serial(CUfunc_st *f) {
  return (f->mod->m->flags & GPA_SIM_MODULE_SERIAL) ? &f->mod->serial_mu : nullptr;
}

GPA_SIM_API CUresult cuModuleLoadData(CUmodule *out, const void *image) {
  return gpa_sim__guard("cuModuleLoadData", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    return load(out, image);
  });
}

GPA_SIM_API CUresult cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned int n, CUjit_option *o, void **v) {
  return gpa_sim__guard("cuModuleLoadDataEx", [&]() -> CUresult {
    (void)n, (void)o, (void)v; /* JIT options do not apply to emulated modules */
    return cuModuleLoadData(out, image);
  });
}

GPA_SIM_API CUresult cuModuleLoadFatBinary(CUmodule *out, const void *image) { return cuModuleLoadData(out, image); }

GPA_SIM_API CUresult cuModuleUnload(CUmodule m) {
  return gpa_sim__guard("cuModuleUnload", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    return unload(m);
  });
}

GPA_SIM_API CUresult cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name) {
  return gpa_sim__guard("cuModuleGetFunction", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    return get_function(out, m, name);
  });
}

GPA_SIM_API CUresult cuLibraryLoadData(CUlibrary *out, const void *code, CUjit_option *jo, void **jv, unsigned int nj,
                                       CUlibraryOption *lo, void **lv, unsigned int nl) {
  return gpa_sim__guard("cuLibraryLoadData", [&]() -> CUresult {
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CUmod_st *m;
    CUresult r = load(&m, code);
    if (r) return r;
    *out = (CUlibrary)m;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuLibraryUnload(CUlibrary lib) {
  return gpa_sim__guard("cuLibraryUnload", [&]() -> CUresult {
    return unload((CUmod_st *)lib);
  });
}

GPA_SIM_API CUresult cuLibraryGetKernel(CUkernel *out, CUlibrary lib, const char *name) {
  return gpa_sim__guard("cuLibraryGetKernel", [&]() -> CUresult {
    if (!lib) return CUDA_ERROR_INVALID_HANDLE;
    CUfunc_st *f;
    CUresult r = get_function(&f, (CUmod_st *)lib, name);
    if (r == CUDA_SUCCESS) *out = (CUkernel)f;
    return r;
  });
}

GPA_SIM_API CUresult cuLibraryGetModule(CUmodule *out, CUlibrary lib) {
  return gpa_sim__guard("cuLibraryGetModule", [&]() -> CUresult {
    if (!out || !lib) return CUDA_ERROR_INVALID_VALUE;
    *out = (CUmod_st *)lib;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuKernelGetFunction(CUfunction *out, CUkernel k) {
  return gpa_sim__guard("cuKernelGetFunction", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!out || !k) return CUDA_ERROR_INVALID_VALUE;
    *out = (CUfunction)k; /* one device, one context: the kernel is its function */
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int v) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int a = (int)attr;
  return gpa_sim__guard("cuFuncSetAttribute", [&]() -> CUresult {
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
      if (v < 0 || v > 227 * 1024)
        return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute: %d bytes of dynamic shared memory is "
                              "above the device's opt-in limit (232448)", v);
      f->max_dyn = v;
      return CUDA_SUCCESS;
    }
    if (a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) return CUDA_SUCCESS;
    return CUDA_ERROR_INVALID_VALUE;
  });
}

GPA_SIM_API CUresult cuFuncGetAttribute(int *v, CUfunction_attribute attr, CUfunction f) {
  /* an int inside the guard: a bad value read through the lambda's reference
   * would be a load of an invalid enum (UBSan) */
  int a = (int)attr;
  return gpa_sim__guard("cuFuncGetAttribute", [&]() -> CUresult {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    switch (a) {
      case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
      case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = f->max_dyn; break;
      case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
      case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = 90; break;
      default: *v = 0; break; /* static shared / local / const sizes are not known to the emulation */
    }
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  return cuFuncSetAttribute((CUfunction)k, a, v); /* guarded there */
}

GPA_SIM_API CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  return cuFuncGetAttribute(v, a, (CUfunction)k); /* guarded there */
}
