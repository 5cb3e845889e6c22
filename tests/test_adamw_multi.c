/* adamw_multi against adamw, bit for bit, on the device GPA_DEVICE selects:
 * two copies of the same parameters and moments, one stepped by adamw per
 * tensor, the other by adamw_multi calls over the same tensors, several
 * steps, with a decay mask, odd sizes (0, 1, 7, 17, 65539), a view 4 bytes
 * into its buffer (no 16-byte accesses for that tensor, float4 for the
 * rest of the call), empty tensors in the middle and at the end of a call,
 * in place and out of place. bf16_copies: the bf16 copies written by the
 * update are bit for bit the cast op's rounding of the updated params (one
 * copy 2 bytes into its buffer, NaN and inf params, copies on some tensors
 * only), and the rest of the update is unchanged by them. Then bad input:
 * each gets its status and a message that names the problem. */
#include <dlfcn.h>
#include <math.h>

#include "util/testutil.h"

enum { MAXT = 16 };

typedef struct set {
  gpa_tensor p[MAXT], m[MAXT], v[MAXT];
} set;

static gpa_actor *A;
static gpa_queue *Q;
static int64_t len[MAXT];
static gpa_tensor grad[MAXT];

/* a tensor of n floats, `skew` floats into a buffer of its own */
static gpa_tensor f32_at(int64_t n, int skew) {
  gpa_tensor t = tu_f32(A, n + skew);
  t.offset = (uint64_t)skew * 4;
  t.shape[0] = n;
  return t;
}

static float urand(uint64_t *s, float lo, float hi) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((*s >> 40) / 16777216.0);
}

static void put_rand(const gpa_tensor *t, int64_t n, uint64_t seed, float lo, float hi) {
  if (!n) return;
  float *h = malloc((size_t)(n ? n : 1) * 4);
  for (int64_t i = 0; i < n; i++) h[i] = urand(&seed, lo, hi);
  tu_put(Q, t, h, n);
  free(h);
}

static void set_init(set *s, int count, int skew_k) {
  for (int k = 0; k < count; k++) {
    int skew = k == skew_k;
    s->p[k] = f32_at(len[k], skew), s->m[k] = f32_at(len[k], skew), s->v[k] = f32_at(len[k], skew);
    put_rand(&s->p[k], len[k], 11 + (uint64_t)k, -1, 1);
    put_rand(&s->m[k], len[k], 101 + (uint64_t)k, -0.1f, 0.1f);
    put_rand(&s->v[k], len[k], 1001 + (uint64_t)k, 0, 0.01f);
  }
}

static gpa_attr hp[7];
static void set_hp(int64_t step, int64_t mask) {
  gpa_attr h[7] = {{"lr", GPA_ATTR_FLOAT, 0, 1e-3},        {"beta1", GPA_ATTR_FLOAT, 0, 0.85},
                   {"beta2", GPA_ATTR_FLOAT, 0, 0.98},      {"eps", GPA_ATTR_FLOAT, 0, 1e-7},
                   {"weight_decay", GPA_ATTR_FLOAT, 0, 0.1}, {"step", GPA_ATTR_INT, step, 0},
                   {"decay_mask", GPA_ATTR_INT, mask, 0}};
  memcpy(hp, h, sizeof h);
}

/* tensor k by adamw, its weight decay 0 where mask leaves it out */
static void step_one(const set *in, const set *out, int k, int64_t mask) {
  gpa_attr h[6];
  memcpy(h, hp, sizeof h);
  if (!(mask >> k & 1)) h[4].f = 0.0;
  gpa_tensor i4[4] = {in->p[k], grad[k], in->m[k], in->v[k]}, o3[3] = {out->p[k], out->m[k], out->v[k]};
  CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw", i4, 4, o3, 3, h, 6}, NULL));
}

static gpa_status step_multi(const set *in, const set *out, int k0, int count) {
  gpa_tensor i4[4 * MAXT], o3[3 * MAXT];
  for (int j = 0; j < count; j++) {
    int k = k0 + j;
    i4[4 * j] = in->p[k], i4[4 * j + 1] = grad[k], i4[4 * j + 2] = in->m[k], i4[4 * j + 3] = in->v[k];
    o3[3 * j] = out->p[k], o3[3 * j + 1] = out->m[k], o3[3 * j + 2] = out->v[k];
  }
  return gpa_submit(Q, &(gpa_op_call){"adamw_multi", i4, 4 * (uint32_t)count, o3, 3 * (uint32_t)count, hp, 7}, NULL);
}

