/* LayerNorm on CUDA (kernels/cuda/norm.cu). bf16 x (and dy) take the _bf16
 * kernels: x/y/dy/dx bf16, gamma/beta/mean/rstd and dgamma/dbeta fp32. The
 * mixed forms (x f32 with a bf16 y, or a bf16 dy and an optional bf16 copy
 * of dx) take the fp32 kernels' mixed instances: the same geometry, so the
 * fp32 path's bits.
 * Every kernel moves 16 bytes per access where D and the pointers allow,
 * and falls back to scalar accesses where not. */
#include <stdio.h>

#include "backends/cuda/cuda_ops.h"
#include "ops/cuda_kernels.h"
#include "ops/layernorm/layernorm.h"
#include "kernels/cuda/launch_shapes.h"

#define WARPS 4 /* per forward/dx block */

/* Rows per dgamma/dbeta partial: up to 64, fewer while that leaves under
 * 32768 threads of 16-byte columns for the partials (n * d / 4 / rows),
 * so small layers (the main job's 4096 x 96) still fill the GPU instead of
 * 64 blocks walking 64 rows each; at least 4, and few enough blocks for
 * gridDim.y. Depends on n and d only, not on the access width: the vector
 * and scalar paths' sums stay the same bit for bit (test_membound_vec). */
static int part_rows(long long n, int d) {
  long long rows = n * d / (4 * 32768);
  if (rows > 64) rows = 64;
  if (rows < 4) rows = 4;
  if (rows < (n + 65534) / 65535) rows = (n + 65534) / 65535;
  return (int)rows;
}
/* dgamma/dbeta of rows up to this long: one split-sum launch (norm.cu
 * ln_split) instead of the partials and gpa_ln_bwd_cols_f32, whose ceil(D /
 * 32) blocks (3 at the main job's D = 96) each walked every partial: 20 us
 * a launch at 4096 x 96 on an H100 (issue 25). Longer rows launch enough
 * column blocks (32 and up) for the two kernels; 16384 x 4096 ran at 1.31x
 * PyTorch on them, so they keep them. */
#define LN_SPLIT_MAX_D 1024
/* Chunks of rows: 128 rows each (16 a slice: four rounds of four rows'
 * loads), but at least LN_SPLIT_BLOCKS blocks of (32, GPA_LN_SLICES) in all
 * while chunks keep 32 rows (the main job's 4096 x 96: 64 chunks of 64),
 * and at most LN_SPLIT_MAX_BLOCKS (longer chunks for many rows: the last
 * block walks every chunk, two a slice per memory latency). Guesses, not
 * measured (no GPU in this session). */
#define LN_SPLIT_BLOCKS 64
#define LN_SPLIT_MAX_BLOCKS 512

static gpa_status ln_bwd_split(const gpa_op_exec *x, long long n, int d, int vec, int bf, int mix) {
  const long long step = 4 * GPA_LN_SLICES; /* rows of a chunk: whole rounds of four rows a slice */
  int w = vec ? (bf ? 8 : 4) : 1, tiles = (d + 32 * w - 1) / (32 * w);
  /* the chunks from n and d alone, as if 128 columns a tile: the 16-byte and
   * scalar paths (other tiles) sum each column in the same order */
  long long t128 = (d + 127) / 128, chunks = (n + 127) / 128;
  long long few = LN_SPLIT_BLOCKS / t128, most = LN_SPLIT_MAX_BLOCKS / t128;
  if (few > (n + step - 1) / step) few = (n + step - 1) / step;
  if (chunks < few) chunks = few;
  if (chunks > most) chunks = most;
  if (chunks < 1) chunks = 1;
  long long rows = ((n + chunks - 1) / chunks + step - 1) / step * step;
  if (rows < (n + 65534) / 65535) rows = (n + 65534) / 65535; /* gridDim.y */
  if (rows > 0x7fffffff) return gpa__cu_fallback(x);
  int irows = (int)rows;
  chunks = (n + rows - 1) / rows;
  CUdeviceptr part = 0, ctr = 0; /* one chunk: its sums are dgamma/dbeta */
  if (chunks > 1 && (!(part = gpa__cu_scratch(x, (uint64_t)chunks * 2 * (uint64_t)d * sizeof(double))) ||
                     !(ctr = gpa__cu_counters(x))))
    return GPA_ENOMEM;
  void *xx = x->in[0], *dy = x->in[1], *m = x->in[3], *r = x->in[4], *dg = x->out[1], *db = x->out[2];
  void *a[] = {&xx, &dy, &m, &r, &part, &dg, &db, &ctr, &n, &d, &irows, &vec};
  return gpa__cu_launch(x, bf ? GPA__K_LN_BWD_SPLIT_BF : mix ? GPA__K_LN_BWD_SPLIT_MIX : GPA__K_LN_BWD_SPLIT,
                        (unsigned)tiles, (unsigned)chunks, 1, 32, GPA_LN_SLICES, 0, a);
}

