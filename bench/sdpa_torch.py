"""PyTorch SDPA on one shape, per backend, for gpa-bench cuda_sdpa
(bench/bench_sdpa.c runs it when GPA_BENCH_SDPA_TORCH names this file).

    python3 sdpa_torch.py DTYPE B S H HKV D CAUSAL

prints one line per backend that runs: "name fwd_tflops bwd_tflops"
(cudnn, flash, efficient). Layout [B,S,H,D] viewed as [B,H,S,D] by a
transpose, as our tensors are. S = Sk, so PyTorch's top-left causal mask is
our bottom-right one. CUDA events, median of 7 after 3 warm-up runs, fresh
random inputs (never zeros). FLOPs: 4 B H S S D forward, halved when causal,
2.5x backward. Prints nothing when torch or CUDA is missing."""
import sys


def main():
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:
        return
    if not torch.cuda.is_available():
        return
    dt, B, S, H, Hk, D, causal = sys.argv[1], *map(int, sys.argv[2:8])
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
    dev = "cuda"

    def t(h):
        return torch.randn(B, S, h, D, device=dev, dtype=dtype).transpose(1, 2).requires_grad_(True)

    q, k, v = t(H), t(Hk), t(Hk)
    do = torch.randn(B, S, H, D, device=dev, dtype=dtype).transpose(1, 2)
    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    gqa = H != Hk

    def timed(fn):
        for _ in range(3):
            fn()
        times = []
        for _ in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e-3)
        times.sort()
        return times[len(times) // 2]

    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for name, be in backends:
        try:
            with sdpa_kernel(be):
                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), enable_gqa=gqa)

                tf = timed(fwd)
                o = fwd()

                def bwd():
                    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

                tb = timed(bwd)
            print(f"{name} {flops / tf / 1e12:.1f} {2.5 * flops / tb / 1e12:.1f}", flush=True)
        except Exception as e:  # a backend that does not take the shape: no line
            print(f"# {name}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
