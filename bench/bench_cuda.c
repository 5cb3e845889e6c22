/* gpa-bench cuda_*: the CUDA backend's kernels timed on the device (CUDA
 * events around each op, the batch's device time), through the actor.
 *   cuda_membound: add, gelu_fwd/bwd (erf), layernorm_fwd/bwd (f32 and bf16),
 *     adamw and sgd (f32), embedding_fwd/bwd, cross_entropy_fwd/bwd,
 *     add_broadcast_fwd and mask_zero (f32 and bf16) as GB/s (each input read once, each output written
 *     once), against the built-in copy op of n floats, which is one
 *     cuMemcpyDtoDAsync: the device-to-device copy bandwidth measured in the
 *     same run; with GPA_BENCH_MEMBOUND_TORCH naming bench/membound_torch.py
 *     (python3 with torch and CUDA) each line also carries PyTorch's time for
 *     the same op and dtype ("torch_ns") and our speed over it ("torch_ratio").
 *   cuda_linear: linear_fwd (sgemm + bias epilogue) against a bare
 *     cublasSgemm of the same shape, issued by a user op on the same stream;
 *     linear_bwd (dx, dW, db) f32 and bf16 against PyTorch's two GEMMs and
 *     bias sum (the same script), or itself without it.
 * Runs when GPA_DEVICE selects cuda or sim; on sim only the plumbing is
 * exercised: emulated times mean nothing, and every line says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpuactor.h"

#ifdef GPA_HAVE_CUDA_BACKEND
#include "backends/cuda/cuda_ops.h"
#endif

typedef struct cb {
  gpa_actor *a;
  gpa_queue *q;
  int sim;
  const char *note;
} cb;

static int cb_open(cb *c) {
  memset(c, 0, sizeof *c);
  if (gpa_actor_create(NULL, &c->a) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_*: no actor: %s\n", gpa_last_error_message());
    return 0;
  }
  const char *be = gpa_actor_backend(c->a);
  if (strcmp(be, "cuda") && strcmp(be, "sim")) {
    fprintf(stderr, "gpa-bench cuda_*: skipped on backend %s (set GPA_DEVICE=cuda or sim)\n", be);
    gpa_actor_destroy(c->a);
    return 0;
  }
  c->sim = !strcmp(be, "sim");
  c->q = gpa_actor_default_queue(c->a);
  c->note = c->sim ? "\"note\":\"simulated device: emulated times, plumbing check only; the numbers mean nothing\""
                   : "\"note\":\"device time from CUDA events\"";
  return 1;
}

static gpa_tensor f32(cb *c, int rank, const int64_t *shape) {
  gpa_tensor t = {0};
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i], t.shape[i] = shape[i];
  t.rank = (uint32_t)rank;
  t.dtype = GPA_F32;
  if (gpa_buffer_acquire(c->a, NULL, (uint64_t)(n ? n : 1) * 4, &t.buffer) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_*: %s\n", gpa_last_error_message());
    exit(1);
  }
  gpa_attr v = {"value", GPA_ATTR_FLOAT, 0, 0.25};
  gpa_op_call f = {"fill", NULL, 0, &t, 1, &v, 1};
  gpa_submit(c->q, &f, NULL);
  return t;
}

/* i32 values in [0, v) (ids, targets) or u8 values 0/1 (a mask), uploaded. */
static gpa_tensor ints(cb *c, int dt, int rank, const int64_t *shape, int64_t v, uint64_t *seed) {
  gpa_tensor t = {0};
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i], t.shape[i] = shape[i];
  t.rank = (uint32_t)rank;
  t.dtype = dt;
  size_t es = dt == GPA_U8 ? 1 : 4;
  void *h = malloc((size_t)n * es);
  if (!h || gpa_buffer_acquire(c->a, NULL, (uint64_t)n * es, &t.buffer) != GPA_OK) {
    fprintf(stderr, "gpa-bench cuda_*: %s\n", gpa_last_error_message());
    exit(1);
  }
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    int64_t r = (int64_t)((*seed >> 33) % (uint64_t)v);
    if (dt == GPA_U8) ((uint8_t *)h)[i] = (uint8_t)r;
    else ((int32_t *)h)[i] = (int32_t)r;
  }
  gpa_upload(c->q, &t, h, (uint64_t)n * es, 0, NULL);
  gpa_sync_batch(c->q, NULL);
  free(h);
  return t;
}

