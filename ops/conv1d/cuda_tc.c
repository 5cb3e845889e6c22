/* conv1d with bf16 storage on CUDA through the tensor-core kernels of
 * kernels/cuda/conv1d_tc.cu (module "conv"): per call, channels-last bf16
 * copies of x (and dy) and W re-laid per tap, in one scratch block; then
 * one implicit-GEMM kernel each for y, dx and dW (fp32 accumulators, y and
 * dx rounded to bf16 once, dW f32). dW past one split of the B Lout sum
 * goes through partials and the ordered sum of linear.cu
 * (gpa_conv_dw_sum_f32); db through the f32 path's block tree. Nothing is
 * atomic and every split is a property of the shape alone, so results are
 * the same on every device (deterministic). ops/conv1d/cuda.c calls these
 * for bf16 storage where gpa__conv_tc_fits holds.
 *
 * Layout nlc: x and dy are channels last already; the kernels read them in
 * place (no copies, only W re-laid) where every group's channels are a
 * multiple of 8 and x, dy, y and dx 16-byte aligned (cp.async and the
 * 16-byte stores of y and dx); other nlc shapes go to the SIMT kernels. */
#include <limits.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/conv1d_tc_geo.h"
#include "ops/conv1d/conv1d.h"
#include "ops/cuda_kernels.h"

/* dW: split the B Lout sum until about this many blocks run (a property of
 * the shape only, never of the device: the sum's order must not change
 * between machines; 4 blocks fit an SM, 132 SMs on an H100), with at most
 * DW_PART_CAP bytes of partials. */
#define DW_BLOCKS 512
#define DW_PART_CAP ((uint64_t)64 << 20)
/* the scratch of one call (copies, re-laid W, partials) at most; past it
 * the SIMT kernels, which need none, take the call */
#define TC_SCRATCH_CAP ((uint64_t)512 << 20)

static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }
static long long up8(long long v) { return (v + 7) & ~7LL; }
static uint64_t up256(uint64_t v) { return (v + 255) & ~(uint64_t)255; }
static int ifits(long long v) { return v >= 0 && v <= INT_MAX; }

/* Bytes of the channels-last copy of [B G][ch][len] (none under nlc: read in place). */
static uint64_t pack_bytes(const gpa__conv_cu_geom *c, long long ch, long long len) {
  if (c->nlc) return 0;
  return up256((uint64_t)c->B * (uint64_t)c->G * (uint64_t)len * (uint64_t)up8(ch) * 2);
}

static int al16(const void *p) { return ((uintptr_t)p & 15) == 0; }
static uint64_t wpack_bytes(const gpa__conv_cu_geom *c, long long m, long long n) {
  return up256((uint64_t)c->G * (uint64_t)c->K * (uint64_t)m * (uint64_t)up8(n) * 2);
}

static long long dw_splits(const gpa__conv_cu_geom *c, long long *per, long long *nslice) {
  long long tiles = cdiv(c->cout_g, GPA_CONV_TC_BM) * cdiv(c->cin_g, GPA_CONV_TC_BN) * c->K * c->G;
  *nslice = c->B * cdiv(c->Lout, GPA_CONV_TC_BK);
  long long s = cdiv(DW_BLOCKS, tiles);
  if (s > *nslice) s = *nslice;
  uint64_t one = (uint64_t)c->Cout * (uint64_t)c->R * sizeof(float);
  if (s > 1 && (uint64_t)s * one > DW_PART_CAP) s = (long long)(DW_PART_CAP / one);
  if (s > 65535) s = 65535;
  if (s < 1) s = 1;
  *per = cdiv(*nslice, s);
  return cdiv(*nslice, *per);
}

static uint64_t bwd_scratch(const gpa__conv_cu_geom *c) {
  long long per, nslice, s = dw_splits(c, &per, &nslice);
  uint64_t part = s > 1 ? up256((uint64_t)s * (uint64_t)c->Cout * (uint64_t)c->R * sizeof(float)) : 0;
  return pack_bytes(c, c->cin_g, c->L) + pack_bytes(c, c->cout_g, c->Lout) + wpack_bytes(c, c->cin_g, c->cout_g) +
         part;
}

