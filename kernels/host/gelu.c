/* GELU. With AVX2+FMA (checked at run time): one fused pass, 8 lanes, our
 * own erfc and exp (below; simd_exp.h gives the CPU check): bound by their
 * arithmetic on two cores, not by memory, so cut to the FMA slots. Else:
 * chunks of CH elements whose transcendental part goes through vmath.c (libm
 * or libmvec), the rest plain loops the compiler vectorizes. */
#include "kernels/host/gelu.h"

#include <string.h>

#include "kernels/host/nt_store.h"
#include "kernels/host/simd_exp.h"
#include "kernels/host/vmath.h"

#define CH 1024
#define GELU_GRAIN 16384
#define K_TANH 0.7978845608028654f /* sqrt(2/pi) */
#define C_TANH 0.044715f
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT2PI 0.3989422804014327f
/* |x| past which the tanh form's exp(-2u) leaves float's range (both paths
 * clamp x inside the exp, see below), and past which the erf form's terms
 * in x are 0 or x itself (the portable path clamps x there, so -inf gives
 * -0, not -inf * 0 = NaN). */
#define TCLAMP 9.9f
#define ECLAMP 40.0f

typedef struct gelu_ctx {
  float *out;
  const float *x, *dy;
  int approximate;
  int avx2, nt;
} gelu_ctx;

#ifdef GPA__HAVE_AVX2_PATH
/* ---- AVX2+FMA: one fused pass over memory, 8 lanes at a time ------------
 *
 * Both forms are bound by arithmetic on this project's CPUs, and the time of
 * the arithmetic adds to the memory time rather than hiding under it, so
 * every piece is cut to the accuracy the op needs (a few 1e-6 relative, the
 * parity tolerance being 1e-5), not to float's last ulp, and counted in
 * slots of the two FMA pipes. On Zen 3 (bench/fp_ports.sh: one more op
 * beside eight independent FMAs a step) multiplies, FMAs, blendv and rcp
 * take one slot each; a divide (ymm) two to three (its own unit, but it
 * holds up the FMAs' issue); add/sub/min/max/compare/logic and integer
 * add run on the other pipes yet still cost ~0.35 of a slot, an integer
 * shift ~0.6. Hence no blendv, clamps with min/max, signs with logic, one
 * divide per kernel, and every op counted, not only the FMA slots (in the
 * erf forward itself one more op per vector cost +0.56 cycles for an FMA,
 * +0.4 for an add, +0.14 for a logic op; session 6). An erf forward of 14
 * multiplies and FMAs, a divide and ~12 other ops runs at 10.7 cycles per
 * 8 elements in L2 (session 7), as those costs add up to; unrolling (1 to
 * 4 vectors a step) or splitting it into passes over an L1 block (short
 * chains) changed nothing or lost 18% and 33%: it is bound by issue, not
 * latency. Polynomials by Horner: Estrin's scheme (one more multiply, half
 * the chain) measured 5-8% slower in every kernel.
 *
 * exp: s = k ln2 + r with k = round(s log2e) taken from the low mantissa
 * bits of s log2e + 1.5 2^23 (no round or convert instruction), e^r by a
 * degree-5 polynomial (Chebyshev fit on |r| <= ln2/2, mpmath: 1.1e-7
 * relative), 2^k added into the exponent bits as an integer (no multiply;
 * valid while k is in [-125, 127], so callers bound s). */
#define E_MAGIC 12582912.0f /* 1.5 * 2^23 */
#define LOG2E 1.44269504088896341f
#define LN2F 0.693147182464599609375f /* float(ln 2): 1.9e-9 low, so k ln2f is k ln2 within 2.3e-7 for |k| <= 122 */
#define EP0 1.00000007545f
#define EP1 1.00000001077f
#define EP2 4.99988693783e-1f
#define EP3 1.66665052604e-1f
#define EP4 4.19175072496e-2f
#define EP5 8.36914849086e-3f

