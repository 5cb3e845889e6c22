"""PyTorch SDPA on one shape, per backend, for gpa-bench cuda_sdpa
(bench/bench_sdpa.c runs it when GPA_BENCH_SDPA_TORCH names this file).

    python3 sdpa_torch.py DTYPE B S H HKV D CAUSAL
    python3 sdpa_torch.py - < shapes     (one "DTYPE B S H HKV D CAUSAL" a line)

prints one line per backend that runs: "name fwd_tflops bwd_tflops"
(cudnn, flash, efficient; DTYPE bf16, f16 or f32); with "-", each line prefixed by its shape's seven
fields, for GPA_BENCH_SDPA_TORCH_CACHE (bench/bench_device.c): one python
start for every shape of a GPU run instead of one per shape and bench. Layout [B,S,H,D] viewed as [B,H,S,D] by a
transpose, as our tensors are. S = Sk, so PyTorch's top-left causal mask is
our bottom-right one. CUDA events, median of 7 after 3 warm-up runs, fresh
random inputs (never zeros). FLOPs: 4 B H S S D forward, halved when causal,
2.5x backward. Prints nothing when torch or CUDA is missing."""
import sys

from torch_cuda import cuda_torch, event_median_s


def main():
    torch = cuda_torch()
    if torch is None:
        return
    try:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:
        return
    if sys.argv[1:] == ["-"]:
        for line in sys.stdin:
            f = line.split()
            if len(f) == 7:
                run(torch, F, SDPBackend, sdpa_kernel, f, " ".join(f) + " ")
    else:
        run(torch, F, SDPBackend, sdpa_kernel, sys.argv[1:8], "")


def run(torch, F, SDPBackend, sdpa_kernel, args, prefix):
    dt, B, S, H, Hk, D, causal = args[0], *map(int, args[1:7])
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
    dev = "cuda"

    def t(h):
        return torch.randn(B, S, h, D, device=dev, dtype=dtype).transpose(1, 2).requires_grad_(True)

    q, k, v = t(H), t(Hk), t(Hk)
    do = torch.randn(B, S, H, D, device=dev, dtype=dtype).transpose(1, 2)
    flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
    gqa = H != Hk

    def timed(fn):
        return event_median_s(torch, fn, 3, 7)

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
            print(f"{prefix}{name} {flops / tf / 1e12:.1f} {2.5 * flops / tb / 1e12:.1f}", flush=True)
        except Exception as e:  # a backend that does not take the shape: no line
            print(f"# {prefix}{name}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