/* Best over reps of the device time per op, k ops per batch. */
static double op_ns(cb *c, const gpa_op_call *call, int k, int reps) {
  double best = 1e300;
  for (int r = 0; r <= reps; r++) {
    gpa_sync_batch(c->q, NULL);
    for (int i = 0; i < k; i++) gpa_submit(c->q, call, NULL);
    gpa_batch_stats st = {.size = sizeof st};
    if (gpa_sync_batch(c->q, &st) != GPA_OK) {
      fprintf(stderr, "gpa-bench cuda_*: %s failed: %s\n", call->op, st.first_error_message);
      return 0;
    }
    double ns = (double)st.device_ns / k;
    if (r && ns < best) best = ns; /* r == 0: warm-up (module load) */
  }
  return best;
}

static void emit(cb *c, const char *name, const char *shape, double ns, double ref_ns, double bytes,
                 double flops, const char *ref) {
  gpa_bench_result r = {.name = name, .backend = c->sim ? "sim" : "cuda", .shape = shape, .ref = ref,
                        .ns = ns, .ref_ns = ref_ns, .bytes = bytes, .flops = flops, .extra = c->note};
  gpa_bench_emit(&r);
}

/* PyTorch's µs for (op, dtype) from the script's lines "<tag> op dtype us"
 * (or "<tag> dtype us" when op is NULL); 0 when absent. */
typedef struct torch_fig {
  char op[32], dt[8];
  double us;
} torch_fig;

static int torch_figs(const char *args, torch_fig *f, int max) {
  FILE *p = gpa_bench_script("GPA_BENCH_MEMBOUND_TORCH", args);
  if (!p) return 0;
  char line[256];
  int n = 0;
  while (n < max && fgets(line, sizeof line, p)) {
    if (sscanf(line, "torch_membound %31s %7s %lf", f[n].op, f[n].dt, &f[n].us) == 3) n++;
    else if (sscanf(line, "torch_linear_bwd %7s %lf", f[n].dt, &f[n].us) == 2) strcpy(f[n].op, "linear_bwd"), n++;
  }
  pclose(p);
  return n;
}

static double torch_us(const torch_fig *f, int n, const char *op, const char *dt) {
  for (int i = 0; i < n; i++)
    if (!strcmp(f[i].op, op) && !strcmp(f[i].dt, dt)) return f[i].us;
  return 0;
}

/* c->note plus PyTorch's figure, when there is one */
static const char *extra_of(cb *c, char *buf, size_t n, double ns, double torch_us_) {
  if (torch_us_ <= 0) return c->note;
  snprintf(buf, n, "%s,\"torch_ns\":%.1f,\"torch_ratio\":%.4f", c->note, torch_us_ * 1e3, torch_us_ * 1e3 / ns);
  return buf;
}

/* The rest of issue 25's memory-bound ops at the same size: sgd (f32),
 * embedding fwd/bwd (16384 ids of a 32000-row table of width D; dtable f32),
 * cross-entropy fwd/bwd (N rows of D classes), add_broadcast_fwd and
 * mask_zero ([N/128, 128, D]); bytes: each input read once, each output
 * written once. */
