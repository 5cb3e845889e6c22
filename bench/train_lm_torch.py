#!/usr/bin/env python3
"""gpa-train-lm's model and training step in PyTorch (examples/train_lm.c,
examples/lm/): the reference a user would pick instead of the actor.

  python3 bench/train_lm_torch.py [--device cuda|cpu] [--steps N] [--warmup W] [--batch B
      --ctx L --dim D --heads H --blocks N --kernel K] (--help: the rest; defaults gpa-train-lm's)

Model, as examples/lm/model.c: embedding [V,D] -> `blocks` residual blocks
x + gelu_erf(conv1d(layernorm(x))) (causal: left pad (K-1)*d, dilation 2^i,
W [D,D,K] + bias) -> x + attn(ln(x)Wq^T, ln(x)Wk^T, ln(x)Wv^T) Wo^T + bo (causal,
H heads of D/H, scale 1/sqrt(D/H)) -> layernorm -> head [V,D] + bias -> mean
cross-entropy. Layernorm eps 1e-5. AdamW (0.9, 0.999), eps 1e-8, weight decay
on the conv, q/k/v/o and head matrices only. 160,668 parameters by default,
as gpa-train-lm prints. The initial values are gpa-train-lm --seed S's bit for
bit, and --data PATH also takes its batches and lr schedule: 20 steps on
genesis-kjv.txt give its losses to 4 decimals (4.6779 ... 2.2447).

Prints "torch_step mode=eager device=<d> ms=<median ms/step> steps=<n>" (cpu:
+ threads=<n>), on cuda also mode=cudagraph, and "loss mode=<m> first= last=".
ms: median over 5 windows after --warmup steps; CUDA events on cuda. cudagraph:
PyTorch's whole-network recipe (warm-up on a side stream, forward, backward and
AdamW(capturable) captured once, each step copies its batch into the static
inputs and replays).

Differences from the C (none in the arithmetic):
- Random token ids (timing only) and a constant --lr, unless --data.
- ids/targets int64 (cross_entropy's target type), the C's int32; both copy
  each step's batch host -> device (here pinned, non_blocking).
- The C waits every step (gpa_sync_batch) for the loss; here the host waits
  only with --sync-each-step (loss.item() each step).
- The [B,L,D] <-> [B,D,L] transposes are strided views (the C gathers); the
  causal pad is F.pad (the C pads inside its im2col).
- Attention: F.scaled_dot_product_attention(is_causal=True) on torch >= 2.0,
  else the explicit masked softmax (the same function).
- AdamW fused where the device accepts it, else foreach on cuda, the for-loop
  on cpu (printed); the update formula is the C's. TF32 off, as in the C.
No torch, or no cuda when asked: "torch_step skipped: <reason>", exit 0.
"""
import argparse
import inspect
import math
import statistics
import sys
import time

M64 = (1 << 64) - 1


