/* The handlers: each is a signature table for gpa_xla_run. Argument and
 * result names are those of the typed C API (ops_*.h), so that our messages
 * and the op's own validation name the same things. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gpuactor/tensor.h"
#include "xla_internal.h"

#define ANY GPA_XLA_ANY_RANK
#define N(a) (uint32_t)(sizeof(a) / sizeof(a)[0])

static const gpa_xla_attr_spec attn_attrs[] = {{"causal", GPA_ATTR_INT, 1}, {"scale", GPA_ATTR_FLOAT, 0}};

static const char *const attn_fwd_args[] = {"q", "k", "v", "lengths"}, *const attn_fwd_rets[] = {"o", "lse"};
static const int8_t attn_fwd_arg_rank[] = {4, 4, 4, 1}, attn_fwd_ret_rank[] = {4, 3};
static const gpa_xla_sig attn_fwd = {"gpuactor_attention_fwd", "attention_fwd", attn_fwd_args, attn_fwd_arg_rank, 3, 4,
                                     attn_fwd_rets, attn_fwd_ret_rank, 2, 2, attn_attrs, N(attn_attrs), NULL};

static const char *const attn_bwd_args[] = {"dout", "q", "k", "v", "o", "lse", "lengths"},
                         *const attn_bwd_rets[] = {"dq", "dk", "dv"};
static const int8_t attn_bwd_arg_rank[] = {4, 4, 4, 4, 4, 3, 1}, attn_bwd_ret_rank[] = {4, 4, 4};
static const gpa_xla_sig attn_bwd = {"gpuactor_attention_bwd", "attention_bwd", attn_bwd_args, attn_bwd_arg_rank, 6, 7,
                                     attn_bwd_rets, attn_bwd_ret_rank, 3, 3, attn_attrs, N(attn_attrs), NULL};

static const gpa_xla_attr_spec ln_attrs[] = {{"eps", GPA_ATTR_FLOAT, 0}};
static const char *const ln_fwd_args[] = {"x", "gamma", "beta"}, *const ln_fwd_rets[] = {"y", "mean", "rstd"};
static const int8_t ln_fwd_arg_rank[] = {2, 1, 1}, ln_fwd_ret_rank[] = {2, 1, 1};
static const gpa_xla_sig ln_fwd = {"gpuactor_layernorm_fwd", "layernorm_fwd", ln_fwd_args, ln_fwd_arg_rank, 3, 3,
                                   ln_fwd_rets, ln_fwd_ret_rank, 3, 3, ln_attrs, N(ln_attrs), NULL};

static const char *const ln_bwd_args[] = {"x", "dy", "gamma", "mean", "rstd"},
                         *const ln_bwd_rets[] = {"dx", "dgamma", "dbeta"};
static const int8_t ln_bwd_arg_rank[] = {2, 2, 1, 1, 1}, ln_bwd_ret_rank[] = {2, 1, 1};
static const gpa_xla_sig ln_bwd = {"gpuactor_layernorm_bwd", "layernorm_bwd", ln_bwd_args, ln_bwd_arg_rank, 5, 5,
                                   ln_bwd_rets, ln_bwd_ret_rank, 3, 3, NULL, 0, NULL};

static const gpa_xla_attr_spec gelu_attrs[] = {{"approximate", GPA_ATTR_INT, 0}};
static const char *const gelu_fwd_args[] = {"x"}, *const gelu_fwd_rets[] = {"y"};
static const gpa_xla_sig gelu_fwd = {"gpuactor_gelu_fwd", "gelu_fwd", gelu_fwd_args, NULL, 1, 1,
                                     gelu_fwd_rets, NULL, 1, 1, gelu_attrs, N(gelu_attrs), NULL};
static const char *const gelu_bwd_args[] = {"x", "dy"}, *const gelu_bwd_rets[] = {"dx"};
static const gpa_xla_sig gelu_bwd = {"gpuactor_gelu_bwd", "gelu_bwd", gelu_bwd_args, NULL, 2, 2,
                                     gelu_bwd_rets, NULL, 1, 1, gelu_attrs, N(gelu_attrs), NULL};

/* Linear, with the fused GELU (tanh form) when gelu=1: the forward with two
 * results also writes the pre-activation (linear_gelu_fwd, which takes no
 * attribute), which the backward then needs as its 4th operand. */