/* every tensor of a and b the same bits; returns how many elements of a's
 * params differ from `before` (the step must have moved them) */
static int64_t same_bits(const set *a, const set *b, int count, const set *before) {
  int64_t moved = 0;
  for (int k = 0; k < count; k++) {
    int64_t n = len[k];
    if (!n) continue;
    float *x = malloc((size_t)(n ? n : 1) * 4), *y = malloc((size_t)(n ? n : 1) * 4);
    const gpa_tensor *ta[3] = {&a->p[k], &a->m[k], &a->v[k]}, *tb[3] = {&b->p[k], &b->m[k], &b->v[k]};
    for (int r = 0; r < 3; r++) {
      tu_get(Q, ta[r], x, n);
      tu_get(Q, tb[r], y, n);
      if (memcmp(x, y, (size_t)n * 4)) {
        int64_t i = 0;
        while (x[i] == y[i]) i++;
        fprintf(stderr, "tensor %d (%lld floats) role %d differs at %lld: adamw %.9g, adamw_multi %.9g\n", k,
                (long long)n, r, (long long)i, x[i], y[i]);
        exit(1);
      }
    }
    if (before) {
      tu_get(Q, &before->p[k], y, n);
      tu_get(Q, &a->p[k], x, n);
      for (int64_t i = 0; i < n; i++) moved += x[i] != y[i];
    }
    free(x);
    free(y);
  }
  return moved;
}

static void parity(void) {
  /* 16 tensors: odd sizes, empties at 5 and 15 (the last), one large enough
   * for many blocks; tensor 3 starts 4 bytes into its buffers */
  const int64_t sizes[MAXT] = {96, 1, 7, 17, 1000, 0, 65539, 16, 3, 4099, 96 * 96 * 3, 5, 12, 257, 2, 0};
  int64_t total = 0;
  for (int k = 0; k < MAXT; k++) {
    len[k] = sizes[k], total += sizes[k];
    grad[k] = f32_at(len[k], k == 3);
    put_rand(&grad[k], len[k], 7 + (uint64_t)k, -1, 1);
  }
  set a, b, o1, o2;
  set_init(&a, MAXT, 3);
  set_init(&b, MAXT, 3);
  const int64_t mask = 0x5A3D; /* some tensors without weight decay */
  for (int64_t step = 1; step <= 3; step++) {
    set_hp(step, mask);
    for (int k = 0; k < MAXT; k++) step_one(&a, &a, k, mask);
    CHECK_OK(step_multi(&b, &b, 0, MAXT));
    CHECK_OK(gpa_sync_batch(Q, NULL));
  }
  same_bits(&a, &b, MAXT, NULL);
  /* out of place, in calls of 1, 3 and 12 tensors (tensor 15 empty last) */
  set_init(&o1, MAXT, -1);
  set_init(&o2, MAXT, -1);
  set_hp(4, -1); /* -1: every tensor decays */
  for (int k = 0; k < MAXT; k++) step_one(&a, &o1, k, -1);
  CHECK_OK(step_multi(&b, &o2, 0, 1));
  CHECK_OK(step_multi(&b, &o2, 1, 3));
  set_hp(4, 0xFFF); /* the same for the 12 tensors from 4 on: bits 0..11 */
  CHECK_OK(step_multi(&b, &o2, 4, 12));
  CHECK_OK(gpa_sync_batch(Q, NULL));
  int64_t moved = same_bits(&o1, &o2, MAXT, &a);
  CHECK(moved > total / 2); /* the step changed the parameters */
  same_bits(&a, &b, MAXT, NULL); /* the inputs were left alone */
  printf("adamw_multi: %d tensors (%lld floats), 4 steps, bitwise equal to adamw; %lld params moved\n", MAXT,
         (long long)total, (long long)moved);
}

/* n bf16 values, `skew` values into a buffer of their own */
static gpa_tensor bf16_at(int64_t n, int skew) {
  gpa_tensor t = tu_f32(A, (n + skew + 1) / 2 + 1);
  t.dtype = GPA_BF16;
  t.offset = (uint64_t)skew * 2;
  t.shape[0] = n;
  return t;
}

