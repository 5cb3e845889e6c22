/* Host kernels of attention (fp32), flash style: tiled, online softmax,
 * never an S x Sk matrix in memory.
 *   q[B,S,H,D], k/v[B,Sk,Hkv,D] (H % Hkv == 0; query head h reads kv head
 *   h / (H/Hkv)), lens[B] (nullable: all Sk) ->
 *   o[B,S,H,D] = softmax(scale * q k^T, masked) v,   lse[B,H,S] = log sum exp.
 * Key j is visible to query i of batch b iff j < lens[b] and, when causal,
 * j <= i + Sk - S (bottom-right aligned: the last query sees the last key).
 * A query with no visible key gets o = 0 and lse = -inf; its gradients are 0.
 *
 * Threads: the forward splits over (batch, head, 64-query tile), the
 * backward over (batch, kv head), or, for fewer than 4 of those, over key
 * tiles (dk, dv) then query tiles (dq); each work item runs serially with
 * tile GEMMs (tgemm.h), so results are bitwise identical for any thread
 * count and either backward split.
 * Workspace: per work-range tiles allocated by the kernel (a few hundred KB,
 * plus G*S floats per backward item, G = H/Hkv, or B*H*S floats once in the
 * split backward). */
#ifndef GPA_KERNELS_HOST_ATTENTION_H
#define GPA_KERNELS_HOST_ATTENTION_H
#include <stdint.h>

#include "gpuactor/status.h"
#include "kernels/host/host_par.h"

typedef struct gpa__attn_geom {
  int64_t B, S, Sk, H, Hkv, D;
  float scale; /* > 0 */
  int causal;
  int bwd_path; /* backward work split: 0 by shape, 1 per (b, kv head), 2 per tile (tests) */
} gpa__attn_geom;

/* lens values must lie in [0, Sk] (callers validate; the kernel clamps).
 * Returns GPA_OK or GPA_ENOMEM (workspace). */
gpa_status gpa__attention_fwd(const gpa__par *par, const gpa__attn_geom *g, const float *q, const float *k,
                              const float *v, const int32_t *lens, float *o, float *lse);

/* dq, dk, dv from dout[B,S,H,D] and the forward's o and lse. */
gpa_status gpa__attention_bwd(const gpa__par *par, const gpa__attn_geom *g, const float *dout, const float *q,
                              const float *k, const float *v, const float *o, const float *lse,
                              const int32_t *lens, float *dq, float *dk, float *dv);

#endif
