/* conv1d on CUDA through our implicit-GEMM kernels (kernels/cuda/conv1d.cu,
 * module "conv"): forward, dx and dW read x and dy directly, f32 and bf16
 * storage alike, no column-matrix scratch. dW past one split of the B Lout
 * sum goes through a partial buffer and the ordered sum of linear.cu
 * (gpa_conv_dw_sum_f32); db through the block-tree kernels of the cuBLAS
 * path. ops/conv1d/cuda.c calls these where gpa__conv_ig_fits holds and
 * keeps its im2col + cuBLAS path for the rest; y and dx go on to the
 * 32 x 32 kernels of cuda_igsmall.c where gpa__conv_igs_pick says
 * (GPA_CONV_IG_SMALL; small grids). */
#include <limits.h>
#include <string.h>

#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/conv1d_geo.h"
#include "ops/conv1d/conv1d.h"
#include "ops/cuda_kernels.h"

/* dW: split the B Lout sum until about this many blocks run (a property
 * of the shape only, never of the device: the sum's order must not change
 * between machines), with at most DW_PART_CAP bytes of partials. */
#define DW_BLOCKS 256
#define DW_PART_CAP ((uint64_t)64 << 20)
#define STAGE_CHANNELS 16 /* y, dx: reduction channels per shared stage, at most */

static int ifits(long long v) { return v >= 0 && v <= INT_MAX; }
static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }
static long long min_ll(long long a, long long b) { return a < b ? a : b; }
static const long long smem_floats = GPA_CONV_SMEM_MAX / 4;

/* every caller runs where gpa__conv_ig_fits holds: each value fits an int */
void gpa__conv_shape_of(const gpa__conv_cu_geom *c, gpa_conv_shape *s) {
  *s = (gpa_conv_shape){.B = (int)c->B, .Cin = (int)c->Cin, .L = (int)c->L, .Cout = (int)c->Cout, .K = (int)c->K,
                        .stride = (int)c->stride, .pad_l = (int)c->pad_l, .dil = (int)c->dil, .G = (int)c->G,
                        .Lout = (int)c->Lout, .cin_g = (int)c->cin_g, .cout_g = (int)c->cout_g,
                        .nlc = c->nlc};
}

static void base(const gpa__conv_cu_geom *c, gpa_conv_geo *g) {
  memset(g, 0, sizeof *g);
  gpa__conv_shape_of(c, &g->s);
}

/* out aligned for the nlc stores of 4 values (16 bytes f32, 8 bf16) */
static int vec_ok(const void *out, int bf) { return ((uintptr_t)out & (bf ? 7u : 15u)) == 0; }

/* Channels per stage when each takes `per` floats of shared memory (0: none fits). */
static long long stage(long long per, long long channels) {
  return min_ll(min_ll(STAGE_CHANNELS, channels), smem_floats / per);
}

/* Shared positions per channel row. Under nlc the stagings store a
 * position's channels to consecutive threads, rows `span` floats apart: an
 * odd span puts them in distinct banks (an even one, 80 at the main job's
 * dilation 8, put 16 threads on 2 banks), so it is rounded up to odd. */
static long long row_span(const gpa__conv_cu_geom *c, long long v) { return c->nlc ? v | 1 : v; }
static long long fwd_span(const gpa__conv_cu_geom *c) {
  return row_span(c, (GPA_CONV_TN - 1) * c->stride + (c->K - 1) * c->dil + 1);
}
static long long dx_span(const gpa__conv_cu_geom *c) {
  return row_span(c, (GPA_CONV_TN - 1 + (c->K - 1) * c->dil) / c->stride + 2);
}
static long long dw_nch(const gpa__conv_cu_geom *c) { return min_ll((GPA_CONV_TN - 1) / c->K + 2, c->cin_g); }
static long long dw_span(const gpa__conv_cu_geom *c, long long bt) {
  return row_span(c, (bt - 1) * c->stride + (c->K - 1) * c->dil + 1);
}

/* dW's slice length: the longest power of two up to GPA_CONV_TN whose tiles fit (0: none). */
static long long dw_bt(const gpa__conv_cu_geom *c) {
  for (long long bt = GPA_CONV_TN; bt >= 1; bt /= 2)
    if (bt * GPA_CONV_TM + dw_nch(c) * dw_span(c, bt) <= smem_floats) return bt;
  return 0;
}

int gpa__conv_ig_fits(const gpa__conv_cu_geom *c) {
  /* every index the kernels form in int: tensor sizes, and positions up to
   * the last tile's reach (Lout rounded up to a tile, times the stride, plus
   * the kernel's extent and the padding) */
  long long reach = (cdiv(c->Lout, GPA_CONV_TN) * GPA_CONV_TN + GPA_CONV_TN) * c->stride + (c->K - 1) * c->dil +
                    c->pad_l + c->L + GPA_CONV_TN;
  if (!ifits(c->B * c->Cin * c->L) || !ifits(c->B * c->Cout * c->Lout) || !ifits(c->Cout * c->R) ||
      !ifits(reach) || c->K > INT_MAX / (c->dil ? c->dil : 1))
    return 0;
  /* grids: y = groups x row tiles within 65535; x = batches x column tiles */
  if (c->G * cdiv(c->cout_g > c->cin_g ? c->cout_g : c->cin_g, GPA_CONV_TM) > 65535) return 0;
  if (!ifits(c->B * cdiv(c->Lout > c->L ? c->Lout : c->L, GPA_CONV_TN))) return 0;
  /* one stage (one channel, one timestep for dW) fits shared memory */
  return stage(c->K * GPA_CONV_TM + fwd_span(c), c->cin_g) >= 1 &&
         stage(c->K * GPA_CONV_TM + dx_span(c), c->cout_g) >= 1 && dw_bt(c) >= 1;
}

