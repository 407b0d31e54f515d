"""bits=32: Lion, AdEMAMix, LAMB and LARS against float64 NumPy implementations of their papers.

The references follow the definitions in cpp/include/octopt/numerics/update_rules.hpp (the update
rules) and cpp/include/octopt/numerics/hyper_params.hpp (scalars_for_step: the per-step scalars,
schedules.hpp for AdEMAMix's), which cite: Lion (Chen et al. 2023, Alg. 2), AdEMAMix (Pagliardini
et al. 2024, Alg. 1 and its alpha / beta3 schedulers), LAMB (You et al. 2020, Alg. 2: trust
||w|| / ||u||, 1 when either is 0) and LARS (You et al. 2017: trust eta ||w|| / (||g|| + wd ||w||)).
"""

from __future__ import annotations

import math

import numpy as np
import octopt
import pytest


# One tensor past a block boundary (4097 = 16 blocks of 256 + 1) and a 2-D one whose size (2145) is no
# multiple of any block size.
SHAPES = ((4097,), (33, 65))
STEPS = 120
# Tolerance, as a fraction of the total displacement. Against float64 the irreducible float32 error is
# the rounding of the parameter itself, up to half an ulp of |p| per step: the initial values are
# kept small (~0.1) so that this stays well below 1e-5 of the displacement.
TOL = 1e-5


class LionRef:
    def __init__(self, lr, betas=(0.9, 0.99), weight_decay=0.0):
        self.lr, (self.b1, self.b2), self.wd = lr, betas, weight_decay

    def init(self, p):
        return {"m": np.zeros_like(p)}

    def step(self, ps, gs, states, t):
        ambiguous = []
        for i, (p, g, s) in enumerate(zip(ps, gs, states)):
            c = self.b1 * s["m"] + (1 - self.b1) * g
            # where c is at float32 rounding distance from 0 its sign is a coin toss: do not compare there
            ambiguous.append(np.abs(c) <= 1e-5 * (np.abs(self.b1 * s["m"]) + np.abs((1 - self.b1) * g)))
            ps[i] = p - self.lr * (np.sign(c) + self.wd * p)
            s["m"] = self.b2 * s["m"] + (1 - self.b2) * g
        return ambiguous


class AdEMAMixRef:
    def __init__(
        self,
        lr,
        betas=(0.9, 0.999, 0.9999),
        alpha=5.0,
        eps=1e-8,
        weight_decay=1e-2,
        t_alpha=None,
        t_beta3=None,
    ):
        self.lr, self.betas, self.alpha, self.eps, self.wd = lr, betas, alpha, eps, weight_decay
        self.t_alpha, self.t_beta3 = t_alpha, t_beta3

    def init(self, p):
        return {"m1": np.zeros_like(p), "nu": np.zeros_like(p), "m2": np.zeros_like(p)}

    def alpha_at(self, t):
        return self.alpha if not self.t_alpha else min(t * self.alpha / self.t_alpha, self.alpha)

    def beta3_at(self, t):
        b1, _, b3 = self.betas
        if not self.t_beta3:
            return b3
        # the slow EMA's half-life grows linearly from beta1's to beta3's
        ln1, ln3 = math.log(b1), math.log(b3)
        f = min(t / self.t_beta3, 1.0)
        return min(math.exp(ln1 * ln3 / ((1 - f) * ln3 + f * ln1)), b3)

    def step(self, ps, gs, states, t):
        b1, b2, _ = self.betas
        b3, alpha = self.beta3_at(t), self.alpha_at(t)
        for i, (p, g, s) in enumerate(zip(ps, gs, states)):
            s["m1"] = b1 * s["m1"] + (1 - b1) * g
            s["m2"] = b3 * s["m2"] + (1 - b3) * g
            s["nu"] = b2 * s["nu"] + (1 - b2) * g * g
            m1_hat = s["m1"] / (1 - b1**t)
            nu_hat = s["nu"] / (1 - b2**t)
            ps[i] = p - self.lr * ((m1_hat + alpha * s["m2"]) / (np.sqrt(nu_hat) + self.eps) + self.wd * p)


