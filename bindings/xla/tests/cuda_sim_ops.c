/* test_xla_cuda_sim's op checks: each CUDA op handler called through a
 * call frame on XLA's stream, its results read back by a copy on that
 * stream and compared with a reference computed here in double. */
#include <math.h>
#include <string.h>

#include "cuda_sim.h"

/* Layer norm, linear (bias) forward and backward, GELU's backward,
 * attention (causal, GQA) and the generic handler's scale against
 * references in double. */
void ops(void) {
  enum { R = 6, D = 40, O = 24, B = 2, S = 9, H = 4, HKV = 2, HD = 32 };
  static float x[R * D], g[D], be[D], w[O * D], bias[O], got[R * D + R * O];
  static double ref[R * D];
  rnd(x, R * D, 1), rnd(g, D, 2), rnd(be, D, 3), rnd(w, O * D, 4), rnd(bias, O, 5);
  dptr dx = upload(x, R * D), dg = upload(g, D), db = upload(be, D), dw = upload(w, O * D), dbias = upload(bias, O);
  dptr dy = zeros(R * D), dmean = zeros(R), drstd = zeros(R), dlin = zeros(R * O);
  ff_frame b;
  ff_init(&b, &api, &xla);
  int64_t rd[2] = {R, D}, dd[1] = {D}, rr[1] = {R}, wd[2] = {O, D}, od[1] = {O}, ro[2] = {R, O};
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 2, rd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dg, 1, dd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, db, 1, dd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 2, rd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dmean, 1, rr);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, drstd, 1, rr);
  ff_attr_f64(&b, "eps", 1e-5);
  expect_ok(gpa_xla_cuda_layernorm_fwd(&b.f), "layernorm_fwd");
  xla_read(dy, got, R * D);
  for (int r = 0; r < R; r++) {
    double m = 0, v = 0;
    for (int d = 0; d < D; d++) m += x[r * D + d];
    m /= D;
    for (int d = 0; d < D; d++) v += (x[r * D + d] - m) * (x[r * D + d] - m);
    double rs = 1 / sqrt(v / D + 1e-5);
    for (int d = 0; d < D; d++) ref[r * D + d] = (x[r * D + d] - m) * rs * g[d] + be[d];
  }
  close_to("layernorm y", got, ref, R * D, 1e-5);

  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 2, rd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dw, 2, wd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dbias, 1, od);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dlin, 2, ro);
  expect_ok(gpa_xla_cuda_linear_fwd(&b.f), "linear_fwd");
  xla_read(dlin, got, R * O);
  for (int r = 0; r < R; r++)
    for (int o = 0; o < O; o++) {
      double acc = bias[o];
      for (int d = 0; d < D; d++) acc += (double)x[r * D + d] * w[o * D + d];
      ref[r * O + o] = acc;
    }
  close_to("linear y", got, ref, R * O, 1e-5);

  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 2, rd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dy, 2, rd);
  ff_attr_f64(&b, "alpha", -2.5);
  ff_attr_str(&b, "op", "scale");
  expect_ok(gpa_xla_cuda_op(&b.f), "op scale");
  xla_read(dy, got, R * D);
  for (int i = 0; i < R * D; i++) ref[i] = -2.5 * x[i];
  close_to("scale y", got, ref, R * D, 1e-6);
  /* backward: linear (dx = dy W, dW = dy^T x, db = sum dy) and GELU */
  static float dyl[R * O], gdx[R * D], gdw[O * D], gdb[O];
  static double rdx[R * D], rdw[O * D], rdb[O];
  rnd(dyl, R * O, 6);
  dptr ddy = upload(dyl, R * O), ddx = zeros(R * D), ddw = zeros(O * D), ddb = zeros(O);
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, ddy, 2, ro);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 2, rd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dw, 2, wd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, ddx, 2, rd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, ddw, 2, wd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, ddb, 1, od);
  expect_ok(gpa_xla_cuda_linear_bwd(&b.f), "linear_bwd");
  xla_read(ddx, gdx, R * D), xla_read(ddw, gdw, O * D), xla_read(ddb, gdb, O);
  memset(rdx, 0, sizeof rdx), memset(rdw, 0, sizeof rdw), memset(rdb, 0, sizeof rdb);
  for (int r = 0; r < R; r++)
    for (int o = 0; o < O; o++) {
      rdb[o] += dyl[r * O + o];
      for (int d = 0; d < D; d++) {
        rdx[r * D + d] += (double)dyl[r * O + o] * w[o * D + d];
        rdw[o * D + d] += (double)dyl[r * O + o] * x[r * D + d];
      }
    }
  close_to("linear dx", gdx, rdx, R * D, 1e-5);
  close_to("linear dW", gdw, rdw, O * D, 1e-5);
  close_to("linear db", gdb, rdb, O, 1e-5);

  int64_t all = R * D;
  dptr dgy = upload(x, R * D); /* GELU's dy: x again (any values do) */
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 1, &all);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dgy, 1, &all);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, ddx, 1, &all);
  expect_ok(gpa_xla_cuda_gelu_bwd(&b.f), "gelu_bwd");
  xla_read(ddx, gdx, R * D);
  for (int i = 0; i < R * D; i++) {
    double v = x[i], cdf = 0.5 * (1 + erf(v / sqrt(2.0))), pdf = exp(-0.5 * v * v) / sqrt(2 * M_PI);
    rdx[i] = x[i] * (cdf + v * pdf);
  }
  close_to("gelu dx", gdx, rdx, R * D, 1e-5);
  cu.free(dgy), cu.free(ddy), cu.free(ddx), cu.free(ddw), cu.free(ddb);
  cu.free(dx), cu.free(dg), cu.free(db), cu.free(dw), cu.free(dbias), cu.free(dy), cu.free(dmean), cu.free(drstd);
  cu.free(dlin);

  /* attention: q [B,S,H,HD], k v [B,S,HKV,HD], causal, scale 1/sqrt(HD) */
  static float q[B * S * H * HD], k[B * S * HKV * HD], v[B * S * HKV * HD], o[B * S * H * HD], lse[B * H * S];
  static double oref[B * S * H * HD], lref[B * H * S];
  rnd(q, sizeof q / 4, 21), rnd(k, sizeof k / 4, 22), rnd(v, sizeof v / 4, 23);
  dptr dq = upload(q, sizeof q / 4), dk = upload(k, sizeof k / 4), dv = upload(v, sizeof v / 4);
  dptr dout = zeros(sizeof o / 4), dlse = zeros(sizeof lse / 4);
  int64_t qd[4] = {B, S, H, HD}, kd[4] = {B, S, HKV, HD}, ld[3] = {B, H, S};
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dq, 4, qd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dk, 4, kd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dv, 4, kd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dout, 4, qd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, dlse, 3, ld);
  ff_attr_i32(&b, "causal", 1);
  expect_ok(gpa_xla_cuda_attention_fwd(&b.f), "attention_fwd");
  xla_read(dout, o, sizeof o / 4);
  xla_read(dlse, lse, sizeof lse / 4);
  double sc = 1 / sqrt((double)HD);
  for (int bb = 0; bb < B; bb++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++) {
        double s[S], mx = -INFINITY, sum = 0;
        const float *qi = &q[((bb * S + i) * H + h) * HD];
        int kh = h / (H / HKV);
        for (int j = 0; j <= i; j++) {
          const float *kj = &k[((bb * S + j) * HKV + kh) * HD];
          s[j] = 0;
          for (int d = 0; d < HD; d++) s[j] += (double)qi[d] * kj[d];
          s[j] *= sc;
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
        lref[(bb * H + h) * S + i] = mx + log(sum);
        for (int d = 0; d < HD; d++) {
          double acc = 0;
          for (int j = 0; j <= i; j++) acc += exp(s[j] - mx) / sum * v[((bb * S + j) * HKV + kh) * HD + d];
          oref[((bb * S + i) * H + h) * HD + d] = acc;
        }
      }
  close_to("attention o", o, oref, sizeof o / 4, 1e-5);
  close_to("attention lse", lse, lref, sizeof lse / 4, 1e-5);
  cu.free(dq), cu.free(dk), cu.free(dv), cu.free(dout), cu.free(dlse);
}


