/* gpa-bench cuda_conv_nlc: conv1d_fwd (with bias) and conv1d_bwd channels
 * last (layout nlc: x, y [B,L,C]) against the default layout ([B,C,L]) on
 * a CUDA device, device time per call (gpa_bench_batch_ns, batches of 20),
 * the two layouts measured alternately in three rounds, best of each:
 * rows cuda_conv1d_nlc_{fwd,bwd} with ns = nlc and ref_ns = ncl (ref
 * "conv1d_ncl"). Shapes: the main job's B32 C96 L128 K3 causal at
 * dilations 1 and 8, and B8 C512 L2048 K3 dilation 4, f32 and bf16, with
 * the actor's defaults (cuDNN from 1 GFLOP; GPA_CUDNN_CONV, GPA_CONV_TC
 * choose as everywhere). On sim: tiny shapes, plumbing only. */
#include <stdio.h>

#include "bench.h"
#include "gpuactor.h"

void gpa_bench_cuda_conv_nlc(void) {
  int sim;
  gpa_actor *a = gpa_bench_cuda_actor("cuda_conv_nlc", &sim);
  if (!a) return;
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(5), k = sim ? 1 : 20;
  static const int64_t shapes[][5] = {{32, 96, 128, 3, 1}, {32, 96, 128, 3, 8}, {8, 512, 2048, 3, 4}};
  uint64_t seed = 91;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] * 2; si++) {
    const int64_t *sh = shapes[si / 2];
    const int bf = (int)(si % 2), dt = bf ? GPA_BF16 : GPA_F32;
    const int64_t B = sim ? 2 : sh[0], C = sim ? 16 : sh[1], L = sim ? 32 : sh[2], K = sh[3], dil = sh[4];
    /* one buffer each for both layouts' x, y, dy, dx: B C L elements either way (causal, stride 1: Lout = L) */
    int64_t ncl[3] = {B, C, L}, nlc[3] = {B, L, C}, ws[3] = {C, C, K}, bs[1] = {C};
    gpa_tensor x = gpa_bench_device_tensor(a, q, dt, 3, ncl, &seed), w = gpa_bench_device_tensor(a, q, dt, 3, ws, &seed);
    gpa_tensor b = gpa_bench_device_tensor(a, q, dt, 1, bs, &seed), y = gpa_bench_device_tensor(a, q, dt, 3, ncl, &seed);
    gpa_tensor dy = gpa_bench_device_tensor(a, q, dt, 3, ncl, &seed), dx = gpa_bench_device_tensor(a, q, dt, 3, ncl, &seed);
    gpa_tensor dw = gpa_bench_device_tensor(a, q, GPA_F32, 3, ws, &seed);
    gpa_tensor db = gpa_bench_device_tensor(a, q, GPA_F32, 1, bs, &seed);
    double best[2][2] = {{0, 0}, {0, 0}}; /* [layout][dir] */
    char err[256] = "";
    for (int round = 0; round < 3 && !err[0]; round++)
      for (int lay = 0; lay < 2 && !err[0]; lay++) {
        gpa_tensor xl = x, yl = y, dyl = dy, dxl = dx;
        const int64_t *s = lay ? nlc : ncl;
        for (int i = 0; i < 3; i++) xl.shape[i] = yl.shape[i] = dyl.shape[i] = dxl.shape[i] = s[i];
        gpa_attr at[3] = {{"causal", GPA_ATTR_INT, 1, 0}, {"dilation", GPA_ATTR_INT, dil, 0},
                          {"layout", GPA_ATTR_INT, lay, 0}};
        gpa_tensor fin[3] = {xl, w, b}, bin[3] = {dyl, xl, w}, bout[3] = {dxl, dw, db};
        gpa_op_call fwd = {"conv1d_fwd", fin, 3, &yl, 1, at, 3}, bwd = {"conv1d_bwd", bin, 3, bout, 3, at, 3};
        for (int dir = 0; dir < 2 && !err[0]; dir++) {
          double ns = gpa_bench_batch_ns(q, dir ? &bwd : &fwd, k, reps, NULL, err, sizeof err);
          if (ns > 0 && (best[lay][dir] == 0 || ns < best[lay][dir])) best[lay][dir] = ns;
        }
      }
    char shape[96], extra[160];
    snprintf(shape, sizeof shape, "%s B%lld C%lld L%lld K%lld d%lld causal", bf ? "bf16" : "f32", (long long)B,
             (long long)C, (long long)L, (long long)K, (long long)dil);
    if (err[0]) fprintf(stderr, "gpa-bench cuda_conv_nlc %s: %s\n", shape, err);
    snprintf(extra, sizeof extra, "\"note\":\"%s\"",
             sim ? "simulated device: plumbing only, the numbers mean nothing" : "device time from CUDA events");
    const double flops = 2.0 * (double)(B * C * C * K * L);
    for (int dir = 0; dir < 2 && !err[0]; dir++) {
      gpa_bench_result r = {.name = dir ? "cuda_conv1d_nlc_bwd" : "cuda_conv1d_nlc_fwd", .backend = sim ? "sim" : "cuda",
                            .shape = shape, .ref = "conv1d_ncl", .ns = best[1][dir], .ref_ns = best[0][dir],
                            .flops = dir ? 2 * flops : flops, .extra = extra};
      gpa_bench_emit(&r);
    }
    gpa_sync_batch(q, NULL);
    const gpa_tensor all[8] = {x, w, b, y, dy, dx, dw, db};
    for (int i = 0; i < 8; i++) gpa_buffer_release(a, all[i].buffer);
  }
  gpa_actor_destroy(a);
}