int gpa__conv_tc_fits(const gpa_op_exec *x, const gpa__conv_cu_geom *c) {
  if (gpa__cu_of(x)->host.conv_tc == 1) return 0; /* GPA_CONV_TC=0 */
  if (c->nlc) {
    if (c->cin_g % 8 || c->cout_g % 8) return 0;
    const int bwd = x->n_outputs > 1; /* in: x, W, b or dy, x, W; out[0]: y or dx */
    if (!al16(x->in[0]) || (bwd && !al16(x->in[1])) || !al16(x->out[0])) return 0;
  }
  const long long cinp = up8(c->cin_g), coutp = up8(c->cout_g), bg = c->B * c->G;
  /* every index the kernels form in int: the copies and re-laid W, the
   * outputs, and positions up to the last column tile's reach */
  long long reach = (cdiv(c->L > c->Lout ? c->L : c->Lout, GPA_CONV_TC_BN) + 1) * GPA_CONV_TC_BN * c->stride +
                    (c->K - 1) * c->dil + c->pad_l + GPA_CONV_TC_BK * c->stride;
  if (!ifits(bg * c->L * cinp) || !ifits(bg * c->Lout * coutp) || !ifits(c->B * c->Cin * c->L) ||
      !ifits(c->B * c->Cout * c->Lout) || !ifits(c->G * c->K * (c->cin_g > c->cout_g ? c->cin_g : c->cout_g) *
                                                 (cinp > coutp ? cinp : coutp)) ||
      !ifits(c->Cout * c->R) || !ifits(reach) || c->K > INT_MAX / (c->dil ? c->dil : 1))
    return 0;
  /* grids: y = groups x row tiles; x = batches x column tiles (and the packs' tiles) */
  if (c->G * cdiv(c->cout_g > c->cin_g ? c->cout_g : c->cin_g, GPA_CONV_TC_BM) > 65535) return 0;
  if (!ifits(c->B * cdiv(c->L > c->Lout ? c->L : c->Lout, GPA_CONV_TC_BN)) ||
      !ifits(bg * cdiv(c->L > c->Lout ? c->L : c->Lout, GPA_CONV_TC_PACK)) ||
      cdiv(cinp > coutp ? cinp : coutp, GPA_CONV_TC_PACK) > 65535 ||
      !ifits(c->K * cdiv(c->cin_g, GPA_CONV_TC_BN)))
    return 0;
  uint64_t fwd = pack_bytes(c, c->cin_g, c->L) + wpack_bytes(c, c->cout_g, c->cin_g);
  return fwd <= TC_SCRATCH_CAP && bwd_scratch(c) <= TC_SCRATCH_CAP;
}

static void base(const gpa__conv_cu_geom *c, gpa_conv_tc_geo *g) {
  memset(g, 0, sizeof *g);
  g->B = (int)c->B;
  g->G = (int)c->G;
  g->L = (int)c->L;
  g->Lout = (int)c->Lout;
  g->K = (int)c->K;
  g->stride = (int)c->stride;
  g->pad_l = (int)c->pad_l;
  g->dil = (int)c->dil;
  g->cin_g = (int)c->cin_g;
  g->cout_g = (int)c->cout_g;
  g->cin_p = (int)up8(c->cin_g);
  g->cout_p = (int)up8(c->cout_g);
  g->nlc = c->nlc;
}

/* dst [B G][len][up8(ch)] from src [B G][ch][len]. */
static gpa_status pack(const gpa_op_exec *x, void *dst, const void *src, long long ch, long long len,
                       const gpa__conv_cu_geom *c) {
  int rows = (int)ch, n = (int)len, rp = (int)up8(ch);
  void *args[] = {&dst, (void *)&src, &rows, &n, &rp};
  const unsigned P = GPA_CONV_TC_PACK;
  return gpa__cu_launch(x, GPA__K_CONV_TC_PACK, (unsigned)(c->B * c->G * cdiv(len, P)), (unsigned)cdiv(rp, P), 1, P,
                        8, P * (P + 1) * 2, args);
}

static gpa_status wpack(const gpa_op_exec *x, void *dst, const void *w, const gpa__conv_cu_geom *c, int trans) {
  int G = (int)c->G, K = (int)c->K, co = (int)c->cout_g, ci = (int)c->cin_g;
  int np = (int)up8(trans ? c->cout_g : c->cin_g);
  void *args[] = {&dst, (void *)&w, &G, &K, &co, &ci, &np, &trans};
  return gpa__cu_launch1d(x, GPA__K_CONV_TC_WPACK, c->G * c->K * (trans ? c->cin_g : c->cout_g) * np, args);
}

/* Where the activation of ch channels (ch_p packed), rows positions per
 * batch lies: the packed copy [B G][rows][ch_p], or under nlc the tensor
 * [B][rows][G ch] itself. */
static void act_at(const gpa__conv_cu_geom *c, long long ch, long long rows, int *bs, int *gs, int *ld) {
  if (c->nlc) {
    *ld = (int)(c->G * ch), *gs = (int)ch, *bs = (int)(rows * c->G * ch);
  } else {
    *ld = (int)up8(ch), *gs = (int)(rows * up8(ch)), *bs = (int)(c->G * rows * up8(ch));
  }
}

/* y or dx: the row-major kernel over [B][G mt][nt] tiles. */
static gpa_status rows(const gpa_op_exec *x, int id, gpa_conv_tc_geo *g, void **args) {
  g->mt = (int)cdiv(g->m_len, GPA_CONV_TC_BM);
  g->nt = (int)cdiv(g->n_len, GPA_CONV_TC_BN);
  return gpa__cu_launch(x, id, (unsigned)((long long)g->B * g->nt), (unsigned)(g->G * g->mt), 1, GPA_CONV_TC_NT, 1,
                        GPA_CONV_TC_SMEM, args);
}

