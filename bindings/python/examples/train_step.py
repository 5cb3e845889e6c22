#!/usr/bin/env python3
"""One training step of a small byte-level model, from Python, through the actor.

    logits = gelu(embedding(ids) W1^T + b1) W2^T + b2      embedding_fwd, linear_gelu_fwd, linear_fwd
    loss   = cross_entropy(logits, next byte)               cross_entropy_fwd

then the backward (cross_entropy_bwd, linear_bwd, linear_bwd with gelu=1,
embedding_bwd) and AdamW on every parameter, all submitted inside one batch;
the loss is a deferred readback read after the sync. The same step as
examples/train_lm.c, in miniature (it predicts the next byte from the
current one only, so it can learn the bigram statistics of the text).

usage: train_step.py [--steps N] [--data PATH]   (GPA_LIBRARY=.../libgpuactor.so)
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpuactor as ga  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "data",
                    "genesis-kjv.txt")


class Model:
    def __init__(self, actor, vocab, dim=64, hidden=128, batch=16, ctx=64, seed=0):
        rng = np.random.default_rng(seed)
        self.a, self.q = actor, actor.queue
        self.B, self.L, self.V = batch, ctx, vocab
        N = batch * ctx
        shapes = {"emb": (vocab, dim), "W1": (hidden, dim), "b1": (hidden,), "W2": (vocab, hidden),
                  "b2": (vocab,)}
        self.params = {}
        for name, shp in shapes.items():
            init = (rng.standard_normal(shp) / np.sqrt(shp[-1] if name != "emb" else 1.0)).astype(np.float32) \
                if len(shp) == 2 else np.zeros(shp, np.float32)
            p = actor.from_numpy(init, label="py." + name)
            g = actor.tensor(shp, label="py." + name + ".grad")
            m = actor.from_numpy(np.zeros(shp, np.float32), label="py." + name + ".m")
            v = actor.from_numpy(np.zeros(shp, np.float32), label="py." + name + ".v")
            self.params[name] = (p, g, m, v)
        t = actor.tensor
        self.ids, self.tg = t((batch, ctx), ga.I32), t((N,), ga.I32)
        self.x, self.pre, self.h = t((N, dim)), t((N, hidden)), t((N, hidden))
        self.logits, self.dlogits, self.loss = t((N, vocab)), t((N, vocab)), t(())
        self.dh, self.dx = t((N, hidden)), t((N, dim))
        self.n_step = 0

    def step(self, ids, targets, lr=3e-3):
        """Submits one whole step in a batch; returns (loss, batch stats)."""
        P = {k: v[0] for k, v in self.params.items()}
        G = {k: v[1] for k, v in self.params.items()}
        q, N = self.q, self.B * self.L
        self.n_step += 1
        with q.batch("py_train_step") as b:
            q.upload(self.ids, ids).release()
            q.upload(self.tg, targets).release()
            x3 = self.x.view(self.B, self.L, self.x.shape[1])
            q.submit("embedding_fwd", [self.ids, P["emb"]], [x3]).release()
            q.submit("linear_gelu_fwd", [self.x, P["W1"], P["b1"]], [self.h, self.pre]).release()
            q.submit("linear_fwd", [self.h, P["W2"], P["b2"]], [self.logits]).release()
            q.submit("cross_entropy_fwd", [self.logits, self.tg], [self.loss]).release()
            q.submit("cross_entropy_bwd", [self.logits, self.tg], [self.dlogits]).release()
            q.submit("linear_bwd", [self.dlogits, self.h, P["W2"]], [self.dh, G["W2"], G["b2"]]).release()
            q.submit("linear_bwd", [self.dh, self.x, P["W1"], self.pre], [self.dx, G["W1"], G["b1"]],
                     {"gelu": 1}).release()
            q.submit("embedding_bwd", [self.dx.view(self.B, self.L, self.x.shape[1]), self.ids],
                     [G["emb"]]).release()
            for name, (p, g, m, v) in self.params.items():
                q.submit("adamw", [p, g, m, v], [p, m, v],
                         {"lr": lr, "step": self.n_step, "weight_decay": 0.0 if name.startswith("b") else 0.01}
                         ).release()
            loss = q.readback(self.loss)
        return float(loss.array()), b.stats  # deferred readback: readable after the sync


def load_text(path):
    data = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
    vocab, tokens = np.unique(data, return_inverse=True)
    counts = np.bincount(tokens).astype(np.float64)
    p = counts / counts.sum()
    return tokens.astype(np.int32), len(vocab), float(-(p * np.log(p)).sum())


def batches(tokens, B, L, seed=1):
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(tokens) - L - 1, B)
        win = np.stack([tokens[s:s + L + 1] for s in starts])
        yield win[:, :-1].copy(), win[:, 1:].reshape(-1).copy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--data", default=DATA)
    args = ap.parse_args()
    tokens, vocab, unigram = load_text(args.data)
    with ga.Actor() as a:
        m = Model(a, vocab)
        gen = batches(tokens, m.B, m.L)
        t0 = time.time()
        first = None
        for s in range(1, args.steps + 1):
            ids, tg = next(gen)
            loss, stats = m.step(ids, tg)
            first = loss if first is None else first
            if s == 1 or s % 10 == 0 or s == args.steps:
                print("step %4d  loss %.4f  %d ops  %.1f ms" % (s, loss, stats["ops"], stats["host_ns"] / 1e6))
        tps = args.steps * m.B * m.L / (time.time() - t0)
        print("backend %s: loss %.4f -> %.4f nats (unigram entropy %.4f); %.0f tokens/s" % (
            a.backend, first, loss, unigram, tps))
    return 0 if loss < first else 1


if __name__ == "__main__":
    sys.exit(main())
