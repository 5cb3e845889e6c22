/* gpa-bench cuda_sdpa: attention through cuDNN's fused SDPA path
 * (backends/cuda/cudnn*.c), forced (a user op that runs only that path and
 * fails if it declines), beside PyTorch's SDPA backends on the same shapes
 * in the same run (bench/sdpa_torch.py, when python3 can import torch with
 * CUDA: cudnn, flash, efficient).
 *
 * Shapes (issue 22): B4 S4096 H16 D128 and B4 S4096 H32 D64, causal and
 * not, plus GQA B4 S4096 H32 Hkv8 D128; bf16 and fp16, forward and
 * backward. FLOPs 4 B H S Sk D forward, halved when causal, 2.5x backward.
 * Device time from the batch's CUDA events (k ops a batch, best of reps).
 * host_us: host time inside the cuDNN path per call with the plan cached
 * (variant pack + execute), measured on the actor thread, the mean;
 * host_med_us its median (a single slow call, a page fault or a
 * preemption, adds a 25th of its length to the mean of 25); exec_us the part inside
 * cudnnBackendExecute (gpa__cudnn_set_timing), the mean: host_us - exec_us
 * is ours (docs/cuda.md, "Host time per call").
 * GPA_BENCH_SDPA_NONDET=1: the backward may take cuDNN's non-deterministic
 * engine (the op's deterministic = 0; by default it is deterministic);
 * =both: each shape's backward twice, deterministic then not, two lines.
 * GPA_BENCH_SDPA_ONLY: a comma-separated list of the shape labels to run
 * (as the lines print them, e.g. "bf16 B4 S4096 H32 Hkv32 D64"); one
 * shape's A/B of the cuDNN knobs (GPA_CUDNN_SDPA_*, docs/cuda.md) then
 * takes seconds. Each line's "plan" says which engine config ran
 * (gpa__cudnn_plan_info).
 * Each line's ratio is ours over the best PyTorch backend of that shape
 * (ref names which); without PyTorch, ref is "none".
 * On sim the shapes are tiny and every line says the numbers mean nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "gpuactor.h"

#ifdef GPA_HAVE_CUDA_BACKEND
#include "backends/cuda/cudnn.h"

typedef struct sp {
  int64_t causal, bwd;
} sp;
static const gpa_attr_spec sp_attrs[] = {
    {"causal", GPA_ATTR_INT, 0, offsetof(sp, causal), 0, 0.0, 0, 1},
    {"bwd", GPA_ATTR_INT, 0, offsetof(sp, bwd), 0, 0.0, 0, 1},
};

/* Host time in the path (actor thread only; read after a batch synced). */
static double host_ns_sum;
static long host_calls;
#define HOST_SAMPLES 256
static double host_ns[HOST_SAMPLES]; /* the first calls' times, for the median */
static uint64_t exec_ns_at, timed_at, exec_ns_base, timed_base; /* inside cudnnBackendExecute: now, at the reset */
static int nondet; /* the backward's, set before each batch (GPA_BENCH_SDPA_NONDET) */
static char plan_info[2][256]; /* forward, backward: the last call's plan */
static size_t dnn_version;     /* the loaded cuDNN's, for the lines */


static gpa_status sdpa_cuda(const gpa_op_exec *x) {
  const sp *p = x->params;
  const gpa_tensor *q = &x->inputs[p->bwd ? 1 : 0], *k = &x->inputs[p->bwd ? 2 : 1];
  gpa__sdpa_args a = {.B = q->shape[0], .S = q->shape[1], .H = q->shape[2], .D = q->shape[3], .Sk = k->shape[1],
                      .Hkv = k->shape[2], .dtype = q->dtype, .out_dtype = x->outputs[0].dtype,
                      .scale = (float)(1.0 / sqrt((double)q->shape[3])), .causal = (int)p->causal,
                      .nondeterministic = nondet};
  gpa__cudnn_set_timing(gpa__cu_of(x), 1);
  double t0 = gpa_bench_now_ns();
  gpa_status st;
  if (p->bwd) {
    a.dout = x->in[0], a.q = x->in[1], a.k = x->in[2], a.v = x->in[3], a.o = x->in[4], a.lse = x->in[5];
    a.dq = x->out[0], a.dk = x->out[1], a.dv = x->out[2];
    a.o_dtype = x->inputs[4].dtype;
    st = gpa__cudnn_sdpa_bwd(x, &a);
  } else {
    a.q = x->in[0], a.k = x->in[1], a.v = x->in[2], a.o = x->out[0], a.lse = x->out[1];
    st = gpa__cudnn_sdpa_fwd(x, &a);
  }
  double dt = gpa_bench_now_ns() - t0;
  host_ns_sum += dt;
  if (host_calls < HOST_SAMPLES) host_ns[host_calls] = dt;
  host_calls++;
  gpa__cu_ctx *C = gpa__cu_of(x);
  gpa__cudnn_stats ds;
  gpa__cudnn_get_stats(C, &ds);
  exec_ns_at = ds.exec_ns, timed_at = ds.timed;
  snprintf(plan_info[p->bwd ? 1 : 0], sizeof plan_info[0], "%s", gpa__cudnn_plan_info(C));
  dnn_version = C->dnn ? C->dnn->version : 0;
  if (st == GPA_SKIP) {
    snprintf(x->msg, x->msg_size, "cuDNN declined: %s", gpa__cudnn_last_decline(gpa__cu_of(x)));
    return GPA_EUNSUPPORTED;
  }
  return st;
}