/* Layer norm's and attention's backward (causal, GQA: the key/value heads'
 * gradients summed over the query heads that share them), rtol 1e-4 as the
 * parity harness's gradients. */
void ops_backward(void) {
  enum { R = 5, D = 48 };
  static float x[R * D], g[D], dy[R * D], mean[R], rstd[R], gdx[R * D], gdg[D], gdb[D];
  static double rdx[R * D], rdg[D], rdb[D];
  rnd(x, R * D, 51), rnd(g, D, 52), rnd(dy, R * D, 53);
  for (int r = 0; r < R; r++) {
    double m = 0, v = 0;
    for (int d = 0; d < D; d++) m += x[r * D + d];
    m /= D;
    for (int d = 0; d < D; d++) v += (x[r * D + d] - m) * (x[r * D + d] - m);
    mean[r] = (float)m, rstd[r] = (float)(1 / sqrt(v / D + 1e-5));
  }
  dptr dx = upload(x, R * D), ddy = upload(dy, R * D), dg = upload(g, D), dm = upload(mean, R), dr = upload(rstd, R);
  dptr odx = zeros(R * D), odg = zeros(D), odb = zeros(D);
  int64_t rd[2] = {R, D}, dd[1] = {D}, rr[1] = {R};
  ff_frame b;
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dx, 2, rd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, ddy, 2, rd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dg, 1, dd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dm, 1, rr);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, dr, 1, rr);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, odx, 2, rd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, odg, 1, dd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, odb, 1, dd);
  expect_ok(gpa_xla_cuda_layernorm_bwd(&b.f), "layernorm_bwd");
  xla_read(odx, gdx, R * D), xla_read(odg, gdg, D), xla_read(odb, gdb, D);
  memset(rdg, 0, sizeof rdg), memset(rdb, 0, sizeof rdb);
  for (int r = 0; r < R; r++) {
    double mg = 0, mgx = 0;
    for (int d = 0; d < D; d++) {
      double xh = (x[r * D + d] - (double)mean[r]) * rstd[r], gg = (double)dy[r * D + d] * g[d];
      mg += gg / D, mgx += gg * xh / D;
      rdg[d] += dy[r * D + d] * xh, rdb[d] += dy[r * D + d];
    }
    for (int d = 0; d < D; d++) {
      double xh = (x[r * D + d] - (double)mean[r]) * rstd[r], gg = (double)dy[r * D + d] * g[d];
      rdx[r * D + d] = rstd[r] * (gg - mg - xh * mgx);
    }
  }
  close_to("layernorm dx", gdx, rdx, R * D, 1e-4);
  close_to("layernorm dgamma", gdg, rdg, D, 1e-4);
  close_to("layernorm dbeta", gdb, rdb, D, 1e-4);
  cu.free(dx), cu.free(ddy), cu.free(dg), cu.free(dm), cu.free(dr), cu.free(odx), cu.free(odg), cu.free(odb);

  enum { B = 2, S = 7, H = 4, HKV = 2, HD = 16, G = H / HKV };
  static float q[B * S * H * HD], k[B * S * HKV * HD], v[B * S * HKV * HD], dout[B * S * H * HD];
  static float o[B * S * H * HD], dq[B * S * H * HD], dk[B * S * HKV * HD], dv[B * S * HKV * HD];
  static double rq[B * S * H * HD], rk[B * S * HKV * HD], rv[B * S * HKV * HD];
  rnd(q, sizeof q / 4, 61), rnd(k, sizeof k / 4, 62), rnd(v, sizeof v / 4, 63), rnd(dout, sizeof dout / 4, 64);
  dptr pq = upload(q, sizeof q / 4), pk = upload(k, sizeof k / 4), pv = upload(v, sizeof v / 4);
  dptr pdo = upload(dout, sizeof dout / 4), po = zeros(sizeof o / 4), plse = zeros(B * H * S);
  dptr pdq = zeros(sizeof dq / 4), pdk = zeros(sizeof dk / 4), pdv = zeros(sizeof dv / 4);
  int64_t qd[4] = {B, S, H, HD}, kd[4] = {B, S, HKV, HD}, ld[3] = {B, H, S};
  ff_init(&b, &api, &xla); /* o and lse from the forward handler, as in a jitted step */
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pq, 4, qd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pk, 4, kd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pv, 4, kd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, po, 4, qd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, plse, 3, ld);
  ff_attr_i32(&b, "causal", 1);
  expect_ok(gpa_xla_cuda_attention_fwd(&b.f), "attention_fwd for the backward");
  ff_init(&b, &api, &xla);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pdo, 4, qd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pq, 4, qd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pk, 4, kd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, pv, 4, kd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, po, 4, qd);
  ff_buf(&b, 0, XLA_FFI_DataType_F32, plse, 3, ld);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, pdq, 4, qd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, pdk, 4, kd);
  ff_buf(&b, 1, XLA_FFI_DataType_F32, pdv, 4, kd);
  ff_attr_i32(&b, "causal", 1);
  expect_ok(gpa_xla_cuda_attention_bwd(&b.f), "attention_bwd");
  xla_read(pdq, dq, sizeof dq / 4), xla_read(pdk, dk, sizeof dk / 4), xla_read(pdv, dv, sizeof dv / 4);
  memset(rk, 0, sizeof rk), memset(rv, 0, sizeof rv);
  double sc = 1 / sqrt((double)HD);
