/* The CUDA kernels of every op family, by id: the families' kernel lists
 * (GPA__CU_KERNELS_<FAMILY> in ops/<family>/<family>.h) composed into one
 * enum, so that the backend caches a loaded function per id and per actor.
 * A module is one gpa_cuda_kernels(gpa_cu_<mod> ...) target of
 * cmake/cuda_backend.cmake (one or more .cu files of kernels/cuda). Included by the
 * families' cuda.c files and ops/cuda_kernels.c only. */
#ifndef GPA_OPS_CUDA_KERNELS_H
#define GPA_OPS_CUDA_KERNELS_H
#include "backends/cuda/cuda_ops.h"
#include "ops/attention/attention.h"
#include "ops/cast/cast.h"
#include "ops/conv1d/conv1d.h"
#include "ops/core/core.h"
#include "ops/elementwise/elementwise.h"
#include "ops/embedding/embedding.h"
#include "ops/gelu/gelu.h"
#include "ops/layernorm/layernorm.h"
#include "ops/linear/linear.h"
#include "ops/metrics/metrics.h"
#include "ops/optim/optim.h"

#define GPA__CU_MODULES(M) M(ew) M(norm) M(emb) M(met) M(lin) M(conv) M(attn)

#define GPA__CU_KERNELS(K)        \
  GPA__CU_KERNELS_CORE(K)         \
  GPA__CU_KERNELS_ELEMENTWISE(K)  \
  GPA__CU_KERNELS_GELU(K)         \
  GPA__CU_KERNELS_OPTIM(K)        \
  GPA__CU_KERNELS_LAYERNORM(K)    \
  GPA__CU_KERNELS_EMBEDDING(K)    \
  GPA__CU_KERNELS_METRICS(K)      \
  GPA__CU_KERNELS_LINEAR(K)       \
  GPA__CU_KERNELS_CONV1D(K)       \
  GPA__CU_KERNELS_ATTENTION(K)    \
  GPA__CU_KERNELS_CAST(K)

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

/* ops/cuda_index.c: checks idx[0..n) against [0, v) (ignore_index when
 * use_ignore) on the device; the op fails at completion with ERANGE and the
 * host's message for the post-check `kind` (gpa__cu_post_check). res: 256
 * bytes of the op's scratch for the two results. */
#define GPA__CU_INDEX_RES_BYTES 256
gpa_status gpa__cu_check_index(const gpa_op_exec *x, CUdeviceptr res, const void *idx, long long n, long long v,
                               long long ignore, int use_ignore, int kind, const char *op, long long a, long long b);
/* The same check inside an op's own kernel, which records the first bad
 * position's (position << 32) | (uint32) value with one atomicMin on res[0]
 * (positions under 2^32 - 1): _begin before that kernel (res set to
 * "none"), _end behind it (res read when the op completes, unpacked:
 * GPA__CU_POST_PACKED). Saves gpa__cu_check_index's two launches. */
gpa_status gpa__cu_index_fused_begin(const gpa_op_exec *x, CUdeviceptr res);
gpa_status gpa__cu_index_fused_end(const gpa_op_exec *x, CUdeviceptr res, int kind, const char *op, long long a,
                                   long long b);

#endif
