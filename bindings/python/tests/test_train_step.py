"""The Python training-step example trains (loss goes down) and its
gradients agree with numpy."""
import os

import numpy as np

import train_step


def test_training_reduces_loss(actor):
    tokens, vocab, unigram = train_step.load_text(train_step.DATA)
    m = train_step.Model(actor, vocab, dim=32, hidden=64, batch=8, ctx=32)
    gen = train_step.batches(tokens, m.B, m.L)
    losses = [m.step(*next(gen))[0] for _ in range(40)]
    assert np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < losses[0] - 0.5
    assert losses[0] > unigram  # it starts above what a unigram model gets


def test_head_gradient_matches_numpy(actor):
    m = train_step.Model(actor, vocab=11, dim=8, hidden=16, batch=2, ctx=5)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 11, (2, 5)).astype(np.int32)
    tg = rng.integers(0, 11, 10).astype(np.int32)
    P = {k: v[0].numpy() for k, v in m.params.items()}
    m.step(ids, tg, lr=1e-9)  # nearly no update: the gradients are those of P
    h = m.h.numpy()
    logits = h @ P["W2"].T + P["b2"]
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(10), tg] -= 1
    np.testing.assert_allclose(m.params["W2"][1].numpy(), p.T @ h / 10, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m.params["b2"][1].numpy(), p.sum(0) / 10, rtol=1e-4, atol=1e-6)
