/* gpa-sim: CUDA atomics on the CPU. Blocks of one launch run on several OS
 * workers, so these are real hardware atomics (GCC __atomic builtins, sequentially
 * consistent). Floating-point adds and min/max use compare-and-swap loops.
 * Scoped variants (_block, _system) are the same operations.
 * Limitation: a kernel that spins on an atomic waiting for another thread of
 * its own block never yields its fiber and hangs (see docs/sim.md). */
#ifndef GPA_SIM_ATOMICS_H
#define GPA_SIM_ATOMICS_H

#define GPA_SIM_ATOMIC_INT(T)                                                                     \
  inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }            \
  inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }            \
  inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }          \
  inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }            \
  inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }              \
  inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }            \
  inline T atomicCAS(T *p, T cmp, T v) {                                                          \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);           \
    return cmp;                                                                                   \
  }                                                                                               \
  inline T atomicMin(T *p, T v) {                                                                 \
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                 \
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) { \
    }                                                                                             \
    return old;                                                                                   \
  }                                                                                               \
  inline T atomicMax(T *p, T v) {                                                                 \
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                 \
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) { \
    }                                                                                             \
    return old;                                                                                   \
  }
GPA_SIM_ATOMIC_INT(int)
GPA_SIM_ATOMIC_INT(unsigned)
GPA_SIM_ATOMIC_INT(unsigned long long)
GPA_SIM_ATOMIC_INT(long long)
#undef GPA_SIM_ATOMIC_INT

/* Read-modify-write of a trivially copyable T of 2, 4 or 8 bytes through a CAS
 * on its bits; `f` maps the old value to the new one. */
template <class T, class U, class F> inline T gpa_sim_atomic_rmw(T *p, F f) {
  static_assert(sizeof(T) == sizeof(U), "size");
  U *u = reinterpret_cast<U *>(p);
  U old = __atomic_load_n(u, __ATOMIC_SEQ_CST), nu;
  T ov;
  do {
    memcpy((void *)&ov, &old, sizeof ov);
    T nv = f(ov);
    memcpy(&nu, (const void *)&nv, sizeof nu);
  } while (!__atomic_compare_exchange_n(u, &old, nu, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return ov;
}
inline float atomicAdd(float *p, float v) {
  return gpa_sim_atomic_rmw<float, uint32_t>(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double *p, double v) {
  return gpa_sim_atomic_rmw<double, uint64_t>(p, [v](double o) { return o + v; });
}
inline float atomicExch(float *p, float v) {
  return gpa_sim_atomic_rmw<float, uint32_t>(p, [v](float) { return v; });
}
inline float atomicMax(float *p, float v) {
  return gpa_sim_atomic_rmw<float, uint32_t>(p, [v](float o) { return o > v ? o : v; });
}
inline float atomicMin(float *p, float v) {
  return gpa_sim_atomic_rmw<float, uint32_t>(p, [v](float o) { return o < v ? o : v; });
}
inline unsigned atomicInc(unsigned *p, unsigned lim) {
  return gpa_sim_atomic_rmw<unsigned, uint32_t>(p, [lim](unsigned o) { return o >= lim ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned *p, unsigned lim) {
  return gpa_sim_atomic_rmw<unsigned, uint32_t>(p, [lim](unsigned o) { return (o == 0 || o > lim) ? lim : o - 1; });
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicCAS_block atomicCAS
#define atomicExch_block atomicExch
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#endif
