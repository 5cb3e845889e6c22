"""PyTorch's figures for gpa-bench cuda_membound and cuda_linear (issue 25's
table), run by bench/bench_cuda.c when GPA_BENCH_MEMBOUND_TORCH names this
file.

    python3 membound_torch.py membound N D
        prints "torch_membound OP DTYPE us" for OP in add, gelu_fwd,
        gelu_bwd (erf form), layernorm_fwd, layernorm_bwd and DTYPE in f32,
        bf16, on [N, D] tensors (layernorm: native_layer_norm and
        native_layer_norm_backward with gamma/beta of x's dtype, as a model
        in that dtype has them)
    python3 membound_torch.py linear N IN OUT
        prints "torch_linear_bwd DTYPE us": the two GEMMs of F.linear's
        backward (dx = dy W, dW = dy^T x) and the bias sum, for f32 and bf16

CUDA events, median of 20 after 5 warm-ups, random inputs; TF32 off (f32
GEMMs as ours). Prints nothing without torch or CUDA."""
import sys

from torch_cuda import cuda_torch, event_median_s


def membound(torch, n, d):
    import torch.nn.functional as F
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(n, d, device="cuda", dtype=dt)
        z = torch.randn(n, d, device="cuda", dtype=dt)
        dy = torch.randn(n, d, device="cuda", dtype=dt)
        y = torch.empty_like(x)
        g = torch.randn(d, device="cuda", dtype=dt)
        b = torch.randn(d, device="cuda", dtype=dt)
        _, mean, rstd = torch.native_layer_norm(x, [d], g, b, 1e-5)
        runs = {
            "add": lambda: torch.add(x, z, out=y),
            "gelu_fwd": lambda: F.gelu(x),
            "gelu_bwd": lambda: torch.ops.aten.gelu_backward(dy, x),
            "layernorm_fwd": lambda: torch.native_layer_norm(x, [d], g, b, 1e-5),
            "layernorm_bwd": lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [d], mean, rstd, g, b,
                                                                                [True, True, True]),
        }
        for op, fn in runs.items():
            print(f"torch_membound {op} {name} {event_median_s(torch, fn, 5, 20) * 1e6:.2f}", flush=True)


def linear(torch, n, i, o):
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        x = torch.randn(n, i, device="cuda", dtype=dt)
        w = torch.randn(o, i, device="cuda", dtype=dt)
        dy = torch.randn(n, o, device="cuda", dtype=dt)

        def bwd():
            return dy @ w, dy.t() @ x, dy.sum(0)

        print(f"torch_linear_bwd {name} {event_median_s(torch, bwd, 5, 20) * 1e6:.2f}", flush=True)


def main():
    torch = cuda_torch()
    if torch is None or len(sys.argv) < 2:
        return
    args = list(map(int, sys.argv[2:]))
    if sys.argv[1] == "membound":
        membound(torch, *args)
    elif sys.argv[1] == "linear":
        linear(torch, *args)


if __name__ == "__main__":
    main()
