"""Adan (Xie et al. 2022) against a float64 NumPy reference kept here, and its quantized state.

The reference is Algorithm 1 of the paper in the convention of the authors' code (their betas are one minus the
paper's: (0.98, 0.92, 0.99) for the paper's (0.02, 0.08, 0.01)) with that code's bias corrections, zero-initialized
moments, the previous gradient taken equal to the gradient at the first step, and its proximal weight decay
p <- (p - lr u) / (1 + lr weight_decay) (or with no_prox p <- p (1 - lr weight_decay) - lr u). octopt's rule: cpp/include/octopt/numerics/rules/adan.hpp.
"""

from __future__ import annotations

import numpy as np
import octopt
import pytest

SHAPES = ((4097,), (33, 65))
STEPS = 120
TOL = 1e-5  # of the total displacement, as tests/optim/test_references.py argues


class AdanRef:
    """Adan in float64: m, the EMA of the gradient; d, of its change; n, of the square of g + beta2 (g - g_prev)."""

    def __init__(self, lr, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, no_prox=False, maximize=False):
        self.lr, self.betas, self.eps, self.wd, self.maximize = lr, betas, eps, weight_decay, maximize
        self.no_prox = no_prox

    def init(self, p):
        return {"m": np.zeros_like(p), "n": np.zeros_like(p), "d": np.zeros_like(p), "prev": None}

    def step(self, ps, gs, states, t):
        b1, b2, b3 = self.betas
        for p, g, s in zip(ps, gs, states):
            g = -g if self.maximize else g
            diff = g - (g if s["prev"] is None else s["prev"])
            c = g + b2 * diff
            s["m"] = b1 * s["m"] + (1 - b1) * g
            s["d"] = b2 * s["d"] + (1 - b2) * diff
            s["n"] = b3 * s["n"] + (1 - b3) * c * c
            denom = np.sqrt(s["n"]) / np.sqrt(1 - b3**t) + self.eps
            u = (s["m"] / (1 - b1**t) + b2 * s["d"] / (1 - b2**t)) / denom
            # the divisor as the float32 scalar that float32 code divides by (torch's div_ too): its rounding,
            # up to 3e-8 of p per step, would otherwise add up to 1e-5 of the displacement over the steps
            if self.no_prox:  # the reference code's other form: decay first, then the step
                p[...] = p * np.float64(np.float32(1 - self.lr * self.wd)) - self.lr * u
            else:
                p[...] = (p - self.lr * u) / np.float64(np.float32(1 + self.lr * self.wd))
            s["prev"] = g


CASES = [
    {"lr": 1e-2},
    {"lr": 1e-2, "weight_decay": 0.1},
    {"lr": 1e-2, "betas": (0.9, 0.8, 0.999), "eps": 1e-6, "weight_decay": 0.02},
    {"lr": 1e-2, "maximize": True},
    {"lr": 1e-2, "weight_decay": 0.1, "no_prox": True},
]


def _ids(kw):
    return "-".join(f"{k}={v}" for k, v in kw.items())


def _trajectory(make, grad_sequence, framework, bits, kw, steps=STEPS, seed=7):
    rng = np.random.default_rng(seed)
    p0 = [rng.standard_normal(s).astype(np.float32) * np.float32(0.1) for s in SHAPES]
    grads = grad_sequence(rng, SHAPES, steps)
    params = [make(p, framework) for p in p0]
    small = {} if bits == 32 else {"min_8bit_size": 0}  # the 33 x 65 tensor is quantized too
    opt = octopt.Adan(params, bits=bits, **small, **kw)
    for gs in grads:
        opt.step([make(g, framework) for g in gs])
    return p0, grads, params, opt


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("kw", CASES, ids=[_ids(c) for c in CASES])
def test_matches_float64_reference(kw, framework, make, to_numpy, grad_sequence):
    if framework == "torch":
        pytest.importorskip("torch")
    p0, grads, params, _ = _trajectory(make, grad_sequence, framework, 32, kw)
    ref = AdanRef(**kw)
    ref_p = [p.astype(np.float64) for p in p0]
    states = [ref.init(p) for p in ref_p]
    for t, gs in enumerate(grads, start=1):
        ref.step(ref_p, [g.astype(np.float64) for g in gs], states, t)
    for i, (p, r, z) in enumerate(zip(params, ref_p, p0)):
        displacement = np.abs(r - z).max()
        assert displacement > 0.2 * np.abs(z).max(), "the trajectory barely moved: the comparison proves nothing"
        err = np.abs(to_numpy(p) - r).max()
        assert err <= TOL * displacement, f"param {i}: max error {err:.3g} vs displacement {displacement:.3g}"


