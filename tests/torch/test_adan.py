"""octopt.torch.Adan: torch.optim's interface (param.grad, state_dict keys of the authors' code, keyword-only
no_prox) over the same core step as octopt.Adan (tests/optim/test_adan.py checks the float64 reference)."""

from __future__ import annotations

import inspect

import numpy as np
import octopt
import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")


def test_signature():
    sig = inspect.signature(ot.Adan)
    assert list(sig.parameters)[:5] == ["params", "lr", "betas", "eps", "weight_decay"]
    assert sig.parameters["betas"].default == (0.98, 0.92, 0.99)
    assert sig.parameters["no_prox"].kind is inspect.Parameter.KEYWORD_ONLY
    assert ot.Adan8bit(torch.nn.Linear(2, 2).parameters()).param_groups[0]["bits"] == 8


@pytest.mark.parametrize("bits", [32, 8, 4])
@pytest.mark.parametrize("no_prox", [False, True])
def test_same_step_as_numpy_surface(bits, no_prox):
    rng = np.random.default_rng(2)
    p0 = (rng.standard_normal(4097) * 0.1).astype(np.float32)
    grads = [rng.standard_normal(4097).astype(np.float32) for _ in range(12)]
    w = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = ot.Adan([w], lr=1e-2, weight_decay=0.1, no_prox=no_prox, bits=bits, seed=9)
    q = p0.copy()
    ref = octopt.Adan([q], lr=1e-2, weight_decay=0.1, no_prox=no_prox, bits=bits, seed=9)
    for g in grads:
        w.grad = torch.from_numpy(g)
        opt.step()
        ref.step([g])
    np.testing.assert_array_equal(w.detach().numpy(), q)
    state = opt.state_dict()["state"][0]
    assert {"exp_avg", "exp_avg_sq", "exp_avg_diff", "pre_grad"} <= set(state)
    back = ot.Adan([torch.nn.Parameter(torch.from_numpy(p0.copy()))], lr=1e-2, bits=bits)
    back.load_state_dict(opt.state_dict())
    assert back.state_dict()["state"][0].keys() == state.keys()