/* x's bits plus k << 23, k in the low bits of v (the magic's bits shift
 * out): x 2^k for x normal and the result in range */
GPA__AVX2_ATTR static inline __m256 exp_scale(__m256 x, __m256 v) {
  __m256i e = _mm256_slli_epi32(_mm256_castps_si256(v), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(x), e));
}

/* c e^(r/2) 2^k (the coefficients scaled by c 2^-j), k in the low bits of
 * v: the erf backward's exp. */
GPA__AVX2_ATTR static inline __m256 exp_finish(__m256 r, __m256 v, float c) {
  const float h = 0.5f;
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(c * EP5 * h * h * h * h * h), r,
                             _mm256_set1_ps(c * EP4 * h * h * h * h));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c * EP3 * h * h * h));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c * EP2 * h * h));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c * EP1 * h));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c * EP0));
  return exp_scale(p, v);
}

/* The forward kernels' exp: e^(h r) ~ (F + r) / (F - r), F = 2/h + EXC h r^2
 * (e^r's symmetry e^-r = 1/e^r: numerator and denominator share F, a
 * multiply and an FMA for both where the polynomial takes five FMAs; EXC a
 * minimax fit on |r| <= ln2/2, scripts/fit_gelu_exp.py: 9.1e-7 relative,
 * against 7e-6 for the Pade value 1/6 and 1.1e-7 for the polynomial). Its
 * division folds into the one each forward kernel has anyway, for two
 * multiplies and three adds in the erf forward (one in place of the final
 * FMA), one multiply and one add in the tanh forward: on this CPU an add in
 * these loops is not free (one more add per vector measured +0.4 cycles,
 * an FMA +0.56, a logic op +0.14), so it nets 1-10% fewer cycles per
 * element in L2 for erf, the most when the VM runs slow, and 1-2% for tanh
 * (2.5% more GB/s on two threads; docs/benchmarks.md). The tanh backward
 * takes it too, s = d/(d + 2^k n) and 1 - s by subtraction (see there). */
#define EXC 1.663773060e-01f
GPA__AVX2_ATTR static inline void exp_ratio(__m256 r, float h, __m256 *n, __m256 *d) {
  __m256 f = _mm256_fmadd_ps(_mm256_mul_ps(r, r), _mm256_set1_ps(EXC * h), _mm256_set1_ps(2.0f / h));
  *n = _mm256_add_ps(f, r);
  *d = _mm256_sub_ps(f, r);
}

