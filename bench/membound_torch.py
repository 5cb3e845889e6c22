"""PyTorch's figures for gpa-bench cuda_membound and cuda_linear (issue 25's
table), run by bench/bench_cuda.c when GPA_BENCH_MEMBOUND_TORCH names this
file.

    python3 membound_torch.py membound N D
        prints "torch_membound OP DTYPE us" for OP in add, gelu_fwd,
        gelu_bwd (erf form), layernorm_fwd, layernorm_bwd and DTYPE in f32,
        bf16, on [N, D] tensors (layernorm: native_layer_norm and
        native_layer_norm_backward with gamma/beta of x's dtype, as a model
        in that dtype has them), and the ops of more_runs below
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
        runs.update(more_runs(torch, F, n, d, dt, x, y, dy))
        for op, fn in runs.items():
            try:
                us = event_median_s(torch, fn, 5, 20) * 1e6
            except (RuntimeError, AttributeError, TypeError) as e:  # an op this PyTorch lacks: no column
                print(f"membound_torch: {op} {name}: {e}", file=sys.stderr)
                continue
            print(f"torch_membound {op} {name} {us:.2f}", flush=True)


def more_runs(torch, F, n, d, dt, x, y, dy):
    """The rest of bench_cuda.c's membound_more at the same shapes: the
    optimizers as PyTorch's fused kernels (f32 state and params), embedding
    (16384 ids, 32000 rows; the backward as autograd runs it,
    embedding_dense_backward), cross-entropy (N rows of d classes; the
    backward as autograd's two kernels), a broadcast add over L = 128 and a
    row mask."""
    b, v = n // 128, 32000
    ids = torch.randint(0, v, (b, 128), device="cuda", dtype=torch.int64)
    table = torch.randn(v, d, device="cuda", dtype=dt)
    tg = torch.randint(0, d, (n,), device="cuda", dtype=torch.int64)
    x3, dy3 = x.view(b, 128, d), dy.view(b, 128, d)
    vb = torch.randn(b, 1, d, device="cuda", dtype=dt)
    mask = torch.randint(0, 2, (b, 128, 1), device="cuda", dtype=torch.uint8).bool()
    ls = torch.log_softmax(x.float(), 1).to(dt)
    gout = torch.ones((), device="cuda", dtype=dt)
    tw = torch.tensor(float(n), device="cuda", dtype=dt)
    runs = {
        "embedding_fwd": lambda: F.embedding(ids, table),
        "embedding_bwd": lambda: torch.ops.aten.embedding_dense_backward(dy3, ids, v, -1, False),
        "cross_entropy_fwd": lambda: F.cross_entropy(x, tg),
        "cross_entropy_bwd": lambda: torch.ops.aten._log_softmax_backward_data(
            torch.ops.aten.nll_loss_backward(gout, ls, tg, None, 1, -100, tw), ls, 1, dt),
        "add_broadcast_fwd": lambda: torch.add(x3, vb),
        "mask_zero": lambda: torch.where(mask, x3, 0.0),
    }
    if dt == torch.float32:
        p, g, m, s2, buf = (torch.randn(n, d, device="cuda") for _ in range(5))
        step = torch.tensor(1.0, device="cuda")
        runs["adamw"] = lambda: torch._fused_adamw_([p], [g], [m], [s2], [], [step], lr=1e-3, beta1=0.9,
                                                    beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                                                    maximize=False)
        runs["sgd"] = lambda: torch._fused_sgd_([p], [g], [buf], weight_decay=0.0, momentum=0.9, lr=1e-3,
                                                dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
    return runs


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
