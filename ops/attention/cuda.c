/* Attention on CUDA: fp32 forward and backward on tensor cores in 3xTF32
 * (kernels/cuda/attention_f32tc.cu, attention_f32tc_bwd.cu: fp32 accuracy,
 * head dims that are multiples of 16 up to 128), else fp32 flash attention
 * on SIMT (kernels/cuda/attention.cu),
 * forward and deterministic backward, head dims up to 256; bf16 and fp16
 * with tensor cores, FlashAttention-2 structure on mma.sync (kernels/cuda/
 * attention_fa2.cu, attention_fa2_bwd.cu), forward (o in fp32 or in the
 * storage type) and deterministic backward, head dims that are multiples
 * of 16 up to 256; with the op's deterministic = 0 (opt-in) up to 128 a
 * faster backward that adds dQ with fp32 atomics (fa2nd_kernel).
 *
 * Lengths: each value must lie in [0, Sk] (GPA_ERANGE otherwise, with the
 * host's message), checked on the device and read at completion (no
 * synchronization; the kernels clamp them meanwhile). Shapes the kernels
 * do not take (grid dimensions over the limits, shared memory over the
 * device's opt-in maximum) run on the host fallback. */
#include <math.h>
#include <stdio.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/attention/attention.h"
#include "ops/cuda_kernels.h"

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
  const gpa__attn_params *p = x->params;
  g->scale = p->scale > 0 ? (float)p->scale : (float)(1.0 / sqrt((double)g->D));
  g->causal = (int)p->causal;
  if (g->B > 65535 || g->H > 65535) return GPA_SKIP; /* grid y, z */
  return GPA_OK;
}

/* Lengths must lie in [0, Sk]: checked on the device, read at completion
 * (the op then fails with ERANGE and the host's message). The kernels clamp
 * them, so a bad length reads nothing out of range meanwhile. */
