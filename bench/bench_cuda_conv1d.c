/* gpa-bench cuda_conv1d (issue 25): conv1d_fwd (with bias) and conv1d_bwd
 * (dx, dW, db) on the device, causal, at the main job's shape (B32 C96 L128
 * K3, dilation 1 and 8) and at B8 C512 L2048 K3 dilation 4, f32 and bf16
 * storage (bf16: x, W, b, y, dy, dx bf16, dW and db f32): device time per
 * op from the batch's CUDA events (k ops a batch, best of reps), beside
 * PyTorch's F.conv1d forward and its autograd backward on the same shapes
 * and dtype (bench/conv1d_torch.py, named by GPA_BENCH_CONV1D_TORCH, when
 * python3 has torch with CUDA; ratio = PyTorch's time over ours, > 1
 * faster). Two rows per shape and direction: cuda_conv1d_* with
 * GPA_CUDNN_CONV=1 (cuDNN's convolutions wherever it takes the call,
 * backends/cuda/cudnn_conv.c; unset, small eager convolutions take our
 * kernels), cuda_conv1d_own_* with GPA_CUDNN_CONV=0 GPA_CONV_TC=1 (our
 * kernels: for bf16 the tensor-core implicit GEMMs of
 * kernels/cuda/conv1d_tc.cu, for f32 the 3xTF32 ones of conv1d_tc32.cu,
 * opt-in since they failed the parity tests on an H100), and
 * cuda_conv1d_simt_* with
 * GPA_CUDNN_CONV=0 GPA_CONV_TC=0 (the SIMT implicit GEMMs of conv1d.cu,
 * the path before the tensor-core kernels: old and new in one run), each
 * on its own actor. Then f32 at the main job's shape only (d1, d8), the
 * SIMT kernels' two tilings of y and dx side by side:
 * cuda_conv1d_igsmall_* with GPA_CONV_IG_SMALL=1 (32 x 32 tiles, the
 * reduction split in the block: kernels/cuda/conv1d_small.cu) and
 * cuda_conv1d_igbig_* with GPA_CONV_IG_SMALL=0 (64 x 64), both with
 * GPA_CUDNN_CONV=0 GPA_CONV_TC=0 (dW, db the same kernels in both), to
 * decide GPA_CONV_IG_SMALL's default (ops/conv1d/cuda_igsmall.c).
 * GPA_BENCH_CONV1D_ONLY picks passes (wanted() below). On sim: tiny
 * shapes, plumbing only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

/* PyTorch's fwd and bwd µs for "B C L K dil dtype"; 0 without it. */
static int torch_conv(const char *args, double *fwd_us, double *bwd_us) {
  char line[256];
  FILE *f = gpa_bench_script("GPA_BENCH_CONV1D_TORCH", args);
  if (!f) return 0;
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "torch_conv1d %lf %lf", fwd_us, bwd_us) == 2) n = 1;
  pclose(f);
  return n;
}

/* Sets env `name` to `v` (NULL: unset), the old value kept in `saved`
 * (empty: was unset); restore with the saved value. */
static void env_swap(const char *name, const char *v, char saved[16], int *had) {
  const char *was = getenv(name);
  *had = was != NULL;
  if (was) snprintf(saved, 16, "%s", was);
  if (v) setenv(name, v, 1);
  else unsetenv(name);
}
static void env_restore(const char *name, const char saved[16], int had) {
  if (had) setenv(name, saved, 1);
  else unsetenv(name);
}

/* One pass over the shapes on a fresh actor: own = 0 cuDNN wherever it
 * takes the call (GPA_CUDNN_CONV=1), 1 our tensor-core kernels
 * (GPA_CUDNN_CONV=0 GPA_CONV_TC=1), 2
 * our SIMT kernels (GPA_CUDNN_CONV=0 GPA_CONV_TC=0; all three read at actor
 * creation), 3 and 4 those with GPA_CONV_IG_SMALL=1 and 0 (f32 at the
 * main job's shape only). */
