/* gpa-sim driver: cuLaunchKernel.
 *
 * At the call: the limits a GPU enforces (block and grid dimensions, dynamic
 * shared memory against the function's limit), the parameters in either form
 * (kernelParams: one pointer per parameter; extra: one packed buffer whose
 * size must match the kernel's parameter layout) copied into one buffer, and
 * injected launch faults. On the stream: every pointer parameter must be
 * NULL or point into a live allocation (or pinned host memory), the grid runs
 * on the SIMT executor, and the guard zones of every allocation a pointer
 * parameter refers to are verified afterwards. Failures there are sticky
 * context errors, as a fault in a kernel is on a GPU. */
#include <string.h>
#include "internal.h"

const gpa_sim_kernel *gpa_sim__func_kernel(CUfunc_st *f);
const std::vector<size_t> &gpa_sim__func_offsets(CUfunc_st *f);
size_t gpa_sim__func_args_size(CUfunc_st *f);
int gpa_sim__func_max_dyn(CUfunc_st *f);
std::mutex *gpa_sim__func_serial(CUfunc_st *f);

namespace {
CUresult pack_params(CUfunc_st *f, void **params, void **extra, std::vector<unsigned char> *buf) {
  const gpa_sim_kernel *k = gpa_sim__func_kernel(f);
  const std::vector<size_t> &off = gpa_sim__func_offsets(f);
  size_t size = gpa_sim__func_args_size(f);
  buf->assign(size ? size : 1, 0);
  if (params && extra) return gpa_sim__fail(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel: both kernelParams and extra given");
  if (params) {
    for (unsigned i = 0; i < k->n_params; i++) {
      if (!params[i]) return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): kernelParams[%u] is NULL", k->name, i);
      memcpy(buf->data() + off[i], params[i], k->param_size[i]);
    }
    return CUDA_SUCCESS;
  }
  if (extra) {
    void *ptr = nullptr;
    size_t *psize = nullptr;
    for (unsigned i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) ptr = extra[i + 1];
      else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) psize = (size_t *)extra[i + 1];
      else return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): unknown extra key %p", k->name, extra[i]);
    }
    if (!ptr || !psize)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): extra needs BUFFER_POINTER and BUFFER_SIZE", k->name);
    size_t need = k->n_params ? off[k->n_params - 1] + k->param_size[k->n_params - 1] : 0;
    if (*psize < need || *psize > size)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): parameter buffer of %zu bytes, kernel takes %zu",
                            k->name, *psize, size);
    memcpy(buf->data(), ptr, *psize);
    return CUDA_SUCCESS;
  }
  if (k->n_params) return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): no parameters given", k->name);
  return CUDA_SUCCESS;
}

struct Launch {
  CUfunc_st *f;
  gpa_sim_launch L;
  std::vector<unsigned char> args;
  bool sticky_fault;
};

CUresult run_launch(CUctx_st *ctx, Launch *ln) {
  const gpa_sim_kernel *k = gpa_sim__func_kernel(ln->f);
  const std::vector<size_t> &off = gpa_sim__func_offsets(ln->f);
  std::string why;
  char b[160];
  if (ln->sticky_fault) {
    gpa_sim__ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS,
                            std::string("kernel '") + k->name + "': injected device fault (sticky)");
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  for (unsigned i = 0; i < k->n_params; i++) {
    if (!k->param_is_ptr[i]) continue;
    CUdeviceptr p;
    memcpy(&p, ln->args.data() + off[i], sizeof p);
    if (gpa_sim__mem_check_param(p, &why) != CUDA_SUCCESS) {
      snprintf(b, sizeof b, "kernel '%s' parameter %u: ", k->name, i);
      gpa_sim__ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, b + why);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  ln->L.args = ln->args.data();
  if (gpa_sim__grid_run(&ln->L) != 0) {
    gpa_sim__ctx_set_sticky(ctx, CUDA_ERROR_LAUNCH_FAILED, ln->L.error);
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  for (unsigned i = 0; i < k->n_params; i++) {
    if (!k->param_is_ptr[i]) continue;
    CUdeviceptr p;
    memcpy(&p, ln->args.data() + off[i], sizeof p);
    if (p && gpa_sim__mem_guards(p, &why) != CUDA_SUCCESS) {
      snprintf(b, sizeof b, "after kernel '%s' (parameter %u): ", k->name, i);
      gpa_sim__ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, b + why);
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
  }
  return CUDA_SUCCESS;
}
} // namespace

GPA_SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                    unsigned int by, unsigned int bz, unsigned int shmem, CUstream h, void **params,
                                    void **extra) {
  return gpa_sim__guard("cuLaunchKernel", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    const gpa_sim_kernel *k = gpa_sim__func_kernel(f);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (bx == 0 || by == 0 || bz == 0 || gx == 0 || gy == 0 || gz == 0)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): zero grid or block dimension", k->name);
    if (bx > 1024 || by > 1024 || bz > 64 || (unsigned long long)bx * by * bz > 1024)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): block (%u,%u,%u) exceeds 1024 threads or the "
                            "per-dimension limits (1024,1024,64)", k->name, bx, by, bz);
    if (gx > 2147483647u || gy > 65535 || gz > 65535)
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): grid (%u,%u,%u) exceeds (2^31-1,65535,65535)",
                            k->name, gx, gy, gz);
    if ((int)shmem < 0 || (int)shmem > gpa_sim__func_max_dyn(f))
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel(%s): %u bytes of dynamic shared memory exceed the "
                            "function's limit of %d (raise it with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                            k->name, shmem, gpa_sim__func_max_dyn(f));
    auto ln = std::make_shared<Launch>();
    ln->f = f;
    r = pack_params(f, params, extra, &ln->args);
    if (r) return r;
    if (gpa_sim__fault_take_launch())
      return gpa_sim__failf(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "cuLaunchKernel(%s): injected launch failure", k->name);
    ln->sticky_fault = gpa_sim__fault_take_sticky();
    if (FILE *lf = gpa_sim__opts().launch_log) { /* which kernels a workload runs, and their geometry */
      bool cap;
      {
        std::lock_guard<std::mutex> g(s->mu);
        cap = s->cap != nullptr;
      }
      fprintf(lf, "%s grid %u %u %u block %u %u %u smem %u%s\n", k->name, gx, gy, gz, bx, by, bz, shmem,
              cap ? " captured" : "");
      fflush(lf);
    }
    ln->L.kernel = k;
    ln->L.grid = dim3(gx, gy, gz);
    ln->L.block = dim3(bx, by, bz);
    ln->L.dyn_shared = shmem;
    ln->L.serial = gpa_sim__func_serial(f);
    gpa_sim__stream_push(s, [ctx, ln] {
      run_launch(ctx, ln.get());
      return CUDA_SUCCESS; /* failures already made the context sticky, with their own message */
    });
    return CUDA_SUCCESS;
  });
}