/* erf form, a = |x| clamped to 13, phi the normal density:
 *   Phi(-a) = 0.5 erfc(a / sqrt2) = phi(a) R(a),  phi(a) = exp(-a^2/2) / sqrt(2pi),
 * R the Mills ratio: smooth, 1.2533 at 0, about 1/a for large a. R = P/Q,
 * P of degree 3, Q monic of degree 4, poles near -1.8 +- 0.6i and -1.7 +-
 * 1.9i (a relative minimax fit over [0, 13.2] by iterated linear least
 * squares with Lawson weights in mpmath, scripts/fit_gelu_mills.py:
 * 3.5e-7, 3.7e-7 with the float coefficients; all positive, so Horner does
 * not cancel): 3 + 3 FMAs, an add and one divide. It replaced
 * t = 1/(1 + p a), Phi(-a) = t exp(-a^2/2) Q(t) with Q of degree 6
 * (forward, 1.3e-6) or 7 (backward):
 * two to four FMA slots and a multiply fewer, a shorter chain (P and Q side
 * by side, then the divide), and 3.5x more accurate than the forward's Q
 * (4% fewer cycles per element forward, 13% backward, in L2). dx's two
 * terms cancel where it crosses 0 (x = -0.75): there the parity tolerance's
 * absolute floor (1e-7 max|dx|) needs R to a few 1e-7 (a degree-6 Q(t)
 * failed it).
 * phi: k from a^2, then r2 = -a^2 - 2k ln2f in one FMA (the product exact
 * inside it) and e^(r2/2) by the polynomial at h = 1/2, 1/sqrt(2pi) folded
 * into its coefficients: a^2 is rounded once (relative error of phi up to
 * a^2 2^-25: 4.8e-7 at a = 4, 5e-6 at a = 13, where |y| < 1e-37). Past
 * |x| = 13, Phi(-13) = 6e-39 stands for the smaller values. Relative, not
 * absolute: the negative tail keeps its digits (no 1 + erf). Measured worst
 * relative error over the float range (tests/test_host_gelu_accuracy.c): y
 * 2.2e-6 for |x| <= 8, 3.0e-6 beyond (the forward's rational exp; 1.3e-6
 * and 2.4e-6 with the polynomial); dx 1.2e-6 and 2.3e-6 (relative to the
 * size of its two terms).
 *
 * Not done, measured (docs/benchmarks.md): a piecewise polynomial on the
 * bulk |x| < 4 with coefficients picked per lane from in-register tables
 * (no exp, no divide; tails through this path on a movemask branch). A
 * table pick costs more than the work it saves on this CPU: vpermps takes
 * the slots of two FMAs, vpermilps one, and with vpshufb (4-entry tables:
 * degree 8 for 3e-7) the erf kernels ran 10-35% slower than the t, Q
 * kernels; a degree-5 Q on the bulk (|x| < 4.5) behind the branch gained
 * 1.4%. Dividing a instead of 1 (s = a t, Q refitted in s) saved the
 * multiply a t but measured 3% slower (a subtraction on the longest
 * chain). Lower-degree Mills ratios cost too much accuracy for what they
 * save: (3,3) 5.1e-6, (2,4) 5.0e-6, (2,3) 1.5e-5 on [0, 9.5]. */
static const float mills_p[4] = {2.968203699e+01f, 2.139812935e+01f, 7.044400492e+00f, 9.998696625e-01f};
static const float mills_q[4] = {2.368284722e+01f, 3.596900113e+01f, 2.248161065e+01f, 7.039273313e+00f};

/* a = |x| clamped to 13 (constant first: NaN stays) */
GPA__AVX2_ATTR static inline __m256 erf_abs(__m256 x) {
  return _mm256_min_ps(_mm256_set1_ps(13.0f), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x));
}

/* -a^2/2 = k ln2 + r2/2: k in the low bits of v; returns r2 = -a^2 - 2k
 * ln2f, or with pos its negation s = a^2 + 2k ln2f, which spares the sign
 * flip of a^2 (the forward takes e^(-s/2) with its ratio's numerator and
 * denominator swapped: the same bits, 0.6-2.5% fewer cycles in L2; the
 * backward's polynomial at h = -1/2 measured 1-2% slower, so it keeps r2) */
GPA__AVX2_ATTR static inline __m256 erf_reduce(__m256 a, __m256 *v, int pos) {
  __m256 a2 = _mm256_mul_ps(a, a);
  *v = _mm256_fmadd_ps(a2, _mm256_set1_ps(-0.5f * LOG2E), _mm256_set1_ps(E_MAGIC));
  __m256 k = _mm256_sub_ps(*v, _mm256_set1_ps(E_MAGIC));
  if (pos) return _mm256_fmadd_ps(k, _mm256_set1_ps(2.0f * LN2F), a2);
  return _mm256_fmadd_ps(k, _mm256_set1_ps(-2.0f * LN2F), _mm256_xor_ps(a2, _mm256_set1_ps(-0.0f)));
}

/* c exp(-a^2/2) */
GPA__AVX2_ATTR static inline __m256 erf_gauss(__m256 a, float c) {
  __m256 v, r2 = erf_reduce(a, &v, 0);
  return exp_finish(r2, v, c);
}

