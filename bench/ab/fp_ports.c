/* What one more vector operation costs next to a stream of FMAs (bench/
 * fp_ports.sh). Each step runs 8 independent FMA chains (enough to fill
 * both FMA pipes: 4-cycle latency, 2 per cycle) plus k operations of one
 * kind on other registers, chained per register so the compiler cannot
 * drop them; the step's time against the FMAs alone says how many FMA
 * slots each added operation takes: 0 if it runs on other pipes, 1 if it
 * competes for the FMA pipes. Clock-free: the unit is the FMA-only step,
 * 4 cycles. The GELU kernels' operation counts (kernels/host/gelu.c) rest
 * on these figures.
 * Usage: fp_ports [millions of steps]   (default 20) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define AVX __attribute__((target("avx2,fma"), noinline))
#define F(a) a = _mm256_fmadd_ps(a, m, c);
#define FMA8 F(a0) F(a1) F(a2) F(a3) F(a4) F(a5) F(a6) F(a7)
/* k operations a step on b0..b3 (k = 0, 1, 2 or 4); an empty asm keeps each
 * b live in a register without costing anything */
#define STEP(OP, K)                                                                     \
  FMA8 if (K > 0) OP(b0) if (K > 1) OP(b1) if (K > 3) { OP(b2) OP(b3) }                 \
  __asm__ volatile("" : "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
#define KERNEL(NAME, OP, K)                                                             \
  AVX static float NAME(long steps, float s) {                                          \
    __m256 a0 = _mm256_set1_ps(s), a1 = _mm256_set1_ps(s + 1), a2 = _mm256_set1_ps(s + 2); \
    __m256 a3 = _mm256_set1_ps(s + 3), a4 = _mm256_set1_ps(s + 4), a5 = _mm256_set1_ps(s + 5); \
    __m256 a6 = _mm256_set1_ps(s + 6), a7 = _mm256_set1_ps(s + 7);                      \
    __m256 b0 = a0, b1 = a1, b2 = a2, b3 = a3;                                          \
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);              \
    const __m256 one = _mm256_set1_ps(1.0f);                                            \
    (void)one;                                                                          \
    for (long i = 0; i < steps; i++) { STEP(OP, K) }                                    \
    __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), \
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))); \
    t = _mm256_add_ps(t, _mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));  \
    float o[8];                                                                         \
    _mm256_storeu_ps(o, t);                                                             \
    return o[0];                                                                        \
  }

#define NONE(b)
#define MAX(b) b = _mm256_max_ps(b, c);
#define ADD(b) b = _mm256_add_ps(b, c);
#define XOR(b) b = _mm256_xor_ps(b, c);
#define PADD(b) b = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(b), _mm256_castps_si256(c)));
#define SLL(b) b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(b), 1));
#define RCP(b) b = _mm256_rcp_ps(b);
/* a divide of a fresh operand (the empty asm hides that it is constant)
 * into an add chain: its own latency (~10 cycles) stays off the step's
 * critical path, the add (3 cycles a step) below the FMAs' 4 */
#define DIV(b)                                  \
  {                                             \
    __m256 q_ = one;                            \
    __asm__ volatile("" : "+x"(q_));            \
    b = _mm256_add_ps(b, _mm256_div_ps(c, q_)); \
  }

KERNEL(k_none, NONE, 0)
KERNEL(k_max, MAX, 4)
KERNEL(k_add, ADD, 4)
KERNEL(k_xor, XOR, 4)
KERNEL(k_padd, PADD, 4)
KERNEL(k_sll, SLL, 4)
KERNEL(k_rcp, RCP, 4)
KERNEL(k_div1, DIV, 1)
KERNEL(k_div2, DIV, 2)

int main(int argc, char **argv) {
  long steps = (argc > 1 ? atol(argv[1]) : 20) * 1000000L;
  if (steps <= 0 || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 2;
  struct {
    const char *name;
    float (*fn)(long, float);
    int k; /* operations a step (a divide comes with an add) */
  } t[] = {{"none", k_none, 0}, {"max", k_max, 4},   {"add", k_add, 4}, {"xor", k_xor, 4},      {"paddd", k_padd, 4},
           {"pslld", k_sll, 4}, {"rcp", k_rcp, 4},   {"div", k_div1, 1}, {"div_x2", k_div2, 2}};
  double base = 0, sink = 0;
  for (int i = 0; i < (int)(sizeof t / sizeof t[0]); i++) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
      double t0 = now();
      sink += t[i].fn(steps, 1.0f + r);
      double d = now() - t0;
      if (d < best) best = d;
    }
    if (i == 0) base = best;
    /* the FMA-only step is 4 cycles: 8 FMAs on two pipes */
    double cyc = 4.0 * best / base;
    printf("{\"name\":\"fp_ports_%s\",\"ops_per_step\":%d,\"cycles_per_step\":%.2f", t[i].name, t[i].k, cyc);
    if (t[i].k) printf(",\"fma_slots_per_op\":%.2f", (cyc - 4.0) * 2.0 / t[i].k);
    printf("}\n");
  }
  return sink == 12345.0;
}
