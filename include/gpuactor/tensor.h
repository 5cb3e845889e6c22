#ifndef GPUACTOR_TENSOR_H
#define GPUACTOR_TENSOR_H
#include <stdint.h>

#include "limits.h" /* GPA_MAX_RANK */

#ifdef __cplusplus
extern "C" {
#endif
/* Everything declared here is exported; the rest of the library is hidden. */
#pragma GCC visibility push(default)

/* Element types. 0 is invalid so that an all-zero tensor is caught. */
typedef enum gpa_dtype {
  GPA_DTYPE_INVALID = 0,
  GPA_F32 = 1,
  GPA_F16 = 2,
  GPA_BF16 = 3,
  GPA_I32 = 4,
  GPA_U8 = 5,
  GPA_I64 = 6,
  GPA_DTYPE_COUNT_
} gpa_dtype;

/* Bytes per element; 0 for an invalid dtype. Any thread. */
uint32_t gpa_dtype_size(int dtype);
/* "f32", ...; "invalid" otherwise. Any thread. */
const char *gpa_dtype_name(int dtype);

/* A buffer id: slot index and generation. 0 is never a valid id. */
typedef uint64_t gpa_buffer_id;


/* A view of a buffer: row-major contiguous, starting `offset` bytes in. */
typedef struct gpa_tensor {
  gpa_buffer_id buffer;
  uint64_t offset;
  int32_t dtype; /* gpa_dtype */
  uint32_t rank; /* 0 = scalar (one element) */
  int64_t shape[GPA_MAX_RANK];
} gpa_tensor;

/* Elements of `t`, or -1 when a dimension is negative or the product
 * overflows int64. Any thread. */
int64_t gpa_tensor_numel(const gpa_tensor *t);

/* Attribute values of an op call. */
typedef enum gpa_attr_type { GPA_ATTR_NONE = 0, GPA_ATTR_INT = 1, GPA_ATTR_FLOAT = 2 } gpa_attr_type;

typedef struct gpa_attr {
  const char *name;
  int32_t type; /* gpa_attr_type */
  int64_t i;    /* GPA_ATTR_INT */
  double f;     /* GPA_ATTR_FLOAT */
} gpa_attr;

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