/* *p = c P(a) (P's coefficients scaled by c, each rounded once), *q = Q(a) */
GPA__AVX2_ATTR static inline void erf_mills_pq(__m256 a, float c, __m256 *p, __m256 *q) {
  *q = _mm256_add_ps(a, _mm256_set1_ps(mills_q[3]));
  *p = _mm256_set1_ps(mills_p[3] * c);
  for (int j = 2; j >= 0; j--) {
    *q = _mm256_fmadd_ps(*q, a, _mm256_set1_ps(mills_q[j]));
    *p = _mm256_fmadd_ps(*p, a, _mm256_set1_ps(mills_p[j] * c));
  }
}

/* R(a) = P(a) / Q(a) */
GPA__AVX2_ATTR static inline __m256 erf_mills(__m256 a) {
  __m256 p, q;
  erf_mills_pq(a, 1.0f, &p, &q);
  return _mm256_div_ps(p, q);
}

/* y = x Phi(x) = max(x, 0) - a Phi(-a) = max(x, 0) - a phi(a) R(a) for either sign,
 * with phi(a) = 2^k n/d / sqrt(2pi) (exp_ratio at h = 1/2 on s, the
 * reduced argument of erf_reduce negated) and R = P/Q: a phi R = 2^k (a P' n) / (Q d), one division,
 * P' = P / sqrt(2pi). 2^k goes into a P' n, normal wherever k != 0
 * (a >= 0.83). */
GPA__AVX2_ATTR static inline __m256 fwd_erf8(__m256 x) {
  __m256 a = erf_abs(x);
  __m256 v, en, ed, p, q;
  exp_ratio(erf_reduce(a, &v, 1), 0.5f, &ed, &en); /* e^(-s/2) = (F - s) / (F + s) */
  erf_mills_pq(a, INV_SQRT2PI, &p, &q);
  __m256 num = exp_scale(_mm256_mul_ps(_mm256_mul_ps(p, a), en), v);
  __m256 t = _mm256_div_ps(num, _mm256_mul_ps(q, ed));
  return _mm256_sub_ps(_mm256_max_ps(_mm256_setzero_ps(), x), t); /* max: NaN stays */
}

/* dx = dy (Phi(x) + x phi(x)) = dy (H + sg phi(a) (a - R(a))): H = 1 and
 * sg = 1 for x >= 0 (-0 included), H = 0 and sg = -1 below. */
GPA__AVX2_ATTR static inline __m256 bwd_erf8(__m256 x, __m256 dy) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 a = erf_abs(x);
  __m256 w = _mm256_sub_ps(a, erf_mills(a));
  __m256 ge = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  __m256 h = _mm256_and_ps(ge, one);
  __m256 sg = _mm256_xor_ps(erf_gauss(a, INV_SQRT2PI), _mm256_andnot_ps(ge, _mm256_set1_ps(-0.0f)));
  return _mm256_mul_ps(dy, _mm256_fmadd_ps(sg, w, h));
}

/* tanh form: y = x / (1 + e), e = exp(-2u) = exp(s), s = x (A + B x^2),
 * with x clamped to +-9.9 inside e (|s| <= 85.1, exp's range); past that
 * 1 + e is 1 (x > 0) or y underflows (x < 0: the numerator is clamped too,
 * y = -1.2e-36 for any x <= -9.9). Measured worst relative error
 * (tests/test_host_gelu_accuracy.c): y 3.2e-6, dx 3.1e-6, both near
 * x = -7 (|y| ~ 1e-14), where the rounding of x^2 and of the reduction's
 * one FMA (~1.2e-7 of |s log2e| = 50) is amplified by exp (before session
 * 6, with s formed and reduced by r = s - k ln2f: 4.5e-6 and 4.4e-6). A
 * degree-4 exp polynomial (2.6e-6) in the backward (before it took the
 * rational exp, below) measured 4-10% fewer cycles in L2
 * and 3-8% more GB/s on two threads, and passes the sweep (dx 4.9e-6), but
 * fails the parity harness where dx crosses 0 near x = -0.75 (its terms
 * cancel: 1.3e-6 absolute against the 1.1e-7 floor): not used. */

