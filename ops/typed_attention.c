/* Typed calls of the attention ops (include/gpuactor/ops_attention.h). */
#include "gpuactor/ops_attention.h"

#include "actor/internal.h"

gpa_status gpa_attention_fwd(gpa_queue *q, const gpa_attention_fwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_attention_fwd: args is NULL");
  gpa_tensor in[4] = {a->q, a->k, a->v, a->lengths}, o[2] = {a->o, a->lse};
  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, a->scale > 0 ? a->scale : 0.0},
                    {"causal", GPA_ATTR_INT, a->causal != 0, 0.0}};
  gpa_op_call c = {"attention_fwd", in, a->lengths.buffer ? 4u : 3u, o, 2, at, 2};
  return gpa_submit(q, &c, out);
}

gpa_status gpa_attention_bwd(gpa_queue *q, const gpa_attention_bwd_args *a, gpa_handle **out) {
  if (out) *out = NULL;
  if (!a) return gpa__fail(GPA_EINVAL, "gpa_attention_bwd: args is NULL");
  gpa_tensor in[7] = {a->dout, a->q, a->k, a->v, a->o, a->lse, a->lengths}, o[3] = {a->dq, a->dk, a->dv};
  gpa_attr at[2] = {{"scale", GPA_ATTR_FLOAT, 0, a->scale > 0 ? a->scale : 0.0},
                    {"causal", GPA_ATTR_INT, a->causal != 0, 0.0}};
  gpa_op_call c = {"attention_bwd", in, a->lengths.buffer ? 7u : 6u, o, 3, at, 2};
  return gpa_submit(q, &c, out);
}
