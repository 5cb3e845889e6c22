/* The benchmark table. One line per benchmark; each bench_*.c file defines its
 * functions. Conditional entries are guarded by the macro its CMake sets. */
#ifndef GPA_BENCH_LIST_H
#define GPA_BENCH_LIST_H
#include "bench.h"

void gpa_bench_mailbox_async(void);
void gpa_bench_mailbox_roundtrip(void);
void gpa_bench_mailbox_memory(void);
void gpa_bench_feed(void);
void gpa_bench_profile_overhead(void);
void gpa_bench_linear_fwd(void);
void gpa_bench_linear_bwd(void);
void gpa_bench_conv1d_fwd(void);
void gpa_bench_conv1d_bwd(void);
void gpa_bench_conv1d_nlc(void);
void gpa_bench_gemm_targets(void);
void gpa_bench_attention_fwd(void);
void gpa_bench_attention_bwd(void);
void gpa_bench_layernorm_fwd(void);
void gpa_bench_layernorm_bwd(void);
void gpa_bench_gelu_fwd(void);
void gpa_bench_gelu_bwd(void);
void gpa_bench_add(void);
void gpa_bench_embedding_fwd(void);
void gpa_bench_embedding_bwd(void);
void gpa_bench_cross_entropy(void);
void gpa_bench_adamw(void);
void gpa_bench_adamw_multi(void);
void gpa_bench_actor_overhead(void);
void gpa_bench_pool_wake(void);
void gpa_bench_cuda_membound(void);
void gpa_bench_cuda_linear(void);
void gpa_bench_cuda_attention(void);
void gpa_bench_cuda_sdpa(void);
void gpa_bench_cuda_attention_fa2(void);
void gpa_bench_cuda_actor_cost(void);
void gpa_bench_cuda_conv1d(void);
void gpa_bench_cuda_conv_nlc(void);
void gpa_bench_cuda_split_sums(void);
void gpa_bench_cuda_mixed(void);
void gpa_bench_cuda_emb_bwd(void);
void gpa_bench_cuda_allreduce(void);
#ifdef GPA_BENCH_SIM
void gpa_bench_sim_layernorm(void);
#endif

static const gpa_bench_entry gpa_benches[] = {
    {"mailbox_async", gpa_bench_mailbox_async},
    {"mailbox_roundtrip", gpa_bench_mailbox_roundtrip},
    {"mailbox_memory", gpa_bench_mailbox_memory},
    {"feed", gpa_bench_feed},
    {"profile_overhead", gpa_bench_profile_overhead},
    {"linear_fwd", gpa_bench_linear_fwd},
    {"linear_bwd", gpa_bench_linear_bwd},
    {"conv1d_fwd", gpa_bench_conv1d_fwd},
    {"conv1d_bwd", gpa_bench_conv1d_bwd},
    {"conv1d_nlc", gpa_bench_conv1d_nlc},
    {"gemm_targets", gpa_bench_gemm_targets},
    {"attention_fwd", gpa_bench_attention_fwd},
    {"attention_bwd", gpa_bench_attention_bwd},
    {"layernorm_fwd", gpa_bench_layernorm_fwd},
    {"layernorm_bwd", gpa_bench_layernorm_bwd},
    {"gelu_fwd", gpa_bench_gelu_fwd},
    {"gelu_bwd", gpa_bench_gelu_bwd},
    {"add", gpa_bench_add},
    {"embedding_fwd", gpa_bench_embedding_fwd},
    {"embedding_bwd", gpa_bench_embedding_bwd},
    {"cross_entropy", gpa_bench_cross_entropy},
    {"adamw", gpa_bench_adamw},
    {"adamw_multi", gpa_bench_adamw_multi},
    {"actor_overhead", gpa_bench_actor_overhead},
    {"pool_wake", gpa_bench_pool_wake},
    {"cuda_membound", gpa_bench_cuda_membound},
    {"cuda_linear", gpa_bench_cuda_linear},
    {"cuda_sdpa", gpa_bench_cuda_sdpa},
    {"cuda_attention", gpa_bench_cuda_attention},
    {"cuda_attention_fa2", gpa_bench_cuda_attention_fa2},
    {"cuda_actor", gpa_bench_cuda_actor_cost},
    {"cuda_conv1d", gpa_bench_cuda_conv1d},
    {"cuda_conv_nlc", gpa_bench_cuda_conv_nlc},
    {"cuda_split_sums", gpa_bench_cuda_split_sums},
    {"cuda_mixed", gpa_bench_cuda_mixed},
    {"cuda_emb_bwd", gpa_bench_cuda_emb_bwd},
    {"cuda_allreduce", gpa_bench_cuda_allreduce},
#ifdef GPA_BENCH_SIM
    {"sim_layernorm", gpa_bench_sim_layernorm},
#endif
};
#endif