/* Rows from which the forward (and dx) holds a row in registers (a block per row)
 * instead of reading it twice with a lane group: 4 KiB of x (below, the
 * lane groups' rows stay in L1 between the two reads). A guess from the
 * cache sizes, not measured (no GPU in issue 25's session). */
#define LN_ROW_MIN_F32 1024
#define LN_ROW_MIN_BF 2048

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
static int aligned8(const void *p) { return ((uintptr_t)p & 7) == 0; }

/* Threads of the block-per-row kernels (norm.cu, ln_fwd_row / ln_dx_row)
 * for rows of d values, nv vectors of 16 bytes a thread; 0 when the row
 * does not take them (too short, no 16-byte accesses, or past 1024 threads). */
static unsigned row_threads(int d, int bf, int nv, int vec) {
  long long vecs = d / (bf ? 8 : 4), t = ((vecs + nv - 1) / nv + 31) / 32 * 32;
  return vec && d >= (bf ? LN_ROW_MIN_BF : LN_ROW_MIN_F32) && t <= 1024 ? (unsigned)t : 0;
}

gpa_status gpa__ln_fwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  long long n = t->shape[0];
  int d = (int)t->shape[1];
  if (t->shape[1] > 0x7fffffff) return gpa__cu_fallback(x);
  float eps = (float)((const gpa__ln_params *)x->params)->eps;
  int bf = t->dtype == GPA_BF16, mix = !bf && x->outputs[0].dtype == GPA_BF16;
  /* fp32: float4 when D % 4 == 0; bf16: 8 values (16 bytes) when D % 8 == 0;
   * mixed (x f32, y bf16): as fp32, y 4 values (8 bytes) a store */
  int vec4 = d % (bf ? 8 : 4) == 0 && aligned16(x->in[0]) && aligned16(x->in[1]) && aligned16(x->in[2]) &&
             (mix ? aligned8(x->out[0]) : aligned16(x->out[0]));
  void *xx = x->in[0], *g = x->in[1], *b = x->in[2], *y = x->out[0], *m = x->out[1], *r = x->out[2];
  if (n <= 0) return GPA_OK;
  /* long rows: a block per row holding it in registers (4 vectors of 16
   * bytes a thread), so x is read once (norm.cu, ln_fwd_row) */
  unsigned threads = row_threads(d, bf, 4, vec4);
  if (threads) {
    void *ra[] = {&xx, &g, &b, &y, &m, &r, &n, &d, &eps};
    return gpa__cu_launch(x, bf ? GPA__K_LN_FWD_ROW_BF : mix ? GPA__K_LN_FWD_ROW_MIX : GPA__K_LN_FWD_ROW,
                          gpa__cu_row_blocks(x, n, 32, 1), 1, 1, threads, 1, 0, ra);
  }
  int grp = gpa__cu_row_group(d);
  void *args[] = {&xx, &g, &b, &y, &m, &r, &n, &d, &eps, &vec4, &grp};
  return gpa__cu_launch(x, bf ? GPA__K_LN_FWD_BF : mix ? GPA__K_LN_FWD_MIX : GPA__K_LN_FWD,
                        gpa__cu_row_blocks(x, n, grp, WARPS), 1, 1, 32, WARPS, 0, args);
}

