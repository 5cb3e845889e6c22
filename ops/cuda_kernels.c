/* The tables the CUDA backend loads the families' kernels from: module
 * images (the fatbins cmake/cuda_backend.cmake embeds) and names, and each
 * kernel's module and name, indexed by the ids of ops/cuda_kernels.h. */
#include "ops/cuda_kernels.h"

#define GPA__CU_FATBIN_DECL(mod) extern const unsigned char gpa_fatbin_gpa_cu_##mod[];
GPA__CU_MODULES(GPA__CU_FATBIN_DECL)
#undef GPA__CU_FATBIN_DECL

const unsigned char *const gpa__cu_mod_images[] = {
#define GPA__CU_IMG(mod) gpa_fatbin_gpa_cu_##mod,
    GPA__CU_MODULES(GPA__CU_IMG)
#undef GPA__CU_IMG
};
const char *const gpa__cu_mod_names[] = {
#define GPA__CU_MNAME(mod) #mod,
    GPA__CU_MODULES(GPA__CU_MNAME)
#undef GPA__CU_MNAME
};
const gpa__cu_kdef gpa__cu_kdefs[] = {
#define GPA__CU_KDEF(id, mod, name) {GPA__CU_MOD_##mod, #name},
    GPA__CU_KERNELS(GPA__CU_KDEF)
#undef GPA__CU_KDEF
};

_Static_assert(GPA__CU_NMODS <= GPA__CU_MODULES_MAX, "raise GPA__CU_MODULES_MAX");
_Static_assert(GPA__CU_NKERNELS <= GPA__CU_FUNCS_MAX, "raise GPA__CU_FUNCS_MAX");