/* adamw_multi with bf16_copies against adamw_multi followed by a cast of
 * each copied param', over 3 steps in place: params, moments and copies the
 * same bits. The copies start as 0xBEEF words, so a copy left unwritten
 * differs from the cast's. */
static void copies(void) {
  const int64_t mask = 0xB6DD; /* tensors 0, 2, 3 (skewed), 4, 6 (many blocks), 7, 9, 10, 12, 13, 15 (empty) */
  set a, b;
  set_init(&a, MAXT, 3);
  set_init(&b, MAXT, 3);
  /* tensor 4's params get NaN, +-inf and a value past bf16's largest */
  const float odd[4] = {NAN, INFINITY, -INFINITY, 3.4e38f};
  for (int r = 0; r < 2; r++) {
    gpa_tensor head = r ? b.p[4] : a.p[4];
    head.shape[0] = 4;
    tu_put(Q, &head, odd, 4);
  }
  gpa_tensor ca[MAXT], cb[MAXT];
  for (int k = 0; k < MAXT; k++) {
    ca[k] = bf16_at(len[k], k == 9), cb[k] = bf16_at(len[k], k == 9); /* tensor 9's copy 2 bytes in */
    int64_t words = len[k] + 2;
    uint16_t *fill = malloc((size_t)words * 2);
    for (int64_t i = 0; i < words; i++) fill[i] = 0xBEEF;
    gpa_tensor whole = cb[k];
    whole.offset = 0, whole.shape[0] = words - 1;
    tu_put_bytes(Q, &whole, fill, (uint64_t)(words - 1) * 2);
    free(fill);
  }
  for (int64_t step = 1; step <= 3; step++) {
    set_hp(step, 0x5A3D);
    CHECK_OK(step_multi(&a, &a, 0, MAXT));
    for (int k = 0; k < MAXT; k++)
      if (mask >> k & 1) CHECK_OK(gpa_submit(Q, &(gpa_op_call){"cast", &a.p[k], 1, &ca[k], 1, NULL, 0}, NULL));
    gpa_tensor i4[4 * MAXT], o4[4 * MAXT];
    uint32_t n_out = 3 * MAXT;
    for (int k = 0; k < MAXT; k++) {
      i4[4 * k] = b.p[k], i4[4 * k + 1] = grad[k], i4[4 * k + 2] = b.m[k], i4[4 * k + 3] = b.v[k];
      o4[3 * k] = b.p[k], o4[3 * k + 1] = b.m[k], o4[3 * k + 2] = b.v[k];
    }
    for (int k = 0; k < MAXT; k++)
      if (mask >> k & 1) o4[n_out++] = cb[k];
    gpa_attr h[8];
    memcpy(h, hp, sizeof hp);
    h[7] = (gpa_attr){"bf16_copies", GPA_ATTR_INT, mask, 0};
    CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw_multi", i4, 4 * MAXT, o4, n_out, h, 8}, NULL));
    CHECK_OK(gpa_sync_batch(Q, NULL));
  }
  same_bits(&a, &b, MAXT, NULL);
  int64_t compared = 0, nan_words = 0;
  for (int k = 0; k < MAXT; k++) {
    if (!(mask >> k & 1) || !len[k]) continue;
    uint16_t *x = malloc((size_t)len[k] * 2), *y = malloc((size_t)len[k] * 2);
    tu_get_bytes(Q, &ca[k], x, (uint64_t)len[k] * 2);
    tu_get_bytes(Q, &cb[k], y, (uint64_t)len[k] * 2);
    for (int64_t i = 0; i < len[k]; i++) {
      if (x[i] != y[i]) {
        fprintf(stderr, "tensor %d's bf16 copy differs at %lld: cast 0x%04x, bf16_copies 0x%04x\n", k, (long long)i,
                x[i], y[i]);
        exit(1);
      }
      nan_words += (x[i] & 0x7fff) > 0x7f80;
    }
    compared += len[k];
    free(x);
    free(y);
  }
  CHECK(nan_words >= 1); /* tensor 4's NaN went through both roundings */
  printf("adamw_multi: bf16_copies on 11 tensors, 3 steps: %lld copied values bitwise equal to cast-after-update\n",
         (long long)compared);
}

