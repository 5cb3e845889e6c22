/* Attention through cuDNN's fused SDPA (design in cudnn.h).
 *
 * Declines (GPA_SKIP: our kernels, then the host fallback, run instead):
 * no usable cuDNN; f32 storage (cuDNN's fused engines take fp16/bf16); o or
 * dq/dk/dv in another type than q (cuDNN writes the storage type); a device
 * below sm_80; D not a multiple of 8 or above 128 (sm_80..sm_89) / 256
 * (sm_90 and later); causal with S > Sk (the first S - Sk queries see no
 * key: cuDNN refuses a bottom-right diagonal there); key lengths (cuDNN
 * computes another mask for a length of 0, and for causal with S != Sk);
 * empty tensors;
 * operands not 16-byte aligned; a graph or plan cuDNN refuses; no device
 * memory for the workspace. All of these are decided before anything is
 * enqueued. After that, a failing cudnnBackendExecute is an error of the op
 * (GPA_EDEVICE with cuDNN's text), except NOT_SUPPORTED when nothing was
 * enqueued for the call (no `before` hook ran): that declines.
 *
 * Workspace: the stream's scratch (ops of a stream never overlap), laid out
 * as [reserved by the caller][delta: B H S fp32, backward][dQ's fp32
 * accumulator: B H S D, non-deterministic backward (cudnn_graph.c)][cuDNN's
 * workspace], each part 256-byte aligned. The accumulator needs no
 * zeroing from cuDNN 9.6 on (GPA__CUDNN_MIN_VERSION), where the engine
 * initialises it (cudnn-frontend zeroes it only before 9.6). The graphs with a padding mask
 * (key.lens) stay buildable (the real-library test finalizes them) but no
 * call reaches them while calls with lengths decline. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cudnn_sdpa.h"

static uint64_t up256(uint64_t n) { return (n + 255) & ~(uint64_t)255; }

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Device capability, read once per actor: a driver call per op would be
 * host time on every attention call. */
static int cc_major(gpa__cu_ctx *C, gpa__dnn *d) {
  if (!d->cc_major &&
      C->cu.cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, C->dev) != CUDA_SUCCESS)
    d->cc_major = 0;
  return d->cc_major;
}

/* What cuDNN cannot take whatever the device, as a decline reason (a
 * string constant); NULL when it can. Decided before the library is
 * loaded: an actor whose attention is f32 (the main job's) declines every
 * call, and must not load cuDNN, set its stream or format a message for it. */
static const char *unsupported(const gpa__sdpa_args *a, int bwd) {
  if (a->dtype != GPA_BF16 && a->dtype != GPA_F16) return "storage is not bf16/fp16";
  if (a->out_dtype != a->dtype) return bwd ? "dq/dk/dv are not in the storage dtype" : "o is not in the storage dtype";
  if (bwd && a->o_dtype != a->dtype) return "o is not in the storage dtype";
  if (a->D % 8 || a->D > 256) return "head dim not a multiple of 8 or over the engines' limit";
  if (a->causal && a->S > a->Sk) return "causal with S > Sk (rows that see no key)";
  /* Measured on an H100 (cuDNN 9.14): with key lengths, a batch of length 0
   * gets values where our rule has o = 0 and lse = -inf, and causal with
   * S != Sk aligns the diagonal to each batch's length, not to Sk. Lengths
   * are device data: the call cannot be checked here, so it declines. */
  if (a->lens) return "key lengths (cuDNN's padding mask differs from ours)";
  if (a->B < 1 || a->S < 1 || a->Sk < 1 || a->H < 1 || a->Hkv < 1 || a->H % a->Hkv) return "empty or malformed shape";
  const void *p[] = {a->q, a->k, a->v, a->o, a->lse, a->dout, a->dq, a->dk, a->dv};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
    if (!aligned16(p[i])) return "an operand is not 16-byte aligned";
  return NULL;
}

/* What this device's engines cannot take (read once per actor). */
static const char *unsupported_here(gpa__cu_ctx *C, gpa__dnn *d, const gpa__sdpa_args *a) {
  int cc = cc_major(C, d);
  if (cc < 8) return "device below sm_80";
  if (a->D > (cc >= 9 ? 256 : 128)) return "head dim not a multiple of 8 or over the engines' limit";
  return NULL;
}

typedef struct vpack {
  int64_t uid[GPA__DNN_VP_MAX];
  void *ptr[GPA__DNN_VP_MAX];
  int n;
} vpack;

static void put(vpack *v, int64_t uid, const void *p) {
  v->uid[v->n] = uid;
  v->ptr[v->n++] = (void *)(uintptr_t)p;
}

