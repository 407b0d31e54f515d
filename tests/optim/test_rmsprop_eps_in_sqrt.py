"""RMSprop's eps_in_sqrt: the denominator sqrt(v + eps) (optax's default form) instead of sqrt(v) + eps
(torch's), on every surface that takes it, against a float64 reference."""

from __future__ import annotations

import numpy as np
import octopt
import pytest

N = 4097  # past a block boundary


def _reference(p, grads, lr, alpha, eps, momentum, centered, eps_in_sqrt):
    p = p.astype(np.float64)
    v, buf, mean = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = g.astype(np.float64)
        v = alpha * v + (1 - alpha) * g * g
        var = v
        if centered:
            mean = alpha * mean + (1 - alpha) * g
            var = v - mean * mean
        denom = np.sqrt(var + eps) if eps_in_sqrt else np.sqrt(var) + eps
        if momentum:
            buf = momentum * buf + g / denom
            p = p - lr * buf
        else:
            p = p - lr * g / denom
    return p


@pytest.mark.parametrize("centered", (False, True))
@pytest.mark.parametrize("momentum", (0.0, 0.8))
@pytest.mark.parametrize("eps_in_sqrt", (False, True))
def test_32bit_steps_follow_the_reference(eps_in_sqrt, momentum, centered):
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(N).astype(np.float32)
    grads = [rng.standard_normal(N).astype(np.float32) * 0.05 for _ in range(6)]
    kw = dict(lr=1e-2, alpha=0.9, eps=1e-3, momentum=momentum, centered=centered)
    w = p0.copy()
    opt = octopt.RMSprop([w], bits=32, eps_in_sqrt=eps_in_sqrt, **kw)
    for g in grads:
        opt.step([g])
    want = _reference(p0, grads, eps_in_sqrt=eps_in_sqrt, **kw)
    other = _reference(p0, grads, eps_in_sqrt=not eps_in_sqrt, **kw)
    np.testing.assert_allclose(w, want, rtol=2e-5, atol=2e-6)
    # eps = 1e-3 against gradients of 0.05 sets the two forms far apart: the check can tell them apart
    assert np.max(np.abs(other - want)) > 100 * np.max(np.abs(w - want))


def test_the_flag_is_kept_in_state_dicts_and_files(tmp_path):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(N).astype(np.float32)
    a = octopt.RMSprop([w], bits=8, eps_in_sqrt=True)
    a.step([w * 0.01])
    assert a.state_dict()["param_groups"][0]["eps_in_sqrt"] is True
    a.save(tmp_path / "r.octopt")
    w2 = w.copy()
    b = octopt.RMSprop([w2], bits=8)
    b.load(tmp_path / "r.octopt")
    assert b.param_groups[0]["eps_in_sqrt"] is True
    g = rng.standard_normal(N).astype(np.float32) * 0.01
    a.step([g])
    b.step([g])
    assert np.array_equal(w, w2)


def test_torch_takes_it_as_a_keyword_only():
    torch = pytest.importorskip("torch")
    import octopt.torch as ot

    p = torch.nn.Parameter(torch.zeros(8))
    assert ot.RMSprop([p], eps_in_sqrt=True).param_groups[0]["eps_in_sqrt"] is True
    assert ot.RMSprop([p]).param_groups[0]["eps_in_sqrt"] is False  # torch's form by default
    with pytest.raises(TypeError, match="RMSprop"):
        ot.RMSprop([p], 1e-2, 0.99, 1e-8, 0.0, 0.0, False, True)  # torch.optim has no 8th positional flag
