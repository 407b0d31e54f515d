"""bits=32: octopt's Adam, AdamW, SGD, RMSprop and Adagrad follow torch.optim to float32 rounding."""

from __future__ import annotations

import numpy as np
import octopt
import pytest

torch = pytest.importorskip("torch")


# One tensor past a block boundary (4097 = 16 blocks of 256 + 1) and a 2-D one whose size (2145) is no
# multiple of any block size.
SHAPES = ((4097,), (33, 65))
STEPS = 200
TOL = 1e-5  # of the total displacement max |p_200 - p_0|

CASES = [
    ("Adam", {"lr": 1e-2}),
    ("Adam", {"lr": 1e-2, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("Adam", {"lr": 1e-2, "weight_decay": 0.05, "maximize": True}),
    ("AdamW", {"lr": 1e-2}),
    ("AdamW", {"lr": 1e-2, "betas": (0.85, 0.95), "weight_decay": 0.3}),
    ("SGD", {"lr": 1e-2}),
    ("SGD", {"lr": 1e-2, "momentum": 0.9}),
    ("SGD", {"lr": 1e-2, "momentum": 0.9, "dampening": 0.3}),
    ("SGD", {"lr": 1e-2, "momentum": 0.9, "nesterov": True}),
    ("SGD", {"lr": 1e-2, "weight_decay": 0.1}),
    ("SGD", {"lr": 1e-2, "momentum": 0.8, "dampening": 0.1, "weight_decay": 0.05, "maximize": True}),
    ("SGD", {"lr": 1e-2, "momentum": 0.7, "nesterov": True, "weight_decay": 0.05}),
    ("RMSprop", {"lr": 1e-3}),
    ("RMSprop", {"lr": 1e-3, "alpha": 0.9, "momentum": 0.9}),
    ("RMSprop", {"lr": 1e-3, "centered": True}),
    ("RMSprop", {"lr": 1e-3, "momentum": 0.8, "centered": True, "weight_decay": 0.01}),
    ("Adagrad", {"lr": 1e-2}),
    ("Adagrad", {"lr": 1e-2, "lr_decay": 0.01}),
    ("Adagrad", {"lr": 1e-2, "initial_accumulator_value": 0.5}),
    ("Adagrad", {"lr": 1e-2, "lr_decay": 0.02, "initial_accumulator_value": 0.1, "weight_decay": 0.05}),
]


def _ids(case):
    name, kw = case
    return name + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_matches_torch_optim(case, framework, grad_sequence, make, to_numpy):
    name, kw = case
    rng = np.random.default_rng(1234)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = grad_sequence(rng, SHAPES, STEPS)

    params = [make(p, framework) for p in p0]
    opt = getattr(octopt, name)(params, bits=32, **kw)
    ref = [torch.tensor(p, requires_grad=True) for p in p0]
    ref_opt = getattr(torch.optim, name)(ref, foreach=False, **kw)
    for gs in grads:
        opt.step([make(g, framework) for g in gs])
        for r, g in zip(ref, gs):
            r.grad = torch.from_numpy(g)
        ref_opt.step()

    for i, (p, r, z) in enumerate(zip(params, ref, p0)):
        got, want = to_numpy(p), r.detach().double().numpy()
        displacement = np.abs(want - z).max()
        assert displacement > 0.05, "the trajectory barely moved: the comparison would prove nothing"
        err = np.abs(got - want).max()
        assert err <= TOL * displacement, f"param {i}: max error {err:.3g} vs displacement {displacement:.3g}"
    # the state follows torch's too (same names, same values)
    sd = opt.state_dict()
    for i, r in enumerate(ref):
        for key, value in ref_opt.state[r].items():
            if key == "step":
                assert sd["state"][i]["step"] == STEPS
                continue
            got = to_numpy(sd["state"][i]["slots"][key]["data"]).reshape(value.shape)
            want = value.double().numpy()
            scale = np.abs(want).max()
            assert np.abs(got - want).max() <= 1e-4 * scale, f"state {key} of param {i}"


def test_sgd_without_momentum_has_no_state():
    p = np.zeros(4097, np.float32)
    opt = octopt.SGD([p], lr=0.1, bits=32)
    assert opt.state_bytes() == 0
    opt.step([np.ones(4097, np.float32)])
    np.testing.assert_array_equal(p, np.float32(-0.1))
