/* Attention on CUDA: fp32 flash attention (kernels/cuda/attention.cu),
 * forward and deterministic backward, head dims up to 256; bf16 and fp16
 * with tensor cores (kernels/cuda/attention_lowp.cu), forward and
 * deterministic backward, head dims that are multiples of 16 up to 256.
 *
 * Lengths: each value must lie in [0, Sk] (GPA_ERANGE otherwise, with the
 * host's message), checked on the device and read at completion (no
 * synchronization; the kernels clamp them meanwhile). Shapes the kernels
 * do not take (grid dimensions over the limits, shared memory over the
 * device's opt-in maximum) run on the host fallback. */
#include <math.h>
#include <stdio.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernel_list.h"

#define BC 32 /* keys per tile (attention.cu) */
#define FWD_BR 16
#define BQ 32

/* Head-dim class: index of the kernel variant (32, 64, 96, 128, 256). */
static int dclass(int64_t D) { return D <= 32 ? 0 : D <= 64 ? 1 : D <= 96 ? 2 : D <= 128 ? 3 : 4; }

typedef struct attn_geom {
  int B, S, Sk, H, Hkv, D, causal;
  float scale;
} attn_geom;

static gpa_status geom(const gpa_op_exec *x, const gpa_tensor *q, const gpa_tensor *k, attn_geom *g) {
  for (int i = 0; i < 4; i++)
    if (q->shape[i] > 0x7fffffff || k->shape[i] > 0x7fffffff) return GPA_SKIP;
  g->B = (int)q->shape[0];
  g->S = (int)q->shape[1];
  g->H = (int)q->shape[2];
  g->D = (int)q->shape[3];
  g->Sk = (int)k->shape[1];
  g->Hkv = (int)k->shape[2];
  double sc = gpa__cu_attr_f(x, "scale", 0.0);
  g->scale = sc > 0 ? (float)sc : (float)(1.0 / sqrt((double)g->D));
  g->causal = (int)gpa__cu_attr_i(x, "causal", 0);
  if (g->B > 65535 || g->H > 65535) return GPA_SKIP; /* grid y, z */
  return GPA_OK;
}

#define RES_BYTES 256 /* the lengths check's two results, at the start of the scratch */

/* Checks the lengths against [0, Sk] on the device (the embedding ids'
 * check kernels); the outcome is read when the op completes, which then
 * fails with ERANGE and the host's message. The kernels clamp the values,
 * so a bad length reads nothing out of range meanwhile. */
static gpa_status check_lengths(const gpa_op_exec *x, const char *op, void *lens, const attn_geom *g,
                                CUdeviceptr res) {
  if (!lens || g->B == 0) return GPA_OK;
  gpa__cu_ctx *C = gpa__cu_of(x);
  GPA__CU_TRY(gpa__cu_check(C, C->cu.cuMemsetD32Async(res, 0xffffffffu, 4, (CUstream)x->stream),
                            "cuMemsetD32Async", x->msg, x->msg_size));
  long long n = g->B, v = (long long)g->Sk + 1, ignore = 0;
  int use_ignore = 0;
  void *a1[] = {&lens, &n, &v, &ignore, &use_ignore, &res};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_IDX_CHECK, gpa__cu_blocks(x, n, 256), 1, 1, 256, 1, 0, a1));
  void *a2[] = {&lens, &res};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_IDX_FETCH, 1, 1, 1, 32, 1, 0, a2));
  return gpa__cu_post_check(x, GPA__CU_POST_LENGTHS, op, res, g->Sk, 0);
}

/* Allows kernel id `smem` bytes of dynamic shared memory; 0 if it cannot. */
static int allow_smem(const gpa_op_exec *x, int id, unsigned smem) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  if (smem <= 48 * 1024) return 1;
  if ((int)smem > C->max_smem_optin) return 0;
  CUfunction f = gpa__cu_fn(x, id);
  return f && C->cu.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem) ==
                  CUDA_SUCCESS;
}

static unsigned fwd_smem(int D) { return (unsigned)(sizeof(float) * (size_t)(BC * (D | 1) + BC * D + FWD_BR * D + 4 * 32)); }
static unsigned bwd_smem(int D) {
  return (unsigned)(sizeof(float) * (size_t)(2 * BC * (D | 1) + 2 * BQ * D + 2 * BQ * (BC + 1) + 2 * BQ));
}

/* bf16/fp16 (attention_lowp.cu): 64-row tiles of T with rows of D + 8.
 * Forward: K and V tiles, per warp fp32 scores [16][68] and P [16][72];
 * D > 128: O too, fp32 [64][D+4]. Backward: K, V, Q, dO tiles, per warp
 * fp32 chunks of S and dP [16][20] each, P and dS [64][72], lse and delta
 * [64]; D > 128: two blocks per tile, one per half of the accumulated
 * columns. */
#define LP_BR 64
static unsigned lp_fwd_smem(int D) {
  return (unsigned)(2 * LP_BR * (D + 8) * 2 + 4 * 16 * 68 * 4 + 4 * 16 * 72 * 2 + (D > 128 ? LP_BR * (D + 4) * 4 : 0));
}
static unsigned lp_bwd_smem(int D) {
  return (unsigned)(4 * LP_BR * (D + 8) * 2 + 4 * 2 * 16 * 20 * 4 + 2 * LP_BR * 72 * 2 + 2 * LP_BR * 4);
}

