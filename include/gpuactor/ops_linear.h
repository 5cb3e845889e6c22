/* Typed calls for the linear layer and the 1-D convolution (docs/ops.md,
 * "linear" and "conv1d", has the semantics and the op names).
 *
 * Each call fills a gpa_op_call from its argument struct and goes through
 * gpa_submit: the same validation and the same errors but ENOTFOUND (the name
 * is fixed): Errors: EINVAL, ESHAPE, EDTYPE, ERANGE, EOVERFLOW, ESTALE,
 * ECLOSED, ESHUTDOWN, EAGAIN, ETIMEDOUT, ENOMEM. The message names the
 * offending argument; the same ordering within the queue.
 *
 * Threads: any thread may call these, as gpa_submit (not from inside an op
 * implementation). The argument struct is read during the call only.
 * out may be NULL: the message is then tracked by the batch only.
 *
 * Argument structs: `size` = sizeof the struct, or 0. A tensor whose buffer
 * is 0 is absent (optional bias b, bias gradient db, pre-activation pre).
 * All tensors are f32. */
#ifndef GPUACTOR_OPS_LINEAR_H
#define GPUACTOR_OPS_LINEAR_H
#include <stdint.h>

#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default)

/* ---- linear --------------------------------------------------------------- */

/* y = act(x W^T + b); x [...,in], W [out,in], b [out] (optional), y [...,out].
 * gelu != 0: act = GELU (tanh form); with pre given (buffer != 0), the
 * pre-activation x W^T + b is written to pre too (op "linear_gelu_fwd", what
 * the backward needs), else op "linear_fwd" with attr gelu. */
typedef struct gpa_linear_fwd_args {
  uint32_t size;
  gpa_tensor x, W, b, y, pre;
  int32_t gelu;
} gpa_linear_fwd_args;
gpa_status gpa_linear_fwd(gpa_queue *q, const gpa_linear_fwd_args *args, gpa_handle **out);

/* dx [...,in] = g W, dW [out,in] = g^T x, db [out] = column sums of g
 * (optional: op "linear_bwd" with db, "linear_bwd_nobias" without), where
 * g = dy, or dy * gelu'(pre) when gelu != 0 (pre [...,out] required: the
 * forward's pre-activation). */
typedef struct gpa_linear_bwd_args {
  uint32_t size;
  gpa_tensor dy, x, W, pre, dx, dW, db;
  int32_t gelu;
} gpa_linear_bwd_args;
gpa_status gpa_linear_bwd(gpa_queue *q, const gpa_linear_bwd_args *args, gpa_handle **out);

/* ---- conv1d --------------------------------------------------------------- */

/* Geometry shared by both directions. stride, dilation, groups: 0 = 1.
 * padding: zeros on each side. causal != 0: (K-1)*dilation zeros on the left
 * only (padding must be 0). Lout = (L + pads - dilation*(K-1) - 1)/stride + 1.
 * layout: GPA_CONV1D_NCL (0, the default) or GPA_CONV1D_NLC (channels
 * last: x [B,L,Cin], y [B,Lout,Cout], dx and dy likewise; W unchanged). */
typedef struct gpa_conv1d_geometry {
  int64_t stride, padding, dilation, groups;
  int32_t causal;
  int32_t layout; /* in what was the struct's tail padding: its size is unchanged */
} gpa_conv1d_geometry;
#define GPA_CONV1D_NCL 0
#define GPA_CONV1D_NLC 1

/* y [B,Cout,Lout] from x [B,Cin,L], W [Cout,Cin/groups,K], b [Cout]
 * (optional); [B,L,Cin] and [B,Lout,Cout] under GPA_CONV1D_NLC. Op
 * "conv1d_fwd". */
typedef struct gpa_conv1d_fwd_args {
  uint32_t size;
  gpa_tensor x, W, b, y;
  gpa_conv1d_geometry geom;
} gpa_conv1d_fwd_args;
gpa_status gpa_conv1d_fwd(gpa_queue *q, const gpa_conv1d_fwd_args *args, gpa_handle **out);

/* dx [B,Cin,L], dW, db [Cout] (optional: op "conv1d_bwd" with it,
 * "conv1d_bwd_nobias" without) from dy [B,Cout,Lout]. */
typedef struct gpa_conv1d_bwd_args {
  uint32_t size;
  gpa_tensor dy, x, W, dx, dW, db;
  gpa_conv1d_geometry geom;
} gpa_conv1d_bwd_args;
gpa_status gpa_conv1d_bwd(gpa_queue *q, const gpa_conv1d_bwd_args *args, gpa_handle **out);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
