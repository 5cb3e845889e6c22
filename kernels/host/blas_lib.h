/* The BLAS of the host kernels, loaded at run time so that its kernel set is
 * chosen from what this CPU can do before the BLAS initialises.
 *
 * Why: OpenBLAS (Debian's is built for every x86 kernel set, DYNAMIC_ARCH)
 * picks its kernels from the CPU's model number. Virtual machines that mask
 * the model get the SSE3 "Prescott" kernels on a CPU with AVX-512: 2048^3
 * sgemm ran at 60 GFLOP/s here, against 305 with the SkylakeX kernels
 * (docs/ops.md, "Which GEMM kernels run"). OpenBLAS reads its choice from
 * OPENBLAS_CORETYPE once, when it initialises, so the library is not linked
 * at build time: the first GEMM (or gpa__blas_load at actor creation)
 * decides the kernel set from the cpuid feature bits and the registers the
 * OS saves (xgetbv), sets OPENBLAS_CORETYPE for the duration of dlopen
 * (only when the variable is unset, restored right after), and loads it.
 * A kernel set the CPU lacks is never forced: an override naming one is
 * refused with a warning.
 *
 * When OpenBLAS was already loaded by someone else in the process (numpy,
 * a program linking it), its kernels are whatever it chose then: the load
 * reports them and says so. Without any BLAS the GEMMs run on our own
 * register-blocked kernel (kernels/host/tgemm.c), correct but slower. */
#ifndef GPA_KERNELS_HOST_BLAS_LIB_H
#define GPA_KERNELS_HOST_BLAS_LIB_H

/* cblas_sgemm's signature (the CBLAS enums as ints: row major 101,
 * no transpose 111, transpose 112). */
typedef void (*gpa__cblas_sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                    int lda, const float *B, int ldb, float beta, float *C, int ldc);
enum { GPA__CBLAS_ROW_MAJOR = 101, GPA__CBLAS_NO_TRANS = 111, GPA__CBLAS_TRANS = 112 };

typedef struct gpa__blas_lib {
  gpa__cblas_sgemm_fn sgemm;  /* NULL: no BLAS (our own kernel runs) */
  void (*set_threads)(int);   /* NULL: not OpenBLAS */
  int (*get_threads)(void);
  char kernels[32];           /* the kernel set that runs: OpenBLAS's core name, or "none" */
  char wanted[32];            /* what the feature bits (or the override) asked for */
  char note[400];             /* how it was chosen, for the info log and docs */
} gpa__blas_lib;

/* Before the first load (the options table: GPA_BLAS, GPA_BLAS_CORETYPE;
 * NULL or "" = default): the library path ("none": no BLAS, our own
 * kernel) and the kernel set to ask for ("auto", or an OpenBLAS core name
 * this CPU can run). */
void gpa__blas_configure(const char *path, const char *coretype);
/* Loads the BLAS once (any thread); never NULL. */
const gpa__blas_lib *gpa__blas(void);
/* The best OpenBLAS kernel set this CPU and OS can run: "Cooperlake"
 * (SkylakeX's and AVX512_BF16), "SkylakeX" (AVX-512 F/BW/VL/DQ, zmm state
 * saved), "Haswell" (AVX2 + FMA), "Sandybridge" (AVX), or "Prescott" (SSE3). */
const char *gpa__blas_best_kernels(void);
/* What "auto" asks for: the best set, except on AMD Zen 1-4, where
 * OpenBLAS's AVX2 "Zen" set runs faster than its AVX-512 ones (blas_lib.c). */
const char *gpa__blas_auto_kernels(void);

#endif
