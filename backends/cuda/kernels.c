/* Kernel modules (the kernels/cuda .cu files, embedded fatbins) loaded lazily per
 * module and cached by the actor; functions cached by id. Also: the table of
 * built-in CUDA implementations by op name, and attribute lookup by name. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernel_list.h"

#define GPA__CU_FATBIN_DECL(mod) extern const unsigned char gpa_fatbin_gpa_cu_##mod[];
GPA__CU_MODULES(GPA__CU_FATBIN_DECL)
#undef GPA__CU_FATBIN_DECL

static const unsigned char *const mod_image[] = {
#define GPA__CU_IMG(mod) gpa_fatbin_gpa_cu_##mod,
    GPA__CU_MODULES(GPA__CU_IMG)
#undef GPA__CU_IMG
};
static const char *const mod_name[] = {
#define GPA__CU_MNAME(mod) #mod,
    GPA__CU_MODULES(GPA__CU_MNAME)
#undef GPA__CU_MNAME
};
static const struct {
  int mod;
  const char *name;
} kdefs[] = {
#define GPA__CU_KDEF(id, mod, name) {GPA__CU_MOD_##mod, #name},
    GPA__CU_KERNELS(GPA__CU_KDEF)
#undef GPA__CU_KDEF
};

_Static_assert(GPA__CU_NMODS <= GPA__CU_MODULES_MAX, "raise GPA__CU_MODULES_MAX");
_Static_assert(GPA__CU_NKERNELS <= GPA__CU_FUNCS_MAX, "raise GPA__CU_FUNCS_MAX");

CUfunction gpa__cu_fn(const gpa_op_exec *x, int id) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (C->fns[id]) return C->fns[id];
  int m = kdefs[id].mod;
  if (!C->mods[m]) {
    CUresult e = C->cu.cuModuleLoadData(&C->mods[m], mod_image[m]);
    if (e != CUDA_SUCCESS) {
      char what[96];
      snprintf(what, sizeof what, "loading kernel module %s", mod_name[m]);
      gpa__cu_check(C, e, what, x->msg, x->msg_size);
      C->mods[m] = NULL;
      return NULL;
    }
  }
  CUresult e = C->cu.cuModuleGetFunction(&C->fns[id], C->mods[m], kdefs[id].name);
  if (e != CUDA_SUCCESS) {
    gpa__cu_check(C, e, kdefs[id].name, x->msg, x->msg_size);
    C->fns[id] = NULL;
  }
  return C->fns[id];
}

gpa_status gpa__cu_launch(const gpa_op_exec *x, int id, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned smem, void **args) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  CUfunction f = gpa__cu_fn(x, id);
  if (!f) return C->failed ? GPA_EDEVICE : GPA_EUNSUPPORTED;
  if (!gx || !gy || !gz) return GPA_OK;
  CUresult e = C->cu.cuLaunchKernel(f, gx, gy, gz, bx, by, 1, smem, (CUstream)x->stream, args, NULL);
  return gpa__cu_check(C, e, kdefs[id].name, x->msg, x->msg_size);
}

unsigned gpa__cu_blocks(const gpa_op_exec *x, int64_t n, unsigned threads) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  int64_t b = (n + threads - 1) / threads, cap = C->grid_cap;
  if (b > cap) b = cap;
  return b < 1 ? 1 : (unsigned)b;
}

int gpa__cu_row_group(long long len) {
  int g = 1;
  while (g < 32 && (long long)g * 32 < len) g *= 2; /* up to 32 elements a lane */
  return g;
}

unsigned gpa__cu_row_blocks(const gpa_op_exec *x, long long n, int group, int warps) {
  long long rows_per_block = (long long)warps * (32 / group);
  long long b = (n + rows_per_block - 1) / rows_per_block, cap = gpa__cu_of(x)->row_cap;
  return (unsigned)(b < 1 ? 1 : b < cap ? b : cap);
}

void gpa__cu_kernels_release(gpa__cu_ctx *C) {
  for (int i = 0; i < GPA__CU_MODULES_MAX; i++)
    if (C->mods[i]) C->cu.cuModuleUnload(C->mods[i]);
  memset(C->mods, 0, sizeof C->mods);
  memset(C->fns, 0, sizeof C->fns);
  /* user ops' modules: several ops may share one image's module */
  for (uint32_t i = 0; i < C->n_user; i++) {
    bool first = true;
    for (uint32_t j = 0; j < i; j++) first &= C->user[j].mod != C->user[i].mod;
    if (first) C->cu.cuModuleUnload(C->user[i].mod);
  }
  C->n_user = 0;
}

static const gpa_attr_spec *attr_spec(const gpa_op_exec *x, const char *name) {
  const gpa__op *op = gpa__cu_of(x)->cur_msg ? gpa__cu_of(x)->cur_msg->op : NULL;
  if (!op) return NULL;
  for (uint32_t i = 0; i < op->d.n_attrs; i++)
    if (!strcmp(op->d.attrs[i].name, name)) return &op->d.attrs[i];
  return NULL;
}

double gpa__cu_attr_f(const gpa_op_exec *x, const char *name, double dflt) {
  const gpa_attr_spec *s = attr_spec(x, name);
  if (!s) return dflt;
  const unsigned char *p = (const unsigned char *)x->params + s->offset;
  if (s->type == GPA_ATTR_INT) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return (double)v;
  }
  double v;
  memcpy(&v, p, sizeof v);
  return v;
}

int64_t gpa__cu_attr_i(const gpa_op_exec *x, const char *name, int64_t dflt) {
  const gpa_attr_spec *s = attr_spec(x, name);
  if (!s) return dflt;
  const unsigned char *p = (const unsigned char *)x->params + s->offset;
  if (s->type == GPA_ATTR_FLOAT) {
    double v;
    memcpy(&v, p, sizeof v);
    return (int64_t)v;
  }
  int64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Built-in implementations, by op name. */
#define GPA__CU_FAMILIES(X) X(core) X(ew) X(norm) X(emb_met) X(blas) X(attn)
#define GPA__CU_FAM_DECL(f) extern const gpa__cu_impl gpa__cu_ops_##f[];
GPA__CU_FAMILIES(GPA__CU_FAM_DECL)
#undef GPA__CU_FAM_DECL

gpa_op_impl_fn gpa__cu_builtin(const char *name) {
  static const gpa__cu_impl *const fams[] = {
#define GPA__CU_FAM(f) gpa__cu_ops_##f,
      GPA__CU_FAMILIES(GPA__CU_FAM)
#undef GPA__CU_FAM
  };
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
    for (const gpa__cu_impl *e = fams[i]; e->name; e++)
      if (!strcmp(e->name, name)) return e->fn;
  return NULL;
}
