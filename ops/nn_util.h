/* Small helpers shared by the linear, conv1d, attention and elementwise op families. */
#ifndef GPA_OPS_NN_UTIL_H
#define GPA_OPS_NN_UTIL_H
#include <stdint.h>

#include "actor/dtype.h"
#include "ops/basic_check.h"

/* bytes_moved of an op that reads every input and writes every output
 * once, each at its own dtype's size. */
static inline uint64_t gpa__nn_io_bytes(const gpa_op_sig *s) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < s->n_inputs; i++)
    n += gpa__dtype_size(s->inputs[i].dtype) * (uint64_t)gpa__chk_numel(&s->inputs[i]);
  for (uint32_t i = 0; i < s->n_outputs; i++)
    n += gpa__dtype_size(s->outputs[i].dtype) * (uint64_t)gpa__chk_numel(&s->outputs[i]);
  return n;
}

#endif
