/* bf16 storage on the host backend: widen, run fp32, narrow (bf16_host.h). */
#include "ops/bf16_host.h"

#include <stdio.h>
#include <stdlib.h>

#include "kernels/host/bf16.h"
#include "ops/basic_check.h"

int gpa__has_bf16(const gpa_op_exec *x) {
  for (uint32_t i = 0; i < x->n_inputs; i++)
    if (x->inputs[i].dtype == GPA_BF16) return 1;
  for (uint32_t i = 0; i < x->n_outputs; i++)
    if (x->outputs[i].dtype == GPA_BF16) return 1;
  return 0;
}

/* fp32 bytes of a bf16 tensor's copy, rounded up to keep copies 64-byte aligned. */
static uint64_t copy_bytes(const gpa_tensor *t) {
  return t->dtype == GPA_BF16 ? ((uint64_t)gpa__chk_numel(t) * sizeof(float) + 63) & ~(uint64_t)63 : 0;
}

gpa_status gpa__bf16_host_run(const gpa_op_exec *x, gpa_op_impl_fn f32_impl) {
  enum { MAXT = 16 };
  if (x->n_inputs > MAXT || x->n_outputs > MAXT) {
    snprintf(x->msg, x->msg_size, "bf16 host path: at most %d inputs and outputs", MAXT);
    return GPA_EINVAL;
  }
  gpa_tensor ti[MAXT], to[MAXT];
  void *pi[MAXT], *po[MAXT];
  uint64_t total = 0;
  for (uint32_t i = 0; i < x->n_inputs; i++) total += copy_bytes(&x->inputs[i]);
  for (uint32_t i = 0; i < x->n_outputs; i++) total += copy_bytes(&x->outputs[i]);
  char *block = NULL;
  if (total && !(block = aligned_alloc(64, (size_t)total))) {
    snprintf(x->msg, x->msg_size, "bf16 host path: no memory for %llu bytes of fp32 copies",
             (unsigned long long)total);
    return GPA_ENOMEM;
  }
  gpa__par par = gpa__ops_par(x->env);
  char *next = block;
  for (uint32_t i = 0; i < x->n_inputs; i++) {
    ti[i] = x->inputs[i];
    pi[i] = x->in[i];
    if (ti[i].dtype != GPA_BF16) continue;
    ti[i].dtype = GPA_F32;
    ti[i].offset = 0;
    pi[i] = next;
    next += copy_bytes(&x->inputs[i]);
    gpa__bf16_widen(&par, pi[i], x->in[i], gpa__chk_numel(&ti[i]));
  }
  for (uint32_t i = 0; i < x->n_outputs; i++) {
    to[i] = x->outputs[i];
    po[i] = x->out[i];
    if (to[i].dtype != GPA_BF16) continue;
    to[i].dtype = GPA_F32;
    to[i].offset = 0;
    po[i] = NULL;
    for (uint32_t k = 0; k < x->n_inputs && !po[i]; k++) /* in place: share the input's copy */
      if (x->in[k] == x->out[i] && x->inputs[k].dtype == GPA_BF16) po[i] = pi[k];
    if (!po[i]) {
      po[i] = next;
      next += copy_bytes(&x->outputs[i]);
    }
  }
  gpa_op_exec y = *x;
  y.inputs = ti;
  y.outputs = to;
  y.in = pi;
  y.out = po;
  gpa_status st = f32_impl(&y);
  if (st == GPA_OK)
    for (uint32_t i = 0; i < x->n_outputs; i++)
      if (x->outputs[i].dtype == GPA_BF16) gpa__bf16_narrow(&par, x->out[i], po[i], gpa__chk_numel(&to[i]));
  free(block);
  return st;
}