gpa_status gpa__conv_fwd_tc_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c) {
  if (c->B == 0) return GPA_OK;
  uint64_t xb = pack_bytes(c, c->cin_g, c->L);
  CUdeviceptr s = gpa__cu_scratch(x, xb + wpack_bytes(c, c->cout_g, c->cin_g));
  if (!s) return GPA_ENOMEM;
  void *xT = c->nlc ? x->in[0] : (void *)(uintptr_t)s, *wf = (void *)(uintptr_t)(s + xb);
  if (!c->nlc) GPA__CU_TRY(pack(x, xT, x->in[0], c->cin_g, c->L, c));
  GPA__CU_TRY(wpack(x, wf, x->in[1], c, 0));
  gpa_conv_tc_geo g;
  base(c, &g);
  act_at(c, c->cin_g, c->L, &g.a_bs, &g.a_gs, &g.a_ld);
  g.m_len = g.cout_g;
  g.n_len = g.Lout;
  g.act_rows = g.L;
  g.red_p = g.cin_p;
  g.out_ch = (int)c->Cout;
  void *y = x->out[0], *b = x->n_inputs > 2 ? x->in[2] : NULL;
  void *args[] = {&y, &xT, &wf, &b, &g};
  return rows(x, GPA__K_CONV_TC_FWD, &g, args);
}

gpa_status gpa__conv_bwd_tc_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c) {
  GPA__CU_TRY(c->nlc ? gpa__conv_db_rows_cu(x, c->B * c->Lout, c->Cout) : gpa__conv_db_cu(x, c->B, c->Cout, c->Lout));
  if (c->B == 0) return gpa__cu_zero_f32(x, x->out[1], c->Cout * c->R);
  const uint64_t xb = pack_bytes(c, c->cin_g, c->L), db = pack_bytes(c, c->cout_g, c->Lout);
  const uint64_t wb = wpack_bytes(c, c->cin_g, c->cout_g);
  CUdeviceptr s = gpa__cu_scratch(x, bwd_scratch(c));
  if (!s) return GPA_ENOMEM;
  void *xT = (void *)(uintptr_t)s, *dyT = (void *)(uintptr_t)(s + xb), *wd = (void *)(uintptr_t)(s + xb + db);
  void *part = (void *)(uintptr_t)(s + xb + db + wb);
  if (c->nlc) {
    xT = x->in[1], dyT = x->in[0];
  } else {
    GPA__CU_TRY(pack(x, dyT, x->in[0], c->cout_g, c->Lout, c));
    GPA__CU_TRY(pack(x, xT, x->in[1], c->cin_g, c->L, c));
  }
  GPA__CU_TRY(wpack(x, wd, x->in[2], c, 1));
  /* dx [B][G cin_g][L] = sum over taps of Wd dyT */
  gpa_conv_tc_geo g;
  base(c, &g);
  act_at(c, c->cout_g, c->Lout, &g.a_bs, &g.a_gs, &g.a_ld);
  g.m_len = g.cin_g;
  g.n_len = g.L;
  g.act_rows = g.Lout;
  g.red_p = g.cout_p;
  g.out_ch = (int)c->Cin;
  void *dx = x->out[0];
  void *dargs[] = {&dx, &dyT, &wd, &g};
  GPA__CU_TRY(rows(x, GPA__K_CONV_TC_DX, &g, dargs));
  /* dW [Cout][cin_g][K]: grid x = taps x column tiles over cin_g, y = groups x row tiles, z = splits */
  long long per, nslice, splits = dw_splits(c, &per, &nslice);
  base(c, &g);
  act_at(c, c->cin_g, c->L, &g.a_bs, &g.a_gs, &g.a_ld);
  act_at(c, c->cout_g, c->Lout, &g.d_bs, &g.d_gs, &g.d_ld);
  g.mt = (int)cdiv(c->cout_g, GPA_CONV_TC_BM);
  g.nt = (int)cdiv(c->cin_g, GPA_CONV_TC_BN);
  g.per = (int)per;
  g.nslice = (int)nslice;
  void *dW = x->out[1], *out = splits > 1 ? part : dW;
  void *wargs[] = {&out, &dyT, &xT, &g};
  GPA__CU_TRY(gpa__cu_launch(x, GPA__K_CONV_TC_DW, (unsigned)(c->K * g.nt), (unsigned)(c->G * g.mt),
                             (unsigned)splits, GPA_CONV_TC_NT, 1, GPA_CONV_TC_SMEM, wargs));
  if (splits == 1) return GPA_OK;
  long long n = c->Cout * c->R;
  int acc = 0;
  void *sargs[] = {&dW, &out, &splits, &n, &acc};
  return gpa__cu_launch1d(x, GPA__K_CONV_DW_SUM, n, sargs);
}