#define QI(bb, i, h) (((bb) * S + (i)) * H + (h)) * HD
#define KJ(bb, j, h) (((bb) * S + (j)) * HKV + (h)) * HD
  for (int bb = 0; bb < B; bb++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < S; i++) {
        int kh = h / G;
        double p[S], mx = -INFINITY, sum = 0, oi[HD] = {0}, dpo = 0, dp[S];
        for (int j = 0; j <= i; j++) {
          p[j] = 0;
          for (int d = 0; d < HD; d++) p[j] += (double)q[QI(bb, i, h) + d] * k[KJ(bb, j, kh) + d];
          p[j] *= sc, mx = fmax(mx, p[j]);
        }
        for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
        for (int j = 0; j <= i; j++) p[j] /= sum;
        for (int j = 0; j <= i; j++)
          for (int d = 0; d < HD; d++) oi[d] += p[j] * v[KJ(bb, j, kh) + d];
        for (int d = 0; d < HD; d++) dpo += (double)dout[QI(bb, i, h) + d] * oi[d];
        for (int d = 0; d < HD; d++) rq[QI(bb, i, h) + d] = 0;
        for (int j = 0; j <= i; j++) {
          dp[j] = 0;
          for (int d = 0; d < HD; d++) {
            dp[j] += (double)dout[QI(bb, i, h) + d] * v[KJ(bb, j, kh) + d];
            rv[KJ(bb, j, kh) + d] += p[j] * dout[QI(bb, i, h) + d];
          }
          double ds = p[j] * (dp[j] - dpo) * sc;
          for (int d = 0; d < HD; d++) {
            rq[QI(bb, i, h) + d] += ds * k[KJ(bb, j, kh) + d];
            rk[KJ(bb, j, kh) + d] += ds * q[QI(bb, i, h) + d];
          }
        }
      }
#undef QI
#undef KJ
  close_to("attention dq", dq, rq, sizeof dq / 4, 1e-4);
  close_to("attention dk", dk, rk, sizeof dk / 4, 1e-4);
  close_to("attention dv", dv, rv, sizeof dv / 4, 1e-4);
  cu.free(pq), cu.free(pk), cu.free(pv), cu.free(pdo), cu.free(po), cu.free(plse), cu.free(pdq), cu.free(pdk);
  cu.free(pdv);
}
