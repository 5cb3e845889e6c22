/* gpa-sim: kernel registration. The build (cmake/cuda.cmake) compiles each
 * .cu through a generated wrapper that includes it and then names every
 * `__global__` function found in it with GPA_SIM_KERNEL(name). The macro
 * derives the parameter list from the kernel's type, so the runtime can copy
 * cuLaunchKernel's `void **kernelParams` (or the packed buffer form) into one
 * buffer with natural C layout, check pointer parameters, and unpack the
 * buffer again for every fiber through the trampoline below. */
#ifndef GPA_SIM_REGISTER_H
#define GPA_SIM_REGISTER_H
#include <type_traits>
#include <utility>

template <class F> struct gpa_sim_sig;
template <class... A> struct gpa_sim_sig<void (*)(A...)> {
  static constexpr unsigned n = sizeof...(A);
  /* one extra element so zero-parameter kernels get valid arrays */
  static constexpr uint16_t size[n + 1] = {(uint16_t)sizeof(A)..., 0};
  static constexpr uint16_t align[n + 1] = {(uint16_t)alignof(A)..., 1};
  static constexpr uint8_t is_ptr[n + 1] = {(uint8_t)std::is_pointer<A>::value..., 0};
  static constexpr size_t offset(unsigned i) {
    size_t off = 0;
    for (unsigned j = 0; j <= i && j < n; j++) {
      off = (off + align[j] - 1) / align[j] * align[j];
      if (j < i) off += size[j];
    }
    return off;
  }
  template <class T> static T load(const unsigned char *p) {
    typename std::remove_cv<T>::type v;
    memcpy((void *)&v, p, sizeof v);
    return v;
  }
  template <void (*K)(A...), size_t... I> static void call(const unsigned char *args, std::index_sequence<I...>) {
    K(load<A>(args + offset((unsigned)I))...);
  }
  template <void (*K)(A...)> static void run(const unsigned char *args) {
    call<K>(args, std::index_sequence_for<A...>{});
  }
};

/* Kernels of this module, collected by static constructors at dlopen. */
struct gpa_sim_kernel_list {
  const gpa_sim_kernel *k[256];
  unsigned n;
};
__attribute__((visibility("hidden"))) gpa_sim_kernel_list &gpa_sim_module_kernels(void);
struct gpa_sim_registrar {
  explicit gpa_sim_registrar(const gpa_sim_kernel *k) {
    gpa_sim_kernel_list &l = gpa_sim_module_kernels();
    if (l.n < 256) l.k[l.n++] = k;
  }
};

#define GPA_SIM_KERNEL(name)                                                                     \
  namespace {                                                                                    \
  typedef gpa_sim_sig<decltype(&name)> gpa_sim_sig_##name;                                       \
  const gpa_sim_kernel gpa_sim_k_##name = {#name,                                                \
                                           gpa_sim_sig_##name::n,                                \
                                           gpa_sim_sig_##name::size,                             \
                                           gpa_sim_sig_##name::align,                            \
                                           gpa_sim_sig_##name::is_ptr,                           \
                                           &gpa_sim_sig_##name::run<&name>};                     \
  gpa_sim_registrar gpa_sim_r_##name(&gpa_sim_k_##name);                                         \
  }

/* The one exported symbol of a module (generated file per module). */
#define GPA_SIM_DEFINE_MODULE(modname, id)                                                       \
  gpa_sim_kernel_list &gpa_sim_module_kernels(void) {                                            \
    static gpa_sim_kernel_list l;                                                                \
    return l;                                                                                    \
  }                                                                                              \
  extern "C" GPA_SIM_EXPORT const gpa_sim_module *gpa_sim_module_v1(void) {                      \
    static gpa_sim_module m;                                                                     \
    m.abi = GPA_SIM_ABI_VERSION;                                                                 \
    m.flags = GPA_SIM_MODULE_FLAGS;                                                              \
    m.fatbin_id = (id);                                                                          \
    m.name = (modname);                                                                          \
    m.kernels = gpa_sim_module_kernels().k;                                                      \
    m.n_kernels = gpa_sim_module_kernels().n;                                                    \
    return &m;                                                                                   \
  }
#endif