static const gpa_xla_attr_spec lin_attrs[] = {{"gelu", GPA_ATTR_INT, 0}};

static int gelu_on(const gpa_attr *a, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(a[i].name, "gelu")) return a[i].i != 0;
  return 0;
}

static const char *lin_fwd_pick(const gpa_xla_sig *s, uint32_t n_args, uint32_t n_rets, const gpa_attr *a,
                                uint32_t *n_attrs) {
  (void)s, (void)n_args;
  if (n_rets == 2 && gelu_on(a, *n_attrs)) {
    *n_attrs = 0;
    return "linear_gelu_fwd";
  }
  return "linear_fwd"; /* two results without gelu: the op's arity check says so */
}
static const char *const lin_fwd_args[] = {"x", "W", "b"}, *const lin_fwd_rets[] = {"y", "pre"};
static const int8_t lin_fwd_arg_rank[] = {ANY, 2, 1};
static const gpa_xla_sig lin_fwd = {"gpuactor_linear_fwd", NULL, lin_fwd_args, lin_fwd_arg_rank, 2, 3,
                                    lin_fwd_rets, NULL, 1, 2, lin_attrs, N(lin_attrs), lin_fwd_pick};

static const char *lin_bwd_pick(const gpa_xla_sig *s, uint32_t n_args, uint32_t n_rets, const gpa_attr *a,
                                uint32_t *n_attrs) {
  (void)s, (void)n_args, (void)a, (void)n_attrs;
  return n_rets == 3 ? "linear_bwd" : "linear_bwd_nobias";
}
static const char *const lin_bwd_args[] = {"dy", "x", "W", "pre"}, *const lin_bwd_rets[] = {"dx", "dW", "db"};
static const int8_t lin_bwd_arg_rank[] = {ANY, ANY, 2, ANY}, lin_bwd_ret_rank[] = {ANY, 2, 1};
static const gpa_xla_sig lin_bwd = {"gpuactor_linear_bwd", NULL, lin_bwd_args, lin_bwd_arg_rank, 3, 4,
                                    lin_bwd_rets, lin_bwd_ret_rank, 2, 3, lin_attrs, N(lin_attrs), lin_bwd_pick};

static const gpa_xla_sig generic = {"gpuactor_op", NULL, NULL, NULL, 0, 0, NULL, NULL, 0, 0, NULL, 0, NULL};

/* Each op handler twice: for XLA's host platform and for CUDA (the same
 * target names; JAX picks by platform). */
#define HANDLER(name, sig)                                                                    \
  XLA_FFI_Error *gpa_xla_##name(XLA_FFI_CallFrame *f) { return gpa_xla_run(f, &sig, 0); }     \
  XLA_FFI_Error *gpa_xla_cuda_##name(XLA_FFI_CallFrame *f) { return gpa_xla_run(f, &sig, 1); }
HANDLER(attention_fwd, attn_fwd)
HANDLER(attention_bwd, attn_bwd)
HANDLER(layernorm_fwd, ln_fwd)
HANDLER(layernorm_bwd, ln_bwd)
HANDLER(gelu_fwd, gelu_fwd)
HANDLER(gelu_bwd, gelu_bwd)
HANDLER(linear_fwd, lin_fwd)
HANDLER(linear_bwd, lin_bwd)
HANDLER(op, generic)

/* The baseline: what XLA's own call of an FFI handler costs, with the
 * metadata answer every handler owes. */
XLA_FFI_Error *gpa_xla_nothing(XLA_FFI_CallFrame *f) {
  XLA_FFI_Error *e;
  gpa_xla_metadata(f, &e);
  return e;
}