gpa_status gpa__ln_bwd_cu(const gpa_op_exec *x) {
  const gpa_tensor *t = &x->inputs[0];
  long long n = t->shape[0];
  int d = (int)t->shape[1];
  if (t->shape[1] > 0x7fffffff) return gpa__cu_fallback(x);
  if (d == 0) return GPA_OK;
  void *dx = x->out[0], *dg = x->out[1], *db = x->out[2];
  void *xx = x->in[0], *dy = x->in[1], *g = x->in[2], *m = x->in[3], *r = x->in[4];
  if (n == 0) {
    GPA__CU_TRY(gpa__cu_zero_f32(x, dg, d));
    return gpa__cu_zero_f32(x, db, d);
  }
  int grp = gpa__cu_row_group(d), bf = t->dtype == GPA_BF16, mix = !bf && x->inputs[1].dtype == GPA_BF16;
  void *dx2 = x->n_outputs > 3 ? x->out[3] : NULL; /* the mixed form's bf16 copy of dx */
  /* 16-byte accesses: 4 floats or 8 bf16 values (gamma: 4 or 8 floats);
   * mixed: as fp32, the bf16 dy (and dx copy) 4 values (8 bytes) a load */
  int v = bf ? 8 : 4;
  int vec_rows = d % v == 0 && aligned16(xx) && (mix ? aligned8(dy) : aligned16(dy));
  int vec = vec_rows && aligned16(g) && aligned16(dx) && (!dx2 || aligned8(dx2));
  void *a1[] = {&xx, &dy, &g, &m, &r, &dx, &n, &d, &grp, &vec, &dx2};
  void *a1row[] = {&xx, &dy, &g, &m, &r, &dx, &n, &d, &dx2}; /* the mixed row kernel's */
  /* long rows: a block per row holding x and dy in registers (f32: 4
   * vectors a thread, bf16: 2), read once (norm.cu, ln_dx_row); its
   * parameters are a1's first eight (and dx2 in the mixed form) */
  unsigned threads = row_threads(d, bf, bf ? 2 : 4, vec);
  int kid = threads ? (bf ? GPA__K_LN_BWD_DX_ROW_BF : mix ? GPA__K_LN_BWD_DX_ROW_MIX : GPA__K_LN_BWD_DX_ROW)
                    : (bf ? GPA__K_LN_BWD_DX_BF : mix ? GPA__K_LN_BWD_DX_MIX : GPA__K_LN_BWD_DX);
  gpa_status st =
      threads ? gpa__cu_launch(x, kid, gpa__cu_row_blocks(x, n, 32, 1), 1, 1, threads, 1, 0, mix ? a1row : a1)
              : gpa__cu_launch(x, kid, gpa__cu_row_blocks(x, n, grp, WARPS), 1, 1, 32, WARPS, 0, a1);
  if (st != GPA_OK) return st;
  if (d <= LN_SPLIT_MAX_D && gpa__cu_split_sums(x)) return ln_bwd_split(x, n, d, vec_rows, bf, mix);
  int cols = vec_rows ? d / v : d; /* threads across a row */
  int rows = part_rows(n, d), nblk = (int)((n + rows - 1) / rows);
  CUdeviceptr part = gpa__cu_scratch(x, (uint64_t)nblk * 2 * (uint64_t)d * sizeof(float));
  if (!part) return GPA_ENOMEM;
  void *a2[] = {&xx, &dy, &m, &r, &part, &n, &d, &rows, &vec_rows};
  unsigned pt = cols >= 128 ? 128 : (unsigned)(cols + 31) / 32 * 32;
  st = gpa__cu_launch(x, bf ? GPA__K_LN_BWD_PART_BF : mix ? GPA__K_LN_BWD_PART_MIX : GPA__K_LN_BWD_PART,
                      (unsigned)((cols + pt - 1) / pt), (unsigned)nblk, 1, pt, 1, 0, a2);
  if (st != GPA_OK) return st;
  void *a3[] = {&part, &dg, &db, &d, &nblk};
  return gpa__cu_launch(x, GPA__K_LN_BWD_COLS, (unsigned)((d + 31) / 32), 1, 1, 32, GPA_LN_SLICES, 0, a3);
}

