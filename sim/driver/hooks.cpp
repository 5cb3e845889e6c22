/* gpa-sim driver: hooks for the cuBLAS subset (include/gpa_sim_hooks.h). */
#include <stdio.h>
#include <memory>
#include "../include/gpa_sim_hooks.h"
#include "internal.h"

GPA_SIM_API CUresult gpa_sim__enqueue(CUstream h, int (*fn)(void *, char *, size_t), void *arg,
                                      void (*free_arg)(void *)) {
  return gpa_sim__guard("gpa_sim__enqueue", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    /* The argument lives as long as the operation: once on a stream, or
     * in a captured graph for as many launches as it gets (graph.cpp). If
     * the push fails, the caller keeps it (it frees it itself). */
    struct owned {
      void *p;
      void (*free_arg)(void *);
      bool ours = true;
      ~owned() {
        if (ours && free_arg) free_arg(p);
      }
    };
    auto a = std::make_shared<owned>();
    a->p = arg;
    a->free_arg = free_arg;
    try {
      gpa_sim__stream_push(s, [ctx, fn, a] {
        char why[512] = "";
        if (ctx->sticky.load() == 0 && fn(a->p, why, sizeof why) != 0)
          gpa_sim__ctx_set_sticky(ctx, CUDA_ERROR_ILLEGAL_ADDRESS, why);
        return CUDA_SUCCESS;
      });
    } catch (...) {
      a->ours = false;
      throw;
    }
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API int gpa_sim__device_range_ok(CUdeviceptr p, size_t bytes, char *why, size_t n) {
  std::string w;
  if (bytes == 0 || gpa_sim__mem_check(p, bytes, &w) == CUDA_SUCCESS) return 1;
  snprintf(why, n, "%s", w.c_str());
  return 0;
}

GPA_SIM_API int gpa_sim__capture_mem_nodes(CUstream h) {
  int captured = 0;
  gpa_sim__guard("gpa_sim__capture_mem_nodes", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    captured = gpa_sim__stream_mem_node(s) && gpa_sim__stream_mem_node(s);
    return CUDA_SUCCESS;
  });
  return captured;
}