/* The reduction in units of log2: k = round(s log2e) in the low bits of v
 * and r' = s log2e - k returned (|r'| <= 1/2; e^s = 2^k e^(r' ln2)), with
 * log2e folded into s's coefficients: m = (A + B x^2) log2e, s log2e = x m,
 * and r' = x m - k in one FMA, so s itself is never formed: a multiply
 * fewer than s = x (A + B x^2), r = s - k ln2, and one rounding fewer (y's
 * worst error 5.3e-6 -> 3.2e-6 forward; 12% fewer cycles per element in
 * L2 forward, docs/benchmarks.md). */
#define TAL ((float)(-2.0 * 0.7978845608028654 * 1.4426950408889634))
#define TBL ((float)(-2.0 * 0.7978845608028654 * 0.044715 * 1.4426950408889634))
GPA__AVX2_ATTR static inline __m256 tanh_reduce(__m256 xc, __m256 x2, __m256 *v) {
  __m256 m = _mm256_fmadd_ps(x2, _mm256_set1_ps(TBL), _mm256_set1_ps(TAL));
  *v = _mm256_fmadd_ps(xc, m, _mm256_set1_ps(E_MAGIC));
  __m256 k = _mm256_sub_ps(*v, _mm256_set1_ps(E_MAGIC));
  return _mm256_fmsub_ps(xc, m, k);
}

/* s = sigmoid(2u) = 1 / (1 + e) = d / (d + 2^k n) of x clamped (xc, its
 * square x2), e = 2^k n/d from exp_ratio (2^k n <= 2^123 3.4, finite): both
 * tanh kernels' one division */
GPA__AVX2_ATTR static inline __m256 tanh_sigmoid(__m256 xc, __m256 x2) {
  __m256 v, en, ed;
  exp_ratio(tanh_reduce(xc, x2, &v), LN2F, &en, &ed);
  return _mm256_div_ps(ed, _mm256_add_ps(ed, exp_scale(en, v)));
}

/* y = x s (s first, as x d overflows past x = 1e38) */
GPA__AVX2_ATTR static inline __m256 fwd_tanh8(__m256 x) {
  __m256 xl = _mm256_max_ps(_mm256_set1_ps(-TCLAMP), x); /* constants first: NaN stays */
  __m256 xc = _mm256_min_ps(_mm256_set1_ps(TCLAMP), xl);
  return _mm256_mul_ps(xl, tanh_sigmoid(xc, _mm256_mul_ps(xc, xc)));
}

/* dy s (1 + x 2u' (1 - s)) with s from tanh_sigmoid: the ratio's division
 * is s's own, so it costs a
 * multiply and an FMA where the polynomial took five FMAs (session 7, single
 * thread in L2: 8.5% fewer cycles; two threads streaming, median of 40
 * rounds against the previous kernel: 2-4% less time). 1 - s by
 * subtraction: where s nears 1 it keeps an absolute error of half an ulp
 * of 1, times x 2u' (below ~35 while 1 - s is not 0), 2e-6 of dx at most.
 * x clamped as above (past it the factor is 1 or underflows). Measured
 * worst relative error of dx 3.1e-6, near x = -7 (2.5e-6 with e = 2^k p(r)
 * and s = 1 / (1 + e)). */
GPA__AVX2_ATTR static inline __m256 bwd_tanh8(__m256 x, __m256 dy) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 xc = _mm256_min_ps(_mm256_set1_ps(TCLAMP), _mm256_max_ps(_mm256_set1_ps(-TCLAMP), x));
  __m256 x2 = _mm256_mul_ps(xc, xc);
  __m256 s = tanh_sigmoid(xc, x2);
  __m256 du2 = _mm256_fmadd_ps(x2, _mm256_set1_ps(6.0f * K_TANH * C_TANH), _mm256_set1_ps(2.0f * K_TANH)); /* 2u' */
  __m256 in = _mm256_fmadd_ps(_mm256_mul_ps(xc, du2), _mm256_sub_ps(one, s), one);
  return _mm256_mul_ps(_mm256_mul_ps(dy, s), in);
}

