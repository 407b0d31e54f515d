"""Adam's coupled weight decay at 0 is no operation at all, as in torch.optim.Adam (which skips `grad + wd * p` when
weight_decay is 0): a non-finite parameter does not turn its moments into NaN, on every kernel variant."""

import numpy as np
import pytest
import torch

import octopt
from octopt import _octopt

ISAS = ("baseline", "avx2", "avx512", "avx512vbmi")


@pytest.fixture
def isa_restore():
    yield
    _octopt.set_simd_level("")


def _params():
    p = np.random.default_rng(0).standard_normal(4097).astype(np.float32)
    p[3] = np.inf
    p[300] = -np.inf
    g = (np.random.default_rng(1).standard_normal(4097) * 1e-2).astype(np.float32)
    return p, g


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits", [32, 8])
def test_infinite_parameter_keeps_finite_moments(isa, bits, isa_restore, isa_available):
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level(isa)
    p, g = _params()
    tp = torch.from_numpy(p.copy()).requires_grad_()
    tp.grad = torch.from_numpy(g.copy())
    topt = torch.optim.Adam([tp], lr=1e-3, weight_decay=0.0)
    opt = octopt.Adam([p], lr=1e-3, weight_decay=0.0, bits=bits)
    for _ in range(3):
        topt.step()
        opt.step([g])
    ref = tp.detach().numpy()
    assert np.isposinf(p[3]) and np.isneginf(p[300])
    finite = np.isfinite(ref)
    if bits == 32:
        np.testing.assert_allclose(p[finite], ref[finite], rtol=0, atol=1e-6)
    else:
        # quantized moments: the step moves each parameter by at most ~lr; what matters is that no block went NaN
        np.testing.assert_allclose(p[finite], ref[finite], rtol=0, atol=2e-3)
    for name, slot in opt.state_dict()["state"][0]["slots"].items():
        assert np.all(np.isfinite(np.asarray(slot["data"], dtype=np.float32))), name
        if "absmax" in slot:
            assert np.all(np.isfinite(slot["absmax"])), name


def test_nonzero_weight_decay_still_couples():
    p, g = _params()
    p[3] = p[300] = 1.0
    a, b = p.copy(), p.copy()
    octopt.Adam([a], lr=1e-2, weight_decay=0.0, bits=32).step([g])
    octopt.Adam([b], lr=1e-2, weight_decay=0.5, bits=32).step([g])
    assert not np.array_equal(a, b)
