/* Building cuDNN backend graphs (cudnn_graph.c: attention, cudnn_conv.c:
 * conv1d): descriptors created into a gpa__dnn_descs (freed together), the
 * first failing step kept and every later step skipped, so a builder is a
 * straight list of calls with one check at its end. */
#ifndef GPA_BACKENDS_CUDA_CUDNN_BUILD_H
#define GPA_BACKENDS_CUDA_CUDNN_BUILD_H
#include <stdint.h>

#include "backends/cuda/cudnn.h"

typedef struct gpa__dnn_b {
  const gpa__cudnn_api *A;
  gpa__dnn_descs *g;
  cudnnStatus_t s;  /* the first failure, or success */
  const char *what; /* the step that failed first */
  int64_t vuid;     /* the next unique id for a tensor made with uid 0 */
} gpa__dnn_b;

enum { GPA__DNN_VIRT = 1, GPA__DNN_BYVAL = 2 };

cudnnBackendDescriptor_t gpa__dnn_mk(gpa__dnn_b *b, cudnnBackendDescriptorType_t t);
/* what: the step named on failure (NULL: "set attribute") */
void gpa__dnn_set(gpa__dnn_b *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what);
void gpa__dnn_fin(gpa__dnn_b *b, cudnnBackendDescriptor_t d, const char *what);
/* Finalizes an operation and marks it for the graph's operation list. */
void gpa__dnn_op(gpa__dnn_b *b, cudnnBackendDescriptor_t o, const char *what);
/* A tensor of four dims with the given strides, 16-byte aligned; uid 0
 * takes the next virtual id; flags GPA__DNN_VIRT / GPA__DNN_BYVAL. */
cudnnBackendDescriptor_t gpa__dnn_tensor(gpa__dnn_b *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                                         const int64_t str[4], int flags);
#endif