static void membound_more(cb *c, int dt, int64_t N, int64_t D, int k, int reps, double ref, double ref_bytes,
                          const torch_fig *tf, int ntf, uint64_t *seed) {
  const int bf = dt == GPA_BF16;
  const double es = bf ? 2.0 : 4.0, n = (double)N * (double)D;
  const int64_t V = c->sim ? 1000 : 32000, B = N / 128;
  int64_t sh[2] = {N, D}, sh3[3] = {B, 128, D}, ids2[2] = {B, 128}, tab[2] = {V, D}, bd[2] = {B, D}, rows[1] = {N};
  char shape[64], extra[512];
  const char *dn = bf ? "bf16" : "f32";
  snprintf(shape, sizeof shape, "%s %lldx%lld", dn, (long long)N, (long long)D);
  gpa_tensor x = gpa_bench_device_tensor(c->a, c->q, dt, 2, sh, seed), y = gpa_bench_device_tensor(c->a, c->q, dt, 2, sh, seed);
  gpa_tensor p = gpa_bench_device_tensor(c->a, c->q, GPA_F32, 2, sh, seed);
  gpa_tensor gr = gpa_bench_device_tensor(c->a, c->q, GPA_F32, 2, sh, seed);
  gpa_tensor bu = gpa_bench_device_tensor(c->a, c->q, GPA_F32, 2, sh, seed);
  gpa_tensor t = gpa_bench_device_tensor(c->a, c->q, dt, 2, tab, seed);
  gpa_tensor dtab = gpa_bench_device_tensor(c->a, c->q, GPA_F32, 2, tab, seed);
  gpa_tensor v = gpa_bench_device_tensor(c->a, c->q, dt, 2, bd, seed);
  gpa_tensor ids = ints(c, GPA_I32, 2, ids2, V, seed), tg = ints(c, GPA_I32, 1, rows, D, seed);
  gpa_tensor mask = ints(c, GPA_U8, 2, ids2, 2, seed);
  gpa_tensor loss = gpa_bench_device_tensor(c->a, c->q, GPA_F32, 1, (int64_t[]){1}, seed);
  gpa_tensor x3 = x, y3 = y;
  x3.rank = y3.rank = 3;
  memcpy(x3.shape, sh3, sizeof sh3);
  memcpy(y3.shape, sh3, sizeof sh3);
  struct {
    const char *name, *op;
    gpa_tensor in[4];
    uint32_t nin;
    gpa_tensor out[2];
    uint32_t nout;
    gpa_attr attr[2];
    uint32_t nattr;
    double bytes;
    int f32_only;
  } cases[] = {
      {"cuda_sgd", "sgd", {p, gr, bu}, 3, {p, bu}, 2,
       {{"lr", GPA_ATTR_FLOAT, 0, 1e-3}, {"momentum", GPA_ATTR_FLOAT, 0, 0.9}}, 2, 20.0 * n, 1},
      {"cuda_embedding_fwd", "embedding_fwd", {ids, t}, 2, {y3}, 1, {{0}}, 0, 2 * es * n + 4.0 * N, 0},
      {"cuda_embedding_bwd", "embedding_bwd", {y3, ids}, 2, {dtab}, 1, {{0}}, 0, es * n + 4.0 * N + 4.0 * V * D, 0},
      {"cuda_cross_entropy_fwd", "cross_entropy_fwd", {x, tg}, 2, {loss}, 1, {{0}}, 0, es * n + 4.0 * N, 0},
      {"cuda_cross_entropy_bwd", "cross_entropy_bwd", {x, tg}, 2, {y}, 1, {{0}}, 0, 2 * es * n + 4.0 * N, 0},
      {"cuda_add_broadcast_fwd", "add_broadcast_fwd", {x3, v}, 2, {y3}, 1, {{0}}, 0, 2 * es * n + es * B * D, 0},
      {"cuda_mask_zero", "mask_zero", {x3, mask}, 2, {y3}, 1, {{0}}, 0, 2 * es * n + (double)N, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (bf && cases[i].f32_only) continue;
    gpa_op_call call = {cases[i].op, cases[i].in, cases[i].nin, cases[i].out, cases[i].nout, cases[i].attr,
                        cases[i].nattr};
    double ns = op_ns(c, &call, k, reps);
    if (ns <= 0) continue;
    double tu = torch_us(tf, ntf, cases[i].op, dn);
    gpa_bench_result r = {.name = cases[i].name, .backend = c->sim ? "sim" : "cuda", .shape = shape,
                          .ref = "cuMemcpyDtoD", .ns = ns, .ref_ns = ref, .bytes = cases[i].bytes,
                          .ref_bytes = ref_bytes, .extra = extra_of(c, extra, sizeof extra, ns, tu)};
    gpa_bench_emit(&r);
  }
  const gpa_tensor all[12] = {x, y, p, gr, bu, t, dtab, v, ids, tg, mask, loss};
  for (int i = 0; i < 12; i++) gpa_buffer_release(c->a, all[i].buffer);
}

void gpa_bench_cuda_membound(void) {
  cb c;
  if (!cb_open(&c)) return;
  const int reps = gpa_bench_reps(5), k = c.sim ? 2 : 20;
  const int64_t N = c.sim ? 256 : 16384, D = c.sim ? 1024 : 4096, n = N * D;
  int64_t sh[2] = {N, D}, vec[1] = {D}, rows[1] = {N}, flat[1] = {n};
  char shape[64], args[64], extra[512];
  snprintf(args, sizeof args, "membound %lld %lld", (long long)N, (long long)D);
  /* 24 lines today (13 ops in f32, 11 in bf16): with room for 16 the bf16
   * rows past gelu_bwd had no PyTorch column (session 14's H100 run) */
  torch_fig tf[64];
  int ntf = c.sim ? 0 : torch_figs(args, tf, 64);
  uint64_t seed = 25;
  /* the reference: one device-to-device copy of n floats (8n bytes moved) */
  gpa_tensor xf = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, flat, &seed);
  gpa_tensor yf = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, flat, &seed);
  gpa_op_call copy = {"copy", &xf, 1, &yf, 1, NULL, 0};
  double ref = op_ns(&c, &copy, k, reps), ref_bytes = 8.0 * (double)n;
  gpa_buffer_release(c.a, xf.buffer);
  gpa_buffer_release(c.a, yf.buffer);
  for (int bf = 0; bf < 2; bf++) {
    const int dt = bf ? GPA_BF16 : GPA_F32;
    const double es = bf ? 2.0 : 4.0; /* bytes per element of x-sized tensors */
    const char *dn = bf ? "bf16" : "f32";
    gpa_tensor x = gpa_bench_device_tensor(c.a, c.q, dt, 2, sh, &seed), y = gpa_bench_device_tensor(c.a, c.q, dt, 2, sh, &seed);
    gpa_tensor z = gpa_bench_device_tensor(c.a, c.q, dt, 2, sh, &seed), w = gpa_bench_device_tensor(c.a, c.q, dt, 2, sh, &seed);
    gpa_tensor g = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, vec, &seed);
    gpa_tensor b = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, vec, &seed);
    gpa_tensor mu = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, rows, &seed);
    gpa_tensor rs = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, rows, &seed);
    snprintf(shape, sizeof shape, "%s %lldx%lld", dn, (long long)N, (long long)D);
    struct {
      const char *name, *op;
      gpa_tensor in[5];
      uint32_t nin;
      gpa_tensor out[3];
      uint32_t nout;
      gpa_attr attr[2];
      uint32_t nattr;
      double bytes;
    } cases[] = {
        {"cuda_add", "add", {x, z}, 2, {y}, 1, {{0}}, 0, 3 * es * n},
        {"cuda_gelu_fwd", "gelu_fwd", {x}, 1, {y}, 1, {{0}}, 0, 2 * es * n},
        {"cuda_gelu_bwd", "gelu_bwd", {x, z}, 2, {y}, 1, {{0}}, 0, 3 * es * n},
        {"cuda_layernorm_fwd", "layernorm_fwd", {x, g, b}, 3, {y, mu, rs}, 3, {{0}}, 0, 2 * es * n},
        {"cuda_layernorm_bwd", "layernorm_bwd", {x, z, g, mu, rs}, 5, {y, b, g}, 3, {{0}}, 0, 3 * es * n},
        {"cuda_adamw", "adamw", {x, y, z, w}, 4, {x, z, w}, 3,
         {{"lr", GPA_ATTR_FLOAT, 0, 1e-3}, {"step", GPA_ATTR_INT, 1, 0}}, 2, 28.0 * n},
    };
    /* layernorm_bwd writes dgamma into g after reading it: a copy keeps gamma apart */
    gpa_tensor dg = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, vec, &seed);
    cases[4].out[2] = dg;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      if (bf && !strcmp(cases[i].op, "adamw")) continue; /* its state is f32: the f32 row says it */
      gpa_op_call call = {cases[i].op, cases[i].in, cases[i].nin, cases[i].out, cases[i].nout, cases[i].attr,
                          cases[i].nattr};
      double ns = op_ns(&c, &call, k, reps);
      if (ns <= 0) continue;
      double tu = torch_us(tf, ntf, cases[i].op, dn);
      gpa_bench_result r = {.name = cases[i].name, .backend = c.sim ? "sim" : "cuda", .shape = shape,
                            .ref = "cuMemcpyDtoD", .ns = ns, .ref_ns = ref, .bytes = cases[i].bytes,
                            .ref_bytes = ref_bytes, .extra = extra_of(&c, extra, sizeof extra, ns, tu)};
      gpa_bench_emit(&r);
    }
    const gpa_tensor all[9] = {x, y, z, w, g, b, mu, rs, dg};
    for (int i = 0; i < 9; i++) gpa_buffer_release(c.a, all[i].buffer);
    membound_more(&c, dt, N, D, k, reps, ref, ref_bytes, tf, ntf, &seed);
  }
  gpa_actor_destroy(c.a);
}