/* The loops: four vectors per step (independent chains, which gcc's first
 * scheduling pass interleaves: see cmake/host_kernels.cmake), then one at
 * a time, then the tail through a zero-padded block. With nt (see nt_store.h), a
 * head up to y's 32-byte alignment goes through the padded block too, and
 * the body streams (gcc unswitches the loops on nt).
 *
 * With nt the inputs come from DRAM, and each step also prefetches into L2
 * the line GELU_PF floats (a 4 KiB page) ahead of each input: the reorder
 * window of these arithmetic-heavy loops covers only about 60 elements,
 * far less than a DRAM latency, so the loads depend on the hardware
 * prefetcher, which restarts at each page (two threads, 4M elements,
 * inputs evicted before each call, alternated with the same loops without
 * the prefetch: 0-2% more GB/s for erf, 4-7% for tanh; 8 KiB ahead or T0
 * were no better; docs/benchmarks.md). The address is formed as an
 * integer: near the end it points past the arrays, which a prefetch may
 * touch but C pointer arithmetic may not. */
#define GELU_PF 1024
GPA__AVX2_ATTR static inline void gelu_store(float *p, __m256 v, int nt) {
  if (nt)
    _mm256_stream_ps(p, v);
  else
    _mm256_storeu_ps(p, v);
}

static inline void gelu_prefetch(const float *p, int nt) {
  if (nt) _mm_prefetch((const char *)((uintptr_t)p + GELU_PF * sizeof *p), _MM_HINT_T1);
}

static int64_t gelu_head(const float *y, int64_t n, int nt) {
  int64_t h = nt ? (int64_t)((32 - ((uintptr_t)y & 31)) & 31) / 4 : 0;
  return h < n ? h : n;
}

#define GELU_LOOP1(NAME, F)                                                              \
  GPA__AVX2_ATTR static void NAME##_part(float *y, const float *x, int64_t n) {         \
    float t[8] = {0};                                                                    \
    memcpy(t, x, (size_t)n * sizeof *t);                                                 \
    _mm256_storeu_ps(t, F(_mm256_loadu_ps(t)));                                          \
    memcpy(y, t, (size_t)n * sizeof *t);                                                 \
  }                                                                                      \
  GPA__AVX2_ATTR static void NAME(float *y, const float *x, int64_t n, int nt) {        \
    int64_t i = gelu_head(y, n, nt);                                                     \
    if (i) NAME##_part(y, x, i);                                                         \
    for (; i + 32 <= n; i += 32) {                                                       \
      gelu_prefetch(x + i, nt);                                                          \
      gelu_prefetch(x + i + 16, nt);                                                     \
      __m256 a = F(_mm256_loadu_ps(x + i)), b = F(_mm256_loadu_ps(x + i + 8));          \
      __m256 c = F(_mm256_loadu_ps(x + i + 16)), d = F(_mm256_loadu_ps(x + i + 24));    \
      gelu_store(y + i, a, nt);                                                          \
      gelu_store(y + i + 8, b, nt);                                                      \
      gelu_store(y + i + 16, c, nt);                                                     \
      gelu_store(y + i + 24, d, nt);                                                     \
    }                                                                                    \
    for (; i + 8 <= n; i += 8) gelu_store(y + i, F(_mm256_loadu_ps(x + i)), nt);        \
    if (nt) _mm_sfence();                                                                \
    if (i < n) NAME##_part(y + i, x + i, n - i);                                         \
  }
