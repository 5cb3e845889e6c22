"""What the PyTorch reference scripts of gpa-bench share (bench/*_torch.py):
torch with CUDA or nothing, and a kernel's median time from CUDA events."""


def cuda_torch():
    """The torch module when it imports and sees a GPU, else None (the
    benches then print nothing and gpa-bench leaves PyTorch's column out)."""
    try:
        import torch
    except Exception:
        return None
    return torch if torch.cuda.is_available() else None


def event_median_s(torch, fn, warmup, reps):
    """Median seconds of fn() between two CUDA events, after warmup calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    ts.sort()
    return ts[len(ts) // 2]
