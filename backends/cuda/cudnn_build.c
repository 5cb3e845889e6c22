/* The cuDNN graph builders' common steps (cudnn_build.h). */
#include <stdbool.h>

#include "backends/cuda/cudnn_build.h"

cudnnBackendDescriptor_t gpa__dnn_mk(gpa__dnn_b *b, cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d = NULL;
  if (b->s) return NULL;
  if (b->g->n == GPA__DNN_DESCS) {
    b->s = CUDNN_STATUS_INTERNAL_ERROR;
    b->what = "too many descriptors";
    return NULL;
  }
  b->s = b->A->cudnnBackendCreateDescriptor(t, &d);
  if (b->s) {
    b->what = "create descriptor";
    return NULL;
  }
  b->g->d[b->g->n++] = d;
  return d;
}

void gpa__dnn_set(gpa__dnn_b *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what) {
  if (b->s) return;
  b->s = b->A->cudnnBackendSetAttribute(d, name, t, n, v);
  if (b->s) b->what = what ? what : "set attribute";
}

void gpa__dnn_fin(gpa__dnn_b *b, cudnnBackendDescriptor_t d, const char *what) {
  if (b->s) return;
  b->s = b->A->cudnnBackendFinalize(d);
  if (b->s) b->what = what;
}

void gpa__dnn_op(gpa__dnn_b *b, cudnnBackendDescriptor_t o, const char *what) {
  gpa__dnn_fin(b, o, what);
  for (int i = b->g->n - 1; i >= 0 && !b->s; i--)
    if (b->g->d[i] == o) {
      b->g->op[i] = 1;
      break;
    }
}

cudnnBackendDescriptor_t gpa__dnn_tensor(gpa__dnn_b *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                                         const int64_t str[4], int flags) {
  cudnnBackendDescriptor_t t = gpa__dnn_mk(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t align = 16;
  bool virt = flags & GPA__DNN_VIRT, byval = flags & GPA__DNN_BYVAL;
  if (!uid) uid = b->vuid++;
  gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
  gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dims");
  gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
  gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  if (virt) gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "virtual tensor");
  if (byval) gpa__dnn_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, "by-value tensor");
  gpa__dnn_fin(b, t, "tensor");
  return t;
}