/* adamw's optional 4th output, param_bf16, against adamw and a cast after
 * it: an f32 grad (adamw_multi's kernel over one tensor on CUDA) and a bf16
 * grad (the bf16 kernel), aligned and 2 bytes into its buffer */
static void adamw_copy(void) {
  const int64_t n = 4099;
  for (int gbf = 0; gbf < 2; gbf++)
    for (int skew = 0; skew < 2; skew++) {
      gpa_tensor p[2], m[2], v[2], c[2], g = grad[9];
      for (int r = 0; r < 2; r++) {
        p[r] = f32_at(n, 0), m[r] = f32_at(n, 0), v[r] = f32_at(n, 0), c[r] = bf16_at(n, skew);
        put_rand(&p[r], n, 5, -1, 1);
        put_rand(&m[r], n, 6, -0.1f, 0.1f);
        put_rand(&v[r], n, 7, 0, 0.01f);
      }
      if (gbf) {
        g = bf16_at(n, 0);
        CHECK_OK(gpa_submit(Q, &(gpa_op_call){"cast", &grad[9], 1, &g, 1, NULL, 0}, NULL));
      }
      for (int64_t step = 1; step <= 2; step++) {
        set_hp(step, -1);
        gpa_tensor i0[4] = {p[0], g, m[0], v[0]}, o0[3] = {p[0], m[0], v[0]};
        gpa_tensor i1[4] = {p[1], g, m[1], v[1]}, o1[4] = {p[1], m[1], v[1], c[1]};
        CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw", i0, 4, o0, 3, hp, 6}, NULL));
        CHECK_OK(gpa_submit(Q, &(gpa_op_call){"cast", &p[0], 1, &c[0], 1, NULL, 0}, NULL));
        CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw", i1, 4, o1, 4, hp, 6}, NULL));
        CHECK_OK(gpa_sync_batch(Q, NULL));
      }
      float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
      const gpa_tensor *ta[3] = {&p[0], &m[0], &v[0]}, *tb[3] = {&p[1], &m[1], &v[1]};
      for (int r = 0; r < 3; r++) {
        tu_get(Q, ta[r], x, n);
        tu_get(Q, tb[r], y, n);
        CHECK(!memcmp(x, y, (size_t)n * 4));
      }
      tu_get_bytes(Q, &c[0], x, (uint64_t)n * 2);
      tu_get_bytes(Q, &c[1], y, (uint64_t)n * 2);
      if (memcmp(x, y, (size_t)n * 2)) {
        fprintf(stderr, "adamw's param_bf16 (grad %s, copy %d bytes in) differs from the cast\n", gbf ? "bf16" : "f32",
                2 * skew);
        exit(1);
      }
      free(x);
      free(y);
    }
  printf("adamw: param_bf16 bitwise equal to cast-after-update (f32 and bf16 grads, aligned and not)\n");
}

/* sim: a failed launch of the fused update (adamw_multi with bf16_copies,
 * adamw with param_bf16) fails that call's handle with a status and a
 * message, and the next call runs */