static void conv_rows(int own) {
  int sim, had[3];
  char saved[3][16];
  env_swap("GPA_CUDNN_CONV", own ? "0" : "1", saved[0], &had[0]);
  env_swap("GPA_CONV_TC", own >= 2 ? "0" : own ? "1" : NULL, saved[1], &had[1]);
  env_swap("GPA_CONV_IG_SMALL", own == 3 ? "1" : own == 4 ? "0" : NULL, saved[2], &had[2]);
  gpa_actor *a = gpa_bench_cuda_actor("cuda_conv1d", &sim);
  env_restore("GPA_CUDNN_CONV", saved[0], had[0]);
  env_restore("GPA_CONV_TC", saved[1], had[1]);
  env_restore("GPA_CONV_IG_SMALL", saved[2], had[2]);
  if (!a) return;
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(5), k = sim ? 1 : 20;
  static const int64_t shapes[][5] = {{32, 96, 128, 3, 1}, {32, 96, 128, 3, 8}, {8, 512, 2048, 3, 4}};
  uint64_t seed = 77;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] * 2; si++) {
    const int64_t *sh = shapes[si / 2];
    const int bf = (int)(si % 2), dt = bf ? GPA_BF16 : GPA_F32;
    if (own >= 3 && (bf || si >= 4)) continue;
    const int64_t B = sim ? 2 : sh[0], C = sim ? 16 : sh[1], L = sim ? 32 : sh[2];
    const int64_t K = sh[3], dil = sh[4];
    int64_t xs[3] = {B, C, L}, ws[3] = {C, C, K}, bs[1] = {C};
    gpa_tensor x = gpa_bench_device_tensor(a, q, dt, 3, xs, &seed), w = gpa_bench_device_tensor(a, q, dt, 3, ws, &seed);
    gpa_tensor b = gpa_bench_device_tensor(a, q, dt, 1, bs, &seed), y = gpa_bench_device_tensor(a, q, dt, 3, xs, &seed);
    gpa_tensor dy = gpa_bench_device_tensor(a, q, dt, 3, xs, &seed), dx = gpa_bench_device_tensor(a, q, dt, 3, xs, &seed);
    /* dW, db f32 for either storage (they feed fp32 optimizer state) */
    gpa_tensor dw = gpa_bench_device_tensor(a, q, GPA_F32, 3, ws, &seed);
    gpa_tensor db = gpa_bench_device_tensor(a, q, GPA_F32, 1, bs, &seed);
    gpa_attr at[2] = {{"causal", GPA_ATTR_INT, 1, 0}, {"dilation", GPA_ATTR_INT, dil, 0}};
    gpa_tensor fin[3] = {x, w, b}, bin[3] = {dy, x, w}, bout[3] = {dx, dw, db};
    gpa_op_call fwd = {"conv1d_fwd", fin, 3, &y, 1, at, 2}, bwd = {"conv1d_bwd", bin, 3, bout, 3, at, 2};
    char err[256] = "", shape[96], args[96], extra[256];
    double ns[2] = {gpa_bench_batch_ns(q, &fwd, k, reps, NULL, err, sizeof err), 0};
    if (ns[0] > 0) ns[1] = gpa_bench_batch_ns(q, &bwd, k, reps, NULL, err, sizeof err);
    const char *dn = bf ? "bf16" : "f32";
    snprintf(shape, sizeof shape, "%s B%lld C%lld L%lld K%lld d%lld causal", dn, (long long)B, (long long)C,
             (long long)L, (long long)K, (long long)dil);
    snprintf(args, sizeof args, "%lld %lld %lld %lld %lld %s", (long long)B, (long long)C, (long long)L, (long long)K,
             (long long)dil, dn);
    /* PyTorch's figures once per shape, in the first pass that runs it */
    static double tt[6][2];
    static int th[6], asked[6];
    if (!asked[si]) th[si] = sim ? 0 : torch_conv(args, &tt[si][0], &tt[si][1]);
    asked[si] = 1;
    const double *t = tt[si];
    int have = th[si];
    static const char *names[5][2] = {{"cuda_conv1d_fwd", "cuda_conv1d_bwd"},
                                      {"cuda_conv1d_own_fwd", "cuda_conv1d_own_bwd"},
                                      {"cuda_conv1d_simt_fwd", "cuda_conv1d_simt_bwd"},
                                      {"cuda_conv1d_igsmall_fwd", "cuda_conv1d_igsmall_bwd"},
                                      {"cuda_conv1d_igbig_fwd", "cuda_conv1d_igbig_bwd"}};
    const double flops = 2.0 * (double)(B * C * C * K * L);
    for (int dir = 0; dir < 2; dir++) {
      if (ns[dir] <= 0) {
        fprintf(stderr, "gpa-bench cuda_conv1d %s %s: %s\n", shape, dir ? "bwd" : "fwd", err);
        continue;
      }
      snprintf(extra, sizeof extra, "\"note\":\"%s; %s\"",
               sim ? "simulated device: plumbing only, the numbers mean nothing" : "device time from CUDA events",
               own == 4   ? "our SIMT kernels, y and dx in 64 x 64 tiles (GPA_CUDNN_CONV=0 GPA_CONV_TC=0 GPA_CONV_IG_SMALL=0)"
               : own == 3 ? "our SIMT kernels, y and dx in 32 x 32 tiles (GPA_CUDNN_CONV=0 GPA_CONV_TC=0 GPA_CONV_IG_SMALL=1)"
               : own == 2 ? "our SIMT kernels (GPA_CUDNN_CONV=0 GPA_CONV_TC=0)"
               : own    ? (bf ? "our tensor-core kernels (GPA_CUDNN_CONV=0)"
                              : "our 3xTF32 tensor-core kernels (GPA_CUDNN_CONV=0 GPA_CONV_TC=1)")
                        : "cuDNN where it takes the call (GPA_CUDNN_CONV=1), else our kernels");
      gpa_bench_result r = {.name = names[own][dir], .backend = sim ? "sim" : "cuda",
                            .shape = shape, .ref = have ? "torch_conv1d" : "itself", .ns = ns[dir],
                            .ref_ns = have ? t[dir] * 1e3 : ns[dir], .flops = dir ? 2 * flops : flops, .extra = extra};
      gpa_bench_emit(&r);
    }
    gpa_sync_batch(q, NULL);
    const gpa_tensor all[8] = {x, w, b, y, dy, dx, dw, db};
    for (int i = 0; i < 8; i++) gpa_buffer_release(a, all[i].buffer);
  }
  gpa_actor_destroy(a);
}

/* GPA_BENCH_CONV1D_ONLY: a comma-separated list of the passes to run
 * (cudnn, own, simt, igsmall, igbig; e.g. "igsmall,igbig" for the tiling
 * A/B alone); unset, all of them. */
static int wanted(const char *pass) {
  const char *only = getenv("GPA_BENCH_CONV1D_ONLY");
  if (!only || !*only) return 1;
  const size_t n = strlen(pass);
  for (const char *p = only; (p = strstr(p, pass)) != NULL; p += n)
    if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
  return 0;
}

void gpa_bench_cuda_conv1d(void) {
  static const char *const passes[] = {"cudnn", "own", "simt", "igsmall", "igbig"};
  for (int i = 0; i < 5; i++)
    if (wanted(passes[i])) conv_rows(i);
}