#ifdef GPA_HAVE_CUDA_BACKEND
/* The reference GEMM: y[N,out] = x W^T by one cublasSgemm on the op's stream. */
static gpa_status bare_sgemm(const gpa_op_exec *x) {
  cublasHandle_t h;
  gpa_status st = gpa__cu_blas(x, &h);
  if (st != GPA_OK) return st;
  int n = (int)x->inputs[0].shape[0], in = (int)x->inputs[0].shape[1], out = (int)x->inputs[1].shape[0];
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = gpa__cu_of(x)->blas.cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, x->in[1], in,
                                                      x->in[0], in, &zero, x->out[0], out);
  return s == CUBLAS_STATUS_SUCCESS ? GPA_OK : GPA_EDEVICE;
}
#endif

void gpa_bench_cuda_linear(void) {
#ifdef GPA_HAVE_CUDA_BACKEND
  cb c;
  if (!cb_open(&c)) return;
  gpa_op_desc d = {.size = sizeof d, .name = "bench_bare_sgemm", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
                   .cuda = bare_sgemm};
  if (gpa_op_register(gpa_actor_registry(c.a), &d) != GPA_OK) {
    gpa_actor_destroy(c.a);
    return;
  }
  const int reps = gpa_bench_reps(5), k = c.sim ? 1 : 10;
  const int64_t N = c.sim ? 256 : 8192, IN = c.sim ? 256 : 4096, OUT = c.sim ? 256 : 4096;
  int64_t xs[2] = {N, IN}, ws[2] = {OUT, IN}, ys[2] = {N, OUT}, bs[1] = {OUT};
  gpa_tensor x = f32(&c, 2, xs), w = f32(&c, 2, ws), y = f32(&c, 2, ys), b = f32(&c, 1, bs);
  gpa_tensor in3[3] = {x, w, b};
  gpa_op_call lin = {"linear_fwd", in3, 3, &y, 1, NULL, 0};
  gpa_op_call ref = {"bench_bare_sgemm", in3, 2, &y, 1, NULL, 0};
  double ref_ns = op_ns(&c, &ref, k, reps), ns = op_ns(&c, &lin, k, reps);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)N, (long long)IN, (long long)OUT);
  if (ns > 0 && ref_ns > 0) emit(&c, "cuda_linear_fwd", shape, ns, ref_ns, 0, 2.0 * N * IN * OUT, "cublasSgemm");
  /* linear_bwd (dx, dW, db; no GELU) f32 and bf16 (dW, db f32) beside PyTorch's two GEMMs and bias sum */
  char args[96], extra[512];
  snprintf(args, sizeof args, "linear %lld %lld %lld", (long long)N, (long long)IN, (long long)OUT);
  torch_fig tf[4];
  int ntf = c.sim ? 0 : torch_figs(args, tf, 4);
  uint64_t seed = 26;
  for (int bf = 0; bf < 2; bf++) {
    const int dt = bf ? GPA_BF16 : GPA_F32;
    gpa_tensor bx = gpa_bench_device_tensor(c.a, c.q, dt, 2, xs, &seed), bw = gpa_bench_device_tensor(c.a, c.q, dt, 2, ws, &seed);
    gpa_tensor bdy = gpa_bench_device_tensor(c.a, c.q, dt, 2, ys, &seed), bdx = gpa_bench_device_tensor(c.a, c.q, dt, 2, xs, &seed);
    gpa_tensor bdw = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 2, ws, &seed);
    gpa_tensor bdb = gpa_bench_device_tensor(c.a, c.q, GPA_F32, 1, bs, &seed);
    gpa_tensor bin[3] = {bdy, bx, bw}, bout[3] = {bdx, bdw, bdb};
    gpa_op_call bwd = {"linear_bwd", bin, 3, bout, 3, NULL, 0};
    double bns = op_ns(&c, &bwd, k, reps), tu = torch_us(tf, ntf, "linear_bwd", bf ? "bf16" : "f32");
    snprintf(shape, sizeof shape, "%s %lldx%lldx%lld", bf ? "bf16" : "f32", (long long)N, (long long)IN,
             (long long)OUT);
    if (bns > 0) {
      gpa_bench_result r = {.name = "cuda_linear_bwd", .backend = c.sim ? "sim" : "cuda", .shape = shape,
                            .ref = tu > 0 ? "torch_linear_bwd" : "itself", .ns = bns,
                            .ref_ns = tu > 0 ? tu * 1e3 : bns, .flops = 4.0 * N * IN * OUT,
                            .extra = extra_of(&c, extra, sizeof extra, bns, tu)};
      gpa_bench_emit(&r);
    }
    const gpa_tensor all[6] = {bx, bw, bdy, bdx, bdw, bdb};
    for (int i = 0; i < 6; i++) gpa_buffer_release(c.a, all[i].buffer);
  }
  gpa_actor_destroy(c.a);