static gpa_status run(const gpa_op_exec *x, const gpa__sdpa_args *a, int bwd) {
  gpa__cu_ctx *C = gpa__cu_of(x);
  const char *no = unsupported(a, bwd);
  if (no) return gpa__dnn_decline_const(x, no);
  const char *no_lib;
  gpa__dnn *d = gpa__cudnn_get(x, &no_lib);
  if (!d) return gpa__dnn_decline(x, "no cuDNN: %s", no_lib);
  if ((no = unsupported_here(C, d, a))) return gpa__dnn_decline_const(x, no);
  gpa__dnn_key k;
  memset(&k, 0, sizeof k); /* compared with memcmp: padding too */
  k.bwd = bwd, k.dtype = a->dtype, k.causal = !!a->causal;
  k.nondet = bwd && a->nondeterministic, k.ordinal = C->ordinal;
  k.B = a->B, k.S = a->S, k.Sk = a->Sk, k.H = a->H, k.Hkv = a->Hkv, k.D = a->D;
  char why[256];
  gpa__dnn_plan *p = gpa__dnn_plan_get(d, &k, gpa__dnn_build_sdpa, why, sizeof why);
  if (!p) return gpa__dnn_decline(x, "%s", why);

  uint64_t delta_bytes = bwd ? up256((uint64_t)(a->B * a->H * a->S) * 4) : 0;
  uint64_t accum_bytes = k.nondet ? up256((uint64_t)(a->B * a->H * a->S * a->D) * 4) : 0;
  uint64_t ws = (uint64_t)gpa__dnn_plan_workspace(p);
  uint64_t skip = up256(a->scratch_reserved);
  CUdeviceptr base = gpa__cu_scratch(x, skip + delta_bytes + accum_bytes + ws + 1);
  if (!base) {
    x->msg[0] = 0; /* not the op's failure: the next implementation runs */
    return gpa__dnn_decline(x, "no device memory for cuDNN's workspace (%llu bytes)",
                            (unsigned long long)(delta_bytes + accum_bytes + ws));
  }
  if (a->before) {
    gpa_status st = a->before(x, base, a->before_ctx);
    if (st != GPA_OK) return st;
  }
  base += skip;
  CUdeviceptr delta = base, accum = base + delta_bytes, work = accum + accum_bytes;
  gpa__dnn_scalars *sc = gpa__dnn_plan_scalars(p);
  sc->scale = a->scale, sc->one = 1.0f;
  sc->neg = d->version >= 91000 ? -INFINITY : -FLT_MAX;
  sc->shift = (int32_t)(a->Sk - a->S);
  vpack v = {.n = 0};
  put(&v, GPA__DNN_UID_Q, a->q);
  put(&v, GPA__DNN_UID_K, a->k);
  put(&v, GPA__DNN_UID_V, a->v);
  put(&v, GPA__DNN_UID_O, a->o);
  put(&v, GPA__DNN_UID_STATS, a->lse);
  put(&v, GPA__DNN_UID_SCALE, &sc->scale);
  if (a->causal) put(&v, GPA__DNN_UID_NEG, &sc->neg);
  if (a->causal && sc->shift) put(&v, GPA__DNN_UID_SHIFT, &sc->shift);
  if (bwd) {
    put(&v, GPA__DNN_UID_DO, a->dout);
    put(&v, GPA__DNN_UID_DQ, a->dq);
    put(&v, GPA__DNN_UID_DK, a->dk);
    put(&v, GPA__DNN_UID_DV, a->dv);
    put(&v, GPA__DNN_UID_DELTA, (void *)(uintptr_t)delta);
    put(&v, GPA__DNN_UID_ONE, &sc->one);
    if (accum_bytes) put(&v, GPA__DNN_UID_DQ_ACCUM, (void *)(uintptr_t)accum);
  }
  const gpa__cudnn_api *A = gpa__dnn_api(d);
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  cudnnBackendDescriptor_t vp = gpa__dnn_plan_pack(d, p, v.n, v.uid, v.ptr, (void *)(uintptr_t)work, &s);
  const char *what = "variant pack";
  if (vp) {
    what = "cudnnBackendExecute";
    s = gpa__dnn_execute(d, p, vp);
  }
  if (!s) return GPA_OK;
  /* NOT_SUPPORTED enqueued nothing of cuDNN's; a decline is still only
   * clean if the caller's hook enqueued nothing either */
  if (s >= CUDNN_STATUS_NOT_SUPPORTED && s < CUDNN_STATUS_INTERNAL_ERROR && !a->before)
    return gpa__dnn_decline(x, "%s: %s", what, A->cudnnGetErrorString(s));
  snprintf(x->msg, x->msg_size, "attention_%s: cuDNN %s failed: %s", bwd ? "bwd" : "fwd", what,
           A->cudnnGetErrorString(s));
  return GPA_EDEVICE;
}

gpa_status gpa__cudnn_sdpa_fwd(const gpa_op_exec *x, const gpa__sdpa_args *a) { return run(x, a, 0); }
gpa_status gpa__cudnn_sdpa_bwd(const gpa_op_exec *x, const gpa__sdpa_args *a) { return run(x, a, 1); }
