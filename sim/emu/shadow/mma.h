/* gpa-sim shadow of CUDA's <mma.h>: nvcuda::wmma for the emulated kernels.
 * The emulated modules put this directory first on the include path, so a
 * .cu includes <mma.h> unchanged under both compilers.
 *
 * The fragment layout across lanes is unspecified by CUDA, so every lane
 * holds the whole tile: x[] is the tile in row-major order (num_elements =
 * rows * cols). Element-wise loops over x[] work as on the device (all lanes
 * apply them to identical copies); code that depends on the device's real
 * per-lane layout cannot be emulated. Every call is a warp collective (it
 * starts with __syncwarp), as the _sync names require. Supported: matrix
 * shapes 16x16x16, 32x8x16 and 8x32x16 with __half or __nv_bfloat16 inputs
 * and float (or __half) accumulators; products accumulate in fp32. */
#ifndef GPA_SIM_SHADOW_MMA_H
#define GPA_SIM_SHADOW_MMA_H
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct gpa_sim_dims;
template <int M, int N, int K> struct gpa_sim_dims<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct gpa_sim_dims<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct gpa_sim_dims<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16),
                "wmma shape not supported by the emulation");
  typedef T element_type;
  static constexpr int rows = gpa_sim_dims<Use, M, N, K>::rows;
  static constexpr int cols = gpa_sim_dims<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];
};

inline float gpa_sim_f(float v) { return v; }
inline float gpa_sim_f(__half v) { return __half2float(v); }
inline float gpa_sim_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> inline T gpa_sim_from_f(float v);
template <> inline float gpa_sim_from_f<float>(float v) { return v; }
template <> inline __half gpa_sim_from_f<__half>(float v) { return __float2half_rn(v); }
template <> inline __nv_bfloat16 gpa_sim_from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class Use, int M, int N, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {
  for (int i = 0; i < f.num_elements; i++) f.x[i] = v;
}

/* matrix_a / matrix_b: layout from the fragment type */
template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
  __syncwarp();
  typedef fragment<Use, M, N, K, T, L> F;
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++)
      f.x[r * F::cols + c] = std::is_same<L, col_major>::value ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

/* accumulator: layout given at the call */
template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l) {
  __syncwarp();
  typedef fragment<accumulator, M, N, K, T> F;
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++)
      f.x[r * F::cols + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l) {
  __syncwarp();
  typedef fragment<accumulator, M, N, K, T> F;
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++)
      (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * F::cols + c];
}

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
                     const fragment<matrix_b, M, N, K, TB, LB> &b, const fragment<accumulator, M, N, K, TC> &c) {
  __syncwarp();
  /* inputs widened once, not in the inner loop: the host's half-to-float is
   * a software routine, and every lane runs this whole product */
  float fa[M * K], fb[K * N], acc[M * N];
  for (int i = 0; i < M * K; i++) fa[i] = gpa_sim_f(a.x[i]);
  for (int i = 0; i < K * N; i++) fb[i] = gpa_sim_f(b.x[i]);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float s = gpa_sim_f(c.x[i * N + j]);
      for (int k = 0; k < K; k++) s += fa[i * K + k] * fb[k * N + j];
      acc[i * N + j] = s;
    }
  for (int i = 0; i < M * N; i++) d.x[i] = gpa_sim_from_f<TD>(acc[i]);
}
} // namespace wmma
} // namespace nvcuda
#endif