/* Offset of the bf16/fp16 kernel variant from its bf16 D <= 64 entry, or
 * -1 for a shape the tensor-core kernels do not take (the host fallback
 * runs it). */
static int lowp_variant(int dtype, int D) {
  if (dtype != GPA_BF16 && dtype != GPA_F16) return -1;
  if (D % 16 || D > 256) return -1;
  return (dtype == GPA_F16 ? 3 : 0) + (D > 64) + (D > 128);
}

static gpa_status fwd_cu(const gpa_op_exec *x) {
  attn_geom g;
  gpa_status st = geom(x, &x->inputs[0], &x->inputs[1], &g);
  if (st == GPA_SKIP) return gpa__cu_fallback(x);
  int lowp = x->inputs[0].dtype != GPA_F32, var = lowp_variant(x->inputs[0].dtype, g.D);
  if (lowp && var < 0) return gpa__cu_fallback(x);
  void *lens = x->n_inputs > 3 ? x->in[3] : NULL;
  CUdeviceptr res = lens ? gpa__cu_scratch(x, RES_BYTES) : 0;
  if (lens && !res) return GPA_ENOMEM;
  GPA__CU_TRY(check_lengths(x, "attention_fwd", lens, &g, res));
  int id = lowp ? GPA__K_ATT_FWD_BF64 + var : GPA__K_ATT_FWD32 + dclass(g.D);
  unsigned smem = lowp ? lp_fwd_smem(g.D) : fwd_smem(g.D), br = lowp ? LP_BR : FWD_BR;
  if (!allow_smem(x, id, smem)) return gpa__cu_fallback(x);
  void *q = x->in[0], *k = x->in[1], *v = x->in[2], *o = x->out[0], *lse = x->out[1];
  void *args[] = {&q, &k, &v, &lens, &o, &lse, &g.S, &g.Sk, &g.H, &g.Hkv, &g.D, &g.scale, &g.causal};
  return gpa__cu_launch(x, id, (unsigned)((g.S + br - 1) / br), (unsigned)g.H, (unsigned)g.B, 32, 4, smem, args);
}

static gpa_status bwd_cu(const gpa_op_exec *x) {
  attn_geom g;
  gpa_status st = geom(x, &x->inputs[1], &x->inputs[2], &g);
  if (st == GPA_SKIP) return gpa__cu_fallback(x);
  int dtype = x->inputs[1].dtype, lowp = dtype != GPA_F32, var = lowp_variant(dtype, g.D);
  if (lowp && var < 0) return gpa__cu_fallback(x);
  void *lens = x->n_inputs > 6 ? x->in[6] : NULL;
  int cls = dclass(g.D), warps = lowp ? 4 : cls == 4 ? 8 : 4;
  int kdkv = lowp ? GPA__K_ATT_DKV_BF64 + var : GPA__K_ATT_DKV32 + cls;
  int kdq = lowp ? GPA__K_ATT_DQ_BF64 + var : GPA__K_ATT_DQ32 + cls;
  int kdelta = !lowp ? GPA__K_ATT_DELTA : dtype == GPA_F16 ? GPA__K_ATT_DELTA_H : GPA__K_ATT_DELTA_BF;
  unsigned smem = lowp ? lp_bwd_smem(g.D) : bwd_smem(g.D), bk = lowp ? LP_BR : BC, bq = lowp ? LP_BR : BQ;
  unsigned halves = lowp && g.D > 128 ? 2 : 1; /* blocks per tile */
  if (!allow_smem(x, kdkv, smem) || !allow_smem(x, kdq, smem)) return gpa__cu_fallback(x);
  long long rows = (long long)g.B * g.S * g.H;
  CUdeviceptr scr = gpa__cu_scratch(x, RES_BYTES + (uint64_t)(rows > 0 ? rows : 1) * sizeof(float));
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr delta = scr + RES_BYTES;
  GPA__CU_TRY(check_lengths(x, "attention_bwd", lens, &g, scr));
  void *dout = x->in[0], *q = x->in[1], *k = x->in[2], *v = x->in[3], *o = x->in[4], *lse = x->in[5];
  void *dq = x->out[0], *dk = x->out[1], *dv = x->out[2], *dl = (void *)(uintptr_t)delta;
  void *a0[] = {&dout, &o, &dl, &rows, &g.S, &g.H, &g.D};
  if (rows > 0) GPA__CU_TRY(gpa__cu_launch(x, kdelta, gpa__cu_blocks(x, (rows + 7) / 8, 1), 1, 1, 32, 8, 0, a0));
  void *a1[] = {&dout, &q, &k, &v, &lse, &dl, &lens, &dq, &dk, &dv, &g.S, &g.Sk, &g.H, &g.Hkv, &g.D, &g.scale,
                &g.causal};
  GPA__CU_TRY(gpa__cu_launch(x, kdkv, (g.Sk + bk - 1) / bk * halves, (unsigned)g.Hkv, (unsigned)g.B, 32,
                             (unsigned)warps, smem, a1));
  return gpa__cu_launch(x, kdq, (g.S + bq - 1) / bq * halves, (unsigned)g.H, (unsigned)g.B, 32, (unsigned)warps,
                        smem, a1);
}

const gpa__cu_impl gpa__cu_ops_attn[] = {
    {"attention_fwd", fwd_cu},
    {"attention_bwd", bwd_cu},
    {NULL, NULL},
};
