"""bitsandbytes' percentile clipping (the 8-bit optimizers paper's gradient clipping by a percentile of
the last 100 gradient norms) and update-norm clipping, against independent references."""

from __future__ import annotations

import math

import octopt.bnb as obnb
import pytest
import torch


def _reference_percentile_sgd(
    w0: torch.Tensor, grads: list, lr: float, momentum: float, percentile: int
) -> torch.Tensor:
    """bitsandbytes' momentum rule with percentile clipping, written out: a history of 100 squared
    gradient norms (the first step fills it), the gradient scaled to the percentile when above it."""
    w, buf, history = w0.clone(), None, torch.zeros(100)
    for step, g in enumerate(grads, start=1):
        sq = float((g * g).sum())
        if step == 1:
            history[:] = sq
        else:
            history[step % 100] = sq
        current = math.sqrt(history[step % 100])
        clip = math.sqrt(float(torch.sort(history).values[percentile]))
        if current > clip:
            g = g * (clip / current)
        buf = g.clone() if buf is None else buf * momentum + g
        w = w - lr * buf
    return w


@pytest.mark.parametrize("bits", [32, 8])
def test_percentile_clipping_follows_the_reference(bits):
    torch.manual_seed(0)
    n = 5000
    w0 = torch.randn(n)
    # gradients whose norms vary tenfold, so that clipping at the 20th percentile acts often
    grads = [torch.randn(n) * (1 + 9 * (k % 3 == 1)) for k in range(12)]
    w = torch.nn.Parameter(w0.clone())
    opt = obnb.optim.SGD([w], lr=1e-3, momentum=0.9, optim_bits=bits, percentile_clipping=20)
    for g in grads:
        w.grad = g.clone()
        opt.step()
    want = _reference_percentile_sgd(w0, grads, 1e-3, 0.9, 20)
    unclipped = _reference_percentile_sgd(w0, grads, 1e-3, 0.9, 99)
    moved = float((want - w0).norm())
    assert float((w.detach() - want).norm()) < (1e-5 if bits == 32 else 2e-2) * moved
    assert float((unclipped - want).norm()) > 0.1 * moved  # the clipping acted
    hist = opt.state[w]["gnorm_vec"]
    assert hist.shape == (100,) and float(hist[len(grads) % 100]) == pytest.approx(
        float((grads[-1] ** 2).sum()), rel=1e-5
    )


def test_percentile_clipping_from_args():
    class Args:
        optim_bits = 32
        min_8bit_size = 4096
        max_unorm = 0.0
        skip_zeros = False
        percentile_clipping = 5

    w = torch.nn.Parameter(torch.ones(10))
    opt = obnb.optim.Adam([w], args=Args())
    w.grad = torch.ones(10)
    opt.step()
    assert "gnorm_vec" in opt.state[w]


def test_update_norm_clipping_of_lamb_follows_the_reference():
    """bitsandbytes' LAMB (32-bit): AdamW whose update m / (sqrt(v) + eps * c2) is scaled down to
    max_unorm times the parameter's norm."""
    torch.manual_seed(1)
    w0 = torch.randn(300)
    grads = [torch.randn(300) for _ in range(4)]
    lr, b1, b2, eps, wd, max_unorm = 1e-2, 0.9, 0.999, 1e-8, 0.1, 0.05
    w, m, v = w0.clone(), torch.zeros(300), torch.zeros(300)
    for step, g in enumerate(grads, start=1):
        pnorm = float(w.norm())
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        c1, c2 = 1 - b1**step, math.sqrt(1 - b2**step)
        update = m / (v.sqrt() + eps * c2)
        scale = min(1.0, max_unorm * pnorm / float(update.norm()))
        w = w * (1 - lr * wd) - lr * c2 / c1 * scale * update
    p = torch.nn.Parameter(w0.clone())
    opt = obnb.optim.LAMB32bit([p], lr=lr, weight_decay=wd, max_unorm=max_unorm)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    assert torch.allclose(p.detach(), w, rtol=0, atol=1e-6)
    assert float(opt.state[p]["unorm_vec"]) == pytest.approx(float(update.norm()), rel=1e-5)


def test_pytorch_lars_matches_bitsandbytes_live(bnb):
    def run(optim):
        torch.manual_seed(2)
        w = torch.nn.Parameter(torch.randn(200))
        opt = optim.PytorchLARS([w], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
        for _ in range(5):
            w.grad = torch.randn(200)
            opt.step()
        return w.detach()

    assert torch.allclose(run(obnb.optim), run(bnb.optim), rtol=0, atol=1e-6)