static void launch_faults(void) {
  if (strcmp(gpa_actor_backend(A), "sim")) return;
  void *lib = dlopen("libgpa_sim_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  CHECK(lib);
  void (*fault)(unsigned) = (void (*)(unsigned))dlsym(lib, "gpa_sim_fault_launch");
  CHECK(fault);
  dlclose(lib);
  gpa_tensor t[4], o[3], c = bf16_at(5, 0);
  for (int i = 0; i < 4; i++) t[i] = tu_f32(A, 5);
  for (int i = 0; i < 3; i++) o[i] = tu_f32(A, 5);
  set_hp(1, -1);
  gpa_attr h[8];
  memcpy(h, hp, sizeof hp);
  h[7] = (gpa_attr){"bf16_copies", GPA_ATTR_INT, 1, 0};
  gpa_tensor o4[4] = {o[0], o[1], o[2], c};
  const gpa_op_call calls[2] = {{"adamw_multi", t, 4, o4, 4, h, 8}, {"adamw", t, 4, o4, 4, hp, 6}};
  for (int k = 0; k < 2; k++) {
    gpa_handle *hd = NULL;
    fault(1);
    CHECK_OK(gpa_submit(Q, &calls[k], &hd));
    gpa_status st = gpa_await(hd, -1);
    CHECK(st != GPA_OK);
    fprintf(stderr, "%s with its bf16 copy, failed launch: %s (%s)\n", calls[k].op, gpa_status_name(st),
            gpa_last_error_message());
    gpa_handle_release(hd);
    gpa_sync_batch(Q, NULL);
    CHECK_OK(gpa_submit(Q, &calls[k], NULL));
    CHECK_OK(gpa_sync_batch(Q, NULL));
  }
  printf("adamw_multi, adamw: a failed launch of the fused copy fails its call; the next runs\n");
}

static void expect(gpa_op_call c, gpa_status want, const char *needle) {
  CHECK_ST(gpa_submit(Q, &c, NULL), want);
  CHECK_MSG(needle);
}

static void bad_input(void) {
  gpa_tensor t[8], o[6];
  for (int i = 0; i < 8; i++) t[i] = tu_f32(A, 5);
  for (int i = 0; i < 6; i++) o[i] = tu_f32(A, 5);
  set_hp(1, -1);
  expect((gpa_op_call){"adamw_multi", t, 6, o, 3, hp, 7}, GPA_EINVAL, "inputs come in fours");
  expect((gpa_op_call){"adamw_multi", t, 8, o, 3, hp, 7}, GPA_EINVAL, "2 tensors take 6 outputs");
  gpa_tensor many[68];
  for (int i = 0; i < 68; i++) many[i] = t[i % 8];
  expect((gpa_op_call){"adamw_multi", many, 68, o, 6, hp, 7}, GPA_EINVAL, "takes 4 to 64 inputs");
  expect((gpa_op_call){"adamw_multi", t, 4, o, 3, hp, 5}, GPA_EINVAL, "step"); /* step missing */
  set_hp(1, 4);                                                                /* bit 2: a third tensor */
  expect((gpa_op_call){"adamw_multi", t, 8, o, 6, hp, 7}, GPA_EINVAL, "decay_mask 0x4");
  set_hp(1, -2);
  expect((gpa_op_call){"adamw_multi", t, 4, o, 3, hp, 7}, GPA_ERANGE, "decay_mask");
  set_hp(1, -1);
  gpa_tensor s[8];
  memcpy(s, t, sizeof s);
  s[5].shape[0] = 4; /* grad[1] */
  expect((gpa_op_call){"adamw_multi", s, 8, o, 6, hp, 7}, GPA_ESHAPE, "grad[1]");
  memcpy(s, t, sizeof s);
  s[6].dtype = GPA_I32; /* m[1] */
  expect((gpa_op_call){"adamw_multi", s, 8, o, 6, hp, 7}, GPA_EDTYPE, "m[1]");
  memcpy(s, t, sizeof s);
  s[4].dtype = GPA_BF16, s[4].shape[0] = 10; /* param[1] bf16 (10 bf16 in 20 bytes) */
  expect((gpa_op_call){"adamw_multi", s, 8, o, 6, hp, 7}, GPA_EDTYPE, "param[1] is bf16");
  gpa_tensor os[6];
  memcpy(os, o, sizeof os);
  os[4].shape[0] = 4; /* m'[1] */
  expect((gpa_op_call){"adamw_multi", t, 8, os, 6, hp, 7}, GPA_ESHAPE, "outputs[4]");
  /* the same parameter twice, in place: two writers of one memory */
  gpa_tensor twice[8] = {t[0], t[1], t[2], t[3], t[0], t[5], t[6], t[7]};
  gpa_tensor tw_out[6] = {t[0], t[2], t[3], t[0], t[6], t[7]};
  expect((gpa_op_call){"adamw_multi", twice, 8, tw_out, 6, hp, 7}, GPA_EINVAL,
         "tensor 0's param' overlaps tensor 1's param");
  /* tensor 1's v' is a view that reaches into tensor 0's grad */
  gpa_tensor big = tu_f32(A, 8), in2[8], out2[6];
  memcpy(in2, t, sizeof in2);
  in2[1] = big; /* grad[0] = big[0..5) */
  in2[1].shape[0] = 5;
  memcpy(out2, o, sizeof out2);
  out2[5] = big, out2[5].offset = 12, out2[5].shape[0] = 5; /* v'[1] = big[3..8) */
  expect((gpa_op_call){"adamw_multi", in2, 8, out2, 6, hp, 7}, GPA_EINVAL, "tensor 1's v' overlaps tensor 0's grad");
  /* two tensors may read one gradient */
  gpa_tensor share[8] = {t[0], t[1], t[2], t[3], t[4], t[1], t[6], t[7]};
  CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw_multi", share, 8, o, 6, hp, 7}, NULL));
  CHECK_OK(gpa_sync_batch(Q, NULL));
  /* bf16_copies: a bf16 copy per set bit after the 3 per tensor, bf16 of param's shape */
  gpa_attr h[8];
  memcpy(h, hp, sizeof hp);
  gpa_tensor c8[8], w0 = bf16_at(5, 0), w1 = bf16_at(5, 0);
  memcpy(c8, o, sizeof o);
  c8[6] = w0, c8[7] = w1;
  h[7] = (gpa_attr){"bf16_copies", GPA_ATTR_INT, 3, 0};
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_EINVAL, "take 8 outputs (param', m', v' per tensor, then 2 bf16 copies), got 7");
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 6, h, 8}, GPA_EINVAL, "take 8 outputs");
  h[7].i = 4;
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_EINVAL, "bf16_copies 0x4 names tensors past the call's 2");
  h[7].i = -1;
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_ERANGE, "bf16_copies");
  h[7].i = 2; /* tensor 1's copy: outputs[6] */
  c8[6] = tu_f32(A, 5);
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_EDTYPE, "param_bf16[1] (outputs[6]) has dtype f32, expected bf16");
  c8[6] = bf16_at(4, 0);
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_ESHAPE, "param_bf16[1] (outputs[6]) has shape [4], expected [5]");
  /* a copy that reaches into another tensor's memory, or its own */
  c8[6] = t[2], c8[6].dtype = GPA_BF16; /* tensor 0's m (read) */
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_EINVAL, "tensor 1's param_bf16 overlaps tensor 0's m");
  c8[6] = o[3], c8[6].dtype = GPA_BF16; /* tensor 1's own param' */
  expect((gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, GPA_EINVAL, "tensor 1's param_bf16 overlaps tensor 1's param'");
  c8[6] = w1;
  CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw_multi", t, 8, c8, 7, h, 8}, NULL));
  CHECK_OK(gpa_sync_batch(Q, NULL));
  /* adamw's param_bf16 */
  gpa_tensor a4[4] = {o[0], o[1], o[2], w0};
  a4[3] = tu_f32(A, 5);
  expect((gpa_op_call){"adamw", t, 4, a4, 4, hp, 6}, GPA_EDTYPE, "param_bf16 (outputs[3]) has dtype f32, expected bf16");
  a4[3] = bf16_at(6, 0);
  expect((gpa_op_call){"adamw", t, 4, a4, 4, hp, 6}, GPA_ESHAPE, "param_bf16 (outputs[3]) has shape [6], expected [5]");
  a4[3] = t[3], a4[3].dtype = GPA_BF16; /* v */
  expect((gpa_op_call){"adamw", t, 4, a4, 4, hp, 6}, GPA_EINVAL, "param_bf16 (outputs[3]) overlaps v");
  gpa_tensor pb[4] = {bf16_at(5, 0), t[1], t[2], t[3]}, pbo[4] = {pb[0], o[1], o[2], w0};
  expect((gpa_op_call){"adamw", pb, 4, pbo, 4, hp, 6}, GPA_EDTYPE, "param is bf16 already");
  expect((gpa_op_call){"adamw", t, 4, c8, 5, hp, 6}, GPA_EINVAL, "takes 3 to 4 outputs, got 5");
  a4[3] = w0;
  CHECK_OK(gpa_submit(Q, &(gpa_op_call){"adamw", t, 4, a4, 4, hp, 6}, NULL));
  CHECK_OK(gpa_sync_batch(Q, NULL));
}

int main(void) {
  A = tu_actor(NULL);
  Q = gpa_actor_default_queue(A);
  parity();
  copies();
  adamw_copy();
  launch_faults();
  bad_input();
  CHECK_OK(gpa_actor_destroy(A));
  printf("adamw_multi: ok\n");
  return 0;
}