static gpa_status check_lengths(const gpa_op_exec *x, const char *op, void *lens, const attn_geom *g,
                                CUdeviceptr res) {
  if (!lens) return GPA_OK;
  return gpa__cu_check_index(x, res, lens, g->B, (long long)g->Sk + 1, 0, 0, GPA__CU_POST_LENGTHS, op, g->Sk, 0);
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

/* bf16/fp16: the FlashAttention-2-structured kernels (attention_fa2.cu,
 * attention_fa2_bwd.cu; their head comments have the tiling). Variant:
 * bf16 then fp16, each of the head-dim classes 64, 96, 128, 256; D a
 * multiple of 16 (the mma k step), else -1 and the host fallback runs it.
 * Shared memory: tiles of T with rows of class + 8 elements. Forward: a Q
 * tile of 128 rows (class 256: 64) and double-buffered K and V tiles of 64
 * keys (32). Backward dK/dV: K and V tiles of 64 keys, double-buffered Q
 * and dO steps of 32 rows (16) and their lse and delta; dQ: Q and dO tiles
 * of 64 rows, double-buffered K and V tiles of 64 keys (32). */
static int fa2_class(int D) { return D <= 64 ? 0 : D <= 96 ? 1 : D <= 128 ? 2 : 3; }
static int fa2_variant(int dtype, int D) {
  if (dtype != GPA_BF16 && dtype != GPA_F16) return -1;
  if (D % 16 || D > 256) return -1;
  return (dtype == GPA_F16 ? 4 : 0) + fa2_class(D);
}
static unsigned fa2_ld(int D) { static const int dm[4] = {64, 96, 128, 256}; return (unsigned)dm[fa2_class(D)] + 8; }
/* the forward's query rows per block and warps per block (attention_fa2.cu,
 * fa2_fwd_cfg): 32 rows a warp (two m-tiles) up to D 128, 16 for D 256 */
static unsigned fa2_fwd_br(int D) { return D > 128 ? 64 : 128; }
static unsigned fa2_fwd_warps(int D) { return fa2_fwd_br(D) / (D > 128 ? 16 : 32); }
static unsigned fa2_fwd_smem(int D) { return (fa2_fwd_br(D) + 4 * (D > 128 ? 32 : 64)) * fa2_ld(D) * 2; }
static unsigned fa2_dkv_smem(int D) {
  const unsigned bq = D > 128 ? 16 : 32;
  return (2 * 64 + 4 * bq) * fa2_ld(D) * 2 + 4 * bq * 4;
}
/* dQ pass (fa2_bwd_cfg): 128 query rows a block (32 a warp), 64 for D 256;
 * key tiles of 64 for D 64, 32 above */
static unsigned fa2_dq_br(int D) { return D > 128 ? 64 : 128; }
static unsigned fa2_dq_smem(int D) { return (2 * fa2_dq_br(D) + 4 * (D > 64 ? 32 : 64)) * fa2_ld(D) * 2; }
/* The exact-head-dim variant (attention_fa2.cu's EX kernels, compiled for
 * D = 64, 96, 128 exactly): the default for these head dims, bf16 and fp16
 * (bf16 on an H100: 1.5-1.9x the class kernels, docs/cuda.md);
 * GPA_FA2_EXACT=0 (fa2_exact 1) keeps the class kernels. Its index 0..5
 * (bf16 64, 96, 128, then fp16, as the kernel table orders them) for these
 * calls, else -1 (the kernels above). Same grid, block and shared memory as
 * the class's kernels (the dQ pass at D 64 takes 32-key tiles there and
 * uses less of its allocation). */
static int fa2x_index(const gpa_op_exec *x, int dtype, int D) {
  if (gpa__cu_of(x)->host.fa2_exact == 1) return -1;
  const int d = D == 64 ? 0 : D == 96 ? 1 : D == 128 ? 2 : -1;
  return d < 0 ? -1 : dtype == GPA_BF16 ? d : dtype == GPA_F16 ? 3 + d : -1;
}
unsigned long long gpa__attn_fa2x_fwd_calls, gpa__attn_fa2x_bwd_calls, gpa__attn_fa2nd_bwd_calls;
/* The non-deterministic backward (the op's deterministic = 0; bf16/fp16,
 * classes 64, 96, 128): the dK/dV kernel also adds each key tile's share of
 * dQ with fp32 atomics (attention_fa2_bwd.cu, fa2_dq_red), and no dQ pass
 * runs. Its kernel id (exact-head-dim where fa2x_index gives one) or -1
 * (class 256: the deterministic kernels). Shared memory: the dK/dV
 * kernel's plus the step's dS^T, 64 keys x (32 + 8) elements. */
static int fa2nd_kernel(int dtype, int D, int fx) {
  if (fa2_class(D) > 2) return -1;
  return fx >= 0 ? GPA__K_FA2NX_DKV_BF64 + fx : GPA__K_FA2N_DKV_BF64 + (dtype == GPA_F16 ? 3 : 0) + fa2_class(D);
}
static unsigned fa2nd_smem(int D) { return fa2_dkv_smem(D) + 64 * (32 + 8) * 2; }
/* The 128-key dK/dV kernels (attention_fa2_dkv128.cu, GPA_FA2_DKV128=1 gives
 * fa2_dkv128 2): the deterministic backward at D = 64, 96, 128 exactly, bf16
 * and fp16; 8 warps. Kernel id or -1 (the kernels above). Shared memory
 * (fa2k_cfg): K and V tiles of 128 keys, double-buffered Q and dO steps of
 * 64 rows (rows of D + 8), P^T and dS^T (128 x (64 + 8)), lse and delta. */
unsigned long long gpa__attn_fa2k_bwd_calls;
static int fa2k_kernel(const gpa_op_exec *x, int dtype, int D) {
  if (gpa__cu_of(x)->host.fa2_dkv128 != 2) return -1;
  const int d = D == 64 ? 0 : D == 96 ? 1 : D == 128 ? 2 : -1;
  return d < 0 ? -1 : GPA__K_FA2K_DKV_BF64 + (dtype == GPA_F16 ? 3 : 0) + d;
}
static unsigned fa2k_smem(int D) {
  return (2 * 128 + 4 * 64) * (unsigned)(D + 8) * 2 + 2 * 128 * (64 + 8) * 2 + 4 * 64 * 4;
}
/* cp.async moves 16 bytes, the fp32 outputs are written in pairs */
static int fa2_aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* fp32 on tensor cores (attention_f32tc.cu), 3xTF32: D a multiple of 16 up
 * to 128 (-1 otherwise: the SIMT kernels run it). Classes 64 (64-key
 * tiles), 96 and 128 (32-key tiles); 64-row Q tiles, 4 warps. Shared
 * memory: the Q tile and double-buffered K tiles in rows of class + 16
 * floats, double-buffered V tiles in rows of class + 4. */
static int tc32_class(int D) { return D % 16 || D > 128 ? -1 : D <= 64 ? 0 : D <= 96 ? 1 : 2; }
static unsigned tc32_fwd_smem(int D) {
  static const unsigned dm[3] = {64, 96, 128};
  const unsigned c = dm[tc32_class(D)], kt = c > 64 ? 32 : 64;
  return 4 * (64 * (c + 16) + 2 * kt * (c + 16) + 2 * kt * (c + 4));
}

/* The backward (attention_f32tc_bwd.cu, tc32b_cfg) takes the forward's
 * head dims in classes 32, 64, 96, 128 (index 0..3; -1: the SIMT kernels):
 * dK/dV blocks of 64 keys, K and V in rows of class + 16, double-buffered Q
 * and dO steps of 32 rows (classes 32, 64; 16 above) in rows of class + 4
 * with their lse and delta; dQ blocks of 64 query rows (Q and dO in rows of
 * class + 16), double-buffered K (rows of class + 4) and V (class + 16)
 * tiles of 32 keys (classes 32, 64; 16 above). */
static int tc32b_class(int D) { return tc32_class(D) < 0 ? -1 : D <= 32 ? 0 : 1 + tc32_class(D); }
static unsigned tc32_dkv_smem(int D) {
  static const unsigned dm[4] = {32, 64, 96, 128};
  const unsigned c = dm[tc32b_class(D)], qs = c > 64 ? 16 : 32;
  return 4 * (2 * 64 * (c + 16) + 4 * qs * (c + 4) + 4 * qs);
}
static unsigned tc32_dq_smem(int D) {
  static const unsigned dm[4] = {32, 64, 96, 128};
  const unsigned c = dm[tc32b_class(D)], kt = c > 64 ? 16 : 32;
  return 4 * (2 * 64 * (c + 16) + 2 * kt * (c + 4) + 2 * kt * (c + 16));
}

unsigned long long gpa__attn_tc32_calls, gpa__attn_tc32_bwd_calls;

/* tc: the fp32 forward may take the tensor-core kernels (0: the SIMT
 * ones only, for the benchmark's comparison). */
static gpa_status own_fwd(const gpa_op_exec *x, int tc) {
  attn_geom g;
  gpa_status st = geom(x, &x->inputs[0], &x->inputs[1], &g);
  if (st == GPA_SKIP) return gpa__cu_fallback(x);
  int lowp = x->inputs[0].dtype != GPA_F32, var = fa2_variant(x->inputs[0].dtype, g.D);
  void *q = x->in[0], *k = x->in[1], *v = x->in[2], *o = x->out[0], *lse = x->out[1];
  const int o_f32 = x->outputs[0].dtype == GPA_F32;
  if (lowp && (var < 0 || !fa2_aligned(q, 16) || !fa2_aligned(k, 16) || !fa2_aligned(v, 16) ||
               !fa2_aligned(o, o_f32 ? 8 : 16)))
    return gpa__cu_fallback(x);
  const int tcc = lowp || !tc ? -1 : tc32_class(g.D);
  const int use_tc = tcc >= 0 && fa2_aligned(q, 16) && fa2_aligned(k, 16) && fa2_aligned(v, 16) &&
                     fa2_aligned(o, 8) && allow_smem(x, GPA__K_TC32_FWD64 + tcc, tc32_fwd_smem(g.D));
  void *lens = x->n_inputs > 3 ? x->in[3] : NULL;
  CUdeviceptr res = lens ? gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES) : 0;
  if (lens && !res) return GPA_ENOMEM;
  GPA__CU_TRY(check_lengths(x, "attention_fwd", lens, &g, res));
  if (use_tc) {
    __atomic_fetch_add(&gpa__attn_tc32_calls, 1, __ATOMIC_RELAXED);
    void *a[] = {&q, &k, &v, &lens, &o, &lse, &g.S, &g.Sk, &g.H, &g.Hkv, &g.D, &g.scale, &g.causal};
    return gpa__cu_launch(x, GPA__K_TC32_FWD64 + tcc, (unsigned)((g.S + 63) / 64), (unsigned)g.H, (unsigned)g.B,
                          32, 4, tc32_fwd_smem(g.D), a);
  }
  const int fx = lowp ? fa2x_index(x, x->inputs[0].dtype, g.D) : -1;
  int id = fx >= 0 ? GPA__K_FA2X_FWD_BF64 + fx : lowp ? GPA__K_FA2_FWD_BF64 + var : GPA__K_ATT_FWD32 + dclass(g.D);
  unsigned smem = lowp ? fa2_fwd_smem(g.D) : fwd_smem(g.D), br = lowp ? fa2_fwd_br(g.D) : FWD_BR;
  if (!allow_smem(x, id, smem)) return gpa__cu_fallback(x);
  if (lowp) { /* o in fp32 or in the storage type */
    void *o32 = o_f32 ? o : NULL, *oT = o_f32 ? NULL : o;
    void *a[] = {&q, &k, &v, &lens, &o32, &oT, &lse, &g.S, &g.Sk, &g.H, &g.Hkv, &g.D, &g.scale, &g.causal};
    if (fx >= 0) __atomic_fetch_add(&gpa__attn_fa2x_fwd_calls, 1, __ATOMIC_RELAXED);
    return gpa__cu_launch(x, id, (unsigned)((g.S + br - 1) / br), (unsigned)g.H, (unsigned)g.B, 32,
                          fa2_fwd_warps(g.D), smem, a);
  }
  void *args[] = {&q, &k, &v, &lens, &o, &lse, &g.S, &g.Sk, &g.H, &g.Hkv, &g.D, &g.scale, &g.causal};
  return gpa__cu_launch(x, id, (unsigned)((g.S + br - 1) / br), (unsigned)g.H, (unsigned)g.B, 32, 4, smem, args);
}
gpa_status gpa__attn_own_fwd_cu(const gpa_op_exec *x) { return own_fwd(x, 1); }
gpa_status gpa__attn_simt32_fwd_cu(const gpa_op_exec *x) { return own_fwd(x, 0); }