static const gpa_xla_target targets[] = {
    {"gpuactor_attention_fwd", gpa_xla_attention_fwd}, {"gpuactor_attention_bwd", gpa_xla_attention_bwd},
    {"gpuactor_layernorm_fwd", gpa_xla_layernorm_fwd}, {"gpuactor_layernorm_bwd", gpa_xla_layernorm_bwd},
    {"gpuactor_gelu_fwd", gpa_xla_gelu_fwd},           {"gpuactor_gelu_bwd", gpa_xla_gelu_bwd},
    {"gpuactor_linear_fwd", gpa_xla_linear_fwd},       {"gpuactor_linear_bwd", gpa_xla_linear_bwd},
    {"gpuactor_op", gpa_xla_op},                       {"gpuactor_nothing", gpa_xla_nothing},
    {"gpuactor_infeed", gpa_xla_infeed},               {"gpuactor_outfeed", gpa_xla_outfeed},
    {NULL, NULL},
};

/* CUDA: the op handlers, the baseline and the feed calls (cuda_feed.c). */
static const gpa_xla_target cuda_targets[] = {
    {"gpuactor_attention_fwd", gpa_xla_cuda_attention_fwd}, {"gpuactor_attention_bwd", gpa_xla_cuda_attention_bwd},
    {"gpuactor_layernorm_fwd", gpa_xla_cuda_layernorm_fwd}, {"gpuactor_layernorm_bwd", gpa_xla_cuda_layernorm_bwd},
    {"gpuactor_gelu_fwd", gpa_xla_cuda_gelu_fwd},           {"gpuactor_gelu_bwd", gpa_xla_cuda_gelu_bwd},
    {"gpuactor_linear_fwd", gpa_xla_cuda_linear_fwd},       {"gpuactor_linear_bwd", gpa_xla_cuda_linear_bwd},
    {"gpuactor_op", gpa_xla_cuda_op},                       {"gpuactor_nothing", gpa_xla_nothing},
    {"gpuactor_infeed", gpa_xla_cuda_infeed},               {"gpuactor_outfeed", gpa_xla_cuda_outfeed},
    {NULL, NULL},
};

const gpa_xla_target *gpa_xla_targets(void) { return targets; }
const gpa_xla_target *gpa_xla_cuda_targets(void) { return cuda_targets; }

/* XLA's names of the CUDA platform, compared as XLA does (lower case). */
static int is_cuda(const char *platform) {
  return !strcasecmp(platform, "cuda") || !strcasecmp(platform, "gpu");
}

int gpa_xla_register(const XLA_FFI_Api *api, const char *platform, const char *prefix, char *msg,
                     uint64_t msg_size) {
  if (!platform) platform = "Host";
  for (const gpa_xla_target *t = is_cuda(platform) ? cuda_targets : targets; t->name; t++) {
    char name[128];
    snprintf(name, sizeof name, "%s%s", prefix ? prefix : "gpuactor_", t->name + strlen("gpuactor_"));
    XLA_FFI_Handler_Register_Args r = {.struct_size = XLA_FFI_Handler_Register_Args_STRUCT_SIZE,
                                       .name = {name, strlen(name)},
                                       .platform = {platform, strlen(platform)},
                                       .bundle = {.execute = t->handler}};
    XLA_FFI_Error *e = api->XLA_FFI_Handler_Register(&r);
    if (!e) continue;
    gpa_ffi_error_text_args g = {.struct_size = GPA_FFI_ERROR_TEXT_ARGS_SIZE, .error = e};
    GPA_FFI_ERROR_TEXT(api)(&g);
    if (msg && msg_size) snprintf(msg, msg_size, "%s: %s", name, g.message ? g.message : "");
    XLA_FFI_Error_Destroy_Args d = {.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, .error = e};
    api->XLA_FFI_Error_Destroy(&d);
    return -1;
  }
  return 0;
}