/* r == 0 built the plan: host time counts cached calls only */
static void host_reset(void) { host_ns_sum = 0, host_calls = 0, exec_ns_base = exec_ns_at, timed_base = timed_at; }

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The calls since host_reset: median host µs, mean µs inside execute. */
static void host_more(double *med_us, double *exec_us) {
  long n = host_calls < HOST_SAMPLES ? host_calls : HOST_SAMPLES;
  qsort(host_ns, (size_t)n, sizeof host_ns[0], cmp_d);
  *med_us = n ? (n & 1 ? host_ns[n / 2] : (host_ns[n / 2 - 1] + host_ns[n / 2]) / 2) / 1e3 : 0;
  uint64_t t = timed_at - timed_base;
  *exec_us = t ? (double)(exec_ns_at - exec_ns_base) / (double)t / 1e3 : 0;
}

/* Whether GPA_BENCH_SDPA_ONLY (NULL: all) lists this shape's label. */
static int wanted(const char *only, const char *label) {
  if (!only) return 1;
  size_t n = strlen(label);
  for (const char *p = only; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    while (l && *p == ' ') p++, l--;
    while (l && p[l - 1] == ' ') l--;
    if (l == n && !strncmp(p, label, n)) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}


void gpa_bench_cuda_sdpa(void) {
  int sim;
  gpa_actor *a = gpa_bench_cuda_actor("cuda_sdpa", &sim);
  if (!a) return;
  const char *nd = getenv("GPA_BENCH_SDPA_NONDET"), *only = getenv("GPA_BENCH_SDPA_ONLY");
  /* the backward passes' `nondet`: {0} (default), {1} ("1") or {0, 1} ("both") */
  int nd_from = nd && !strcmp(nd, "1"), nd_to = nd && !strcmp(nd, "both") ? 1 : nd_from;
  if (only && !*only) only = NULL;
  gpa_op_desc d = {.size = sizeof d, .name = "bench_cudnn_sdpa", .min_inputs = 3, .max_inputs = 6, .n_outputs = 3,
                   .attrs = sp_attrs, .n_attrs = 2, .params_size = sizeof(sp), .cuda = sdpa_cuda};
  gpa_op_desc d2 = d;
  d2.name = "bench_cudnn_sdpa_fwd", d2.n_outputs = 2;
  gpa_op_register(gpa_actor_registry(a), &d);
  gpa_op_register(gpa_actor_registry(a), &d2);
  gpa_queue *q = gpa_actor_default_queue(a);
  const int reps = gpa_bench_reps(5), k = sim ? 1 : 5;
  const char *note = sim ? "\"note\":\"simulated device: plumbing only, the numbers mean nothing\""
                         : "\"note\":\"device time from CUDA events\"";
  static const int64_t shapes[][5] = {{4, 4096, 16, 16, 128}, {4, 4096, 32, 32, 64}, {4, 4096, 32, 8, 128}};
  uint64_t seed = 12345;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int dti = 0; dti < 2; dti++)
      for (int causal = 0; causal <= 1; causal++) {
        int dt = dti ? GPA_F16 : GPA_BF16;
        int64_t B = sim ? 1 : shapes[si][0], S = sim ? 64 : shapes[si][1], H = sim ? shapes[si][2] / 8 : shapes[si][2];
        int64_t Hk = sim ? shapes[si][3] / 8 : shapes[si][3], D = shapes[si][4];
        if (si == 2 && causal) continue; /* one GQA row per dtype */
        char shape[96];
        snprintf(shape, sizeof shape, "%s B%lld S%lld H%lld Hkv%lld D%lld%s", gpa_dtype_name(dt), (long long)B,
                 (long long)S, (long long)H, (long long)Hk, (long long)D, causal ? " causal" : "");
        if (!wanted(only, shape)) continue;
        int64_t qs[4] = {B, S, H, D}, ks[4] = {B, S, Hk, D}, ls[3] = {B, H, S};
        gpa_tensor tq = gpa_bench_device_tensor(a, q, dt, 4, qs, &seed), tk = gpa_bench_device_tensor(a, q, dt, 4, ks, &seed);
        gpa_tensor tv = gpa_bench_device_tensor(a, q, dt, 4, ks, &seed), tdo = gpa_bench_device_tensor(a, q, dt, 4, qs, &seed);
        gpa_tensor to = gpa_bench_device_tensor(a, q, dt, 4, qs, &seed), tl = gpa_bench_device_tensor(a, q, GPA_F32, 3, ls, &seed);
        gpa_tensor tdq = gpa_bench_device_tensor(a, q, dt, 4, qs, &seed), tdk = gpa_bench_device_tensor(a, q, dt, 4, ks, &seed);
        gpa_tensor tdv = gpa_bench_device_tensor(a, q, dt, 4, ks, &seed);
        gpa_attr at[2] = {{"causal", GPA_ATTR_INT, causal, 0}, {"bwd", GPA_ATTR_INT, 0, 0}};
        gpa_tensor fin[3] = {tq, tk, tv}, fout[2] = {to, tl};
        gpa_op_call fwd = {"bench_cudnn_sdpa_fwd", fin, 3, fout, 2, at, 2};
        char err[256] = "", args[96], extra[1024], fplan[256];
        /* lse must be real for the backward: the forward writes it first */
        double fns = gpa_bench_batch_ns(q, &fwd, k, reps, host_reset, err, sizeof err);
        double fhost = host_calls ? host_ns_sum / host_calls : 0, fmed, fexec;
        host_more(&fmed, &fexec);
        snprintf(fplan, sizeof fplan, "%s", plan_info[0]);
        at[1].i = 1;
        gpa_tensor bin[6] = {tdo, tq, tk, tv, to, tl}, bout[3] = {tdq, tdk, tdv};
        gpa_op_call bwd = {"bench_cudnn_sdpa", bin, 6, bout, 3, at, 2};
        snprintf(args, sizeof args, "%s %lld %lld %lld %lld %lld %d", gpa_dtype_name(dt), (long long)B, (long long)S,
                 (long long)H, (long long)Hk, (long long)D, causal);
        gpa_bench_torch_row rows[4];
        int nr = sim ? 0 : gpa_bench_torch_sdpa(args, rows, 4);
        double flops = 4.0 * (double)(B * H * S * S * D) * (causal ? 0.5 : 1.0);
        /* dir 0: the forward; then one backward line per determinism asked for */
        for (int pass = 0; pass <= 1 + (nd_from != nd_to); pass++) {
          int dir = pass > 0;
          double ns = fns, hus = fhost / 1e3, med = fmed, exec = fexec;
          const char *plan = fplan;
          if (dir) {
            nondet = pass == 1 ? nd_from : nd_to;
            if (fns > 0) err[0] = 0; /* else the forward's error: the backward needs its lse */
            ns = fns > 0 ? gpa_bench_batch_ns(q, &bwd, k, reps, host_reset, err, sizeof err) : 0;
            hus = host_calls ? host_ns_sum / host_calls / 1e3 : 0;
            host_more(&med, &exec);
            plan = plan_info[1];
          }
          double fl = dir ? 2.5 * flops : flops, best = 0;
          const char *ref = "none";
          int len = snprintf(extra, sizeof extra,
                             "%s,\"host_us\":%.2f,\"host_med_us\":%.2f,\"exec_us\":%.2f%s,\"cudnn\":%zu,"
                             "\"plan\":\"%s\"",
                             note, hus, med, exec,
                             dir ? (nondet ? ",\"deterministic\":0" : ",\"deterministic\":1") : "", dnn_version,
                             plan);
          for (int r = 0; r < nr; r++) {
            double tf = dir ? rows[r].bwd : rows[r].fwd;
            len += snprintf(extra + len, sizeof extra - (size_t)len, ",\"torch_%s_tflops\":%.1f", rows[r].backend, tf);
            if (tf > best) best = tf, ref = rows[r].backend;
          }
          if (ns <= 0) {
            fprintf(stderr, "gpa-bench cuda_sdpa %s %s: %s\n", shape, dir ? "bwd" : "fwd", err);
            continue;
          }
          /* the reference's time for the same flops at its best rate */
          double ref_ns = best > 0 ? fl / (best * 1e3) : ns;
          gpa_bench_result res = {.name = dir ? "cuda_sdpa_bwd" : "cuda_sdpa_fwd", .backend = sim ? "sim" : "cuda",
                                  .shape = shape, .ref = ref, .ns = ns, .ref_ns = ref_ns, .flops = fl, .extra = extra};
          gpa_bench_emit(&res);
        }
        gpa_sync_batch(q, NULL);
        const gpa_tensor all[9] = {tq, tk, tv, tdo, to, tl, tdq, tdk, tdv};
        for (int i = 0; i < 9; i++) gpa_buffer_release(a, all[i].buffer);
      }
  gpa_actor_destroy(a);
}
#else
void gpa_bench_cuda_sdpa(void) {}
#endif