/* tc: the fp32 backward may take the tensor-core kernels (0: the SIMT
 * ones only, for the benchmark's comparison). */
static gpa_status own_bwd(const gpa_op_exec *x, int tc) {
  attn_geom g;
  gpa_status st = geom(x, &x->inputs[1], &x->inputs[2], &g);
  if (st == GPA_SKIP) return gpa__cu_fallback(x);
  int dtype = x->inputs[1].dtype, lowp = dtype != GPA_F32, var = fa2_variant(dtype, g.D);
  const int o_f32 = x->inputs[4].dtype == GPA_F32;
  if (lowp) {
    int ok = var >= 0;
    for (int i = 0; i < 4; i++) ok = ok && fa2_aligned(x->in[i], 16);
    for (int i = 0; i < 3; i++)
      ok = ok && x->outputs[i].dtype == x->outputs[0].dtype && fa2_aligned(x->out[i], 8); /* fp32 or all T */
    if (!ok) return gpa__cu_fallback(x);
  }
  void *lens = x->n_inputs > 6 ? x->in[6] : NULL;
  int cls = dclass(g.D), warps = lowp ? 4 : cls == 4 ? 8 : 4;
  const int fx = lowp ? fa2x_index(x, dtype, g.D) : -1;
  int kdkv = fx >= 0 ? GPA__K_FA2X_DKV_BF64 + fx : lowp ? GPA__K_FA2_DKV_BF64 + var : GPA__K_ATT_DKV32 + cls;
  int kdq = fx >= 0 ? GPA__K_FA2X_DQ_BF64 + fx : lowp ? GPA__K_FA2_DQ_BF64 + var : GPA__K_ATT_DQ32 + cls;
  int kdelta = !lowp ? GPA__K_ATT_DELTA
               : o_f32 ? (dtype == GPA_F16 ? GPA__K_FA2_DELTA32_H : GPA__K_FA2_DELTA32_BF)
                       : (dtype == GPA_F16 ? GPA__K_FA2_DELTA_H : GPA__K_FA2_DELTA_BF);
  unsigned smem = lowp ? fa2_dkv_smem(g.D) : bwd_smem(g.D), smem_q = lowp ? fa2_dq_smem(g.D) : smem;
  unsigned bk = lowp ? 64 : BC, bq = lowp ? fa2_dq_br(g.D) : BQ;
  unsigned halves = lowp && g.D > 128 ? 2 : 1; /* dK/dV blocks per key tile */
  /* fp32: the 3xTF32 kernels wherever the forward's would run (the same
   * classes; cp.async reads dO, q, k, v, the gradients go out in pairs) */
  int tcc = lowp || !tc ? -1 : tc32b_class(g.D);
  for (int i = 0; i < 4 && tcc >= 0; i++) tcc = fa2_aligned(x->in[i], 16) ? tcc : -1;
  for (int i = 0; i < 3 && tcc >= 0; i++) tcc = fa2_aligned(x->out[i], 8) ? tcc : -1;
  if (tcc >= 0 && allow_smem(x, GPA__K_TC32_DKV32 + tcc, tc32_dkv_smem(g.D)) &&
      allow_smem(x, GPA__K_TC32_DQ32 + tcc, tc32_dq_smem(g.D))) {
    kdkv = GPA__K_TC32_DKV32 + tcc, kdq = GPA__K_TC32_DQ32 + tcc, bk = 64, bq = 64;
    smem = tc32_dkv_smem(g.D), smem_q = tc32_dq_smem(g.D);
    __atomic_fetch_add(&gpa__attn_tc32_bwd_calls, 1, __ATOMIC_RELAXED);
  }
  const gpa__attn_params *prm = x->params;
  int knd = lowp && !prm->deterministic ? fa2nd_kernel(dtype, g.D, fx) : -1;
  if (knd >= 0 && !allow_smem(x, knd, fa2nd_smem(g.D))) knd = -1;
  int kv_warps = warps, kk = lowp && knd < 0 ? fa2k_kernel(x, dtype, g.D) : -1;
  if (kk >= 0 && !allow_smem(x, kk, fa2k_smem(g.D))) kk = -1; /* an A100 at D 128: the 64-key kernels */
  if (knd >= 0) kdkv = knd, smem = fa2nd_smem(g.D);
  else if (kk >= 0) kdkv = kk, smem = fa2k_smem(g.D), bk = 128, kv_warps = 8;
  if (knd < 0 && (!allow_smem(x, kdkv, smem) || !allow_smem(x, kdq, smem_q))) return gpa__cu_fallback(x);
  long long rows = (long long)g.B * g.S * g.H;
  int grads_t = x->outputs[0].dtype != GPA_F32;
  /* scratch: the lengths' check, delta, and (knd with dq in T) the fp32
   * dQ accumulator, 256-byte aligned */
  const uint64_t dl_bytes = ((uint64_t)(rows > 0 ? rows : 1) * sizeof(float) + 255) / 256 * 256;
  const uint64_t acc_bytes = knd >= 0 && grads_t ? (uint64_t)rows * (uint64_t)g.D * sizeof(float) : 0;
  CUdeviceptr scr = gpa__cu_scratch(x, GPA__CU_INDEX_RES_BYTES + dl_bytes + acc_bytes);
  if (!scr) return GPA_ENOMEM;
  CUdeviceptr delta = scr + GPA__CU_INDEX_RES_BYTES;
  GPA__CU_TRY(check_lengths(x, "attention_bwd", lens, &g, scr));
  void *dout = x->in[0], *q = x->in[1], *k = x->in[2], *v = x->in[3], *o = x->in[4], *lse = x->in[5];
  void *dq = x->out[0], *dk = x->out[1], *dv = x->out[2], *dl = (void *)(uintptr_t)delta;
  void *a0[] = {&dout, &o, &dl, &rows, &g.S, &g.H, &g.D};
  if (rows > 0) GPA__CU_TRY(gpa__cu_launch(x, kdelta, gpa__cu_blocks(x, (rows + 7) / 8, 1), 1, 1, 32, 8, 0, a0));
  /* the FA2 kernels' 18th parameter: dq, dk, dv in the storage type (the
   * fp32 kernels have 17 parameters; a launch reads as many as its kernel
   * has); the non-deterministic one's 19th: its fp32 dQ accumulator */
  if (fx >= 0) __atomic_fetch_add(&gpa__attn_fa2x_bwd_calls, 1, __ATOMIC_RELAXED);
  if (kk >= 0) __atomic_fetch_add(&gpa__attn_fa2k_bwd_calls, 1, __ATOMIC_RELAXED);
  void *dqa = grads_t ? (void *)(uintptr_t)(delta + dl_bytes) : dq;
  void *a1[] = {&dout, &q, &k, &v, &lse, &dl, &lens, &dq, &dk, &dv, &g.S, &g.Sk, &g.H, &g.Hkv, &g.D, &g.scale,
                &g.causal, &grads_t, &dqa};
  if (knd >= 0) { /* zeroed in-stream, the atomics, then dq in T when it is */
    __atomic_fetch_add(&gpa__attn_fa2nd_bwd_calls, 1, __ATOMIC_RELAXED);
    const long long n = rows * g.D;
    GPA__CU_TRY(gpa__cu_zero_f32(x, dqa, n));
    GPA__CU_TRY(gpa__cu_launch(x, kdkv, (g.Sk + 63) / 64, (unsigned)g.Hkv, (unsigned)g.B, 32, 4, smem, a1));
    if (!grads_t || n == 0) return GPA_OK;
    void *a2[] = {&dqa, &dq, (void *)&n};
    return gpa__cu_launch(x, dtype == GPA_F16 ? GPA__K_FA2_DQ_OUT_H : GPA__K_FA2_DQ_OUT_BF,
                          gpa__cu_blocks(x, n / 4, 256), 1, 1, 256, 1, 0, a2);
  }
  GPA__CU_TRY(gpa__cu_launch(x, kdkv, (g.Sk + bk - 1) / bk * halves, (unsigned)g.Hkv, (unsigned)g.B, 32,
                             (unsigned)kv_warps, smem, a1));
  return gpa__cu_launch(x, kdq, (g.S + bq - 1) / bq * (lowp ? 1 : halves), (unsigned)g.H, (unsigned)g.B, 32,
                        (unsigned)warps, smem_q, a1);
}

gpa_status gpa__attn_own_bwd_cu(const gpa_op_exec *x) { return own_bwd(x, 1); }
gpa_status gpa__attn_simt32_bwd_cu(const gpa_op_exec *x) { return own_bwd(x, 0); }

/* The op's CUDA implementations: cuDNN's fused SDPA first where it takes the
 * call (issue 22), then our own kernels (and their host fallback). */
gpa_status gpa__attn_fwd_cu(const gpa_op_exec *x) {
  gpa_status st = gpa__attn_cudnn_cu(x, 0);
  return st == GPA_SKIP ? gpa__attn_own_fwd_cu(x) : st;
}
gpa_status gpa__attn_bwd_cu(const gpa_op_exec *x) {
  gpa_status st = gpa__attn_cudnn_cu(x, 1);
  return st == GPA_SKIP ? gpa__attn_own_bwd_cu(x) : st;
}