#endif
}

/* attention_fwd / attention_bwd (fp32 flash kernels, kernels/cuda/attention.cu),
 * causal and not. FLOPs: 4 B H S Sk D forward (two GEMMs), halved when
 * causal (S = Sk); the backward counts 2.5x the forward (five GEMMs, the
 * recomputed scores included). No reference run: ref_ns is the op's own. */
void gpa_bench_cuda_attention(void) {
  cb c;
  if (!cb_open(&c)) return;
  const int reps = gpa_bench_reps(3), k = c.sim ? 1 : 10;
  const int64_t B = c.sim ? 1 : 4, S = c.sim ? 128 : 2048, H = c.sim ? 2 : 16, D = 64;
  int64_t qs[4] = {B, S, H, D}, ls[3] = {B, H, S};
  gpa_tensor q = f32(&c, 4, qs), kk = f32(&c, 4, qs), v = f32(&c, 4, qs), o = f32(&c, 4, qs), lse = f32(&c, 3, ls);
  gpa_tensor dq = f32(&c, 4, qs), dk = f32(&c, 4, qs), dv = f32(&c, 4, qs), dout = f32(&c, 4, qs);
  char shape[96];
  for (int causal = 0; causal <= 1; causal++) {
    gpa_attr at = {"causal", GPA_ATTR_INT, causal, 0};
    double flops = 4.0 * (double)(B * H * S * S * D) * (causal ? 0.5 : 1.0);
    snprintf(shape, sizeof shape, "B%lldxS%lldxH%lldxD%lld%s", (long long)B, (long long)S, (long long)H,
             (long long)D, causal ? " causal" : "");
    gpa_tensor fin[3] = {q, kk, v}, fout[2] = {o, lse};
    gpa_op_call fwd = {"attention_fwd", fin, 3, fout, 2, &at, 1};
    double ns = op_ns(&c, &fwd, k, reps);
    if (ns > 0) emit(&c, "cuda_attention_fwd", shape, ns, ns, 0, flops, "itself");
    gpa_tensor bin[6] = {dout, q, kk, v, o, lse}, bout[3] = {dq, dk, dv};
    gpa_op_call bwd = {"attention_bwd", bin, 6, bout, 3, &at, 1};
    ns = op_ns(&c, &bwd, k, reps);
    if (ns > 0) emit(&c, "cuda_attention_bwd", shape, ns, ns, 0, 2.5 * flops, "itself");
  }
  gpa_actor_destroy(c.a);
}