static unsigned smem_of(const gpa_conv_geo *g, long long per_stage) { return (unsigned)(g->bc * per_stage * 4); }

gpa_status gpa__conv_fwd_ig_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c) {
  if (c->B == 0) return GPA_OK;
  gpa_conv_geo g;
  base(c, &g);
  long long per = c->K * GPA_CONV_TM + fwd_span(c);
  g.span = (int)fwd_span(c);
  g.bc = (int)stage(per, c->cin_g);
  g.mt = (int)cdiv(c->cout_g, GPA_CONV_TM);
  g.nt = (int)cdiv(c->Lout, GPA_CONV_TN);
  if (gpa__conv_igs_pick(x, c, c->B * g.nt * c->G * g.mt)) return gpa__conv_fwd_igs_cu(x, c, &g);
  void *y = x->out[0], *xs = x->in[0], *w = x->in[1], *b = x->n_inputs > 2 ? x->in[2] : NULL;
  void *args[] = {&y, &xs, &w, &b, &g};
  int id = x->inputs[0].dtype == GPA_BF16 ? GPA__K_CONV_IG_FWD_BF : GPA__K_CONV_IG_FWD;
  g.vec = vec_ok(y, x->inputs[0].dtype == GPA_BF16);
  return gpa__cu_launch(x, id, (unsigned)(c->B * g.nt), (unsigned)(c->G * g.mt), 1, GPA_CONV_NT, 1,
                        smem_of(&g, per), args);
}

static gpa_status bwd_dx(const gpa_op_exec *x, const gpa__conv_cu_geom *c, int bf) {
  gpa_conv_geo g;
  base(c, &g);
  long long per = c->K * GPA_CONV_TM + dx_span(c);
  g.span = (int)dx_span(c);
  g.bc = (int)stage(per, c->cout_g);
  g.mt = (int)cdiv(c->cin_g, GPA_CONV_TM);
  g.nt = (int)cdiv(c->L, GPA_CONV_TN);
  if (gpa__conv_igs_pick(x, c, c->B * g.nt * c->G * g.mt)) return gpa__conv_dx_igs_cu(x, c, &g, bf);
  void *dx = x->out[0], *dy = x->in[0], *w = x->in[2];
  void *args[] = {&dx, &dy, &w, &g};
  g.vec = vec_ok(dx, bf);
  return gpa__cu_launch(x, bf ? GPA__K_CONV_IG_DX_BF : GPA__K_CONV_IG_DX, (unsigned)(c->B * g.nt),
                        (unsigned)(c->G * g.mt), 1, GPA_CONV_NT, 1, smem_of(&g, per), args);
}

static gpa_status bwd_dw(const gpa_op_exec *x, const gpa__conv_cu_geom *c, int bf) {
  gpa_conv_geo g;
  base(c, &g);
  long long bt = dw_bt(c), nch = dw_nch(c);
  g.bt = (int)bt;
  g.nch = (int)nch;
  g.span = (int)dw_span(c, bt);
  g.mt = (int)cdiv(c->cout_g, GPA_CONV_TM);
  g.nt = (int)cdiv(c->R, GPA_CONV_TN);
  long long nslice = c->B * cdiv(c->Lout, bt), tiles = (long long)g.mt * g.nt * c->G;
  long long splits = min_ll(cdiv(DW_BLOCKS, tiles), nslice);
  uint64_t one = (uint64_t)c->Cout * (uint64_t)c->R * sizeof(float);
  if ((uint64_t)splits * one > DW_PART_CAP) splits = (long long)(DW_PART_CAP / one);
  if (splits < 1) splits = 1;
  long long per = cdiv(nslice, splits);
  splits = cdiv(nslice, per);
  g.per = (int)per;
  g.nslice = (int)nslice;
  void *dW = x->out[1], *out = dW, *dy = x->in[0], *xs = x->in[1];
  if (splits > 1) {
    CUdeviceptr s = gpa__cu_scratch(x, (uint64_t)splits * one);
    if (!s) return GPA_ENOMEM;
    out = (void *)(uintptr_t)s;
  }
  void *args[] = {&out, &dy, &xs, &g};
  unsigned smem = (unsigned)((bt * GPA_CONV_TM + nch * g.span) * 4);
  GPA__CU_TRY(gpa__cu_launch(x, bf ? GPA__K_CONV_IG_DW_BF : GPA__K_CONV_IG_DW, (unsigned)g.nt,
                             (unsigned)(c->G * g.mt), (unsigned)splits, GPA_CONV_NT, 1, smem, args));
  if (splits == 1) return GPA_OK;
  long long n = c->Cout * c->R;
  int acc = 0;
  void *sargs[] = {&dW, &out, &splits, &n, &acc};
  return gpa__cu_launch1d(x, GPA__K_CONV_DW_SUM, n, sargs);
}

gpa_status gpa__conv_bwd_ig_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c) {
  int bf = x->inputs[1].dtype == GPA_BF16;
  GPA__CU_TRY(c->nlc ? gpa__conv_db_rows_cu(x, c->B * c->Lout, c->Cout) : gpa__conv_db_cu(x, c->B, c->Cout, c->Lout));
  if (c->B == 0) return gpa__cu_zero_f32(x, x->out[1], c->Cout * c->R);
  GPA__CU_TRY(bwd_dx(x, c, bf));
  return bwd_dw(x, c, bf);
}