class LAMBRef:
    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=True):
        self.lr, (self.b1, self.b2), self.eps, self.wd, self.bc = (
            lr,
            betas,
            eps,
            weight_decay,
            bias_correction,
        )
        self.trust = []

    def init(self, p):
        return {"m": np.zeros_like(p), "v": np.zeros_like(p)}

    def step(self, ps, gs, states, t):
        self.trust = []
        for i, (p, g, s) in enumerate(zip(ps, gs, states)):
            s["m"] = self.b1 * s["m"] + (1 - self.b1) * g
            s["v"] = self.b2 * s["v"] + (1 - self.b2) * g * g
            bc1, bc2 = (1 - self.b1**t, 1 - self.b2**t) if self.bc else (1.0, 1.0)
            u = (s["m"] / bc1) / (np.sqrt(s["v"] / bc2) + self.eps) + self.wd * p
            wn, un = np.linalg.norm(p), np.linalg.norm(u)
            trust = wn / un if wn > 0 and un > 0 else 1.0
            self.trust.append(trust)
            ps[i] = p - self.lr * trust * u


class LARSRef:
    def __init__(self, lr, momentum=0.9, weight_decay=0.0, eta=1e-3):
        self.lr, self.mu, self.wd, self.eta = lr, momentum, weight_decay, eta
        self.trust = []

    def init(self, p):
        return {"v": np.zeros_like(p)}

    def step(self, ps, gs, states, t):
        self.trust = []
        for i, (p, g, s) in enumerate(zip(ps, gs, states)):
            wn, gn = np.linalg.norm(p), np.linalg.norm(g)
            trust = self.eta * wn / (gn + self.wd * wn) if wn > 0 and gn > 0 else 1.0
            self.trust.append(trust)
            d = g + self.wd * p
            if self.mu:
                s["v"] = self.mu * s["v"] + self.lr * trust * d
                ps[i] = p - s["v"]
            else:
                ps[i] = p - self.lr * trust * d


REFS = {"Lion": LionRef, "AdEMAMix": AdEMAMixRef, "LAMB": LAMBRef, "LARS": LARSRef}

CASES = [
    ("Lion", {"lr": 1e-2}),
    ("Lion", {"lr": 1e-2, "betas": (0.95, 0.98), "weight_decay": 0.5}),
    ("AdEMAMix", {"lr": 1e-2, "weight_decay": 0.0}),
    ("AdEMAMix", {"lr": 1e-2, "betas": (0.9, 0.99, 0.999), "alpha": 3.0, "weight_decay": 0.1}),
    ("AdEMAMix", {"lr": 1e-2, "alpha": 8.0, "t_alpha": 60}),
    ("AdEMAMix", {"lr": 1e-2, "t_beta3": 50}),
    (
        "AdEMAMix",
        {"lr": 1e-2, "betas": (0.8, 0.999, 0.9995), "t_alpha": 80, "t_beta3": 40, "weight_decay": 0.05},
    ),
    ("LAMB", {"lr": 3e-2}),
    ("LAMB", {"lr": 3e-2, "bias_correction": False}),
    ("LAMB", {"lr": 3e-2, "weight_decay": 0.1}),
    ("LAMB", {"lr": 3e-2, "betas": (0.8, 0.99), "eps": 1e-8, "weight_decay": 0.05, "bias_correction": False}),
    ("LARS", {"lr": 50.0, "momentum": 0.0}),
    ("LARS", {"lr": 5.0, "momentum": 0.9}),
    ("LARS", {"lr": 50.0, "momentum": 0.0, "weight_decay": 0.01}),
    ("LARS", {"lr": 5.0, "momentum": 0.9, "weight_decay": 0.01, "eta": 2e-3}),
]


def _ids(case):
    name, kw = case
    return name + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


