/* Host fallback: a built-in op without a CUDA kernel (attention today) or a
 * case a kernel declines runs its host implementation on staged copies.
 *
 * Synchronous on the actor thread: wait for the stream, copy every buffer
 * range the op names to pinned host memory (one range per buffer, covering
 * all of its tensors, so aliasing between inputs and outputs is preserved
 * exactly), run the host implementation inline (loops inline, host
 * scratch), copy the ranges
 * that hold outputs back, wait again. Correct on a GPU, slow by design;
 * docs/cuda.md lists which ops take it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

typedef struct span {
  gpa_buffer_id buf;
  CUdeviceptr base; /* device address of the buffer's offset 0 */
  uint64_t lo, hi;  /* byte range within the buffer */
  uint64_t at;      /* position in the staging block */
  bool written;
} span;

static uint64_t tensor_bytes(const gpa_tensor *t) {
  int64_t n = gpa_tensor_numel(t);
  return n > 0 ? (uint64_t)n * gpa_dtype_size(t->dtype) : 0;
}

gpa_status gpa__cu_fallback(const gpa_op_exec *x) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  const gpa_op_desc *op = C->cur_op;
  if (!op || !op->host) {
    snprintf(x->msg, x->msg_size, "%s: no CUDA kernel and no host implementation to fall back to",
             op ? op->name : "op");
    return GPA_EUNSUPPORTED;
  }
  gpa__log(GPA_LOG_DEBUG, C->host.log_level, "cuda: %s runs on the host fallback", op->name);
  uint32_t nt = x->n_inputs + x->n_outputs;
  span sp[GPA__MAX_TENSORS];
  uint32_t ns = 0;
  for (uint32_t i = 0; i < nt; i++) {
    const gpa_tensor *t = i < x->n_inputs ? &x->inputs[i] : &x->outputs[i - x->n_inputs];
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)(i < x->n_inputs ? x->in[i] : x->out[i - x->n_inputs]);
    uint64_t lo = t->offset, hi = t->offset + tensor_bytes(t);
    uint32_t k = 0;
    while (k < ns && sp[k].buf != t->buffer) k++;
    if (k == ns) {
      sp[ns++] = (span){t->buffer, p - t->offset, lo, hi, 0, false};
    } else {
      if (lo < sp[k].lo) sp[k].lo = lo;
      if (hi > sp[k].hi) sp[k].hi = hi;
    }
    if (i >= x->n_inputs) sp[k].written = true;
  }
  uint64_t total = 0;
  for (uint32_t k = 0; k < ns; k++) {
    sp[k].at = total;
    total += (sp[k].hi - sp[k].lo + 63) & ~(uint64_t)63;
  }
  gpa_status st = gpa__cu_sync(x);
  if (st != GPA_OK) return st;
  gpa__cu_stage *stage = gpa__cu_stage_get(C, total ? total : 64);
  if (!stage) {
    snprintf(x->msg, x->msg_size, "%s (host fallback): out of pinned memory for %llu bytes", op->name,
             (unsigned long long)total);
    return GPA_ENOMEM;
  }
  char *h = stage->p;
  CUstream s = C->cur_q->s;
  CUresult e = CUDA_SUCCESS;
  for (uint32_t k = 0; k < ns && e == CUDA_SUCCESS; k++)
    if (sp[k].hi > sp[k].lo) e = C->cu.cuMemcpyDtoHAsync(h + sp[k].at, sp[k].base + sp[k].lo, sp[k].hi - sp[k].lo, s);
  if (e == CUDA_SUCCESS) e = C->cu.cuStreamSynchronize(s);
  if (e != CUDA_SUCCESS) {
    gpa__cu_stage_put(C, stage);
    return gpa__cu_check(C, e, "host fallback: copy in", x->msg, x->msg_size);
  }
  void *ptrs[GPA__MAX_TENSORS];
  for (uint32_t i = 0; i < nt; i++) {
    const gpa_tensor *t = i < x->n_inputs ? &x->inputs[i] : &x->outputs[i - x->n_inputs];
    uint32_t k = 0;
    while (sp[k].buf != t->buffer) k++;
    ptrs[i] = h + sp[k].at + (t->offset - sp[k].lo);
  }
  gpa_op_exec hx = *x;
  hx.in = ptrs;
  hx.out = ptrs + x->n_inputs;
  hx.stream = NULL;
  hx.env = x->env; /* inline loops, host scratch (run() cleared scratch_fn) */
  hx.user_data = op->user_data;
  st = op->host(&hx);
  if (st == GPA_OK) {
    for (uint32_t k = 0; k < ns && e == CUDA_SUCCESS; k++)
      if (sp[k].written && sp[k].hi > sp[k].lo)
        e = C->cu.cuMemcpyHtoDAsync(sp[k].base + sp[k].lo, h + sp[k].at, sp[k].hi - sp[k].lo, s);
    if (e == CUDA_SUCCESS) e = C->cu.cuStreamSynchronize(s);
    if (e != CUDA_SUCCESS) st = gpa__cu_check(C, e, "host fallback: copy out", x->msg, x->msg_size);
  }
  gpa__cu_stage_put(C, stage);
  return st;
}
