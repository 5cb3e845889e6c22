"""PyTorch's conv1d for gpa-bench cuda_conv1d (bench/bench_cuda_conv1d.c runs
it when GPA_BENCH_CONV1D_TORCH names this file).

    python3 conv1d_torch.py B C L K DILATION [f32|bf16]

prints "torch_conv1d fwd_us bwd_us": F.conv1d with bias on [B, C, L], C -> C
channels, causal (left padding dilation * (K - 1)), and its autograd
backward (dx, dW, db); CUDA events, median of 20 after 5 warm-ups, random
inputs. TF32 off, as ours. bf16: every tensor bf16 (PyTorch's autograd
writes dW and db in bf16 too, where ours are f32). Prints nothing without
torch or CUDA."""
import sys

from torch_cuda import cuda_torch, event_median_s


def main():
    torch = cuda_torch()
    if torch is None:
        return
    import torch.nn.functional as F
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    B, C, L, K, d = map(int, sys.argv[1:6])
    dt = torch.bfloat16 if len(sys.argv) > 6 and sys.argv[6] == "bf16" else torch.float32
    x = torch.randn(B, C, L, device="cuda", dtype=dt, requires_grad=True)
    w = torch.randn(C, C, K, device="cuda", dtype=dt, requires_grad=True)
    b = torch.randn(C, device="cuda", dtype=dt, requires_grad=True)
    dy = torch.randn(B, C, L, device="cuda", dtype=dt)

    def fwd():
        return F.conv1d(F.pad(x, (d * (K - 1), 0)), w, b, dilation=d)

    tf = event_median_s(torch, fwd, 5, 20) * 1e6
    y = fwd()
    tb = event_median_s(torch, lambda: torch.autograd.grad(y, (x, w, b), dy, retain_graph=True), 5, 20) * 1e6
    print(f"torch_conv1d {tf:.2f} {tb:.2f}", flush=True)


if __name__ == "__main__":
    main()
