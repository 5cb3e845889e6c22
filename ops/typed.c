/* The typed-call helper of ops/family.h. */
#include "ops/family.h"

gpa_status gpa__typed_submit(gpa_queue *q, const void *args, const char *fn, const char *op, const gpa_tensor *in,
                             uint32_t n_in, const gpa_tensor *outs, uint32_t n_out, const gpa_attr *attrs,
                             uint32_t n_attrs, gpa_handle **out) {
  if (out) *out = NULL;
  if (!args) return gpa__fail(GPA_EINVAL, "%s: args is NULL", fn);
  gpa_op_call c = {op, in, n_in, outs, n_out, attrs, n_attrs};
  return gpa_submit(q, &c, out);
}
