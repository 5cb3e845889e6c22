/* conv1d's y and dx on the small-grid SIMT kernels
 * (kernels/cuda/conv1d_small.cu): 32 x 32 tiles whose reduction four
 * thread groups of a block split, for shapes where the 64 x 64 tiles of
 * ops/conv1d/cuda_igemm.c leave most of a GPU idle (the main job's B32
 * C96 L128: 128 blocks of 256 threads, one an SM; here 384). Which one
 * runs is a function of the shape and GPA_CONV_IG_SMALL only (never of
 * the device), so a shape's sums keep one order: the same bits on every
 * machine. */
#include "backends/cuda/cuda_ops.h"
#include "kernels/cuda/conv1d_geo.h"
#include "ops/conv1d/conv1d.h"
#include "ops/cuda_kernels.h"

/* A grid of the 64 x 64 kernels under this many blocks takes the small
 * ones under GPA_CONV_IG_SMALL=auto: two waves of two blocks an SM (their
 * __launch_bounds__) on a 132-SM H100. */
#define SMALL_BELOW 528
/* Unset GPA_CONV_IG_SMALL means "0" (the 64 x 64 kernels) until a GPU has
 * timed both at the main job's shape (gpa-bench cuda_conv1d's _igsmall and
 * _igbig rows, issue 25); 1 here makes it mean "auto". */
#define UNSET_IS_AUTO 0

static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }
static long long max_ll(long long a, long long b) { return a > b ? a : b; }
static long long min_ll(long long a, long long b) { return a < b ? a : b; }

/* reduction channels a stage holds (K <= GPA_CONV_S_ROWS: one at least) */
static long long stage_channels(const gpa__conv_cu_geom *c, long long channels) {
  return max_ll(1, min_ll(channels, GPA_CONV_S_ROWS / c->K));
}

/* shared memory: the stage's A [rows][LDA] and B [rows][TN], reused for
 * the groups' partial tiles [SPLIT][TM][TN] at the end */
static long long smem_of(const gpa__conv_cu_geom *c, long long bc) {
  return max_ll(bc * c->K * (GPA_CONV_S_LDA + GPA_CONV_S_TN), (long long)GPA_CONV_S_SPLIT * GPA_CONV_S_TM * GPA_CONV_S_TN) *
         4;
}

/* Where gpa__conv_ig_fits holds (every index within an int for 64-wide
 * tiles, which bounds the 32-wide ones too): K within a stage's rows (the
 * kernels stage at most GPA_CONV_S_ROWS), grid y within 65535, a stage
 * within 48 KiB of shared memory (26 KiB at most). */
static int small_fits(const gpa__conv_cu_geom *c) {
  if (c->K > GPA_CONV_S_ROWS) return 0;
  if (c->G * cdiv(max_ll(c->cout_g, c->cin_g), GPA_CONV_S_TM) > 65535) return 0;
  if (c->B * cdiv(max_ll(c->L, c->Lout), GPA_CONV_S_TN) > 0x7fffffffLL) return 0;
  return smem_of(c, stage_channels(c, c->cin_g)) <= GPA_CONV_SMEM_MAX &&
         smem_of(c, stage_channels(c, c->cout_g)) <= GPA_CONV_SMEM_MAX;
}

int gpa__conv_igs_pick(const gpa_op_exec *x, const gpa__conv_cu_geom *c, long long big_blocks) {
  if (c->nlc) return 0; /* its kernels index ncl only: the 64 x 64 ones take channels last */
  int mode = gpa__cu_of(x)->host.conv_ig_small; /* 0 unset, 1 "0", 2 "1", 3 "auto" */
  if (mode == 0) mode = UNSET_IS_AUTO ? 3 : 1;
  if (mode == 1 || !small_fits(c)) return 0;
  return mode == 2 || big_blocks < SMALL_BELOW;
}

/* rows x cols outputs of each of B G (batch, group) pairs, the reduction
 * over `red` channels */
static gpa_status launch(const gpa_op_exec *x, int id, const gpa__conv_cu_geom *c, long long rows, long long cols,
                         long long red, void **args, gpa_conv_geo *g) {
  const long long bc = stage_channels(c, red);
  g->bc = (int)bc;
  g->mt = (int)cdiv(rows, GPA_CONV_S_TM);
  g->nt = (int)cdiv(cols, GPA_CONV_S_TN);
  return gpa__cu_launch(x, id, (unsigned)(c->B * g->nt), (unsigned)(c->G * g->mt), 1, GPA_CONV_S_NT, 1,
                        (unsigned)smem_of(c, bc), args);
}

gpa_status gpa__conv_fwd_igs_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c, gpa_conv_geo *g) {
  void *y = x->out[0], *xs = x->in[0], *w = x->in[1], *b = x->n_inputs > 2 ? x->in[2] : NULL;
  void *args[] = {&y, &xs, &w, &b, g};
  int id = x->inputs[0].dtype == GPA_BF16 ? GPA__K_CONV_IGS_FWD_BF : GPA__K_CONV_IGS_FWD;
  return launch(x, id, c, c->cout_g, c->Lout, c->cin_g, args, g);
}

gpa_status gpa__conv_dx_igs_cu(const gpa_op_exec *x, const gpa__conv_cu_geom *c, gpa_conv_geo *g, int bf) {
  void *dx = x->out[0], *dy = x->in[0], *w = x->in[2];
  void *args[] = {&dx, &dy, &w, g};
  return launch(x, bf ? GPA__K_CONV_IGS_DX_BF : GPA__K_CONV_IGS_DX, c, c->cin_g, c->L, c->cout_g, args, g);
}