def test_first_step_has_no_gradient_change(make):
    # step 1: g_prev = g, so d stays 0 and n = (1 - beta3) g^2; with the corrections the step is lr g / (|g| + eps)
    g = np.array([0.5, -2.0, 1e-3, 0.0], np.float32)
    p = np.zeros(4, np.float32)
    opt = octopt.Adan([p], lr=0.1, bits=32)
    opt.step([g])
    np.testing.assert_allclose(p, -0.1 * g / (np.abs(g) + 1e-8), rtol=1e-6)
    st = opt.state_dict()["state"][0]["slots"]
    assert sorted(st) == ["exp_avg", "exp_avg_diff", "exp_avg_sq", "pre_grad"]


# Bounds on |p_bits - p_32| as fractions of the 32-bit run's largest displacement, median and max over the
# elements. The gradients are fresh noise every step, the hardest case for quantized state: Adam measured the
# same way gives 0.004 / 0.026 at 8 bits and 0.08 / 0.65 at 4 bits; Adan 0.005 / 0.040 and 0.098 / 1.08.
@pytest.mark.parametrize("bits, median, worst", [(8, 0.01, 0.08), (4, 0.15, 1.6)])
def test_quantized_state_tracks_32_bit(bits, median, worst, make, grad_sequence):
    # the four slots (the previous gradient too) are stored at `bits`; the trajectory stays near the 32-bit one
    kw = {"lr": 1e-2, "weight_decay": 0.01}
    p0, _, ref, _ = _trajectory(make, grad_sequence, "numpy", 32, kw, steps=60)
    _, _, got, opt = _trajectory(make, grad_sequence, "numpy", bits, kw, steps=60)
    for z, r, q in zip(p0, ref, got):
        displacement = np.abs(r - z).max()
        err = np.abs(q - r)
        assert np.median(err) <= median * displacement and err.max() <= worst * displacement
        assert not np.array_equal(q, r)
    slots = opt.state_dict()["state"][0]["slots"]
    assert set(slots) == {"exp_avg", "exp_avg_sq", "exp_avg_diff", "pre_grad"}
    for name, s in slots.items():
        assert s["bits"] == bits, name
        assert np.abs(np.asarray(s["absmax"])).max() > 0, name


def test_three_betas_are_required():
    with pytest.raises(ValueError, match=r"^Adan: 'betas' must be \(beta1, beta2, beta3\) for Adan"):
        octopt.Adan([np.zeros(3, np.float32)], betas=(0.9, 0.99))


def test_previous_gradient_is_state(make, grad_sequence):
    # resuming from a state dict continues the run exactly: the previous gradient travels with the state
    kw = {"lr": 1e-2}
    rng = np.random.default_rng(3)
    grads = grad_sequence(rng, SHAPES[:1], 8)
    for bits in (32, 8, 4):
        p = np.full(SHAPES[0], 0.1, np.float32)
        a = octopt.Adan([p], bits=bits, seed=5, **kw)
        for gs in grads[:4]:
            a.step(gs)
        q = p.copy()
        b = octopt.Adan([q], bits=bits, seed=5, **kw)
        b.load_state_dict(a.state_dict())
        for gs in grads[4:]:
            a.step(gs)
            b.step(gs)
        np.testing.assert_array_equal(p, q)