def _run(make, grad_sequence, name, kw, framework, seed=7, shapes=SHAPES, scales=(0.1, 0.1)):
    rng = np.random.default_rng(seed)
    p0 = [rng.standard_normal(s).astype(np.float32) * np.float32(c) for s, c in zip(shapes, scales)]
    grads = grad_sequence(rng, shapes, STEPS)
    params = [make(p, framework) for p in p0]
    opt = getattr(octopt, name)(params, bits=32, **kw)
    ref = REFS[name](**kw)
    ref_p = [p.astype(np.float64) for p in p0]
    states = [ref.init(p) for p in ref_p]
    excluded = [np.zeros(p.shape, bool) for p in p0]
    for t, gs in enumerate(grads, start=1):
        opt.step([make(g, framework) for g in gs])
        amb = ref.step(ref_p, [g.astype(np.float64) for g in gs], states, t)
        if amb is not None:
            excluded = [e | a for e, a in zip(excluded, amb)]
    return p0, params, ref_p, excluded, opt, ref


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_matches_float64_reference(case, framework, to_numpy, make, grad_sequence):
    if framework == "torch":
        pytest.importorskip("torch")
    name, kw = case
    p0, params, ref_p, excluded, opt, ref = _run(make, grad_sequence, name, kw, framework)
    for i, (p, r, z, ex) in enumerate(zip(params, ref_p, p0, excluded)):
        displacement = np.abs(r - z).max()
        assert displacement > 0.2 * np.abs(z).max(), "the trajectory barely moved: the comparison proves nothing"
        assert ex.mean() < 1e-3, "too many elements with an ambiguous Lion sign"
        err = np.abs(to_numpy(p) - r)[~ex].max()
        assert err <= TOL * displacement, f"param {i}: max error {err:.3g} vs displacement {displacement:.3g}"
    if name in ("LAMB", "LARS"):
        np.testing.assert_allclose(opt.trust_ratios(), ref.trust, rtol=1e-5)


@pytest.mark.parametrize("name", ["LAMB", "LARS"])
def test_trust_ratio_is_per_tensor(name, make, grad_sequence):
    # three tensors of very different scales: one trust ratio each, from that tensor's norms alone
    shapes = ((4097,), (33, 65), (300,))
    scales = (1.0, 20.0, 0.05)
    kw = {"lr": 1e-2, "weight_decay": 0.01} if name == "LAMB" else {"lr": 1.0, "momentum": 0.9, "weight_decay": 0.01}
    p0, params, ref_p, _, opt, ref = _run(make, grad_sequence, name, kw, "numpy", seed=3, shapes=shapes, scales=scales)
    trust = opt.trust_ratios()
    assert len(trust) == 3
    np.testing.assert_allclose(trust, ref.trust, rtol=1e-5)
    assert max(trust) / min(trust) > 10, "tensors of different scales must get different trust ratios"
    for p, r, z in zip(params, ref_p, p0):
        displacement = np.abs(r - z).max()
        assert np.abs(p - r).max() <= TOL * displacement


@pytest.mark.parametrize("name", ["LAMB", "LARS"])
def test_trust_ratio_is_one_for_zero_weights(name):
    p = np.zeros(1000, np.float32)
    q = np.ones(1000, np.float32)
    opt = getattr(octopt, name)([p, q], bits=32, lr=0.1, **({"momentum": 0.0} if name == "LARS" else {}))
    g = np.full(1000, 0.5, np.float32)
    opt.step([g, g])
    trust = opt.trust_ratios()
    assert trust[0] == 1.0
    assert trust[1] != 1.0
    # the zero tensor moved by lr * trust(=1) * direction: LARS direction g, LAMB direction ~ sign(g)
    expected = -0.1 * (0.5 if name == "LARS" else 1.0)
    np.testing.assert_allclose(p, expected, rtol=1e-5)


def test_ademamix_warmups_change_the_trajectory(make, grad_sequence):
    # the schedulers are not no-ops: with warm-ups the early steps take a smaller alpha
    base = _run(make, grad_sequence, "AdEMAMix", {"lr": 1e-2}, "numpy")[1]
    warm = _run(make, grad_sequence, "AdEMAMix", {"lr": 1e-2, "t_alpha": 60, "t_beta3": 60}, "numpy")[1]
    assert np.abs(base[0] - warm[0]).max() > 1e-2