#define GELU_LOOP2(NAME, F)                                                                       \
  GPA__AVX2_ATTR static void NAME##_part(float *dx, const float *x, const float *dy, int64_t n) { \
    float t[8] = {0}, u[8] = {0};                                                                 \
    memcpy(t, x, (size_t)n * sizeof *t);                                                          \
    memcpy(u, dy, (size_t)n * sizeof *u);                                                         \
    _mm256_storeu_ps(t, F(_mm256_loadu_ps(t), _mm256_loadu_ps(u)));                              \
    memcpy(dx, t, (size_t)n * sizeof *t);                                                         \
  }                                                                                               \
  GPA__AVX2_ATTR static void NAME(float *dx, const float *x, const float *dy, int64_t n, int nt) { \
    int64_t i = gelu_head(dx, n, nt);                                                             \
    if (i) NAME##_part(dx, x, dy, i);                                                             \
    for (; i + 32 <= n; i += 32) {                                                                \
      gelu_prefetch(x + i, nt);                                                                   \
      gelu_prefetch(x + i + 16, nt);                                                              \
      gelu_prefetch(dy + i, nt);                                                                  \
      gelu_prefetch(dy + i + 16, nt);                                                             \
      __m256 a = F(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i));                              \
      __m256 b = F(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(dy + i + 8));                      \
      __m256 c = F(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(dy + i + 16));                    \
      __m256 d = F(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(dy + i + 24));                    \
      gelu_store(dx + i, a, nt);                                                                  \
      gelu_store(dx + i + 8, b, nt);                                                              \
      gelu_store(dx + i + 16, c, nt);                                                             \
      gelu_store(dx + i + 24, d, nt);                                                             \
    }                                                                                             \
    for (; i + 8 <= n; i += 8) gelu_store(dx + i, F(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i)), nt); \
    if (nt) _mm_sfence();                                                                         \
    if (i < n) NAME##_part(dx + i, x + i, dy + i, n - i);                                         \
  }
GELU_LOOP1(fwd_erf_avx2, fwd_erf8)
GELU_LOOP1(fwd_tanh_avx2, fwd_tanh8)
GELU_LOOP2(bwd_erf_avx2, bwd_erf8)
GELU_LOOP2(bwd_tanh_avx2, bwd_tanh8)
#endif

/* v clamped to [-c, c]; NaN stays NaN (the comparisons are false) */
static inline float clampf(float v, float c) { return v < -c ? -c : v > c ? c : v; }

GPA__KCLONES static void tanh_arg(float *restrict t, const float *restrict x, int64_t n) {
  /* t = -2u of x clamped to +-TCLAMP: |t| <= 85, so exp(t) and (1 + e)^-1 stay finite */
  for (int64_t i = 0; i < n; i++) {
    float v = clampf(x[i], TCLAMP);
    t[i] = -2.0f * K_TANH * (v + C_TANH * v * v * v);
  }
}

GPA__KCLONES static void neg_scale(float *restrict t, const float *restrict x, float s, int64_t n) {
  for (int64_t i = 0; i < n; i++) t[i] = -s * x[i];
}

GPA__KCLONES static void fwd_tanh_fin(float *y, const float *x, const float *restrict e, int64_t n) {
  for (int64_t i = 0; i < n; i++) { /* below -TCLAMP, y underflows: -TCLAMP / (1 + e) */
    float v = x[i] < -TCLAMP ? -TCLAMP : x[i];
    y[i] = v / (1.0f + e[i]);
  }
}

GPA__KCLONES static void fwd_erf_fin(float *y, const float *x, const float *restrict c, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = 0.5f * (x[i] < -ECLAMP ? -ECLAMP : x[i]) * c[i];
}

GPA__KCLONES static void bwd_tanh_fin(float *dx, const float *x, const float *dy, const float *restrict e,
                                      int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = clampf(x[i], TCLAMP);
    float s = 1.0f / (1.0f + e[i]);     /* sigmoid(2u) */
    float s1 = e[i] * s;                /* 1 - sigmoid(2u) */
    float du = K_TANH * (1.0f + 3.0f * C_TANH * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * s1 * du);
  }
}

