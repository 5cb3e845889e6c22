/* Kernel modules and kernels of the CUDA backend. A module is one
 * gpa_cuda_kernels(gpa_cu_<mod> ...) target of cmake/cuda_backend.cmake. */
#ifndef GPA_BACKENDS_CUDA_KERNEL_LIST_H
#define GPA_BACKENDS_CUDA_KERNEL_LIST_H

#define GPA__CU_MODULES(M) M(ew)

/* K(id, module, kernel name) */
#define GPA__CU_KERNELS(K)                       \
  K(ADD, ew, gpa_ew_add_f32)                     \
  K(AXPY, ew, gpa_ew_axpy_f32)                   \
  K(MASK_ZERO, ew, gpa_ew_mask_zero_f32)         \
  K(SUM_OVER_L, ew, gpa_ew_sum_over_l_f32)       \
  K(MM_BWD, ew, gpa_ew_masked_mean_bwd_f32)      \
  K(ADD_BCAST, ew, gpa_ew_add_broadcast_f32)     \
  K(GELU_FWD, ew, gpa_gelu_fwd_f32)              \
  K(GELU_BWD, ew, gpa_gelu_bwd_f32)              \
  K(ADAMW, ew, gpa_adamw_f32)                    \
  K(SGD, ew, gpa_sgd_f32)

enum {
#define GPA__CU_MENUM(mod) GPA__CU_MOD_##mod,
  GPA__CU_MODULES(GPA__CU_MENUM)
#undef GPA__CU_MENUM
  GPA__CU_NMODS
};
enum {
#define GPA__CU_KENUM(id, mod, name) GPA__K_##id,
  GPA__CU_KERNELS(GPA__CU_KENUM)
#undef GPA__CU_KENUM
  GPA__CU_NKERNELS
};
#endif
