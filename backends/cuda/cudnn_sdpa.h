/* The SDPA graphs of cuDNN's fused attention (cudnn_graph.c) and the unique
 * ids their tensors carry in the variant pack (cudnn_sdpa.c). */
#ifndef GPA_BACKENDS_CUDA_CUDNN_SDPA_H
#define GPA_BACKENDS_CUDA_CUDNN_SDPA_H
#include "backends/cuda/cudnn.h"

enum {
  GPA__DNN_UID_Q = 1, GPA__DNN_UID_K, GPA__DNN_UID_V, GPA__DNN_UID_O, GPA__DNN_UID_STATS, GPA__DNN_UID_SCALE,
  GPA__DNN_UID_SEQ_Q, GPA__DNN_UID_SEQ_KV, GPA__DNN_UID_NEG, GPA__DNN_UID_SHIFT, GPA__DNN_UID_DO, GPA__DNN_UID_DQ,
  GPA__DNN_UID_DK, GPA__DNN_UID_DV, GPA__DNN_UID_DELTA, GPA__DNN_UID_ONE, GPA__DNN_UID_DQ_ACCUM,
  GPA__DNN_UID_VIRTUAL = 100 /* virtual tensors from here on */
};

/* gpa__dnn_build_fn for the key's direction. */
int gpa__dnn_build_sdpa(gpa__dnn *d, const gpa__dnn_key *k, gpa__dnn_descs *g, char *why, size_t n);

#endif