GPA__KCLONES static void bwd_erf_fin(float *dx, const float *x, const float *dy, const float *restrict c,
                                     const float *restrict g, int64_t n) {
  /* c = erfc(-x/sqrt2), g = exp(-x^2/2) */
  for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (0.5f * c[i] + clampf(x[i], ECLAMP) * INV_SQRT2PI * g[i]);
}

GPA__KCLONES static void half_sq_neg(float *restrict t, const float *restrict x, int64_t n) {
  for (int64_t i = 0; i < n; i++) t[i] = -0.5f * x[i] * x[i];
}

static void fwd_range(int64_t s, int64_t e, void *p) {
  const gelu_ctx *c = p;
#ifdef GPA__HAVE_AVX2_PATH
  if (c->avx2) {
    (c->approximate == GPA__GELU_TANH ? fwd_tanh_avx2 : fwd_erf_avx2)(c->out + s, c->x + s, e - s, c->nt);
    return;
  }
#endif
  float t[CH];
  for (int64_t i = s; i < e; i += CH) {
    int64_t n = e - i < CH ? e - i : CH;
    const float *x = c->x + i;
    if (c->approximate == GPA__GELU_TANH) {
      tanh_arg(t, x, n);
      gpa__vexpf(t, t, n);
      fwd_tanh_fin(c->out + i, x, t, n);
    } else {
      neg_scale(t, x, INV_SQRT2, n);
      gpa__verfcf(t, t, n);
      fwd_erf_fin(c->out + i, x, t, n);
    }
  }
}

static void bwd_range(int64_t s, int64_t e, void *p) {
  const gelu_ctx *c = p;
#ifdef GPA__HAVE_AVX2_PATH
  if (c->avx2) {
    (c->approximate == GPA__GELU_TANH ? bwd_tanh_avx2 : bwd_erf_avx2)(c->out + s, c->x + s, c->dy + s, e - s, c->nt);
    return;
  }
#endif
  float t[CH], g[CH];
  for (int64_t i = s; i < e; i += CH) {
    int64_t n = e - i < CH ? e - i : CH;
    const float *x = c->x + i;
    if (c->approximate == GPA__GELU_TANH) {
      tanh_arg(t, x, n);
      gpa__vexpf(t, t, n);
      bwd_tanh_fin(c->out + i, x, c->dy + i, t, n);
    } else {
      neg_scale(t, x, INV_SQRT2, n);
      gpa__verfcf(t, t, n);
      half_sq_neg(g, x, n);
      gpa__vexpf(g, g, n);
      bwd_erf_fin(c->out + i, x, c->dy + i, t, g, n);
    }
  }
}

void gpa__gelu_fwd_f32(const gpa__par *par, float *y, const float *x, int64_t n, int approximate) {
  gelu_ctx c = {.out = y, .x = x, .approximate = approximate, .avx2 = gpa__cpu_avx2(),
                .nt = gpa__nt_worth(8 * (uint64_t)(n > 0 ? n : 0)) && (void *)y != (const void *)x};
  gpa__pfor(par, n, GELU_GRAIN, fwd_range, &c);
}

void gpa__gelu_bwd_f32(const gpa__par *par, float *dx, const float *x, const float *dy, int64_t n,
                       int approximate) {
  gelu_ctx c = {.out = dx, .x = x, .dy = dy, .approximate = approximate, .avx2 = gpa__cpu_avx2(),
                .nt = gpa__nt_worth(12 * (uint64_t)(n > 0 ? n : 0)) && (void *)dx != (const void *)x &&
                      (void *)dx != (const void *)dy};
  gpa__pfor(par, n, GELU_GRAIN, bwd_range, &c);
}