class Rng:  # data.c's splitmix64: gpa-train-lm's initial values and batches
    def __init__(self, seed):
        self.s = seed & M64

    def uniform(self):
        self.s = z = (self.s + 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return ((z ^ (z >> 31)) >> 11) / 9007199254740992.0

    def normal(self):
        u, v = self.uniform() + 1e-300, self.uniform()
        return math.sqrt(-2 * math.log(u)) * math.cos(6.283185307179586 * v)


def make_params(torch, a, dev):
    """model.c's parameters, in its order (the draws depend on it): (name, tensor, decay)."""
    rng, D, K, out = Rng(a.seed), a.dim, a.kernel, []
    branch, sd = 1 / math.sqrt(2.0 * (a.blocks + 1)), 1 / math.sqrt(D)

    def p(name, shape, std=0.0, fill=0.0, decay=False):
        n = math.prod(shape)
        if std > 0:  # std * normal in double, rounded to float once, as the C does
            t = (torch.tensor([rng.normal() for _ in range(n)], dtype=torch.float64) * std).float()
        else:
            t = torch.full((n,), fill)
        out.append((name, t.view(shape).to(dev).requires_grad_(), decay))

    def ln(pre):
        p(pre + "ln_g", (D,), fill=1.0)
        p(pre + "ln_b", (D,))

    p("emb", (a.vocab, D), 1.0)
    for i in range(a.blocks):
        ln(f"conv{i}.")
        p(f"conv{i}.W", (D, D, K), branch * math.sqrt(2.0 / (D * K)), decay=True)
        p(f"conv{i}.b", (D,))
    ln("attn.")
    for w in "qkv":
        p("attn.W" + w, (D, D), sd, decay=True)
    p("attn.Wo", (D, D), sd * branch, decay=True)
    p("attn.bo", (D,))
    ln("head.")
    p("head.W", (a.vocab, D), sd, decay=True)
    p("head.b", (a.vocab,))
    return out


def make_loss_fn(torch, F, a, dev):
    B, L, D, H, K, V = a.batch, a.ctx, a.dim, a.heads, a.kernel, a.vocab
    hd = D // H
    if hasattr(F, "scaled_dot_product_attention"):
        def attend(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # torch 1.x; the mask is made once, not per step
        future = torch.ones(L, L, dtype=torch.bool, device=dev).triu(1)

        def attend(q, k, v):
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            return s.masked_fill(future, float("-inf")).softmax(-1) @ v

    def loss_fn(P, ids, tg):
        x = F.embedding(ids, P["emb"])
        for i in range(a.blocks):
            d, u = 1 << i, F.layer_norm(x, (D,), P[f"conv{i}.ln_g"], P[f"conv{i}.ln_b"], 1e-5)
            c = F.conv1d(F.pad(u.transpose(1, 2), ((K - 1) * d, 0)), P[f"conv{i}.W"], P[f"conv{i}.b"], dilation=d)
            x = x + F.gelu(c.transpose(1, 2))
        u = F.layer_norm(x, (D,), P["attn.ln_g"], P["attn.ln_b"], 1e-5)
        q, k, v = (F.linear(u, P["attn.W" + w]).view(B, L, H, hd).transpose(1, 2) for w in "qkv")
        x = x + F.linear(attend(q, k, v).transpose(1, 2).reshape(B, L, D), P["attn.Wo"], P["attn.bo"])
        logits = F.linear(F.layer_norm(x, (D,), P["head.ln_g"], P["head.ln_b"], 1e-5), P["head.W"], P["head.b"])
        return F.cross_entropy(logits.view(B * L, V), tg.view(B * L))

    return loss_fn


def make_opt(torch, plist, a, dev, capturable):
    groups = [{"params": [t for _, t, dec in plist if dec], "weight_decay": a.wd},
              {"params": [t for _, t, dec in plist if not dec], "weight_decay": 0.0}]
    kw = dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8, **({"capturable": True} if capturable else {}))
    if "fused" in inspect.signature(torch.optim.AdamW).parameters:
        try:  # one kernel for the 28 tensors; torch < 2.0 (and < 2.4 on cpu) refuses it
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (RuntimeError, ValueError):
            pass
    fe = dev.type == "cuda"  # foreach saves launches on cuda; on cpu it is the same loop
    return torch.optim.AdamW(groups, foreach=fe, **kw), "foreach" if fe else "for-loop"


def batches(torch, a, n, dev):
    """n host batches (ids, targets), pinned on cuda so that the per-step copies are async."""
    B, L = a.batch, a.ctx
    if a.data:  # lm_sample: B windows at random starts in the first 90%
        w = torch.empty(n, B, L + 1, dtype=torch.int64)
        rng, span = Rng(a.seed ^ 0x5EED), max(int(len(a.tok) * 0.9) - (L + 1), 0)
        for s in range(n):
            for b in range(B):
                st = min(int(rng.uniform() * (span + 1)), span)
                w[s, b] = a.tok[st:st + L + 1]
    else:
        w = torch.randint(0, a.vocab, (n, B, L + 1), generator=torch.Generator().manual_seed(a.seed))
    x, y = w[:, :, :L].contiguous(), w[:, :, 1:].contiguous()
    return (x.pin_memory(), y.pin_memory()) if dev.type == "cuda" else (x, y)


def lr_at(a, step, total):  # train_lm.c: linear warm-up, cosine decay to 10%
    warm = min(total // 10, 50)
    if warm > 0 and step <= warm:
        return a.lr * step / warm
    p = (step - warm) / max(total - warm, 1)
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def run_mode(torch, F, a, dev, mode):
    plist = make_params(torch, a, dev)  # fresh per mode: the same start for both
    P, loss_fn = {n: t for n, t, _ in plist}, make_loss_fn(torch, F, a, dev)
    opt, impl = make_opt(torch, plist, a, dev, capturable=mode == "cudagraph")
    total, cuda = a.warmup + a.steps, dev.type == "cuda"
    hx, hy = batches(torch, a, total if a.data else 8, dev)
    ids = torch.empty(a.batch, a.ctx, dtype=torch.int64, device=dev)  # static inputs (the graph reads them)
    tg, hist = torch.empty_like(ids), torch.zeros(total, device=dev)

    def feed(i):
        ids.copy_(hx[i % len(hx)], non_blocking=True)
        tg.copy_(hy[i % len(hy)], non_blocking=True)

    def eager(i):
        if a.data:
            for grp in opt.param_groups:
                grp["lr"] = lr_at(a, i + 1, total)
        feed(i)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(P, ids, tg)
        loss.backward()
        opt.step()
        hist[min(i, total - 1)].copy_(loss.detach())

    step, first = eager, 0
    if mode == "cudagraph":  # warm-up and capture on one side stream: lazy handles exist before capture
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(3):
                eager(i)
        torch.cuda.current_stream().wait_stream(s)
        graph, first = torch.cuda.CUDAGraph(), 3
        opt.zero_grad(set_to_none=True)  # the captured backward allocates the grads from the graph's pool
        with torch.cuda.graph(graph, stream=s):
            static_loss = loss_fn(P, ids, tg)
            static_loss.backward()
            opt.step()

        def step(i):
            feed(i)
            graph.replay()
            hist[i].copy_(static_loss.detach())

    def steps(lo, hi):
        for i in range(lo, hi):
            step(i)
            if a.sync_each_step:
                hist[i].item()

    steps(first, a.warmup)
    if cuda:
        torch.cuda.synchronize()
    per, times = max(1, a.steps // 5), []
    for lo in range(a.warmup, total, per):
        hi, t0 = min(lo + per, total), time.perf_counter()
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        steps(lo, hi)
        if cuda:
            e1.record()
            e1.synchronize()
        times.append((e0.elapsed_time(e1) if cuda else (time.perf_counter() - t0) * 1e3) / (hi - lo))
    h, extra = hist.cpu().tolist(), "" if cuda else f" threads={torch.get_num_threads()}"
    print(f"torch_step mode={mode} device={dev.type} ms={statistics.median(times):.3f} steps={a.steps}{extra}")
    tail = h[-min(10, a.steps):]
    print(f"loss mode={mode} first={h[0]:.4f} last={sum(tail) / len(tail):.4f} optimizer=AdamW({impl})")
    if a.data:  # beside gpa-train-lm --print-every 1 --eval-every 0 --steps <warmup + steps>
        print("losses " + " ".join(f"{x:.4f}" for x in h))
    sys.stdout.flush()
    return sum(t.numel() for _, t, _ in plist)


def main():
    ap = argparse.ArgumentParser(description="gpa-train-lm's model and step in PyTorch (timing reference)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    for name, dflt in [("steps", 600), ("warmup", 10), ("batch", 32), ("ctx", 128), ("dim", 96), ("heads", 3),
                       ("blocks", 4), ("kernel", 3), ("vocab", 60), ("seed", 1), ("threads", 0)]:
        ap.add_argument("--" + name, type=int, default=dflt)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--sync-each-step", action="store_true", help="wait for each step's loss, as the C does")
    ap.add_argument("--data", help="a text: gpa-train-lm's vocab, batches and lr schedule (eager only)")
    a = ap.parse_args()
    if (a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.ctx < 2 or a.heads < 1 or a.dim % a.heads
            or not 0 <= a.blocks <= 8 or a.kernel < 1 or a.vocab < 1):
        ap.error("bad sizes (as gpa-train-lm: dim a multiple of heads, blocks 0..8, ctx >= 2)")
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # any import failure: no reference to run
        print(f"torch_step skipped: torch is not importable ({type(e).__name__}: {e})")
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        print(f"torch_step skipped: cuda requested but torch.cuda.is_available() is False "
              f"(torch {torch.__version__}, CUDA build {torch.version.cuda})")
        return 0
    if a.data:  # data.c: a token is the rank of its byte among the text's distinct bytes
        raw = open(a.data, "rb").read()
        rank = {b: i for i, b in enumerate(sorted(set(raw)))}
        a.tok, a.vocab = torch.tensor([rank[b] for b in raw], dtype=torch.int64), len(rank)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):  # the allow_tf32 flags are deprecated from 2.9
        torch.backends.cuda.matmul.fp32_precision = conv.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"torch_info torch={torch.__version__} device={name!r} B={a.batch} L={a.ctx} D={a.dim} H={a.heads} "
          f"blocks={a.blocks} K={a.kernel} V={a.vocab}")
    for mode in ["eager"] + (["cudagraph"] if dev.type == "cuda" and not a.data else []):
        n = run_mode(torch, F, a, dev, mode)
    print(f"torch_info params={n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
